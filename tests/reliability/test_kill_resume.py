"""kill -9 in the middle of a CLI audit, then the same command again.

The audit runs in its own process (``python -m app.cli audit``) with its own
store and cache dir, against a slow fake target on loopback that logs every
answer it finished sending. After SIGKILL the re-run must complete, and from
the server's log: no request that was answered before the kill is sent again,
except at most the one in flight (answered on the wire but killed before the
client stored it; probing is sequential, one request at a time). The
resumed audit's verdicts must equal those of an uninterrupted run.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from audit_core.store import Store
from tests.reliability.support import (
    MEMBERS_DEFAULT, MODEL, ROOT, RecordingServer, answer, audit_args, cli_command, cli_env, make_documents, record_figure,
    record_of, request_id, run_cli, wait_until, write_csv,
)

N_DOCS = 16
N_REQUESTS = 2 * N_DOCS  # one RAG-MIA and one Min-k% request per document
KILL_AFTER = 10  # answered document requests before the kill
DELAY_S = 0.25  # per document request: slow enough for the kill to land midway


def _audit_requests(bodies: list[dict]) -> list[str]:
    return [request_id(b) for b in bodies if record_of(b) is not None]


def _verdict_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.strip().startswith("q0")]


def test_sigkill_midway_then_rerun_sends_no_answered_request_again(rel_cache, tmp_path):
    csv = write_csv(tmp_path / "docs.csv", make_documents(N_DOCS))
    store_path = tmp_path / "audits.sqlite"
    env = cli_env(rel_cache)
    delay = {"s": DELAY_S}

    def responder(body: dict):
        reply = answer(body, MEMBERS_DEFAULT)
        return reply.after(delay["s"]) if record_of(body) is not None else reply

    with RecordingServer(models=[MODEL], responder=responder) as srv:
        # run 1: killed midway
        proc = subprocess.Popen(cli_command(audit_args(srv.base_url, csv, store_path)), cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: len(_audit_requests(srv.answered_ok())) >= KILL_AFTER or proc.poll() is not None,
                       240, f"{KILL_AFTER} answered requests")
            assert proc.poll() is None, f"the audit ended before the kill: {proc.communicate()[1][-2000:]}"
            os.kill(proc.pid, signal.SIGKILL)
            t_kill = time.monotonic()
            _, err1 = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == -signal.SIGKILL
        assert "estimated cost: 32 target queries for 16 documents" in err1  # shown before anything was sent
        with srv._lock:
            answered_before_kill = {request_id(b) for b, status, t in srv.answered
                                    if status == 200 and t <= t_kill and record_of(b) is not None}
        sent_run1 = _audit_requests(srv.chat_requests())
        with Store(store_path) as store:
            stored_bodies = [json.loads(r[0]) for r in store._execute("SELECT request_json FROM responses")]
            stored = {request_id(b) for b in stored_bodies if record_of(b) is not None}
            statuses = [r[0] for r in store._execute("SELECT status FROM runs ORDER BY created")]
        assert KILL_AFTER <= len(answered_before_kill) < N_REQUESTS, "the kill did not land midway"
        assert stored <= answered_before_kill
        assert len(answered_before_kill - stored) <= 1  # answered on the wire, killed before it was stored
        assert statuses == ["running"]  # the killed run is left open in the history

        # run 2: the same command resumes
        delay["s"] = 0.0
        srv.reset_stats()
        rerun = run_cli(audit_args(srv.base_url, csv, store_path), env)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        assert "Traceback" not in rerun.stderr
        sent_run2 = _audit_requests(srv.chat_requests())

        # reference: an uninterrupted audit into a fresh store
        srv.reset_stats()
        reference = run_cli(audit_args(srv.base_url, csv, tmp_path / "reference.sqlite"), env)
        assert reference.returncode == 0, reference.stderr[-3000:]

    assert len(sent_run2) == len(set(sent_run2)), "a request was sent twice in the re-run"
    resent = set(sent_run2) & answered_before_kill
    assert len(resent) <= 1 and resent <= answered_before_kill - stored
    assert set(sent_run2) | stored == set(_audit_requests(srv.chat_requests())), "the two runs together missed a request"
    assert len(set(sent_run2) | stored) == N_REQUESTS
    assert len(sent_run2) == N_REQUESTS - len(stored)
    assert f"answered from the store: {len(stored)}" in rerun.stderr
    assert _verdict_lines(rerun.stdout) == _verdict_lines(reference.stdout)
    assert len(_verdict_lines(rerun.stdout)) == N_DOCS

    record_figure("kill_test", {
        "documents": N_DOCS, "document_requests": N_REQUESTS, "sent_before_kill": len(sent_run1),
        "answered_before_kill": len(answered_before_kill), "stored_before_kill": len(stored),
        "sent_by_rerun": len(sent_run2), "answered_requests_sent_again": len(resent),
    })
