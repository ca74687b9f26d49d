"""Robustness signal, after Tang et al.: members' answers change less when the query is lightly modified.

The first half of the document is sent twice with S2MIA's continuation
prompt: as written, and with ~10% of its words deleted (``drop_words``). A
RAG system that holds the document retrieves it for both and continues from
it, so the two answers agree; without the document the answers follow the
query's wording and drift apart. Score = cosine similarity of the two
answers (all-MiniLM-L6-v2, clipped to [0, 1]), thresholded on the shadow.
Two queries per document.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from audit_core.documents import Document
from audit_core.evidence.answers import non_answer
from audit_core.methods.base import Observation, QueryCost, template_words
from audit_core.methods.baseline_common import split_halves
from audit_core.methods.s2mia import PROMPT
from audit_core.methods.text_edits import drop_words
from audit_core.methods.textonly_base import ThresholdTextMethod, answers
from audit_core.target.base import Target


@dataclass
class RobustnessConfig:
    #: share of the query's words deleted in the modified copy
    drop_ratio: float = 0.1
    max_tokens: int = 32
    min_words: int = 8
    embedder: str = "all-minilm-l6-v2"


class RobustnessMethod(ThresholdTextMethod):
    name = "robustness"
    version = "1"
    scoring_revision = "2"  # session 48: non-answers are no score

    def __init__(self, config: RobustnessConfig | None = None) -> None:
        self.config = config or RobustnessConfig()
        self.min_words = self.config.min_words

    def query_cost(self, n_words: int) -> QueryCost | None:
        if n_words < self.config.min_words:
            return None
        half = n_words // 2
        return QueryCost(2, 2 * (template_words(PROMPT) + half), 2 * self.config.max_tokens)

    def probe(self, doc: Document, target: Target) -> Observation:
        halves = split_halves(doc.text, self.config.min_words)
        if halves is None:
            obs = Observation(self.name, doc.id)
            obs.skipped = "document_too_short"
            return obs
        mod = drop_words(halves.first, self.config.drop_ratio)
        return self.send(doc, target, [PROMPT.format(query=halves.first), PROMPT.format(query=mod.text)],
                         {"dropped": [e.old.strip() for e in mod.edits]}, self.config.max_tokens)

    def observation_score(self, obs: Observation) -> tuple[float | None, dict[str, Any], str | None]:
        a = answers(obs)[-2:]
        ev: dict[str, Any] = {"answers": a, "dropped": obs.data.get("dropped")}
        if any(x is None for x in a):
            return None, ev, "target_error: one of the two queries failed"
        kinds = [non_answer(x) for x in a]
        kind = next((k for k in kinds if k is not None), None)
        if kind is not None:  # two refusals are as alike as two answers from the document: no evidence
            return None, ev, f"non-answer ({kind}): one of the two answers is not an answer, so there is nothing " \
                             "to compare"
        from audit_core.models import embed

        emb = embed(a, self.config.embedder)
        sim = float(np.dot(emb[0], emb[1]))
        ev["similarity"] = sim
        return min(1.0, max(0.0, sim)), ev, None
