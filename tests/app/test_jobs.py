"""The background audit job behind the Run tab: progress, cancel, failures."""
from __future__ import annotations

import threading

from app.jobs import start_job
from audit_core.target.base import Unreachable


def test_cancel_stops_the_work_and_keeps_its_result():
    started = threading.Event()

    def work(job):
        answered = []
        for i in range(1000):
            if job.cancel.is_set():
                return {"answered": answered, "cancelled": True}
            job.progress("auditing documents", i, 1000)
            job.note_result(f"d{i}", "srag")
            answered.append(i)
            started.set()
            job.cancel.wait(0.01)
        return {"answered": answered, "cancelled": False}

    job = start_job("run1", 1000, work, on_error=str)
    assert started.wait(10)
    job.cancel.set()
    job.thread.join(10)
    assert not job.running and job.error is None
    assert job.result["cancelled"] and 0 < len(job.result["answered"]) < 1000
    stages, answered = job.snapshot()
    assert stages["auditing documents"][1] == 1000
    assert len(answered) == len(job.result["answered"])


def test_a_failure_reaches_the_user_as_a_plain_message():
    seen = []

    def work(job):
        raise Unreachable("could not connect to http://127.0.0.1:9/v1")

    def on_error(exc):
        seen.append(exc)
        return f"The target could not be used: {exc}"

    job = start_job("run2", 1, work, on_error)
    job.thread.join(10)
    assert job.result is None
    assert job.error == "The target could not be used: could not connect to http://127.0.0.1:9/v1"
    assert isinstance(seen[0], Unreachable)


def test_the_run_tab_groups_target_queries_apart_from_the_local_preparation_and_names_methods_by_label(
        tmp_path, monkeypatch):
    """Controls being probed were drawn under "Shadow preparation (sends nothing)", and the banner said
    "documents 2 / 2 · done" while they ran."""
    from streamlit.testing.v1 import AppTest

    from app.jobs import AuditJob, job_registry
    from tests.app.test_app import APP

    monkeypatch.setenv("RPA_AUDIT_DB", str(tmp_path / "audits.sqlite"))
    stop = threading.Event()
    job = AuditJob("run-grouping-0001", 2)
    job.thread = threading.Thread(target=stop.wait, daemon=True)
    job.thread.start()
    for stage, done, total in [("S-RAG: probing the shadow", 120, 120), ("auditing documents", 2, 2),
                               ("auditing controls", 3, 20)]:
        job.progress(stage, done, total)
    job.note_result("doc-1", "rag_mia")
    job_registry().add(job)
    try:
        at = AppTest.from_file(APP, default_timeout=120)
        at.session_state["job_run_id"] = job.run_id
        at.run()
        assert not at.exception
        texts = [p.proto.text for p in at.get("progress")]
        order = [m.value for m in at.markdown if m.value.startswith("**")]
        assert "**Audit of your documents** (queries to the target)" in order
        assert any(t.startswith("controls: 3 / 20") for t in texts)
        assert "controls: 3 / 20" in " ".join(i.value for i in at.info)  # the banner says what runs now
        assert "doc-1 (RAG-MIA)" in " ".join(c.value for c in at.caption)
    finally:
        stop.set()


def test_a_calibration_check_can_be_cancelled_and_its_cancel_is_news_not_an_error(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from app.jobs import job_registry
    from app.tab_run import CHECK_PREFIX
    from audit_core.audit import _cancellable
    from tests.app.test_app import APP

    monkeypatch.setenv("RPA_AUDIT_DB", str(tmp_path / "audits.sqlite"))

    def work(job):
        tick = _cancellable(job.progress, job.cancel)
        for i in range(10_000):
            tick("S-RAG: probing the shadow", i, 10_000)
            job.cancel.wait(0.05)
        return {}

    job = start_job(CHECK_PREFIX + "test", 0, work, on_error=str, registry=job_registry())
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["job_run_id"] = job.run_id
    at.run()
    assert not at.exception
    at.button(key="cancel_audit").click().run()
    job.thread.join(10)
    assert not job.running and job.error_kind == "Cancelled"
    at.run()
    assert not at.exception and not at.error
    assert "Cancelled while the shadow was being prepared" in " ".join(i.value for i in at.info)
