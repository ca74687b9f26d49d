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
