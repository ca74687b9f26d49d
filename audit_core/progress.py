"""Done / total and time left for every long stage, from the rate measured so far.

One helper for the app's progress bars and the CLI's: both receive the
library's ``progress(stage, done, total)`` calls and pass them here. The rate
of a stage is measured from its first report on, so a stage that resumes
with part of its work cached (``done`` > 0 at once) is not credited with
that head start.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")


def format_duration(seconds: float) -> str:
    """A duration a person reads at a glance: "40 s", "3 min", "1 h 05 min"."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{round(s / 60)} min"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


@dataclass
class _Stage:
    first_t: float
    first_done: int
    done: int
    total: int
    last_t: float


class ProgressClock:
    """Remembers each stage's reports and says how fast it goes and how long it has left.

    Thread-safe: an audit thread reports, a UI thread reads.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._stages: dict[str, _Stage] = {}
        self._lock = threading.Lock()

    def update(self, stage: str, done: int, total: int) -> None:
        now = self._clock()
        with self._lock:
            s = self._stages.get(stage)
            if s is None or done < s.first_done:  # new stage, or a stage started over
                self._stages[stage] = _Stage(now, done, done, total, now)
            else:
                s.done, s.total, s.last_t = done, total, now

    def rate(self, stage: str) -> float | None:
        """Units per second since the stage's first report, or None before any unit was done."""
        with self._lock:
            s = self._stages.get(stage)
            if s is None:
                return None
            units, elapsed = s.done - s.first_done, self._clock() - s.first_t
        return units / elapsed if units > 0 and elapsed > 0 else None

    def seconds_left(self, stage: str) -> float | None:
        """Estimated seconds until the stage is done (0 when done; None while there is no rate yet)."""
        with self._lock:
            s = self._stages.get(stage)
        if s is None:
            return None
        if s.total and s.done >= s.total:
            return 0.0
        r = self.rate(stage)
        return None if r is None else (s.total - s.done) / r

    def describe(self, stage: str) -> str:
        """ "12 / 60 · about 3 min left", or "12 / 60 · measuring the rate..." before a rate is known."""
        with self._lock:
            s = self._stages.get(stage)
        if s is None:
            return "waiting"
        head = f"{s.done} / {s.total}"
        if s.total and s.done >= s.total:
            return f"{head} · done"
        left = self.seconds_left(stage)
        return f"{head} · " + ("measuring the rate..." if left is None else f"about {format_duration(left)} left")


# --------------------------------------------------------------------------- steps inside one call

_steps: ContextVar[Callable[[int, int], None] | None] = ContextVar("rpa_progress_steps", default=None)


@contextmanager
def steps_of(report: Callable[[int, int], None] | None) -> Iterator[None]:
    """Within this block, ``step(done, total)`` reaches ``report``.

    For a stage that is one call to a method (S-RAG's calibration: k fold
    classifiers and a final one, up to ``time_limit_s`` each) the caller knows
    the stage and the method knows its steps; without this the stage read
    0 / 1 for minutes, with no time left.
    """
    token = _steps.set(report)
    try:
        yield
    finally:
        _steps.reset(token)


@contextmanager
def steps_after(done_before: int) -> Iterator[None]:
    """Within this block, ``step(done, total)`` reaches the enclosing ``steps_of`` as
    ``(done_before + done, done_before + total)``.

    For a method that starts a second piece of work within one stage (S-RAG's
    ``restore`` reads the shadow, then finds its saved fit stale and prepares
    in full): counted from 0 again, the bar went backwards and the time left
    mixed two scales.
    """
    outer = _steps.get()
    if outer is None:
        yield
        return
    with steps_of(lambda done, total: outer(done_before + done, done_before + total)):
        yield


def counted(items: Iterable[T], extra: int = 0) -> Iterator[T]:
    """``items``, each reported as a step of the enclosing ``steps_of``, out of ``len(items) + extra``.

    0 is reported before the first; the caller reports the ``extra`` steps
    that follow (a threshold's fit). The one loop behind the calibration
    stages that read every shadow document and the de-quantizing stage that
    counts a model's tensors.
    """
    items = list(items)
    total = len(items) + extra
    step(0, total)
    for i, item in enumerate(items, start=1):
        yield item
        step(i, total)


def step(done: int, total: int) -> None:
    """Report ``done`` of ``total`` steps to the enclosing ``steps_of``; nothing outside one."""
    report = _steps.get()
    if report is not None:
        report(done, total)
