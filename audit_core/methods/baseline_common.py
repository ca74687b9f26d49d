"""Pieces shared by the three baselines (RAG-MIA, S2MIA, Min-k% Prob).

Kept apart so the three method modules agree on how a document is halved,
how a failed or skipped observation becomes an inconclusive result, and how a
single-score threshold is fitted on the shadow, without importing each other.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from audit_core.evidence.answers import non_answer
from audit_core.evidence.calibration import DEFAULT_FPR, apply_evidence, decide_raw, fit_evidence
from audit_core.methods.base import Calibration, MethodResult, Observation
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
    """First half = the first floor(n/2) words; None when the text has fewer than ``min_words``."""
    return split_at(text, 0.5, min_words)


def split_at(text: str, fraction: float, min_words: int = 2) -> Halves | None:
    """The first floor(n * fraction) words (at least one) and the rest; None below ``min_words`` words.

    The parts are sliced from the original text by character span, so the
    query sent to the target reads exactly like the document does.
    """
    words = split_words(text)
    if len(words) < max(2, min_words):
        return None
    h = min(len(words) - 1, max(1, int(len(words) * fraction)))
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


def unusable(method: str, obs: Observation, check_answer: bool = True) -> MethodResult | None:
    """An inconclusive result when the observation cannot be scored at all, else None.

    Skipped documents keep their skip reason; when no call succeeded, the
    reason is the code of the last failure and the full message goes to the
    evidence (messages never carry secrets: connectors build them without keys).
    A reply that is empty, a refusal or "I don't know" (``evidence.answers``)
    is a non-answer, not a low score: inconclusive with that reason.
    ``check_answer=False`` leaves that to methods that read several answers
    and count their non-answers themselves (the text-only methods: IA scores
    "I don't know" as the paper does).
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
    if not check_answer:
        return None
    comp = last_completion(obs)
    kind = non_answer(comp.text if comp is not None else None)
    if kind is not None:
        return MethodResult(method, obs.doc_id, None, None, f"non-answer ({kind}): the target did not answer",
                            {"answer": comp.text if comp is not None else None, "non_answer": kind})
    return None


def shadow_auc(member_scores: Sequence[float], nonmember_scores: Sequence[float]) -> float | None:
    """ROC AUC of a score on the shadow (None when a class is missing)."""
    if not member_scores or not nonmember_scores:
        return None
    from audit_core.metrics import roc_auc

    return roc_auc([1] * len(member_scores) + [0] * len(nonmember_scores),
                   list(member_scores) + list(nonmember_scores))


def fit_threshold(
    method: str,
    member_scores: Sequence[float | None],
    nonmember_scores: Sequence[float | None],
    default: float | None = None,
    params: dict | None = None,
    source: str = "raw score: nothing is fitted to the shadow documents, so every score is out-of-fold",
) -> Calibration:
    """Calibration of a one-score method at a stated false-positive rate (``evidence.calibration``).

    The raw score is never fitted, only thresholded, so the shadow scores are
    out-of-fold as they stand (a trained method passes its k-fold predictions
    and says so in ``source``). The threshold is the conformal one at
    ``DEFAULT_FPR`` (another rate: ``evidence.calibration.with_fpr``), the
    probability is Platt-scaled, and the method abstains unless its shadow AUC
    clears the abstain rule. ``None`` scores (inconclusive shadow documents) are
    left out and counted in ``params``. ``default`` (a paper's fixed
    threshold) is no longer used to decide: without shadow validation a method
    abstains; it is kept in ``params`` for the record.
    """
    m = [float(s) for s in member_scores if s is not None and math.isfinite(s)]
    n = [float(s) for s in nonmember_scores if s is not None and math.isfinite(s)]
    p = dict(params or {})
    p["shadow_members_used"] = len(m)
    p["shadow_nonmembers_used"] = len(n)
    p["shadow_inconclusive"] = (len(member_scores) - len(m)) + (len(nonmember_scores) - len(n))
    p["threshold_source"] = "shadow: conformal threshold at a stated false-positive rate" if m and n else "none"
    if default is not None:
        p["paper_default_threshold"] = default
    return apply_evidence(Calibration(method, params=p), fit_evidence(m, n, source=source), DEFAULT_FPR)


def decide(method: str, obs: Observation, score: float, cal: Calibration, evidence: dict) -> MethodResult:
    """Decide from a raw score: calibrated probability, conformal p-value, member at the calibration's FPR.

    Inconclusive when the shadow gave no threshold or showed no signal (the
    raw score stays in the evidence).
    """
    d = decide_raw(score, cal)
    return MethodResult(method, obs.doc_id, d.score, d.decision, d.reason, {**evidence, **d.evidence})
