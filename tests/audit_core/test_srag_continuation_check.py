"""S-RAG's continuation check (completion style): a target that refuses is inconclusive, never "not found".

A one-token probe reads the first token of "I'm sorry, ..." as probability 0 for the probed word; the
check's longer reply shows the refusal. Model-free: ``segment`` is replaced by fixed probes.
"""
from __future__ import annotations

import math
import sys

import pytest

from audit_core.audit import probe_document
from audit_core.documents import Document
from audit_core.methods import srag
from audit_core.methods.base import Calibration
from audit_core.target.base import ChatRequest, Completion, Target, TargetError, TokenLogprob, Usage

DOC = ("I have had a dull ache in my lower back for three weeks, mostly after long drives. "
       "My doctor suggested ibuprofen and gentle stretching, but the pain now spreads into my "
       "left thigh and I sometimes feel tingling in my toes.")


#: the words probed (``_probes``); a test may change the last
PROBED = ["ibuprofen", "left"]


def _probes(text: str) -> list[srag.Probe]:
    """Two probes, before "ibuprofen" and before "left" (what ``segment`` would return, without the proxy)."""
    out = []
    for word in PROBED:
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
    assert reason is not None and "cannot confirm" in reason and "a refusal" in reason
    assert '"I don\'t know"' in _reason("I don't know what comes next.")
    assert "a blank reply" in _reason("   ")


def test_a_target_that_continues_is_read_as_before():
    # the same one-token readings (probability 0 for both words) decide when the target continued
    assert _reason("thigh and knee, and the pain is worse at night.") is None


def test_a_reply_that_goes_on_with_the_documents_words_is_a_continuation_even_when_it_reads_like_a_non_answer(
        monkeypatch):
    doc = DOC.replace("left thigh and I sometimes", "left thigh. Not sure whether I")
    monkeypatch.setattr(sys.modules[__name__], "PROBED", ["ibuprofen", "Not"])
    reply = "not sure if it is serious, my doctor says"
    assert srag.non_answer(reply) == "I don't know"  # it reads like one ...
    assert _reason(reply, doc) is None  # ... but it starts with the document's next words: the reading is real
    assert "cannot confirm" in _reason("I'm not sure what comes next.", doc)


@pytest.mark.parametrize("reply", ["I cannot help with that.", "I don't know.", "I'm unable to continue this text.",
                                   "I apologize, but I cannot continue this text."])
def test_a_refusal_that_starts_with_the_probed_word_is_still_a_refusal(reply, monkeypatch):
    """The check took any reply whose first word was the probed word for a continuation: where the document goes
    on "I sometimes feel ...", "I cannot help with that." cleared it (review of session 54)."""
    monkeypatch.setattr(sys.modules[__name__], "PROBED", ["ibuprofen", "I"])
    assert srag.non_answer(reply) is not None
    assert "cannot confirm" in _reason(reply)
    assert _reason("I sometimes wake up at night with it.") is None  # the document's own words go on


@pytest.mark.parametrize("reply", ["I'm unable to continue this text.", "I apologize, but I cannot continue this.",
                                   "Sorry I can't help with that.", "I'm afraid I can't share that.",
                                   "The provided context doesn't contain that.", "Sorry — I can't do that",
                                   "I don't have enough information to continue."])
def test_refusals_in_other_words_are_caught_too(reply):
    """Openings the non-answer reader missed (review of session 54); "I'm unable to" had a pattern that could
    never match (it wanted a space before the apostrophe)."""
    assert "cannot confirm" in _reason(reply)


def test_a_failed_check_leaves_the_readings_unconfirmed():
    assert "continuation check failed" in _reason(None)


def test_the_refusing_document_gets_no_score_and_no_decision():
    method = srag.SragMethod()
    obs = probe_document(method, Document("d1", DOC), _Target("I'm sorry, I cannot help with that."), 5)
    cal = Calibration("srag", 0.5, shadow_auc=0.95, params={"scorer": "mean_probability"})
    res = method.score(obs, cal)
    assert res.score is None and res.decision is None and "cannot confirm" in res.reason


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
        obs = probe_document(srag.SragMethod(cfg), Document("d1", DOC), target, 5)
        assert len(target.requests) == len(PROBED) and "continuation_check" not in obs.data


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


def test_the_benchmarks_retrieval_measure_leaves_the_check_out():
    """The check repeats the last probe's query: counted as a probe, that probe's retrieval counted twice."""
    from shadow.bench.runner import retrieval_hit

    method = srag.SragMethod()
    obs = probe_document(method, Document("d1", DOC), _Target("thigh and knee."), 5)
    hit = {"rpa_retrieval": {"doc_ids": ["d1"]}}
    for j, r in enumerate(obs.responses):  # the first probe missed the document; the last probe and the check hit it
        r["raw"] = hit if j > 0 else {"rpa_retrieval": {"doc_ids": ["other"]}}
    assert retrieval_hit(obs, "d1") == 0.5
