"""Min-k% Prob baseline (Shi et al., 2023), as applied to RAG by Liu et al. (MBA, 2024).

The target continues the document's first half; the raw score is the mean
log-probability of the k% least likely tokens of its continuation (its own
tokens, as returned in ``logprobs``). A system that has the document in its
retrieved context continues it confidently, so even its least likely tokens
are likely: the raw value is closer to 0 for members.

The mean follows Shi et al.; MBA's section 5.4.2 says "the sum" of those
log-probabilities. A sum grows with the continuation's length, which differs
per document here (up to 64 tokens, fewer for short documents), so it would
rank documents by length as much as by confidence: the mean is kept.

Score in [0, 1]: ``exp(raw)``, the geometric mean probability of those
k% tokens -- monotonic in the raw value, so thresholds and AUC are the same
on either scale; the raw value is kept in the evidence.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from audit_core.documents import Document
from audit_core.methods.base import (Calibration, MembershipMethod, MethodResult, Observation, QueryCost, send_all,
                                     template_words)
from audit_core.methods.baseline_common import decide, fit_threshold, last_completion, split_halves, unusable
from audit_core.target.base import ChatRequest, Target

#: the continuation prompt; {prefix} is the document's first half
PROMPT = (
    "Continue the following text. Write only the continuation, with no introduction "
    "or explanation.\n\n{prefix}"
)


@dataclass
class MinKConfig:
    """Defaults: Shi et al. report k = 20% as the best single choice; Liu et al. sweep 1-20%."""

    k_percent: float = 20.0
    max_tokens_cap: int = 64  # continuation length = words of the second half, capped here
    min_words: int = 4  # a first half and a continuation of at least two words each


def min_k_mean(logprobs: Sequence[float], k_percent: float) -> tuple[float, int]:
    """Mean of the ceil(k% * n) lowest logprobs (at least one) and how many were used."""
    if not logprobs:
        raise ValueError("no logprobs to score")
    if not 0 < k_percent <= 100:
        raise ValueError("k_percent must be in (0, 100]")
    n = max(1, math.ceil(len(logprobs) * k_percent / 100))
    low = sorted(logprobs)[:n]
    return sum(low) / n, n


class MinKMethod(MembershipMethod):
    """Membership = the target's continuation of the first half has no unlikely tokens."""

    name = "mink"
    version = "1"
    requires_logprobs = True

    def __init__(self, config: MinKConfig | None = None) -> None:
        self.config = config or MinKConfig()
        self.min_words = self.config.min_words

    def query_cost(self, n_words: int) -> QueryCost | None:
        """One continuation of the first half, as long as the second half (capped)."""
        if n_words < max(2, self.config.min_words):
            return None
        half = n_words // 2
        return QueryCost(1, template_words(PROMPT) + half, max(1, min(self.config.max_tokens_cap, n_words - half)))

    def probe(self, doc: Document, target: Target) -> Observation:
        obs = Observation(self.name, doc.id)
        halves = split_halves(doc.text, self.config.min_words)
        if halves is None:
            obs.skipped = "document_too_short"
            return obs
        obs.data.update(first_half=halves.first, n_second_words=halves.n_second_words)
        req = ChatRequest.chat(
            [{"role": "user", "content": PROMPT.format(prefix=halves.first)}],
            max_tokens=max(1, min(self.config.max_tokens_cap, halves.n_second_words)),
            temperature=0.0, logprobs=True,
        )
        send_all(target, [req], obs)
        return obs

    def raw_score(self, obs: Observation) -> tuple[float | None, str | None, dict]:
        """(raw Min-k% value, reason when there is none, evidence)."""
        comp = last_completion(obs)
        if comp is None:
            return None, "no_response", {}
        ev: dict = {"continuation": comp.text}
        if comp.tokens is None:
            return None, "no_logprobs", ev
        if not comp.tokens:
            return None, "empty_answer", ev
        raw, n = min_k_mean([t.logprob for t in comp.tokens], self.config.k_percent)
        ev.update(min_k_logprob=raw, k_percent=self.config.k_percent, tokens_used=n,
                  tokens_generated=len(comp.tokens))
        return raw, None, ev

    def prepare(self, members: Sequence[Observation], nonmembers: Sequence[Observation]) -> Calibration:
        def scores(obs_list: Sequence[Observation]) -> list[float | None]:
            out: list[float | None] = []
            for o in obs_list:
                raw = None if unusable(self.name, o) else self.raw_score(o)[0]
                out.append(None if raw is None else math.exp(raw))
            return out

        return fit_threshold(self.name, scores(members), scores(nonmembers), default=None,
                             params={"k_percent": self.config.k_percent})

    def score(self, obs: Observation, calibration: Calibration) -> MethodResult:
        bad = unusable(self.name, obs)
        if bad is not None:
            return bad
        raw, reason, ev = self.raw_score(obs)
        if raw is None:
            return MethodResult(self.name, obs.doc_id, None, None, reason, ev)
        return decide(self.name, obs, math.exp(raw), calibration, ev)
