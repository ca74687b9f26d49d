"""Pieces shared by the three baselines (RAG-MIA, S2MIA, Min-k% Prob).

Kept apart so the three method modules agree on how a document is halved,
how a failed or skipped observation becomes an inconclusive result, and how a
single-score threshold is fitted on the shadow, without importing each other.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from audit_core.methods.base import Calibration, MethodResult, Observation, best_threshold, no_signal_reason
from audit_core.scoring import split_words
from audit_core.target.base import Completion


@dataclass(frozen=True)
class Halves:
    """A document cut in two by words (``split_words``), keeping its own spacing."""

    first: str
    second: str
    n_first_words: int
    n_second_words: int


def split_halves(text: str, min_words: int = 2) -> Halves | None:
    """First half = the first floor(n/2) words; None when the text has fewer than ``min_words``.

    The halves are sliced from the original text by character span, so the
    query sent to the target reads exactly like the document does.
    """
    words = split_words(text)
    if len(words) < max(2, min_words):
        return None
    h = len(words) // 2
    first = text[words[0][1]: words[h - 1][2]]
    second = text[words[h][1]: words[-1][2]]
    return Halves(first, second, h, len(words) - h)


def last_completion(obs: Observation) -> Completion | None:
    """The last successful response of an observation (a retry without logprobs wins)."""
    for r in reversed(obs.responses):
        if r is not None:
            return Completion.from_json(r)
    return None


def error_reason(error: str) -> str:
    """The machine-readable code of an ``Observation.errors`` entry ("reason: message")."""
    return error.split(":", 1)[0].strip() or "target_error"


def unusable(method: str, obs: Observation) -> MethodResult | None:
    """An inconclusive result when the observation cannot be scored at all, else None.

    Skipped documents keep their skip reason; when no call succeeded, the
    reason is the code of the last failure and the full message goes to the
    evidence (messages never carry secrets: connectors build them without keys).
    """
    if obs.skipped:
        return MethodResult(method, obs.doc_id, None, None, obs.skipped, {"skipped": obs.skipped})
    if not obs.requests:
        return MethodResult(method, obs.doc_id, None, None, "not_probed", {})
    if all(r is None for r in obs.responses):
        errs = [e for e in obs.errors if e]
        last = errs[-1] if errs else "target_error: no response"
        return MethodResult(method, obs.doc_id, None, None, error_reason(last),
                            {"error": last, "failed_queries": obs.failed, "queries": obs.queries})
    return None


def shadow_auc(member_scores: Sequence[float], nonmember_scores: Sequence[float]) -> float | None:
    """ROC AUC of a score on the shadow (None when a class is missing)."""
    if not member_scores or not nonmember_scores:
        return None
    from sklearn.metrics import roc_auc_score

    y = [1] * len(member_scores) + [0] * len(nonmember_scores)
    return float(roc_auc_score(y, list(member_scores) + list(nonmember_scores)))


def fit_threshold(
    method: str,
    member_scores: Sequence[float | None],
    nonmember_scores: Sequence[float | None],
    default: float | None,
    params: dict | None = None,
) -> Calibration:
    """Calibration of a one-score method: threshold maximising balanced accuracy on the shadow.

    The score is never fitted, only thresholded, so the AUC over all shadow
    documents is already a held-out figure for the ranking. ``None`` scores
    (inconclusive shadow documents) are left out and counted in ``params``.
    ``default`` is used only when a class is empty; without a principled
    default (None) the calibration has no threshold and scoring says so.
    """
    m = [float(s) for s in member_scores if s is not None and math.isfinite(s)]
    n = [float(s) for s in nonmember_scores if s is not None and math.isfinite(s)]
    p = dict(params or {})
    p["shadow_members_used"] = len(m)
    p["shadow_nonmembers_used"] = len(n)
    p["shadow_inconclusive"] = (len(member_scores) - len(m)) + (len(nonmember_scores) - len(n))
    if m and n:
        threshold: float | None = best_threshold(m, n, default if default is not None else 0.5)
        p["threshold_source"] = "shadow"
    else:
        threshold = default
        p["threshold_source"] = "default" if default is not None else "none"
    return Calibration(method, threshold=threshold, member_scores=m, nonmember_scores=n,
                       shadow_auc=shadow_auc(m, n), params=p)


def decide(method: str, obs: Observation, score: float, cal: Calibration, evidence: dict) -> MethodResult:
    """Threshold a score in [0, 1]; inconclusive when the shadow gave no threshold."""
    evidence = {**evidence, "threshold": cal.threshold}
    if cal.threshold is None:
        evidence["uncalibrated_score"] = score
        return MethodResult(method, obs.doc_id, None, None, "uncalibrated", evidence)
    no_signal = no_signal_reason(cal)
    if no_signal is not None:
        return MethodResult(method, obs.doc_id, score, None, no_signal, evidence)
    return MethodResult(method, obs.doc_id, score, bool(score >= cal.threshold), None, evidence)
