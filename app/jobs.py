"""An audit running in a background thread, polled by the script.

Why a thread rather than running the audit inside the script run: a click on
"Cancel" makes Streamlit stop the current script run and start a new one. If
the audit ran inside the script, that stop would tear it down mid-document
through an exception, and the partial result would be lost. In a thread, the
new script run only sets ``cancel``; ``run_audit`` finishes the document in
progress, returns every result answered so far (marked cancelled), and the
thread saves it. The script polls the job object for progress; the thread
never calls Streamlit.

Why a registry (``job_registry``, shared by every session of the app): a
page reload starts a new Streamlit session, which has lost its session
state; the audit thread goes on. The registry lets the new session find the
running audit by its run id and re-attach to it (progress, Cancel, results
as they come).
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import streamlit as st

from audit_core.progress import ProgressClock

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
    #: the audit dict so far, updated after each document (results as they come)
    partial: dict[str, Any] | None = None
    #: methods the audit will not query because their shadow shows no signal (method -> why)
    no_signal: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    #: the failure's type name ("Cancelled": the user cancelled during the shadow preparation)
    error_kind: str | None = None
    clock: ProgressClock = field(default_factory=ProgressClock)
    started: float = field(default_factory=time.time)
    #: tells this job from an earlier one of the same run (a resumed audit keeps its run id)
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: the settings the job was started with, as a person reads them (``Settings.summary``): a page reloaded
    #: while it runs shows the sidebar's defaults, and says where they differ from these
    settings: dict[str, str] = field(default_factory=dict)
    thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def progress(self, stage: str, done: int, total: int) -> None:
        with self._lock:
            self.stages[stage] = (done, total)
        self.clock.update(stage, done, total)

    def note_partial(self, result: dict[str, Any]) -> None:
        with self._lock:
            self.partial = result

    def note_result(self, doc_id: str, method: str) -> None:
        with self._lock:
            self.answered.append((doc_id, method))

    def snapshot(self) -> tuple[dict[str, tuple[int, int]], list[tuple[str, str]]]:
        with self._lock:
            return dict(self.stages), list(self.answered)

    def stages_now(self) -> dict[str, tuple[int, int]]:
        """The stages' (done, total), copied under the lock: what the Run tab redraws every second, without
        copying every answered pair as ``snapshot`` does (a long audit's list grows by one per probe)."""
        with self._lock:
            return dict(self.stages)

    def answered_tail(self, n: int) -> tuple[int, list[tuple[str, str]]]:
        """How many (document, method) pairs were answered, and the last ``n`` of them, copied under the lock;
        the caller renders them after the lock is released, so the audit thread never waits for a redraw."""
        with self._lock:
            return len(self.answered), list(self.answered[-n:]) if n > 0 else []

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


class JobRegistry:
    """Audit jobs of this app process by run id (running ones, and finished ones until replaced)."""

    def __init__(self) -> None:
        self._jobs: dict[str, AuditJob] = {}
        self._lock = threading.Lock()

    def add(self, job: AuditJob) -> None:
        with self._lock:
            # keep running jobs and the last finished one (a reload right after the end still shows it)
            self._jobs = {k: j for k, j in self._jobs.items() if j.running}
            self._jobs[job.run_id] = job

    def get(self, run_id: str | None) -> AuditJob | None:
        with self._lock:
            return self._jobs.get(run_id) if run_id else None

    def running(self) -> list[AuditJob]:
        """Running jobs, the most recently started first."""
        with self._lock:
            return sorted((j for j in self._jobs.values() if j.running), key=lambda j: -j.started)


@st.cache_resource(show_spinner=False)
def job_registry() -> JobRegistry:
    """The registry shared by every session of this app (Streamlit's cache_resource)."""
    return JobRegistry()


def start_job(
    run_id: str,
    n_documents: int,
    work: Callable[["AuditJob"], dict[str, Any]],
    on_error: Callable[[BaseException], str],
    registry: JobRegistry | None = None,
    settings: dict[str, str] | None = None,
) -> AuditJob:
    """Run ``work(job)`` in a daemon thread; its dict becomes ``job.result``.

    ``on_error`` turns an exception into the message the user sees (and may
    record the failure); the traceback goes to the log only. The job is
    entered in ``registry`` before its thread starts.
    """
    job = AuditJob(run_id, n_documents, settings=dict(settings or {}))
    if registry is not None:
        registry.add(job)

    def target() -> None:
        try:
            job.result = work(job)
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the user
            log.exception("audit %s failed", run_id)
            job.error_kind = type(exc).__name__
            job.error = on_error(exc)

    job.thread = threading.Thread(target=target, name=f"audit-{run_id[:8]}", daemon=True)
    job.thread.start()
    return job
