"""Entailment of answers (MEntA-style), after "Five Queries Are Enough" (USENIX Security 2026, arXiv 2605.24312).

A few broad information-seeking questions about the document's topics are
asked as an ordinary user would ask them; a RAG system that holds the
document answers from it, so its answers are supported by the document.

MEntA scores support with an NLI model. No NLI or cross-encoder model ships
as a PyPI weights package here (the package lists hold none; hub downloads are
off), so support is read without one (``EntailmentConfig.support``):

* ``"copied"`` (default): the share of an answer's word 4-grams that occur in
  the document and not in its question, i.e. what the answer took from the
  document word for word, the strictest kind of entailment. Score:
      raw = (largest share over the answers) - (share of "I don't know" answers).
* ``"cosine"`` (before session 44): an answer's highest cosine similarity
  (all-MiniLM-L6-v2) to any sentence of the document. Score:
      raw = mean over answers of (support, or -1 for "I don't know" / refusals).
  A small model that never saw the document still writes about the same
  topic, so the cosine was about as high for non-members: AUC 0.49 and 0.60 on
  the shipped chat shadows, 0.35-0.39 on the completion ones, against
  0.63-0.66 on chat for the copied reading (``scripts/entailment_score_study.py``).

Either raw score is mapped to [0, 1] as (raw + 1) / 2 and thresholded on the shadow.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from audit_core.documents import Document
from audit_core.evidence.answers import non_answer, too_many_non_answers
from audit_core.methods.base import Observation
from audit_core.methods.questions import EMPTY, IDK, QuestionConfig, answer_counts, read_answer
from audit_core.methods.text_edits import split_sentences
from audit_core.methods.textonly_base import QuestionMethod, answers
from audit_core.methods.verbatim import word_ngrams
from audit_core.scoring import norm_words

#: how an answer's support by the document is read (see the module docstring)
SUPPORTS = ("copied", "cosine")


@dataclass
class EntailmentConfig:
    #: questions per document (MEntA: 5)
    n_questions: int = 5
    #: an answer long enough to carry the facts it draws on
    max_tokens: int = 40
    embedder: str = "all-minilm-l6-v2"
    min_questions: int = 2
    questions: QuestionConfig = field(default_factory=QuestionConfig)
    #: "copied" or "cosine" (module docstring). "copied" was chosen on the shipped shadows' answers
    #: only (no target draw): on the standard chat shadow (48 + 48 scored) AUC 0.491 -> 0.625,
    #: +0.134 [-0.004, +0.272] paired; quick chat 0.595 -> 0.632; both completion shadows from
    #: 0.35-0.39 to 0.48-0.50 (a base model copies nothing here). The largest share without the
    #: "I don't know" penalty read 0.656 / 0.657 on chat; the penalty is MEntA's and was kept.
    support: str = field(default="copied", metadata={"scoring_only": True})
    #: words per copied n-gram (as Verbatim continuation's: four words rarely match by chance)
    ngram: int = field(default=4, metadata={"scoring_only": True})
    #: key phrases each rule-made question names (consecutive questions share all but one)
    phrases_per_question: int = field(default=1, metadata={"added_later": True})

    def __post_init__(self) -> None:
        if self.support not in SUPPORTS:
            raise ValueError(f"entailment's support is one of {', '.join(SUPPORTS)} (got '{self.support}')")
        if self.ngram < 2:
            raise ValueError("entailment's copied n-grams need at least 2 words")
        if self.phrases_per_question < 1:
            raise ValueError("an entailment question names at least one key phrase")


def copied_shares(answer_texts: list[str], questions: list[str], document: str, n: int) -> list[float]:
    """Per answer, the share of its word n-grams found in the document but not in its own question."""
    doc = set(word_ngrams(norm_words(document), n))
    out = []
    for a, q in zip(answer_texts, questions):
        grams = word_ngrams(norm_words(a), n)
        fresh = doc - set(word_ngrams(norm_words(q), n))
        out.append(sum(g in fresh for g in grams) / len(grams) if grams else 0.0)
    return out


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
    #: 2, session 48: non-answers are no score; 3, session 49: a reply that opens as a
    #: non-answer (in any of nine languages) is "I don't know", even after a leading "no"
    #: 4, session 51: "No idea" is "I don't know", not "no"; 5, session 60: words compared after Unicode and
    #: typographic normalisation (norm_words)
    scoring_revision = "5"
    kind = "broad"

    @property
    def words_per_question(self) -> int:
        """About 9 words for one key phrase; each further phrase adds "and" and up to a few words."""
        return 9 + 4 * (self.config.phrases_per_question - 1)

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
        too_many = too_many_non_answers([non_answer(a) or {IDK: "I don't know", EMPTY: "empty"}.get(lab)
                                         for (_, a), lab in zip(pairs, labels)])
        if too_many is not None:  # refusals and "I don't know"s are no evidence either way
            return None, ev, too_many
        said = [(q, a) for (q, a), lab in zip(pairs, labels) if lab not in (IDK, EMPTY)]
        c = self.config
        if c.support == "copied":
            sup = iter(copied_shares([a for _, a in said], [q["question"] for q, _ in said], obs.data["document"],
                                     c.ngram))
        else:
            sup = iter(support_scores([a for _, a in said], obs.data["document"], c.embedder))
        per = []
        rows = []
        for (q, a), lab in zip(pairs, labels):
            s = -1.0 if lab == IDK else 0.0 if lab == EMPTY else next(sup)
            per.append(s)
            rows.append({"question": q["question"], "answer": a, "read_as": lab, "support": s})
        idk_share = counts[IDK] / len(labels)
        if c.support == "copied":  # an "I don't know" counts once, as the penalty, not as a support of -1
            raw = max(0.0, *per) - idk_share
        else:
            raw = float(np.mean(per))
        ev.update(answers=rows, raw_score=raw, idk_share=idk_share, support_reading=c.support)
        return (raw + 1) / 2, ev, None
