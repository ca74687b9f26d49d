"""Time left per stage, from the rate measured so far (issue 18 point 3)."""
from __future__ import annotations

from audit_core.progress import ProgressClock, format_duration


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_time_left_follows_the_measured_rate():
    clock = FakeClock()
    p = ProgressClock(clock)
    p.update("probing", 0, 10)
    assert p.seconds_left("probing") is None and "measuring" in p.describe("probing")
    clock.t += 20
    p.update("probing", 2, 10)  # 10 s per unit
    assert p.seconds_left("probing") == 80
    assert p.describe("probing") == "2 / 10 · about 1 min left"
    clock.t += 10
    p.update("probing", 6, 10)  # faster now: 6 units in 30 s
    assert p.seconds_left("probing") == 20
    p.update("probing", 10, 10)
    assert p.seconds_left("probing") == 0 and p.describe("probing").endswith("done")


def test_a_stage_resumed_from_the_cache_is_not_credited_with_its_head_start():
    clock = FakeClock()
    p = ProgressClock(clock)
    p.update("documents", 8, 10)  # eight answered from the store at once
    clock.t += 30
    p.update("documents", 9, 10)
    assert p.seconds_left("documents") == 30
    p.update("documents", 0, 5)  # the stage started over (a new run): measured afresh
    assert p.seconds_left("documents") is None


def test_durations_read_at_a_glance():
    assert format_duration(40) == "40 s"
    assert format_duration(185) == "3 min"
    assert format_duration(3900) == "1 h 05 min"
