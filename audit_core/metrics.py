"""Evaluation metrics for membership inference: AUC, threshold metrics, TPR at low FPR.

ROC curve, AUC, accuracy, precision, recall and F1 are scikit-learn's; this
module adds only what scikit-learn lacks: the inconclusive-score convention
below, TPR at a fixed FPR, stratified bootstrap intervals and the summary.

Conventions used throughout (and by the benchmark and the app):

* ``labels``: 1 / True for a member, 0 / False for a non-member.
* ``scores``: higher means "more likely a member". A score of ``None`` (or NaN)
  is *inconclusive* -- the method could not score that document (no logprobs,
  target errors, too short). Inconclusive documents are excluded from every
  metric and counted separately, never imputed, so a method is not rewarded or
  punished with a made-up score; ``summarize`` reports how many were excluded.
* ``decisions``: True (member) / False (not found) / None (inconclusive), with
  the same exclusion rule. ``decisions_at(scores, t)`` applies ``score >= t``.
* An undefined metric (precision with no positive decision, AUC with one class)
  is ``nan`` here and ``None`` in ``summarize``'s JSON-friendly output.

TPR at a low FPR follows Carlini et al. ("Membership inference attacks from
first principles"): the highest true-positive rate among the thresholds of the
empirical ROC curve whose false-positive rate does not exceed the target. No
interpolation between ROC points is done, so the number is achievable by an
actual threshold. With fewer than ``1 / fpr`` non-members the only admissible
FPR is 0, i.e. the value is the TPR above the highest-scoring non-member.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

#: FPR levels reported by ``summarize`` (1% and 0.1%, as in the MIA literature)
DEFAULT_FPRS: tuple[float, ...] = (0.01, 0.001)
#: bootstrap resamples and confidence level used unless told otherwise
DEFAULT_BOOTSTRAP = 1000
DEFAULT_LEVEL = 0.95

ArrayLike = Sequence[float | int | bool | None] | np.ndarray
MetricFn = Callable[[np.ndarray, np.ndarray], float]


# --------------------------------------------------------------------------- input handling


def _labels(labels: ArrayLike) -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValueError("labels must be one-dimensional")
    y = y.astype(float)
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("labels must be 0/1 or booleans")
    return y.astype(np.int8)


def _values(values: ArrayLike) -> np.ndarray:
    """Floats with NaN where a value is None (inconclusive)."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "biuf":
        return values.astype(float)  # fast path: bootstrap resamples are already numeric
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


def clean(labels: ArrayLike, values: ArrayLike) -> tuple[np.ndarray, np.ndarray, int]:
    """Drop inconclusive entries (None / NaN). Returns labels, values and how many were dropped.

    An infinite score is a decided one at the end of the ranking (a score that is a log-ratio of a zero
    probability, say), not an inconclusive one: it is kept, as a value just past the finite scores on its
    side, since scikit-learn refuses infinities. The order of every score is unchanged.
    """
    y = _labels(labels)
    v = _values(values)
    if len(y) != len(v):
        raise ValueError(f"{len(y)} labels but {len(v)} scores")
    keep = ~np.isnan(v)
    y, v = y[keep], v[keep]
    if np.isinf(v).any():
        finite = v[np.isfinite(v)]
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
        v = np.where(v == np.inf, high + 1.0, np.where(v == -np.inf, low - 1.0, v))
    return y, v, int((~keep).sum())


def decisions_at(scores: ArrayLike, threshold: float) -> list[bool | None]:
    """Decisions ``score >= threshold``; an inconclusive score gives an inconclusive decision."""
    return [None if s is None or math.isnan(float(s)) else bool(float(s) >= threshold) for s in scores]


# --------------------------------------------------------------------------- ranking metrics (scikit-learn)


def roc_auc(labels: ArrayLike, scores: ArrayLike) -> float:
    """Area under the ROC curve (scikit-learn); ties between a member and a non-member count one half.

    ``nan`` if a class is absent (scikit-learn would raise).
    """
    from sklearn.metrics import roc_auc_score

    y, s, _ = clean(labels, scores)
    if len(np.unique(y)) < 2:
        return float("nan")
    return float(roc_auc_score(y, s))


def roc_curve(labels: ArrayLike, scores: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Empirical ROC curve (scikit-learn, every point kept): (fpr, tpr, thresholds), thresholds decreasing.

    Point i is the rule ``score >= thresholds[i]``; the first point is
    ``(0, 0)`` with threshold +inf, the last ``(1, 1)`` at the lowest score.
    Tied scores form a single point. Empty arrays if a class is absent.
    """
    from sklearn.metrics import roc_curve as _sk_roc_curve

    y, s, _ = clean(labels, scores)
    if len(np.unique(y)) < 2:
        empty = np.array([], dtype=float)
        return empty, empty, empty
    fpr, tpr, thr = _sk_roc_curve(y, s, drop_intermediate=False)
    thr = thr.astype(float)
    thr[0] = np.inf  # scikit-learn's first threshold is already +inf; kept explicit for older versions
    return fpr, tpr, thr


def tpr_at_fpr(labels: ArrayLike, scores: ArrayLike, fpr: float) -> float:
    """Highest TPR over ROC thresholds whose FPR is at most ``fpr`` (no interpolation).

    The comparison is done on counts (false positives <= floor(fpr * n0)) so
    floating-point rounding never admits or rejects a point wrongly.
    """
    if not 0.0 <= fpr <= 1.0:
        raise ValueError("fpr must be in [0, 1]")
    y, s, _ = clean(labels, scores)
    n0 = int((y == 0).sum())
    f, t, _ = roc_curve(y, s)
    if len(f) == 0:
        return float("nan")
    max_fp = math.floor(fpr * n0 + 1e-9)
    admissible = np.rint(f * n0) <= max_fp
    return float(t[admissible].max())


# --------------------------------------------------------------------------- decision metrics


def confusion(labels: ArrayLike, decisions: ArrayLike) -> dict[str, int]:
    """Counts tp, fp, tn, fn over decided documents (None decisions excluded)."""
    y, d, _ = clean(labels, decisions)
    d = d.astype(bool)
    pos = y == 1
    return {
        "tp": int((d & pos).sum()),
        "fp": int((d & ~pos).sum()),
        "tn": int((~d & ~pos).sum()),
        "fn": int((~d & pos).sum()),
    }


def _decided(labels: ArrayLike, decisions: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    y, d, _ = clean(labels, decisions)
    return y, d.astype(bool).astype(np.int8)


def accuracy(labels: ArrayLike, decisions: ArrayLike) -> float:
    """Share of decided documents decided right; nan when nothing was decided."""
    from sklearn.metrics import accuracy_score

    y, d = _decided(labels, decisions)
    return float(accuracy_score(y, d)) if len(y) else float("nan")


def precision(labels: ArrayLike, decisions: ArrayLike) -> float:
    """Share of "member" decisions that are members (scikit-learn); nan when nothing was called a member."""
    from sklearn.metrics import precision_score

    y, d = _decided(labels, decisions)
    return float(precision_score(y, d, zero_division=np.nan)) if len(y) else float("nan")


def recall(labels: ArrayLike, decisions: ArrayLike) -> float:
    """True-positive rate among decided members (scikit-learn); nan without members."""
    from sklearn.metrics import recall_score

    y, d = _decided(labels, decisions)
    return float(recall_score(y, d, zero_division=np.nan)) if len(y) else float("nan")


def f1(labels: ArrayLike, decisions: ArrayLike) -> float:
    """2TP / (2TP + FP + FN) (scikit-learn); nan when there is neither a member nor a member decision."""
    from sklearn.metrics import f1_score

    y, d = _decided(labels, decisions)
    return float(f1_score(y, d, zero_division=np.nan)) if len(y) else float("nan")


# --------------------------------------------------------------------------- bootstrap


def _stratified_indices(y: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``n`` resamples of indices, each drawn with replacement within each class."""
    rng = np.random.default_rng(seed)
    strata = [np.nonzero(y == c)[0] for c in (1, 0)]
    parts = [rng.choice(idx, size=(n, len(idx)), replace=True) for idx in strata if len(idx)]
    return np.concatenate(parts, axis=1)


def _check_bootstrap(n: int, level: float) -> None:
    if n < 1:
        raise ValueError("n must be at least 1")
    if not 0.0 < level < 1.0:
        raise ValueError("level must be in (0, 1)")


def _resampled(labels: ArrayLike, values: ArrayLike, n: int, seed: int, level: float,
               both_classes: bool) -> tuple[np.ndarray, int, int] | None:
    """Values of ``n`` stratified resamples, one row each with the members first, and n1, n0;
    None where there is nothing to resample (no value, or one class when ``both_classes``)."""
    _check_bootstrap(n, level)
    y, v, _ = clean(labels, values)
    n1 = int(y.sum())
    n0 = len(y) - n1
    if len(y) == 0 or (both_classes and (n1 == 0 or n0 == 0)):
        return None
    return v[_stratified_indices(y, n, seed)], n1, n0


def _percentile_interval(stats: np.ndarray, level: float) -> tuple[float, float]:
    """Percentile interval of the defined resample values; ``(nan, nan)`` when none is defined."""
    stats = np.asarray(stats, dtype=float)
    stats = stats[np.isfinite(stats)]
    if len(stats) == 0:
        return float("nan"), float("nan")
    alpha = 1.0 - level
    low, high = np.quantile(stats, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def bootstrap_ci(
    metric_fn: MetricFn,
    labels: ArrayLike,
    scores: ArrayLike,
    n: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``metric_fn(labels, scores)``.

    Resampling is stratified: each resample keeps the number of members and
    non-members of the data, so AUC and TPR@FPR stay defined in every
    resample. ``scores`` may be decisions for the decision metrics. Inconclusive
    entries are dropped first. Resamples where the metric is undefined (e.g.
    precision with no member decision) are skipped; if none is defined the
    interval is ``(nan, nan)``. The metrics ``summarize`` reports have
    vectorised forms below that give the same numbers from the same resamples.
    """
    if (r := _resampled(labels, scores, n, seed, level, both_classes=False)) is None:
        return float("nan"), float("nan")
    res, n1, n0 = r
    y = np.r_[np.ones(n1, dtype=int), np.zeros(n0, dtype=int)]  # every resample holds the members first
    return _percentile_interval(np.array([metric_fn(y, v) for v in res], dtype=float), level)


def bootstrap_auc_ci(
    labels: ArrayLike,
    scores: ArrayLike,
    n: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
) -> tuple[float, float]:
    """``bootstrap_ci(roc_auc, ...)`` computed for all resamples at once (the same resamples, the same numbers).

    Each resample's AUC is its Mann-Whitney U from mid-ranks, vectorised over
    resamples, so the abstain rule and the benchmark can afford 1,000
    resamples per method.
    """
    if (r := _resampled(labels, scores, n, seed, level, both_classes=True)) is None:
        return float("nan"), float("nan")
    return _percentile_interval(_resample_aucs(*r), level)


def _resample_aucs(resampled: np.ndarray, n1: int, n0: int) -> np.ndarray:
    """The AUC of every row of ``resampled`` (members first): Mann-Whitney U from mid-ranks over n1 * n0."""
    from scipy.stats import rankdata

    ranks = rankdata(resampled, axis=1)
    return (ranks[:, :n1].sum(axis=1) - n1 * (n1 + 1) / 2.0) / (n1 * n0)


def bootstrap_auc_difference_ci(
    labels: ArrayLike,
    scores_a: ArrayLike,
    scores_b: ArrayLike,
    n: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
) -> tuple[float, float]:
    """Paired interval of AUC(a) - AUC(b): two scores of the SAME documents, the same resamples for both.

    Why paired: two readings of one set of answers share most of their
    sampling error, so the difference's interval is far narrower than the two
    separate intervals suggest. A document inconclusive under either score is
    left out of both. Same stratified resamples as ``bootstrap_auc_ci``.
    """
    y, a, b = _labels(labels), _values(scores_a), _values(scores_b)
    if not len(y) == len(a) == len(b):
        raise ValueError(f"{len(y)} labels but {len(a)} and {len(b)} scores")
    keep = ~(np.isnan(a) | np.isnan(b))
    y, a, b = y[keep], a[keep], b[keep]
    _check_bootstrap(n, level)
    n1 = int(y.sum())
    n0 = len(y) - n1
    if n1 == 0 or n0 == 0:
        return float("nan"), float("nan")
    idx = _stratified_indices(y, n, seed)
    return _percentile_interval(_resample_aucs(a[idx], n1, n0) - _resample_aucs(b[idx], n1, n0), level)


def bootstrap_mean_auc_ci(
    draws: Sequence[tuple[ArrayLike, ArrayLike]],
    n: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
) -> tuple[float, float]:
    """Interval of the mean of per-draw AUCs: ``draws`` is one (labels, scores) pair per independent draw.

    Why a mean of per-draw AUCs and not one AUC over the pooled documents:
    each draw has its own knowledge base, so its scores need not share a scale
    with another draw's; an AUC is read within one draw only. Each resample
    draws every draw's members and non-members again, within that draw (the
    same stratified resamples as ``bootstrap_auc_ci``, a seed per draw), and
    averages the draws' AUCs. A draw without both classes is an error, not a
    silent omission.
    """
    _check_bootstrap(n, level)
    per_draw = []
    for i, (labels, scores) in enumerate(draws):
        if (r := _resampled(labels, scores, n, seed + i, level, both_classes=True)) is None:
            raise ValueError(f"draw {i + 1} has no scored members and non-members both")
        per_draw.append(_resample_aucs(*r))
    if not per_draw:
        raise ValueError("no draws")
    return _percentile_interval(np.mean(per_draw, axis=0), level)


def bootstrap_tpr_at_fpr_ci(
    labels: ArrayLike,
    scores: ArrayLike,
    fpr: float,
    n: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
) -> tuple[float, float]:
    """``bootstrap_ci(tpr_at_fpr(., ., fpr), ...)`` for all resamples at once (the same resamples, the same numbers).

    With at most ``k = floor(fpr * n0)`` false positives allowed, the best
    admissible ROC threshold lies just above the (k+1)-th highest non-member
    score ``c``, and the TPR there is the share of members scoring above ``c``
    (all members when ``k >= n0``): one sort per resample instead of one
    scikit-learn ROC curve, which made the benchmark's intervals cost seconds
    per method.
    """
    if not 0.0 <= fpr <= 1.0:
        raise ValueError("fpr must be in [0, 1]")
    if (r := _resampled(labels, scores, n, seed, level, both_classes=True)) is None:
        return float("nan"), float("nan")
    res, n1, n0 = r
    k = math.floor(fpr * n0 + 1e-9)
    if k >= n0:
        return _percentile_interval(np.ones(n), level)
    c = np.sort(res[:, n1:], axis=1)[:, n0 - 1 - k]
    return _percentile_interval((res[:, :n1] > c[:, None]).sum(axis=1) / n1, level)


def bootstrap_decision_ci(
    metric: str,
    labels: ArrayLike,
    decisions: ArrayLike,
    n: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
) -> tuple[float, float]:
    """``bootstrap_ci`` of ``accuracy``, ``precision``, ``recall`` or ``f1`` for all resamples at once.

    Each resample's confusion counts give the metric by scikit-learn's
    definitions (undefined is skipped, as ``zero_division=nan`` leaves it):
    the same resamples and numbers as calling the scikit-learn function once
    per resample, without its per-call input checks (milliseconds each, a
    thousand times per metric).
    """
    if metric not in ("accuracy", "precision", "recall", "f1"):
        raise ValueError(f"unknown decision metric {metric!r}")
    if (r := _resampled(labels, decisions, n, seed, level, both_classes=False)) is None:
        return float("nan"), float("nan")
    res, n1, n0 = r
    called = res.astype(bool)
    tp = called[:, :n1].sum(axis=1).astype(float)
    fp = called[:, n1:].sum(axis=1).astype(float)
    fn = n1 - tp
    tn = n0 - fp
    with np.errstate(divide="ignore", invalid="ignore"):
        stats = {"accuracy": (tp + tn) / (n1 + n0), "precision": tp / (tp + fp), "recall": tp / (tp + fn),
                 "f1": 2 * tp / (2 * tp + fp + fn)}[metric]
    return _percentile_interval(stats, level)


# --------------------------------------------------------------------------- summary


def _none_if_nan(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _ci(interval: Callable[[], tuple[float, float]], n: int) -> list[float | None] | None:
    if n <= 0:
        return None
    lo, hi = interval()
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return [lo, hi]


def fpr_key(fpr: float) -> str:
    """The summary key of TPR at a given FPR, e.g. ``tpr@fpr=0.01``."""
    return f"tpr@fpr={fpr:g}"


def summarize(
    labels: ArrayLike,
    scores: ArrayLike,
    decisions: ArrayLike | None = None,
    *,
    threshold: float | None = None,
    fprs: Sequence[float] = DEFAULT_FPRS,
    n_boot: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    include_roc: bool = True,
) -> dict:
    """Every metric with its bootstrap interval, as a JSON-ready dict.

    Score metrics (``auc``, ``tpr@fpr=...``) use the documents with a score;
    decision metrics (``accuracy``, ``precision``, ``recall``, ``f1``) use the
    documents with a decision. ``decisions`` default to ``score >= threshold``
    when a threshold is given; with neither, decision metrics are None.
    ``n_inconclusive_scores`` / ``n_inconclusive_decisions`` count what was
    excluded. Undefined values are None. ``n_boot=0`` skips the intervals.
    Each metric's interval key is its name + ``_ci``: ``[low, high]`` or None.
    """
    y_all = _labels(labels)
    if decisions is None and threshold is not None:
        decisions = decisions_at(list(scores), threshold)
    ys, s, n_bad_s = clean(y_all, scores)
    out: dict = {
        "n": int(len(y_all)),
        "n_members": int(y_all.sum()),
        "n_nonmembers": int(len(y_all) - y_all.sum()),
        "n_scored": int(len(ys)),
        "n_inconclusive_scores": n_bad_s,
        "threshold": threshold,
        "level": level,
        "n_boot": n_boot,
    }
    boot = dict(n=n_boot, seed=seed, level=level)
    out["n_scored_members"] = int(ys.sum())
    out["n_scored_nonmembers"] = int(len(ys) - ys.sum())
    out["auc"] = _none_if_nan(roc_auc(ys, s))
    out["auc_ci"] = _ci(lambda: bootstrap_auc_ci(ys, s, **boot), n_boot) if out["auc"] is not None else None
    # every document ranked, those without a score tied below all others: whether a document gets a
    # score can depend on its label, and the AUC over the scored ones alone does not show that
    if n_bad_s and len(ys):
        floor = float(np.min(s)) - 1.0
        v = _values(scores)
        s_all = np.where(np.isnan(v), floor, v)
        out["auc_all"] = _none_if_nan(roc_auc(y_all, s_all))
        out["auc_all_ci"] = (_ci(lambda: bootstrap_auc_ci(y_all, s_all, **boot), n_boot)
                             if out["auc_all"] is not None else None)
    else:
        out["auc_all"], out["auc_all_ci"] = out["auc"], out["auc_ci"]
    for f in fprs:
        name = fpr_key(f)
        out[name] = _none_if_nan(tpr_at_fpr(ys, s, f))
        out[name + "_ci"] = (_ci(lambda f=f: bootstrap_tpr_at_fpr_ci(ys, s, f, **boot), n_boot)
                             if out[name] is not None else None)

    decision_metrics: dict[str, MetricFn] = {"accuracy": accuracy, "precision": precision, "recall": recall, "f1": f1}
    if decisions is None:
        out["n_decided"] = 0
        out["n_inconclusive_decisions"] = int(len(y_all))
        out["confusion"] = None
        for name in decision_metrics:
            out[name] = out[name + "_ci"] = None
    else:
        yd, d, n_bad_d = clean(y_all, decisions)
        out["n_decided"] = int(len(yd))
        out["n_inconclusive_decisions"] = n_bad_d
        out["confusion"] = confusion(yd, d)
        for name, fn in decision_metrics.items():
            out[name] = _none_if_nan(fn(yd, d))
            out[name + "_ci"] = (_ci(lambda name=name: bootstrap_decision_ci(name, yd, d, **boot), n_boot)
                                 if out[name] is not None else None)

    if include_roc:
        fpr, tpr, _ = roc_curve(ys, s)
        out["roc"] = {"fpr": fpr.tolist(), "tpr": tpr.tolist()}
    return out
