"""Target faults during a full audit (``run_audit`` against a fault-injecting server on loopback).

Each document of one audit meets another fault on every request about it;
the audit must finish, give that document an inconclusive result with the
fault's reason (never a score), retry only where retrying can help and only
as often as the policy allows (counted on the server), and sum it all up in
``result.failures``. A rejected key or unknown model stops the audit.
"""
from __future__ import annotations

import collections
import threading

import pytest

from audit_core.documents import Document
from audit_core.store import Store
from audit_core.target.base import AuthenticationFailed, UnknownModel
from audit_core.verdict import plain_reason
from audit_core.target.caching import CachingTarget
from audit_core.target.openai_compat import OpenAITarget
from audit_core.verdict import INCONCLUSIVE
from audit_core.audit import AuditConfig, run_audit
from shadow.prepare import prepare_shadow
from tests.fake_openai_server import Reply
from tests.reliability.support import (
    METHODS, MODEL, RecordingServer, answer, make_documents, method_of, record_figure, record_of, shadow_config,
    truncated,
)

TIMEOUT_S = 0.4
MAX_RETRIES = 2
BAD_RESPONSE_RETRIES = 1
RETRY_AFTER_S = 0.05
MEMBERS = {0, 2}

#: document record -> the fault every request about it meets
FAULTS = {
    0: "ok", 1: "ok", 2: "timeout", 3: "rate_limit_storm", 4: "rate_limit_then_ok", 5: "http_500",
    6: "http_502", 7: "http_503", 8: "malformed_json", 9: "truncated_body", 10: "no_logprobs",
    11: "context_too_long",
}

#: fault -> (attempts per (document, method), reason code of the inconclusive result or None when decided)
RETRYING = 1 + MAX_RETRIES
EXPECTED = {
    "ok": (1, None),
    "timeout": (RETRYING, "unreachable"),
    "rate_limit_storm": (RETRYING, "rate_limited"),
    "rate_limit_then_ok": (RETRYING, None),
    "http_500": (RETRYING, "server_error"),
    "http_502": (RETRYING, "server_error"),
    "http_503": (RETRYING, "server_error"),
    "malformed_json": (1 + BAD_RESPONSE_RETRIES, "bad_response"),
    "truncated_body": (RETRYING, "unreachable"),
    "no_logprobs": (1, "no_logprobs"),  # Min-k%; RAG-MIA falls back to the answer text (below)
    "context_too_long": (1, "context_too_long"),
}


class FaultResponder:
    """Answers the capability probe normally and each document's requests with its fault."""

    def __init__(self, faults: dict[int, str]) -> None:
        self.faults = faults
        self.attempts: collections.Counter[tuple[int, str]] = collections.Counter()
        self._lock = threading.Lock()

    def __call__(self, body: dict) -> Reply:
        rec, method = record_of(body), method_of(body)
        if rec is None:
            return answer(body, MEMBERS)
        with self._lock:
            self.attempts[(rec, method)] += 1
            n = self.attempts[(rec, method)]
        fault = self.faults.get(rec, "ok")
        good = answer(body, MEMBERS)
        if fault == "ok":
            return good
        if fault == "timeout":
            return good.after(TIMEOUT_S + 1.0)
        if fault == "rate_limit_storm" or (fault == "rate_limit_then_ok" and n <= 2):
            return Reply.error(429, "Rate limit reached for requests", headers={"Retry-After": str(RETRY_AFTER_S)})
        if fault == "rate_limit_then_ok":
            return good
        if fault.startswith("http_"):
            return Reply.error(int(fault[5:]), "The server had an error while processing your request")
        if fault == "malformed_json":
            return Reply.malformed()
        if fault == "truncated_body":
            return truncated(good, keep_bytes=60)
        if fault == "no_logprobs":
            return Reply.completion("Yes" if rec in MEMBERS else "No", logprobs=False, model=MODEL)
        if fault == "context_too_long":
            return Reply.error(400, "This model's maximum context length is 512 tokens. However, your messages "
                                    "resulted in 2048 tokens.", code="context_length_exceeded")
        raise AssertionError(fault)


def _target(srv: RecordingServer, **kw) -> OpenAITarget:
    return OpenAITarget(srv.base_url, kw.pop("model", MODEL), api_key=kw.pop("api_key", "sk-test"),
                        timeout_s=TIMEOUT_S, max_retries=MAX_RETRIES, backoff_base_s=0.01, backoff_cap_s=0.05,
                        bad_response_retries=BAD_RESPONSE_RETRIES, max_concurrency=1, **kw)


def _docs(n: int) -> list[Document]:
    return [Document(i, t) for i, t in make_documents(n)]


def _config() -> AuditConfig:
    # the tiny seed shadow shows RAG-MIA no signal; probing it anyway keeps its faults in the test
    return AuditConfig(methods=list(METHODS), shadow=shadow_config(), run_without_signal=list(METHODS))


def _server_attempts(srv: RecordingServer) -> collections.Counter[tuple[int, str]]:
    return collections.Counter((record_of(b), method_of(b)) for b in srv.chat_requests() if record_of(b) is not None)


def test_every_fault_gives_an_inconclusive_document_with_its_reason_and_bounded_retries(rel_cache, tmp_path):
    docs = _docs(len(FAULTS))
    with RecordingServer(api_key="sk-test", models=[MODEL], responder=FaultResponder(FAULTS)) as srv:
        with Store(tmp_path / "store.sqlite") as store:
            target = CachingTarget(_target(srv), store)
            result = run_audit(docs, target, _config(), prepare_shadow)
            attempts = _server_attempts(srv)
            timings = collections.defaultdict(list)
            for r in srv.requests:
                if r["path"].endswith("/chat/completions") and record_of(r["json"]) is not None:
                    timings[(record_of(r["json"]), method_of(r["json"]))].append(r["time"])

            # the audit finished: every document has a verdict
            assert [v.doc_id for v in result.verdicts] == [d.id for d in docs]
            assert not result.cancelled and result.failures["stopped"] is None
            expected_errors: collections.Counter[str] = collections.Counter()
            for rec, fault in FAULTS.items():
                doc_id = docs[rec].id
                n_attempts, reason = EXPECTED[fault]
                for method in METHODS:
                    res = result.results[doc_id][method]
                    sent = attempts[(rec, method)]
                    if fault == "no_logprobs" and method == "rag_mia":
                        # RAG-MIA asks once with logprobs, is refused, asks once for the text answer
                        assert sent == 2
                        assert _decided(res) and res.evidence["mode"] == "text"
                        assert result.observations[doc_id][method].data["logprobs_refused"] is True
                        expected_errors["no_logprobs"] += 1
                        continue
                    assert sent == n_attempts, (fault, method, sent)
                    if reason is None:
                        assert _decided(res) and res.score is not None, (fault, method, res)
                    else:
                        assert res.score is None and res.decision is None, (fault, method, res)
                        assert res.reason == reason, (fault, method, res.reason)
                        expected_errors[reason] += 1
                if reason is not None and fault != "no_logprobs":
                    verdict = next(v for v in result.verdicts if v.doc_id == doc_id)
                    assert verdict.verdict == INCONCLUSIVE and verdict.score is None
                    assert plain_reason(reason) in verdict.reason  # the method's code, in words
                    assert doc_id in result.failures["documents_without_decision"]

            # Retry-After is honoured: no retry of a rate-limited request came sooner than asked
            for key in ((3, "rag_mia"), (3, "mink"), (4, "rag_mia"), (4, "mink")):
                gaps = [b - a for a, b in zip(timings[key], timings[key][1:])]
                assert gaps and min(gaps) >= RETRY_AFTER_S * 0.9, (key, gaps)

            summary = result.failures
            assert summary["target_errors"] == dict(expected_errors)
            assert summary["failed_queries"] == result.account["failures"] == sum(expected_errors.values())
            assert summary["retries"] == result.account["retries"] > 0
            assert set(summary["inconclusive"]) >= {docs[r].id for r, f in FAULTS.items()
                                                     if EXPECTED[f][1] and f != "no_logprobs"}
            assert "failures" in result.to_json()
            # the failures were logged in the store, never cached as answers
            n_failures_logged = store._execute("SELECT COUNT(*) FROM failures")[0][0]
            assert n_failures_logged == sum(expected_errors.values())

            record_figure("faults_injected", sorted(set(FAULTS.values()) - {"ok"}))
            record_figure("fault_audit_requests", sum(attempts.values()))
            record_figure("fault_audit_retries", summary["retries"])
            record_figure("fault_audit_target_errors", summary["target_errors"])

            # the faults are gone: running the same audit again sends only what failed
            srv.responder = FaultResponder({})
            srv.reset_stats()
            again_target = CachingTarget(_target(srv), store)
            again = run_audit(docs, again_target, _config(), prepare_shadow)
            resent = _server_attempts(srv)
            failed_pairs = {(rec, m) for rec, f in FAULTS.items() for m in METHODS
                            if EXPECTED[f][1] is not None and not (f == "no_logprobs" and m == "rag_mia")}
            assert set(resent) == failed_pairs | {(10, "rag_mia")}  # its logprob request was refused, not stored
            assert all(n == 1 for n in resent.values())
            assert again.failures["target_errors"] == {}
            assert all(_decided(r) for rs in again.results.values() for r in rs.values())  # no fault left
            record_figure("fault_rerun_requests_sent", sum(resent.values()))
            record_figure("fault_rerun_answered_from_store", again_target.cache_hits)


@pytest.mark.parametrize("fault", ["expired_key", "model_removed"])
def test_a_rejected_key_or_model_midway_stops_the_audit(rel_cache, fault):
    docs = _docs(6)

    def responder(body: dict) -> Reply:
        rec = record_of(body)
        if rec is None or rec < 2:
            return answer(body, MEMBERS)
        if fault == "expired_key":
            return Reply.error(401, "Incorrect API key provided: sk-t****. Your key has expired.",
                               code="invalid_api_key")
        return Reply.error(404, f"The model `{MODEL}` does not exist or you do not have access to it.",
                           code="model_not_found")

    with RecordingServer(api_key="sk-test", models=[MODEL], responder=responder) as srv:
        result = run_audit(docs, _target(srv), _config(), prepare_shadow)
        attempts = _server_attempts(srv)
    reason = "authentication_failed" if fault == "expired_key" else "unknown_model"
    assert [v.doc_id for v in result.verdicts] == [d.id for d in docs[:3]]
    for method in METHODS:
        assert attempts[(2, method)] == 1  # never retried
        res = result.results[docs[2].id][method]
        assert res.score is None and res.reason == reason
    assert not any(rec >= 3 for rec, _ in attempts), "requests were sent after the fatal error"
    assert result.verdicts[2].verdict == INCONCLUSIVE
    stopped = result.failures["stopped"]
    assert stopped.startswith(reason) and "3 document(s) not audited" in stopped
    assert result.failures["target_errors"] == {reason: 2}


def test_wrong_model_or_key_at_the_start_fails_before_any_document_is_sent(rel_cache):
    docs = _docs(3)
    with RecordingServer(api_key="sk-test", models=[MODEL]) as srv:
        with pytest.raises(UnknownModel, match="does not serve a model named 'no-such-model'"):
            run_audit(docs, _target(srv, model="no-such-model"), _config(), prepare_shadow)
        with pytest.raises(AuthenticationFailed, match="HTTP 401"):
            run_audit(docs, _target(srv, api_key="sk-expired"), _config(), prepare_shadow)
        assert srv.chat_requests() == []  # only GET /models was asked, once per attempt
        assert [r["path"] for r in srv.requests] == ["/v1/models", "/v1/models"]


def _decided(res) -> bool:
    """A healthy answer is decided, unless the tiny seed shadow cannot back a decision (no signal, no
    shadow answers of this kind to calibrate on, or too few shadow non-members for the false-positive
    rate: a method whose 4 + 4 seed shadow separates perfectly reaches that one): the method then
    abstains on purpose, never on a target fault."""
    return res.decision is not None or (res.reason or "").startswith(
        ("no signal", "uncalibrated", "too few shadow non-members"))
