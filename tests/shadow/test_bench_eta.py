"""The benchmark's time left for the whole run (shadow.bench.eta), from the legs measured so far."""
from __future__ import annotations

import pytest

from shadow.bench.eta import RunEstimate


def test_a_leg_not_yet_run_is_estimated_from_its_method_else_from_the_mean():
    legs = {("completion", d, m): 100 for d in ("none", "mirabel") for m in ("srag", "mba")}
    eta = RunEstimate(legs)
    assert eta.seconds_left() is None and "measuring the rate" in eta.line()
    eta.finished(("completion", "none", "srag"), 100, 300.0)  # 3 s per document
    # nothing of mba is known: every leg left at srag's 3 s
    assert eta.seconds_left() == pytest.approx(300 * 3.0)
    eta.finished(("completion", "none", "mba"), 100, 700.0)  # 7 s per document
    assert eta.seconds_left() == pytest.approx(100 * 3.0 + 100 * 7.0)
    eta.finished(("completion", "mirabel", "srag"), 100, 100.0)  # srag's mean: (3 + 1) / 2
    assert eta.seconds_left() == pytest.approx(100 * 7.0)
    assert eta.line().startswith("run: 3 of 4 legs done (300 of 400 documents); about 12 min left")
    eta.finished(("completion", "mirabel", "mba"), 100, 500.0)
    assert eta.seconds_left() == 0 and eta.line().endswith("all done")


def test_legs_that_cannot_run_or_were_done_before_are_not_waited_for():
    eta = RunEstimate({("chat", "none", "srag"): 50, ("chat", "none", "verbatim"): 50,
                       ("completion", "none", "srag"): 0})
    eta.drop("chat", "srag")
    assert eta.line().startswith("run: 0 of 1 legs done (0 of 50 documents)")
    eta.finished(("chat", "none", "verbatim"), 10, 20.0)  # a leg resumed with 40 rows already present
    assert eta.seconds_left() == 0
