"""Shadow and target receive identical request parameters, for every method whose shadow is probed
through ``shadow.prepare._probe``'s general branch (``method.probe_many(docs, rag, progress=...)``):
the methods that read logprobs when they can (RAG-MIA, Perturbation, S2MIA) and Min-k%. The target's
cap on ``top_logprobs`` (``select_methods``) and a text-only target's "no logprobs" must reach the
shadow's requests too. Model-free: a recording fake answers for both the shadow RAG and the target.
(S-RAG, the other branch, is tested with the real shadow in test_profiles.py.)"""
from __future__ import annotations

import json
import math

import pytest

from audit_core.audit import AuditConfig, probe_document, select_methods
from audit_core.documents import Document
from audit_core.target.base import Capabilities, ChatRequest, Completion, Target, TokenLogprob, Usage

#: four texts with adjectives the antonym lexicon knows (Perturbation skips a text without one)
TEXTS = [
    "I have had a dull ache in my lower back for three weeks, mostly after long drives. My doctor "
    "suggested gentle stretching, but the pain is now strong and I wonder whether it is safe to keep driving.",
    "My daughter has a high fever and a dry cough since Monday. The clinic is closed today and the "
    "nurse said it is probably a common virus, but she looks weak and I am worried about her breathing.",
    "After a long shift my hands feel cold and my fingers turn white, then red and painful when they "
    "warm up again. Is this a serious problem or a normal reaction to stress and cold weather outside?",
    "The new tablets make me feel tired and slow in the morning, although my blood pressure is lower "
    "now. Should I take them in the evening instead, or is it better to ask for a different dose?",
]


class _Recorder(Target):
    """Records every request; answers "Yes" with the alternatives it was asked for."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name
        self.requests: list[ChatRequest] = []
        self.cite_sources = False  # set by the shadow preparation on a RagSystem

    def complete(self, request: ChatRequest) -> Completion:
        self.requests.append(request)
        if not request.logprobs:
            return Completion(" Yes, it does.", None, Usage(5, 3))
        top = [(t, math.log(0.5 / (i + 1))) for i, t in enumerate([" Yes", " No"] + [f" t{j}" for j in range(18)])]
        return Completion(" Yes", [TokenLogprob(" Yes", math.log(0.5), top[:request.top_logprobs])], Usage(5, 1))


def _shape(r: ChatRequest) -> tuple:
    return (r.max_tokens, r.top_logprobs, r.logprobs, r.temperature, tuple(role for role, _ in r.messages), r.messages)


#: target capabilities: logprobs with at most 5 alternatives, and text only
CAPS = {"cap5": Capabilities(True, True, 5), "text-only": Capabilities(True, False, 0)}
METHODS = ["rag_mia", "perturbation", "mink", "s2mia_t", "s2mia_m"]


#: every method with every capability it can run on (Min-k% reads logprobs: without them it does not run, and
#: tests/shadow/test_profiles.py checks that it says why)
CASES = [(name, caps) for name in METHODS for caps in CAPS if not (name == "mink" and not CAPS[caps].logprobs)]


@pytest.mark.parametrize("name, caps_name", CASES)
def test_shadow_and_target_receive_identical_request_parameters(name, caps_name, tmp_path, monkeypatch):
    import shadow.prepare as prepare
    from shadow.prepare import ShadowConfig, prepare_shadow

    caps = CAPS[caps_name]
    (method,), _ = select_methods(AuditConfig(methods=[name]), caps)
    corpus = tmp_path / "aux.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"a{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    shadow_rag = _Recorder("shadow")
    monkeypatch.setattr(prepare, "build_shadow_rag", lambda cfg, kb, progress=None: shadow_rag)
    cfg = ShadowConfig(aux_corpus=str(corpus), n_members=2, n_nonmembers=2, n_per_class_generative=2,
                       top_logprobs=20)  # the shadow could give 20 alternatives: the target's cap must win
    prepare_shadow([method], cfg, root=tmp_path / "cache", use_shipped=False, calibrate=False)

    target = _Recorder("target")
    for i, text in enumerate(TEXTS):
        probe_document(method, Document(f"a{i}", text), target, caps.max_top_logprobs)

    # every shadow document probed (one request each, two for Perturbation), no refused-logprobs retry
    assert len(shadow_rag.requests) == len(target.requests) >= len(TEXTS)
    assert sorted(map(_shape, shadow_rag.requests)) == sorted(map(_shape, target.requests))
    if name in ("rag_mia", "perturbation"):  # the target's cap, on both sides
        assert {r.top_logprobs for r in target.requests} == ({5} if caps.logprobs else {0})
    assert {r.logprobs for r in target.requests} == {caps.logprobs}  # a text-only target is asked for none
