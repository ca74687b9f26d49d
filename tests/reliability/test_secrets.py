"""The API key lives in memory only: never in the store, caches, logs, messages, exports.

The key used here matches none of the export scrubber's credential patterns
(no ``sk-`` prefix), so only the product's own handling can keep it out. The
fake target echoes it back the way careless servers do -- in a 401 message, in
400 and 429 error texts and inside a 200 body -- so the tests also cover what
a server sends back, not only what we write ourselves.
"""
from __future__ import annotations

import logging
import traceback
from pathlib import Path

import pytest

from audit_core.documents import Document
from audit_core.report import pdf_report, results_csv, results_json
from audit_core.store import Store
from audit_core.target.caching import CachingTarget
from audit_core.target.openai_compat import OpenAITarget
from audit_core.audit import AuditConfig, run_audit
from shadow.prepare import prepare_shadow
from tests.fake_openai_server import Reply, completion_body
from tests.reliability.support import (
    MEMBERS_DEFAULT, MODEL, RecordingServer, answer, audit_args, cli_env, make_documents, method_of, record_figure,
    record_of,
    run_cli, shadow_config, write_csv,
)

KEY = "rpaLeakProbe.QX7Z9vT2.k48f1e9c"  # distinctive, and no scrubber pattern matches it


class EchoingServer(RecordingServer):
    """A fake target that puts the bearer key it received into its answers."""

    def _handle(self, method, path, headers, raw_body):
        self._current.auth = (headers.get("authorization") or "").removeprefix("Bearer ").strip()
        return super()._handle(method, path, headers, raw_body)

    def echoed_key(self) -> str:
        return getattr(self._current, "auth", "")


def echo_responder(srv: EchoingServer):
    """Echo the key in a 400 and a 429 error text and in a 200 body's metadata; answer normally otherwise."""
    attempts: dict[tuple[int, str], int] = {}

    def respond(body: dict) -> Reply:
        rec = record_of(body)
        key = srv.echoed_key()
        if rec == 1:  # refused for good: the message reaches the observation, the store and the export
            respond.echoes += 1
            return Reply.error(400, f"request refused for key {key}")
        if rec == 2:  # rate-limited once, then answered
            slot = (rec, method_of(body))
            attempts[slot] = attempts.get(slot, 0) + 1
            if attempts[slot] == 1:
                respond.echoes += 1
                return Reply.error(429, f"rate limit for {key}", headers={"Retry-After": "0"})
        reply = answer(body, MEMBERS_DEFAULT)
        if rec == 3 and isinstance(reply.body, dict):
            respond.echoes += 1
            reply.body["system_fingerprint"] = f"fp-{key}"
            reply.body["id"] = f"chatcmpl-{key}"
        return reply

    respond.echoes = 0  # type: ignore[attr-defined]
    return respond


def files_containing(root: Path, needle: bytes) -> list[str]:
    """Every regular file under ``root`` (links not followed) whose bytes contain ``needle``."""
    hits = []
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink() and needle in p.read_bytes():
            hits.append(str(p.relative_to(root)))
    return hits


def test_cli_audit_writes_the_key_nowhere(rel_cache, tmp_path):
    csv = write_csv(tmp_path / "docs.csv", make_documents(5))
    out = tmp_path / "out" / "results.json"
    out.parent.mkdir()
    store = tmp_path / "store" / "audits.sqlite"
    with EchoingServer(api_key=KEY, models=[MODEL]) as srv:
        srv.responder = responder = echo_responder(srv)
        ok = run_cli(audit_args(srv.base_url, csv, store, "--out", str(out)), cli_env(rel_cache, api_key=KEY))
        # the same key, now rejected: the server's 401 quotes it back
        srv.api_key = "another-key"
        rejected = run_cli(audit_args(srv.base_url, csv, store), cli_env(rel_cache, api_key=KEY))
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert rejected.returncode == 3 and "error: the API key was rejected" in rejected.stderr
    assert "Traceback" not in ok.stderr + rejected.stderr
    for text in (ok.stdout, ok.stderr, rejected.stdout, rejected.stderr):
        assert KEY not in text
    assert store.exists() and out.exists()
    assert responder.echoes >= 5  # the server did send the key back
    hits = files_containing(tmp_path, KEY.encode())
    assert hits == []
    # the scan can see what these files hold: the documents are in the store (and the results)
    assert any(h.startswith("store/") for h in files_containing(tmp_path, b"Record 000"))
    scanned = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()]
    record_figure("secret_scan_cli_files", len(scanned))


def test_library_audit_logs_errors_and_exports_hold_no_key(rel_cache, tmp_path, caplog, capsys):
    caplog.set_level(logging.DEBUG)  # openai, httpx, httpcore and ours, at their most talkative
    docs = [Document(i, t) for i, t in make_documents(5)]
    cfg = AuditConfig(methods=["rag_mia", "mink"], shadow=shadow_config(), run_without_signal=["rag_mia", "mink"])
    with EchoingServer(api_key=KEY, models=[MODEL]) as srv:
        srv.responder = responder = echo_responder(srv)
        target = OpenAITarget(srv.base_url, MODEL, api_key=KEY, max_retries=1, backoff_base_s=0.01, timeout_s=5)
        with Store(tmp_path / "store.sqlite") as store:
            result = run_audit(docs, CachingTarget(target, store), cfg, prepare_shadow).to_json()
        # a rejected key raises; its message and traceback must not carry the key either
        srv.api_key = "another-key"
        with pytest.raises(Exception) as info:
            run_audit(docs, OpenAITarget(srv.base_url, MODEL, api_key=KEY), cfg, prepare_shadow)
    error_text = "".join(traceback.format_exception(info.value))
    assert "HTTP 401" in error_text and KEY not in error_text
    assert KEY not in repr(target) and KEY not in str(vars(target))
    assert result["failures"]["target_errors"] == {"request_rejected": 2}
    exports = {"json": results_json(result), "csv": results_csv(result).encode(), "pdf": pdf_report(result)}
    for name, data in exports.items():
        assert KEY.encode() not in data, name
        (tmp_path / f"export.{name}").write_bytes(data)
    logged = "\n".join(f"{r.name} {r.getMessage()} {r.args}" for r in caplog.records)
    assert caplog.records, "nothing was logged: the log check would prove nothing"
    assert KEY not in logged
    captured = capsys.readouterr()
    assert KEY not in captured.out + captured.err
    assert files_containing(tmp_path, KEY.encode()) == []
    # the key really came back from the server (500, 429 and 200 bodies): the checks above are not vacuous
    assert responder.echoes >= 5
    record_figure("secret_scan_log_records", len(caplog.records))


def test_a_key_echoed_in_the_answer_text_is_not_stored(rel_cache, tmp_path):
    """A server that echoes the key in the generated text itself: the stored completion must not hold it."""
    docs = [Document(i, t) for i, t in make_documents(2)]
    with EchoingServer(api_key=KEY, models=[MODEL]) as srv:
        srv.responder = lambda body: Reply(body=completion_body(f"Yes {srv.echoed_key()}", model=MODEL,
                                                                top_logprobs=int(body.get("top_logprobs") or 0)))
        target = OpenAITarget(srv.base_url, MODEL, api_key=KEY, max_retries=0)
        with Store(tmp_path / "store.sqlite") as store:
            result = run_audit(docs, CachingTarget(target, store), AuditConfig(methods=["rag_mia"], shadow=shadow_config(),
                                                                             run_without_signal=["rag_mia"]), prepare_shadow)
    assert KEY not in str(result.to_json())
    assert files_containing(tmp_path, KEY.encode()) == []
