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


def test_a_method_not_yet_measured_is_estimated_from_its_queries_and_tokens():
    # a one-answer method measured at 1 s per document; a nine-answer method not yet run must not be
    # estimated at that same 1 s (the flat mean said "about 2 min left" before a 20-minute leg), nor
    # from seconds per token alone (a one-word answer's time is its query: that said "5 h left")
    eta = RunEstimate({("chat", "paraphrase", "rag_mia"): 100, ("chat", "paraphrase", "verbatim"): 100,
                       ("chat", "paraphrase", "robustness"): 100})
    eta.weigh("chat", "rag_mia", 1, 0)          # 1 unit per document
    eta.weigh("chat", "verbatim", 9, 9 * 128)   # 9 + 18 = 27 units
    eta.finished(("chat", "paraphrase", "rag_mia"), 100, 100.0)  # 1 s per document: 1 s per unit
    # verbatim from its units (27 s per document); robustness, whose cost is unknown, from the mean
    assert eta.seconds_left() == pytest.approx(100 * 27 + 100 * 1.0)
    eta.finished(("chat", "paraphrase", "verbatim"), 100, 1350.0)  # measured: its own 13.5 s from now on
    eta.weigh("chat", "robustness", 2, 128)  # 4 units
    # robustness from the seconds per unit of both measured legs: mean(1, 13.5 / 27) x 4
    assert eta.seconds_left() == pytest.approx(100 * (1 + 0.5) / 2 * 4)
