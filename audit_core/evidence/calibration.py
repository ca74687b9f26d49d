"""Per-document decisions at a stated false-positive rate, fitted on out-of-fold shadow scores.

Every method hands this module one *raw* score per shadow document, computed
without the document ever having been used to fit anything that scored it:

* threshold methods (MBA, RAG-MIA, S2MIA-T, Min-k%) fit nothing but the
  threshold, so their raw scores are out-of-fold by construction;
* trained methods (S-RAG's AutoGluon classifier, S2MIA-M) pass k-fold
  out-of-fold predictions (``oof_predictions``).

From those scores ``fit_evidence`` derives, once, as plain JSON data:

1. **The signal check (abstain rule).** The method decides only when the lower
   end of the 95% stratified bootstrap interval of its out-of-fold shadow AUC
   is above ``AbstainRule.min_auc_lower`` = 0.6. Why 0.6 and not 0.5: the
   shadow is a stand-in for the target, and a ranking that is barely better
   than chance on it has no margin left for the difference between the two;
   a method with shadow AUC 0.52 (RAG-MIA in the benchmark) no longer calls 96
   of 100 documents members.
2. **A threshold per false-positive rate** (1%, 5% and 10%; the user picks,
   default 5%): a document is called a member when its conformal p-value
   against the shadow's non-members,
   ``p = (1 + #{shadow non-members scoring >= s}) / (n0 + 1)``, is at most the
   rate. If the audited document is a non-member whose score is exchangeable
   with the shadow non-members', ``P(p <= alpha) <= alpha`` exactly, with no
   assumption on the score's distribution. That exchangeability is the one
   assumption: the shadow RAG stands in for the target's non-members, which is
   why the benchmark measures the realised rate on the target
   (BENCHMARKS.md, evidence section). With fewer than ``1 / alpha - 1``
   shadow non-members no threshold can promise the rate; the method then
   abstains at that rate and says so.
3. **The method's power at that rate**: the share of shadow members (out of
   fold) the threshold calls members.
4. **Evidence of absence before "not found".** A score under the member
   threshold is not by itself a reason to clear a document: a method with a
   power of 0.4 leaves most members under it. A document is called "not
   found" only when its conformal p-value against the shadow's *members*,
   ``q = (1 + #{shadow members scoring <= s}) / (n1 + 1)``, is at most
   ``ClearRule.max_miss_rate`` (5%), so that a member exchangeable with the
   shadow's members is cleared at most that often -- the mirror image of
   point 2. Between the two thresholds the document is inconclusive ("not
   cleared"), with the share of shadow members that score as low. A method
   whose members often score the floor (Verbatim continuation: four in ten
   shadow members reproduce nothing) therefore never clears a document, and
   one whose members rarely score low (S-RAG and MBA on the completion
   profile: about 80% of shadow non-members cleared) still does.
5. **A calibrated probability**: Platt scaling, i.e. scikit-learn's logistic
   regression of the shadow label on the raw score. It is strictly monotone,
   so it changes no ranking and no decision, and it keeps the KDE plots
   smooth; it is a probability under the shadow's own member share (about
   one half), which the report states. Isotonic regression was not used: on a
   few hundred shadow documents it turns scores into a handful of steps.

Nothing here ever sees an audited document: ``fit_evidence`` takes shadow
scores only, and ``decide_raw`` reads the stored numbers without updating them.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

#: false-positive rates a user can choose (app sidebar, CLI ``--fpr``)
FPR_CHOICES: tuple[float, ...] = (0.01, 0.05, 0.10)
DEFAULT_FPR = 0.05
#: k of the k-fold out-of-fold predictions of trained methods
DEFAULT_FOLDS = 5


@dataclass(frozen=True)
class AbstainRule:
    """When a method may decide at all (module docstring, point 1)."""

    #: the lower bound of the shadow AUC's interval must exceed this
    min_auc_lower: float = 0.6
    level: float = 0.95
    n_boot: int = 1000
    seed: int = 0


ABSTAIN_RULE = AbstainRule()


@dataclass(frozen=True)
class ClearRule:
    """When a score under the member threshold may say "not found" (module docstring, point 4)."""

    #: the largest share of the shadow's members allowed to score at or below a cleared document:
    #: 5%, the default false-positive rate, so that at the default both calls of a method err at
    #: most that often on the shadow. It does not follow the user's rate: a "not found" for a
    #: member is the error this tool must avoid most, whatever rate the member calls use.
    max_miss_rate: float = 0.05


CLEAR_RULE = ClearRule()
#: the start of the reason of a document under the member threshold that is not cleared
NOT_CLEARED = "not cleared"


def fpr_key(fpr: float) -> str:
    """The JSON key of a false-positive rate ("0.05")."""
    return f"{float(fpr):g}"


def check_fpr(fpr: float) -> float:
    fpr = float(fpr)
    if not any(math.isclose(fpr, c) for c in FPR_CHOICES):
        raise ValueError(f"false-positive rate {fpr:g} is not offered; choose one of "
                         f"{', '.join(f'{c:.0%}' for c in FPR_CHOICES)}")
    return fpr


# --------------------------------------------------------------------------- pieces


def conformal_p_value(raw: float, nonmember_raw: Sequence[float]) -> float:
    """(1 + #{shadow non-members with a score >= raw}) / (n0 + 1)."""
    v = np.asarray(nonmember_raw, dtype=float)
    return float((1 + int((v >= raw).sum())) / (len(v) + 1))


def conformal_threshold(nonmember_raw: Sequence[float], fpr: float) -> float | None:
    """The smallest raw score whose conformal p-value is at most ``fpr`` (None: no such score).

    Members are ``raw >= threshold``. With non-member scores sorted from the
    highest, v[0] >= v[1] >= ..., at most k = floor(fpr (n0 + 1)) - 1 of them
    may score at or above a member, so the threshold is just above v[k].
    """
    v = np.sort(np.asarray(nonmember_raw, dtype=float))[::-1]
    k = math.floor(fpr * (len(v) + 1) + 1e-9) - 1
    if k < 0 or len(v) == 0:
        return None
    return float(np.nextafter(v[k], np.inf))


def min_nonmembers(fpr: float) -> int:
    """Fewest shadow non-members for which ``conformal_threshold`` exists at ``fpr``."""
    return max(1, math.ceil(1.0 / fpr - 1 - 1e-9))


def clear_threshold(member_raw: Sequence[float], rule: ClearRule = CLEAR_RULE) -> float | None:
    """The highest raw score a "not found" may have: member p-value <= the miss rate (None: none may).

    The mirror of ``conformal_threshold`` on the members' side: a document is
    cleared when ``raw <= clear_threshold``, i.e. when at most
    ``floor(rate (n1 + 1)) - 1`` shadow members score at or below it.
    """
    t = conformal_threshold([-float(x) for x in member_raw], rule.max_miss_rate)
    return None if t is None else -t


def clearance(evidence: dict[str, Any], rule: ClearRule = CLEAR_RULE) -> dict[str, Any]:
    """What a method's "not found" calls are worth: the threshold, and the shadow's non-members it clears.

    Computed from the stored out-of-fold scores, so calibrations stored before
    this rule get it too.
    """
    m, n = evidence.get("member_raw") or [], evidence.get("nonmember_raw") or []
    t = clear_threshold(m, rule)
    reason = None if t is not None else (
        f"{NOT_CLEARED}: the shadow has {len(m)} scored member(s); at least "
        f"{min_nonmembers(rule.max_miss_rate)} are needed to clear a document at a "
        f"{rule.max_miss_rate:.0%} miss rate")
    return {"max_miss_rate": rule.max_miss_rate, "threshold_raw": t,
            "threshold": None if t is None else platt_probability(t, evidence.get("platt")),
            "cleared_share": None if t is None or not n else float(np.mean(np.asarray(n) <= t)),
            "reason": reason}


def fit_platt(member_raw: Sequence[float], nonmember_raw: Sequence[float]) -> dict[str, float] | None:
    """Platt scaling (scikit-learn's logistic regression on the raw score); None when a class is missing.

    Every method's raw score is built so that a higher one is more member-like, so the fit may not
    run the other way: a shadow on which it does gets the flat fit (a = 0: every document the shadow's
    share of members), as one whose scores are all equal does. A decreasing fit came from noise on the
    shipped shadows (Entailment on the standard completion shadow: shadow AUC 0.48 and a = -53 from one
    copying non-member), and it turned the method's ranking around on the target (BENCHMARKS.md,
    session 44). Such a shadow shows no signal, so the method abstains either way. A decreasing fit can also
    come from a few far-out scores beside a ranking with signal; the scores are then held inside the shadow's
    central 90% and fitted again (``lo`` and ``hi``), and only if that fit falls too is it flat.

    ``prior_log_odds`` is log(members / non-members) of the shadow the fit saw: a * raw + b is the posterior
    log-odds under that share, and a * raw + b - prior_log_odds the log likelihood ratio the collection test
    weighs with (``collection.mixture_weights``), whatever share of the shadow's answers were usable.
    """
    if not member_raw or not nonmember_raw:
        return None
    from sklearn.linear_model import LogisticRegression

    x = np.asarray(list(member_raw) + list(nonmember_raw), dtype=float).reshape(-1, 1)
    y = np.r_[np.ones(len(member_raw)), np.zeros(len(nonmember_raw))]
    prior = float(math.log(len(member_raw) / len(nonmember_raw)))
    flat = {"a": 0.0, "b": prior, "prior_log_odds": prior}
    if np.ptp(x) == 0:
        return flat
    lr = LogisticRegression(C=1e4, max_iter=1000).fit(x, y)
    if lr.coef_[0, 0] >= 0:
        return {"a": float(lr.coef_[0, 0]), "b": float(lr.intercept_[0]), "prior_log_odds": prior}
    # a few far-out scores can turn the fit of a ranking with signal around: fit again with every score held
    # inside the shadow's central 90% (the same bounds then hold each audited score: ``platt_log_odds``)
    lo, hi = (float(q) for q in np.quantile(x, [WINSOR_SHARE, 1 - WINSOR_SHARE]))
    if hi > lo:
        lr = LogisticRegression(C=1e4, max_iter=1000).fit(np.clip(x, lo, hi), y)
        if lr.coef_[0, 0] >= 0:
            return {"a": float(lr.coef_[0, 0]), "b": float(lr.intercept_[0]), "prior_log_odds": prior,
                    "lo": lo, "hi": hi}
    return flat


#: the share of shadow scores at each end that a refitted Platt scaling holds at the bounds (``fit_platt``)
WINSOR_SHARE = 0.05


def platt_log_odds(raw, platt: dict[str, float]):
    """a * raw + b, the raw score (a number or an array) first held inside the fit's bounds where it has them."""
    x = np.asarray(raw, dtype=float)
    if "lo" in platt:
        x = np.clip(x, platt["lo"], platt["hi"])
    return platt["a"] * x + platt["b"]


def platt_probability(raw: float, platt: dict[str, float] | None) -> float:
    if platt is None:
        return float(raw)
    z = float(platt_log_odds(float(raw), platt))
    return float(1.0 / (1.0 + math.exp(-z))) if z > -700 else 0.0


def signal_check(member_raw: Sequence[float], nonmember_raw: Sequence[float],
                 rule: AbstainRule = ABSTAIN_RULE) -> dict[str, Any]:
    """Out-of-fold shadow AUC, its bootstrap interval, and whether the method may decide."""
    from audit_core import metrics

    if len(member_raw) < 2 or len(nonmember_raw) < 2:
        return {"auc": None, "auc_ci": None, "signal": False,
                "reason": (f"uncalibrated: the shadow gave {len(member_raw)} usable member(s) and "
                           f"{len(nonmember_raw)} non-member(s); at least 2 of each are needed to validate")}
    y = [1] * len(member_raw) + [0] * len(nonmember_raw)
    s = list(member_raw) + list(nonmember_raw)
    auc = metrics.roc_auc(y, s)
    lo, hi = metrics.bootstrap_auc_ci(y, s, n=rule.n_boot, seed=rule.seed, level=rule.level)
    ok = bool(math.isfinite(lo) and lo > rule.min_auc_lower)
    reason = None if ok else (
        f"no signal: on the shadow RAG this method's out-of-fold AUC is {auc:.2f} "
        f"({rule.level:.0%} interval {lo:.2f}-{hi:.2f}); it decides only when the lower end is above "
        f"{rule.min_auc_lower:.2f}")
    return {"auc": float(auc), "auc_ci": [float(lo), float(hi)], "signal": ok, "reason": reason}


# --------------------------------------------------------------------------- fitting


def fit_evidence(member_raw: Sequence[float], nonmember_raw: Sequence[float], *, source: str,
                 rule: AbstainRule = ABSTAIN_RULE) -> dict[str, Any]:
    """Everything a method needs to decide at a stated FPR, as JSON data (see the module docstring).

    ``source`` says why the scores are out-of-fold ("k-fold out-of-fold
    predictions", "raw score, nothing fitted"). Non-finite scores are dropped.
    """
    m = [float(x) for x in member_raw if x is not None and math.isfinite(x)]
    n = [float(x) for x in nonmember_raw if x is not None and math.isfinite(x)]
    platt = fit_platt(m, n)
    at: dict[str, dict] = {}
    for fpr in FPR_CHOICES:
        t = conformal_threshold(n, fpr)
        if t is None:
            at[fpr_key(fpr)] = {"threshold_raw": None, "threshold": None, "power": None, "shadow_fpr": None,
                                "reason": (f"too few shadow non-members for a {fpr:.0%} false-positive rate: "
                                           f"{len(n)}, at least {min_nonmembers(fpr)} are needed")}
            continue
        at[fpr_key(fpr)] = {
            "threshold_raw": t,
            "threshold": platt_probability(t, platt),
            "power": float(np.mean(np.asarray(m) >= t)) if m else None,
            "shadow_fpr": float(np.mean(np.asarray(n) >= t)),
            "reason": None,
        }
    return {
        "source": source,
        "rule": dataclasses.asdict(rule),
        **{k: v for k, v in signal_check(m, n, rule).items()},
        "platt": platt,
        "member_raw": m,
        "nonmember_raw": n,
        "at_fpr": at,
    }


def apply_evidence(cal, evidence: dict[str, Any], fpr: float = DEFAULT_FPR):
    """Fill a Calibration from ``fit_evidence``'s output: calibrated OOF scores (KDE), AUC, threshold at ``fpr``."""
    cal.params["evidence"] = evidence
    platt = evidence["platt"]
    cal.member_scores = [platt_probability(x, platt) for x in evidence["member_raw"]]
    cal.nonmember_scores = [platt_probability(x, platt) for x in evidence["nonmember_raw"]]
    cal.shadow_auc = evidence["auc"]
    return with_fpr(cal, fpr, copy=False)


def with_fpr(cal, fpr: float, copy: bool = True):
    """The calibration deciding at ``fpr`` (a copy unless ``copy=False``): threshold and ``fpr`` set."""
    fpr = check_fpr(fpr)
    out = dataclasses.replace(cal) if copy else cal
    out.fpr = fpr
    ev = (cal.params or {}).get("evidence")
    if ev is not None:
        out.threshold = ev["at_fpr"][fpr_key(fpr)]["threshold"]
    return out


def clearing_withheld(method: str) -> str | None:
    """Why ``method`` never says "not found" whatever its shadow shows (``MethodSpec.no_clearing``), or None."""
    from audit_core.methods import METHODS

    spec = METHODS.get(method)
    return None if spec is None else spec.no_clearing


def clearance_of(cal) -> dict[str, Any] | None:
    """``clearance`` of a calibration with out-of-fold evidence (None for a hand-built one); a method
    whose clearing is withheld clears nothing, with that reason."""
    ev = (cal.params or {}).get("evidence")
    if ev is None:
        return None
    out = clearance(ev)
    withheld = clearing_withheld(cal.method)
    if withheld is not None:
        out.update(threshold_raw=None, threshold=None, cleared_share=None, reason=f"{NOT_CLEARED}: {withheld}")
    return out


def power_at(cal, fpr: float | None = None) -> float | None:
    """The shadow TPR of a calibration's threshold at ``fpr`` (its own rate by default)."""
    ev = (cal.params or {}).get("evidence")
    if ev is None:
        return None
    return ev["at_fpr"][fpr_key(fpr if fpr is not None else (cal.fpr or DEFAULT_FPR))]["power"]


# --------------------------------------------------------------------------- deciding


@dataclass
class Decision:
    score: float | None  # calibrated probability (the raw score for a hand-built calibration)
    decision: bool | None
    reason: str | None
    evidence: dict[str, Any]


def abstain_reason(cal) -> str | None:
    """Why a calibration may not decide at its FPR, or None."""
    ev = (cal.params or {}).get("evidence")
    if ev is None:
        # a calibration built by hand or stored before FPR control: a point-AUC rule
        from audit_core.methods.base import NO_SIGNAL_AUC

        auc = cal.shadow_auc
        if isinstance(auc, (int, float)) and auc == auc and auc < NO_SIGNAL_AUC:
            return (f"no signal: on the shadow RAG this method separated members from non-members no better "
                    f"than chance (validation AUC {auc:.2f})")
        return None
    if not ev["signal"]:
        return ev["reason"]
    return ev["at_fpr"][fpr_key(cal.fpr or DEFAULT_FPR)]["reason"]


def is_score(x: object) -> bool:
    """Whether ``x`` is a usable score: a finite number. A NaN compares neither above nor below a threshold,
    sorts anywhere, and would be counted as a scored control; it is no score."""
    import numbers

    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(float(x))


def decide_raw(raw: float, cal) -> Decision:
    """Decide one audited document from its raw score; the calibration is only read.

    A score that is not a finite number (a NaN logprob from a target) decides nothing: compared with
    a threshold it is neither above nor below, and its Platt probability would read 0.
    """
    if not is_score(raw):
        return Decision(None, None, "no usable score: the method's reading of the target's answers is not a "
                                    "number (the target sent a value such as NaN)", {"raw_score": None})
    ev = (cal.params or {}).get("evidence")
    if ev is None:  # hand-built: threshold on the raw score, no FPR statement
        evidence = {"raw_score": raw, "threshold": cal.threshold}
        if cal.threshold is None:
            return Decision(None, None, "uncalibrated", {**evidence, "uncalibrated_score": raw})
        why = abstain_reason(cal)
        return Decision(raw, None if why else bool(raw >= cal.threshold), why, evidence)
    fpr = cal.fpr or DEFAULT_FPR
    at = ev["at_fpr"][fpr_key(fpr)]
    prob = platt_probability(raw, ev["platt"])
    evidence = {
        "raw_score": raw,
        "probability": prob,
        "p_value": conformal_p_value(raw, ev["nonmember_raw"]),
        "fpr": fpr,
        "threshold": at["threshold"],
        "threshold_raw": at["threshold_raw"],
        "power": at["power"],
    }
    why = abstain_reason(cal)
    if why is not None:
        return Decision(prob, None, why, evidence)
    if raw >= at["threshold_raw"]:
        return Decision(prob, True, None, evidence)
    clear = clearance_of(cal)
    members = ev["member_raw"]
    evidence["member_p_value"] = conformal_p_value(-raw, [-x for x in members])
    evidence["clear_threshold"] = clear["threshold"]
    if clear["threshold_raw"] is not None and raw <= clear["threshold_raw"]:
        return Decision(prob, False, None, evidence)
    if clear["reason"] is not None:
        return Decision(prob, None, clear["reason"], evidence)
    low = int(np.sum(np.asarray(members) <= raw))
    return Decision(prob, None, (
        f"{NOT_CLEARED}: below the member threshold, but {low} of the shadow's {len(members)} members "
        f"({low / len(members):.0%}) score this low or lower; \"not found\" needs at most "
        f"{clear_allowance(len(members))} of them (a {CLEAR_RULE.max_miss_rate:.0%} miss rate, the document "
        "counted among the members)"), evidence)


def clear_allowance(n_members: int, rule: ClearRule = CLEAR_RULE) -> int:
    """How many of ``n_members`` shadow members may score at or below a document that is cleared: the k with
    (1 + k) / (n + 1) <= the miss rate (``clear_threshold``'s rule); -1 where even none is few enough.

    Said in a "not cleared" reason instead of the rate itself: with 30 members one member as low (3%) already
    keeps a document from being cleared, which "needs at most 5%" contradicted."""
    return math.floor(rule.max_miss_rate * (n_members + 1) + 1e-9) - 1


# --------------------------------------------------------------------------- out-of-fold predictions


def oof_predictions(
    n_rows: int,
    labels: Sequence[int],
    fit_predict: Callable[[np.ndarray, np.ndarray], np.ndarray],
    folds: int = DEFAULT_FOLDS,
    seed: int = 0,
) -> np.ndarray:
    """Out-of-fold scores: row i is scored by a model fitted on the folds without row i.

    ``fit_predict(train_idx, test_idx)`` fits on ``train_idx`` and returns
    scores for ``test_idx``. Folds are stratified (scikit-learn) and never
    more than the smaller class allows.
    """
    from sklearn.model_selection import StratifiedKFold

    y = np.asarray(labels)
    k = int(min(folds, (y == 1).sum(), (y == 0).sum()))
    if k < 2:
        raise ValueError("out-of-fold scores need at least 2 rows of each class")
    out = np.full(n_rows, np.nan)
    for train_idx, test_idx in StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(np.zeros(n_rows), y):
        out[test_idx] = np.asarray(fit_predict(train_idx, test_idx), dtype=float)
    return out
