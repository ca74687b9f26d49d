"""S-RAG's continuation check (completion style): a target that refuses is inconclusive, never "not found".

A one-token probe reads the first token of "I'm sorry, ..." as probability 0 for the probed word; the
check's longer reply shows the refusal. Model-free: ``segment`` is replaced by fixed probes.
"""
from __future__ import annotations

import math

import pytest

from audit_core.audit import probe_document
from audit_core.documents import Document
from audit_core.methods import srag
from audit_core.methods.base import Calibration
from audit_core.target.base import ChatRequest, Completion, Target, TargetError, TokenLogprob, Usage

DOC = ("I have had a dull ache in my lower back for three weeks, mostly after long drives. "
       "My doctor suggested ibuprofen and gentle stretching, but the pain now spreads into my "
       "left thigh and I sometimes feel tingling in my toes.")


def _probes(text: str) -> list[srag.Probe]:
    """Two probes, before "ibuprofen" and before "left" (what ``segment`` would return, without the proxy)."""
    out = []
    for word in ("ibuprofen", "left"):
        at = text.index(" " + word)
        out.append(srag.Probe(word, len(text[:at].split()), text[:at], 0.01))
    return out


class _Target(Target):
    """Answers one-token probes with ``first`` (no alternative matching the word) and longer requests with ``reply``."""

    def __init__(self, reply: str | None, first: str = " I") -> None:
        super().__init__()
        self.reply, self.first = reply, first
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest) -> Completion:
        self.requests.append(request)
        if request.max_tokens == 1:
            return Completion(self.first, [TokenLogprob(self.first, math.log(0.6), [(self.first, math.log(0.6))])],
                              Usage(20, 1))
        if self.reply is None:
            raise TargetError("server_error", "HTTP 500")
        return Completion(self.reply, None, Usage(20, len(self.reply.split())))


@pytest.fixture(autouse=True)
def _fixed_probes(monkeypatch):
    monkeypatch.setattr(srag, "segment", lambda text, cfg, lm=None: _probes(text))


def _reason(reply: str | None, doc: str = DOC, **cfg) -> str | None:
    method = srag.SragMethod(srag.SragConfig(**cfg))
    obs = probe_document(method, Document("d1", doc), _Target(reply), 5)
    return method.features(obs)[1]


def test_a_target_that_refuses_to_continue_is_inconclusive_with_the_reason():
    reason = _reason("I'm sorry, but I can't continue that text.")
    assert reason is not None and "does not continue" in reason and "refused" in reason
    assert "I don't know" in _reason("I don't know what comes next.")
    assert "replied with nothing" in _reason("   ")


def test_a_target_that_continues_is_read_as_before():
    # the same one-token readings (probability 0 for both words) decide when the target continued
    assert _reason("thigh and knee, and the pain is worse at night.") is None


def test_the_documents_own_words_are_a_continuation_even_when_they_read_like_a_non_answer():
    doc = DOC.replace("left thigh and I sometimes", "left. I don't know whether")
    assert _reason("left. I don't know whether it is safe.", doc) is None
    assert "does not continue" in _reason("I don't know whether it is safe.", doc)


def test_a_failed_check_leaves_the_readings_unconfirmed():
    assert "continuation check failed" in _reason(None)


def test_the_refusing_document_gets_no_score_and_no_decision():
    method = srag.SragMethod()
    obs = probe_document(method, Document("d1", DOC), _Target("I'm sorry, I cannot help with that."), 5)
    cal = Calibration("srag", 0.5, shadow_auc=0.95, params={"scorer": "mean_probability"})
    res = method.score(obs, cal)
    assert res.score is None and res.decision is None and "does not continue" in res.reason


def test_audited_documents_get_one_check_the_shadow_none_and_the_estimate_counts_it():
    method = srag.SragMethod()
    audited = _Target("thigh and knee.")
    obs = probe_document(method, Document("d1", DOC), audited, 5)
    assert [r.max_tokens for r in audited.requests] == [1, 1, method.config.continuation_check_tokens]
    check = audited.requests[-1]
    assert not check.logprobs and check.messages == audited.requests[-2].messages  # the last probe's prompt
    assert obs.queries == 3 and len(method.word_observations(obs)) == 2  # the check is not a reading

    shadow = _Target("thigh and knee.")
    (shadow_obs,) = method.probe_many([Document("s1", DOC)], shadow, top_logprobs=5)
    assert [r.max_tokens for r in shadow.requests] == [1, 1] and "continuation_check" not in shadow_obs.data

    cfg = srag.SragConfig()
    n_words = len(DOC.split())
    with_check = srag.SragMethod(cfg).query_cost(n_words)
    without = srag.SragMethod(srag.SragConfig(continuation_check_tokens=0)).query_cost(n_words)
    assert with_check.queries == without.queries + 1
    assert with_check.completion_tokens == without.completion_tokens + cfg.continuation_check_tokens


def test_chat_style_and_a_check_turned_off_send_no_check():
    for cfg in (srag.SragConfig(style="chat"), srag.SragConfig(continuation_check_tokens=0)):
        target = _Target("I'm sorry, I cannot help with that.")
        probe_document(srag.SragMethod(cfg), Document("d1", DOC), target, 5)
        assert all(r.max_tokens != cfg.continuation_check_tokens or cfg.style == "chat" for r in target.requests)
        assert "continuation_check" not in srag.SragMethod(cfg).probe(Document("d1", DOC), target).data


def test_the_check_does_not_change_the_preparation_key():
    """The shadow is not checked, so the shipped completion preparations keep their keys."""
    from shadow.prepare import ShadowConfig, preparation_key

    cfg = ShadowConfig()
    on = preparation_key(srag.SragMethod(srag.SragConfig()), cfg, "corpus")
    off = preparation_key(srag.SragMethod(srag.SragConfig(continuation_check_tokens=0)), cfg, "corpus")
    other = preparation_key(srag.SragMethod(srag.SragConfig(max_probes=9)), cfg, "corpus")
    assert on == off != other


def test_s_rag_without_logprobs_sends_no_check_its_probes_are_text_already():
    """Its word readings divide the responses by the probes: a check's reply among them would shift them."""
    from audit_core.methods.srag_sampled import SragSampledMethod

    method = SragSampledMethod()
    target = _Target("thigh and knee.")
    obs = probe_document(method, Document("d1", DOC), target, 0)
    assert len(target.requests) == 2 and "continuation_check" not in obs.data
    assert [w.word for w in method.word_observations(obs)] == ["ibuprofen", "left"]
