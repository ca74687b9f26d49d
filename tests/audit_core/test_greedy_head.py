"""The greedy head: a bfloat16 screen, then float32 for the candidates, gives the full layer's argmax."""
from __future__ import annotations

import pytest
import torch

from audit_core import scoring
from audit_core.greedy_head import GreedyHead


def _head(weight: torch.Tensor, max_candidates: int = 4096) -> GreedyHead:
    return GreedyHead(weight, weight.to(torch.bfloat16), float(weight.norm(dim=1).max()), max_candidates)


def test_a_near_tie_below_bfloat16_resolution_goes_to_the_float32_winner():
    """Two rows whose logits differ by far less than bfloat16 resolves: the screen alone could pick either."""
    torch.manual_seed(0)
    w = torch.randn(1000, 64) * 0.05
    h = torch.randn(64)
    w[7] = h / h.norm() * 2.0  # logit 2 ||h||
    w[3] = w[7] * (1 - 3e-6)  # lower by 6e-6 ||h||: the same bfloat16 logit
    assert torch.equal(w[3].to(torch.bfloat16), w[7].to(torch.bfloat16))
    assert _head(w).argmax(h) == [7]
    w[3], w[7] = w[7].clone(), w[3].clone()
    assert _head(w).argmax(h) == [3]


@pytest.mark.parametrize("scale", [0.02, 1.0, 30.0])
def test_random_layers_agree_with_the_full_argmax(scale):
    torch.manual_seed(1)
    w = torch.randn(5000, 96) * 0.05
    hidden = torch.randn(64, 96) * scale
    assert _head(w).argmax(hidden) == torch.argmax(hidden @ w.T, dim=1).tolist()


def test_too_many_candidates_fall_back_to_the_full_row():
    """Rows of nearly equal logits pass the screen together; above the limit the row is computed in full."""
    w = torch.ones(300, 8) + torch.arange(300).unsqueeze(1) * 1e-7
    h = torch.ones(8)
    calls = []
    for limit in (10, 4096):
        head = _head(w, max_candidates=limit)
        full = head.logits
        head.logits = lambda x, full=full: calls.append(limit) or full(x)
        assert head.argmax(h) == [int(torch.argmax(w @ h))]
    assert calls == [10]  # only the low limit computed the whole row


def test_soft_capped_models_are_never_screened():
    class Config:
        final_logit_softcapping = 30.0

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = Config()
            self.head = torch.nn.Linear(8, 20, bias=False)

        def get_output_embeddings(self):
            return self.head

    assert GreedyHead.of(Model()).screen is None


@pytest.mark.parametrize("fixture", ["smollm", "gemma"])
def test_the_screen_agrees_with_the_model_on_its_own_states(request, fixture):
    """Every position of a real text: the screened argmax is the argmax of the model's own logits."""
    lm = request.getfixturevalue(fixture)
    ids = scoring.encode_context(lm, "Rural clinics report that patients with a persistent cough wait weeks for "
                                 "an appointment, and nurses say the new triage line has helped some of them. " * 3)
    with torch.inference_mode():
        out = lm.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
        hidden = out.hidden_states[-1][0]
        assert lm.greedy_head.screen is not None
        assert lm.greedy_head.argmax(hidden) == torch.argmax(out.logits[0], dim=-1).tolist()


@pytest.mark.parametrize("fixture", ["smollm", "gemma"])
def test_generation_without_logprobs_gives_the_same_tokens(request, fixture):
    """generate_ids and generate_greedy_many with logprobs=False: the same text, no logprobs."""
    lm = request.getfixturevalue(fixture)
    texts = ["The patient was given a prescription for", "List three colours: red,",
             "Context: a clinic note about a child with a cough. Complete the note: The doctor"]
    prompts = [scoring.encode_prompt(lm, scoring.render_chat(lm, [{"role": "user", "content": t}])) for t in texts]
    full = [scoring.generate_ids(lm, p, max_new_tokens=12) for p in prompts]
    alone = [scoring.generate_ids(lm, p, max_new_tokens=12, logprobs=False) for p in prompts]
    many = scoring.generate_greedy_many(lm, prompts, [12] * 3, [0] * 3, logprobs=[False] * 3)
    for a, b, c in zip(full, alone, many):
        assert [t.token_id for t in a.tokens] == [t.token_id for t in b.tokens] == [t.token_id for t in c.tokens]
        assert a.text == b.text == c.text and a.finish_reason == b.finish_reason == c.finish_reason
        assert all(t.logprob is None for t in b.tokens + c.tokens)
        assert all(t.logprob is not None for t in a.tokens)
    # one prompt that wants logprobs keeps them for the whole batch
    mixed = scoring.generate_greedy_many(lm, prompts, [12] * 3, [0] * 3, logprobs=[False, True, False])
    assert [g.text for g in mixed] == [g.text for g in full]
    assert all(t.logprob is not None for t in mixed[1].tokens)
