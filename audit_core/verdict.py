"""Per-document verdicts from method results.

A verdict is one of "member", "not found" or "inconclusive" -- never a bare
guess. "not found" is deliberately not "not a member": a RAG can hold a
document and still fail to retrieve it for our probes.

Rules (S-RAG is the primary method, MBA the second opinion):

* a method that could not run (no logprobs, failed calls, too short) says why
  and does not vote;
* the primary method decides when it ran and either nobody else voted or the
  second opinion agrees;
* when the two disagree, the verdict is "inconclusive: methods disagree" unless
  the primary is confident (probability outside [low, high]), in which case it
  stands and the disagreement is reported;
* with only the second opinion, its decision stands, marked as such.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

from audit_core.methods.base import MethodResult

MEMBER = "member"
NOT_FOUND = "not found"
INCONCLUSIVE = "inconclusive"

PRIMARY_ORDER = ("srag", "mba", "rag_mia", "s2mia_m", "s2mia_t", "mink")


@dataclass
class VerdictConfig:
    #: primary probability beyond which a disagreeing second opinion is overruled
    confident_low: float = 0.2
    confident_high: float = 0.8
    primary: str = "srag"
    second: str = "mba"


@dataclass
class Verdict:
    doc_id: str
    verdict: str
    reason: str
    score: float | None  # combined membership score in [0, 1] (the primary's when it ran)
    methods: dict[str, dict] = field(default_factory=dict)  # method -> {score, decision, reason}

    def to_json(self) -> dict:
        return asdict(self)


def decide(doc_id: str, results: Sequence[MethodResult], cfg: VerdictConfig | None = None) -> Verdict:
    cfg = cfg or VerdictConfig()
    by = {r.method: r for r in results}
    summary = {r.method: {"score": r.score, "decision": r.decision, "reason": r.reason} for r in results}
    ran = {m: r for m, r in by.items() if r.decision is not None}
    if not ran:
        reasons = "; ".join(f"{m}: {r.reason}" for m, r in by.items()) or "no method was run"
        return Verdict(doc_id, INCONCLUSIVE, reasons, None, summary)

    primary, second = ran.get(cfg.primary), ran.get(cfg.second)
    if primary is None and second is None:
        # only baselines ran: take the first available in a fixed order
        name = next(m for m in PRIMARY_ORDER + tuple(ran) if m in ran)
        r = ran[name]
        return Verdict(doc_id, MEMBER if r.decision else NOT_FOUND, f"decided by {name} alone", r.score, summary)
    if primary is None:
        why = by[cfg.primary].reason if cfg.primary in by else f"{cfg.primary} was not run"
        return Verdict(doc_id, MEMBER if second.decision else NOT_FOUND,
                       f"{cfg.second} only ({cfg.primary}: {why})", second.score, summary)
    label = MEMBER if primary.decision else NOT_FOUND
    if second is None or second.decision == primary.decision:
        agree = "" if second is None else f"; {cfg.second} agrees"
        return Verdict(doc_id, label, f"{cfg.primary} probability {primary.score:.2f}{agree}", primary.score, summary)
    confident = primary.score <= cfg.confident_low or primary.score >= cfg.confident_high
    if confident:
        return Verdict(doc_id, label,
                       f"{cfg.primary} is confident ({primary.score:.2f}); {cfg.second} disagrees", primary.score, summary)
    return Verdict(doc_id, INCONCLUSIVE,
                   f"methods disagree: {cfg.primary} {primary.score:.2f}, {cfg.second} {second.score:.2f}",
                   primary.score, summary)
