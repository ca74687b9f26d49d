"""An audit running in a background thread, polled by the script.

Why a thread rather than running the audit inside the script run: a click on
"Cancel" makes Streamlit stop the current script run and start a new one. If
the audit ran inside the script, that stop would tear it down mid-document
through an exception, and the partial result would be lost. In a thread, the
new script run only sets ``cancel``; ``run_audit`` finishes the document in
progress, returns every result answered so far (marked cancelled), and the
thread saves it. The script polls the job object for progress; the thread
never calls Streamlit.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

log = logging.getLogger(__name__)


@dataclass
class AuditJob:
    run_id: str
    n_documents: int
    cancel: threading.Event = field(default_factory=threading.Event)
    #: stage -> (done, total), in the order stages first appeared
    stages: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: (doc_id, method) pairs answered so far
    answered: list[tuple[str, str]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    error: str | None = None
    started: float = field(default_factory=time.time)
    thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def progress(self, stage: str, done: int, total: int) -> None:
        with self._lock:
            self.stages[stage] = (done, total)

    def note_result(self, doc_id: str, method: str) -> None:
        with self._lock:
            self.answered.append((doc_id, method))

    def snapshot(self) -> tuple[dict[str, tuple[int, int]], list[tuple[str, str]]]:
        with self._lock:
            return dict(self.stages), list(self.answered)

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


def start_job(
    run_id: str,
    n_documents: int,
    work: Callable[["AuditJob"], dict[str, Any]],
    on_error: Callable[[BaseException], str],
) -> AuditJob:
    """Run ``work(job)`` in a daemon thread; its dict becomes ``job.result``.

    ``on_error`` turns an exception into the message the user sees (and may
    record the failure); the traceback goes to the log only.
    """
    job = AuditJob(run_id, n_documents)

    def target() -> None:
        try:
            job.result = work(job)
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the user
            log.exception("audit %s failed", run_id)
            job.error = on_error(exc)

    job.thread = threading.Thread(target=target, name=f"audit-{run_id[:8]}", daemon=True)
    job.thread.start()
    return job
