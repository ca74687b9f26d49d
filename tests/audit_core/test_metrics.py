"""Metrics: hand-computed cases, agreement with scikit-learn, bootstrap intervals."""
from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn import metrics as skm

from audit_core import metrics as M


def test_auc_perfect_inverted_and_ties():
    y = [1, 1, 0, 0]
    assert M.roc_auc(y, [0.9, 0.8, 0.2, 0.1]) == 1.0
    assert M.roc_auc(y, [0.1, 0.2, 0.8, 0.9]) == 0.0
    assert M.roc_auc(y, [0.5, 0.5, 0.5, 0.5]) == 0.5
    # pairs (m, n): (0.9,0.5)=1 (0.9,0.1)=1 (0.5,0.5)=1/2 (0.5,0.1)=1 -> 3.5/4
    assert M.roc_auc(y, [0.9, 0.5, 0.5, 0.1]) == pytest.approx(3.5 / 4)


def test_auc_matches_sklearn_on_random_and_tied_scores():
    rng = np.random.default_rng(1)
    for _ in range(5):
        y = rng.integers(0, 2, 200)
        s = np.round(rng.normal(size=200) + 0.7 * y, 1)  # rounding creates many ties
        assert M.roc_auc(y, s) == pytest.approx(skm.roc_auc_score(y, s), abs=1e-12)
    y = rng.integers(0, 2, 4000)
    assert abs(M.roc_auc(y, rng.random(4000)) - 0.5) < 0.05


def test_inconclusive_scores_are_excluded_not_imputed():
    y = [1, 1, 0, 0, 1]
    assert M.roc_auc(y, [0.9, None, 0.2, float("nan"), 0.8]) == 1.0
    assert math.isnan(M.roc_auc([1, 1], [0.3, 0.4]))


def test_an_infinite_score_ranks_at_its_end_instead_of_failing():
    """scikit-learn refuses infinities; a score of +-inf is a decided score past every finite one."""
    y = [0, 1, 0, 1, 1]
    s = [0.1, 0.9, -math.inf, 0.5, math.inf]
    assert M.roc_auc(y, s) == 1.0
    assert M.roc_auc(y, [0.1, -math.inf, 0.2, 0.5, 0.6]) == pytest.approx(4 / 6)
    out = M.summarize(y, s, n_boot=50, include_roc=False)
    assert out["auc"] == 1.0 and out["n_scored"] == 5


def test_roc_curve_points_and_sklearn_agreement():
    fpr, tpr, thr = M.roc_curve([1, 0, 1, 0], [0.9, 0.8, 0.8, 0.1])
    # thresholds +inf, 0.9, 0.8 (tie: one member, one non-member), 0.1
    assert fpr.tolist() == [0.0, 0.0, 0.5, 1.0]
    assert tpr.tolist() == [0.0, 0.5, 1.0, 1.0]
    assert thr[0] == np.inf and thr[1:].tolist() == [0.9, 0.8, 0.1]
    rng = np.random.default_rng(2)
    y = rng.integers(0, 2, 300)
    s = np.round(rng.normal(size=300) + y, 1)
    f1_, t1_, _ = M.roc_curve(y, s)
    f2_, t2_, _ = skm.roc_curve(y, s, drop_intermediate=False)
    assert np.allclose(f1_, f2_) and np.allclose(t1_, t2_)
    assert np.trapezoid(t1_, f1_) == pytest.approx(M.roc_auc(y, s))


def test_tpr_at_fpr_exact_from_roc_points():
    # 10 non-members, 4 members; one non-member scores above two members
    neg = [0.1 * i for i in range(10)]  # 0.0 .. 0.9
    pos = [0.95, 0.93, 0.85, 0.2]
    y = [0] * 10 + [1] * 4
    s = neg + pos
    # FPR 0: threshold above 0.9 -> two members
    assert M.tpr_at_fpr(y, s, 0.0) == 0.5
    assert M.tpr_at_fpr(y, s, 0.05) == 0.5  # 0.05*10 < 1 false positive allowed
    assert M.tpr_at_fpr(y, s, 0.1) == 0.75  # one false positive (0.9) admits 0.85
    assert M.tpr_at_fpr(y, s, 1.0) == 1.0
    # against sklearn's ROC: max tpr with fpr <= target
    rng = np.random.default_rng(3)
    yy = rng.integers(0, 2, 2000)
    ss = rng.normal(size=2000) + 1.5 * yy
    f, t, _ = skm.roc_curve(yy, ss)
    for target in (0.01, 0.001, 0.1):
        assert M.tpr_at_fpr(yy, ss, target) == pytest.approx(t[f <= target].max())


def test_decision_metrics_hand_computed():
    y = [1, 1, 1, 0, 0, 0]
    d = [True, True, False, True, False, None]  # last one inconclusive
    assert M.confusion(y, d) == {"tp": 2, "fp": 1, "tn": 1, "fn": 1}
    assert M.accuracy(y, d) == pytest.approx(3 / 5)
    assert M.precision(y, d) == pytest.approx(2 / 3)
    assert M.recall(y, d) == pytest.approx(2 / 3)
    assert M.f1(y, d) == pytest.approx(2 / 3)
    assert math.isnan(M.precision([1, 0], [False, False]))
    assert M.decisions_at([0.2, None, 0.7, 0.5], 0.5) == [False, None, True, True]


def test_decision_metrics_match_sklearn():
    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, 500)
    d = rng.random(500) < 0.4 + 0.3 * y
    assert M.accuracy(y, d) == pytest.approx(skm.accuracy_score(y, d))
    assert M.precision(y, d) == pytest.approx(skm.precision_score(y, d))
    assert M.recall(y, d) == pytest.approx(skm.recall_score(y, d))
    assert M.f1(y, d) == pytest.approx(skm.f1_score(y, d))


def _sample(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.r_[np.ones(n // 2, int), np.zeros(n - n // 2, int)]
    return y, rng.normal(size=n) + 1.0 * y


def test_bootstrap_contains_estimate_and_narrows_with_more_data():
    y, s = _sample(60, 5)
    lo, hi = M.bootstrap_ci(M.roc_auc, y, s, n=500, seed=0)
    assert lo <= M.roc_auc(y, s) <= hi and lo < hi
    y2, s2 = _sample(1200, 5)
    lo2, hi2 = M.bootstrap_ci(M.roc_auc, y2, s2, n=500, seed=0)
    assert lo2 <= M.roc_auc(y2, s2) <= hi2
    assert hi2 - lo2 < (hi - lo) / 2.5  # ~sqrt(20) narrower in theory
    # deterministic for a seed
    assert M.bootstrap_ci(M.roc_auc, y, s, n=200, seed=7) == M.bootstrap_ci(M.roc_auc, y, s, n=200, seed=7)


def test_bootstrap_degenerate_cases():
    # perfect separation: every stratified resample is perfect
    assert M.bootstrap_ci(M.roc_auc, [1, 1, 0, 0], [0.9, 0.8, 0.2, 0.1], n=100) == (1.0, 1.0)
    # one class only: AUC undefined in every resample
    lo, hi = M.bootstrap_ci(M.roc_auc, [1, 1, 1], [0.1, 0.2, 0.3], n=50)
    assert math.isnan(lo) and math.isnan(hi)
    # precision undefined in resamples without a member decision: those are skipped
    y = [1, 0, 0, 0, 0]
    d = [True, False, False, False, False]
    assert M.bootstrap_ci(M.precision, y, d, n=200) == (1.0, 1.0)


def test_summarize_counts_excluded_and_reports_intervals():
    y, s = _sample(80, 6)
    scores: list[float | None] = list(map(float, s))
    scores[0] = None  # a member the method could not score
    scores[-1] = None  # a non-member
    out = M.summarize(y, scores, threshold=0.5, n_boot=200)
    assert out["n"] == 80 and out["n_scored"] == 78 and out["n_inconclusive_scores"] == 2
    assert out["n_decided"] == 78 and out["n_inconclusive_decisions"] == 2
    kept = [i for i, v in enumerate(scores) if v is not None]
    assert out["auc"] == pytest.approx(skm.roc_auc_score(y[kept], s[kept]))
    for key in ("auc", "tpr@fpr=0.01", "tpr@fpr=0.001", "accuracy", "precision", "recall", "f1"):
        lo, hi = out[key + "_ci"]
        assert lo <= out[key] <= hi, key
    assert out["accuracy"] == pytest.approx(skm.accuracy_score(y[kept], s[kept] >= 0.5))
    assert sum(out["confusion"].values()) == 78
    assert len(out["roc"]["fpr"]) == len(out["roc"]["tpr"]) >= 2
    import json

    json.dumps(out)  # JSON-ready: no numpy types, no NaN


def test_summarize_without_decisions_and_one_class():
    out = M.summarize([1, 1, 1], [0.2, 0.3, None], n_boot=50)
    assert out["auc"] is None and out["auc_ci"] is None
    assert out["accuracy"] is None and out["confusion"] is None
    assert out["roc"] == {"fpr": [], "tpr": []}



def _datasets():
    rng = np.random.default_rng(3)
    y = np.r_[np.ones(30), np.zeros(40)].astype(int)
    yield y, rng.normal(size=70) + y  # continuous
    yield y, np.round(rng.normal(size=70) + y)  # heavy ties across the classes
    yield y, np.where(rng.random(70) < 0.6, 0.0, rng.random(70) + y)  # most scores exactly 0, as Verbatim's
    with_gaps = list(rng.normal(size=70) + y)
    with_gaps[3] = None
    with_gaps[50] = float("nan")
    yield y, with_gaps  # inconclusive scores are dropped first
    yield np.array([1, 1, 1, 0, 0, 0, 0]), np.array([0.9, 0.2, 0.7, 0.8, 0.1, 0.3, 0.2])  # n0 < 1 / fpr


# the reference below calls scikit-learn once per resample (milliseconds each): few resamples suffice
N_REF = 30


def test_vectorised_score_intervals_equal_the_per_resample_ones():
    for case, (y, s) in enumerate(_datasets()):
        assert M.bootstrap_auc_ci(y, s, n=N_REF, seed=5) == pytest.approx(
            M.bootstrap_ci(M.roc_auc, y, s, n=N_REF, seed=5)), case
        for fpr in (0.0, 0.01, 0.1, 1.0):
            per_resample = M.bootstrap_ci(lambda a, b: M.tpr_at_fpr(a, b, fpr), y, s, n=N_REF, seed=5)
            assert M.bootstrap_tpr_at_fpr_ci(y, s, fpr, n=N_REF, seed=5) == pytest.approx(per_resample), (case, fpr)


def test_paired_auc_difference_interval_equals_a_per_resample_reference():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(8)
    for case, (y, s) in enumerate(_datasets()):
        a = np.array([np.nan if x is None else x for x in s], dtype=float)
        b = a + rng.normal(scale=0.5, size=len(a))  # a second, noisier reading of the same documents
        b[1] = np.nan  # inconclusive under b only: left out of both
        keep = ~(np.isnan(a) | np.isnan(b))
        yk, ak, bk = y[keep], a[keep], b[keep]
        idx = M._stratified_indices(yk, N_REF, 5)
        diffs = [roc_auc_score(yk[i], ak[i]) - roc_auc_score(yk[i], bk[i]) for i in idx]
        assert M.bootstrap_auc_difference_ci(y, a, b, n=N_REF, seed=5) == pytest.approx(
            tuple(np.quantile(diffs, [0.025, 0.975]))), case


def test_paired_auc_difference_sees_a_gain_that_separate_intervals_hide():
    rng = np.random.default_rng(2)
    y = np.r_[np.ones(40), np.zeros(40)].astype(int)
    base = rng.normal(size=80) + 0.8 * y
    better = base + 0.4 * y  # the same documents, each member a little higher
    lo, hi = M.bootstrap_auc_difference_ci(y, better, base)
    assert 0 < lo < hi  # paired: the gain is clear
    sep_lo, _ = M.bootstrap_auc_ci(y, better)
    _, base_hi = M.bootstrap_auc_ci(y, base)
    assert sep_lo < base_hi  # the separate intervals overlap
    assert M.bootstrap_auc_difference_ci(y, base, base) == (0.0, 0.0)
    assert all(np.isnan(M.bootstrap_auc_difference_ci(np.ones(5, int), base[:5], base[:5])))
    with pytest.raises(ValueError, match="labels"):
        M.bootstrap_auc_difference_ci(y, base, base[:-1])


def test_vectorised_decision_intervals_equal_the_scikit_learn_ones():
    for case, (y, s) in enumerate(list(_datasets())[2:]):
        v = np.array([np.nan if x is None else x for x in s], dtype=float)
        rules = {"threshold": [None if np.isnan(x) else bool(x >= np.nanmedian(v)) for x in v],
                 "all members": [True] * len(v), "none": [False] * len(v),
                 "with gaps": [None if i % 7 == 0 else bool(x > 0.5) for i, x in enumerate(v)]}
        for rule, d in rules.items():
            for name, fn in (("accuracy", M.accuracy), ("precision", M.precision), ("recall", M.recall),
                             ("f1", M.f1)):
                assert M.bootstrap_decision_ci(name, y, d, n=N_REF, seed=2) == pytest.approx(
                    M.bootstrap_ci(fn, y, d, n=N_REF, seed=2), nan_ok=True), (case, rule, name)


def test_summarize_intervals_come_from_the_same_resamples_as_before():
    y, s = list(_datasets())[1]
    d = [bool(x >= 0.5) for x in s]
    out = M.summarize(y, s, d, n_boot=N_REF, seed=4, include_roc=False)
    assert out["auc_ci"] == pytest.approx(list(M.bootstrap_ci(M.roc_auc, y, s, n=N_REF, seed=4)))
    assert out["tpr@fpr=0.01_ci"] == pytest.approx(
        list(M.bootstrap_ci(lambda a, b: M.tpr_at_fpr(a, b, 0.01), y, s, n=N_REF, seed=4)))
    assert out["f1_ci"] == pytest.approx(list(M.bootstrap_ci(M.f1, y, d, n=N_REF, seed=4)))


def test_mean_auc_over_draws_resamples_each_draw_apart():
    """The interval of the mean of per-draw AUCs equals a per-resample reference (sklearn, the same
    resamples), narrows as draws are added, and refuses a draw without both classes."""
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(4)
    draws = []
    for shift in (0.0, 5.0, -3.0):  # each draw's scores on its own scale: no pooled AUC would mean anything
        y = np.r_[np.ones(30), np.zeros(30)].astype(int)
        draws.append((y, rng.normal(size=60) + 1.5 * y + shift))
    lo, hi = M.bootstrap_mean_auc_ci(draws, n=N_REF, seed=3)
    ref = np.mean([[roc_auc_score(y[i], s[i]) for i in M._stratified_indices(y, N_REF, 3 + k)]
                   for k, (y, s) in enumerate(draws)], axis=0)
    assert (lo, hi) == pytest.approx(tuple(np.quantile(ref, [0.025, 0.975])))
    mean = np.mean([roc_auc_score(y, s) for y, s in draws])
    assert lo < mean < hi
    one_lo, one_hi = M.bootstrap_mean_auc_ci(draws[:1], n=N_REF, seed=3)
    assert hi - lo < one_hi - one_lo  # three draws pin the mean down better than one
    with pytest.raises(ValueError, match="draw 2"):
        M.bootstrap_mean_auc_ci([draws[0], (np.ones(5, int), np.arange(5.0))])
    with pytest.raises(ValueError, match="no draws"):
        M.bootstrap_mean_auc_ci([])
