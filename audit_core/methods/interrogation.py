"""Interrogation attack (IA), after "Riddle Me This!" (Naseh et al., CCS 2025, arXiv 2502.00306).

Natural yes/no questions that only the document answers are asked as an
ordinary user would ask them; a RAG system that holds the document answers
them correctly, one that does not guesses or says it does not know.

Score (the paper's, not its public code's plain accuracy):
    raw = share of correct answers - lambda * share of "I don't know" answers, lambda = 5,
mapped to [0, 1] as (raw + lambda) / (1 + lambda); the raw value stays in
the evidence. The threshold is fitted on the shadow.

Questions come from ``questions.questions_for`` (rules by default, or a
helper model the user configures) and are cached per document. IA asks 30;
our default is 10 (``n_questions``) to stay within the issue's 10 queries
per document, and the rule generator rarely finds 30 facts in a 60-word
document anyway (two questions per sentence).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from audit_core.documents import Document
from audit_core.methods.base import Observation, QueryCost, template_words
from audit_core.methods.questions import (EMPTY, IDK, OTHER, QuestionConfig, answer_counts, questions_for,
                                          read_answer)
from audit_core.methods.textonly_base import YES_NO_SUFFIX, ThresholdTextMethod, answers
from audit_core.target.base import Target


@dataclass
class InterrogationConfig:
    #: questions per document (IA: 30; ours: 10, see the module docstring)
    n_questions: int = 10
    #: penalty per "I don't know" answer (IA: lambda = 5)
    idk_penalty: float = 5.0
    #: a yes/no answer, with room for a short hedge
    max_tokens: int = 8
    #: fewest questions a document must yield to be scored
    min_questions: int = 2
    questions: QuestionConfig = field(default_factory=QuestionConfig)


class InterrogationMethod(ThresholdTextMethod):
    name = "interrogation"
    version = "1"
    min_words = 10

    def __init__(self, config: InterrogationConfig | None = None) -> None:
        self.config = config or InterrogationConfig()
        if isinstance(self.config.questions, dict):
            self.config.questions = QuestionConfig(**self.config.questions)

    def query_cost(self, n_words: int) -> QueryCost | None:
        """At most ``n_questions`` questions (fewer when the document has few sentences): an upper bound."""
        if n_words < self.min_words:
            return None
        q = self.config.n_questions
        # a question restates about one sentence: ~15 words
        return QueryCost(q, q * (15 + template_words(YES_NO_SUFFIX)), q * self.config.max_tokens)

    def probe(self, doc: Document, target: Target) -> Observation:
        c = self.config
        if doc.n_words < self.min_words:
            obs = Observation(self.name, doc.id)
            obs.skipped = f"too short: interrogation needs at least {self.min_words} words"
            return obs
        qs = questions_for(doc.text, "yes_no", c.n_questions, c.questions, target_name=getattr(target, "name", None))
        if len(qs) < c.min_questions:
            obs = Observation(self.name, doc.id, data={"questions": [q.to_json() for q in qs]})
            obs.skipped = (f"no_questions: only {len(qs)} yes/no question(s) could be made from this document "
                           f"(at least {c.min_questions} needed)")
            return obs
        return self.send(doc, target, [q.question + YES_NO_SUFFIX for q in qs],
                         {"questions": [q.to_json() for q in qs], "generator": c.questions.identity()},
                         c.max_tokens)

    def observation_score(self, obs: Observation) -> tuple[float | None, dict[str, Any], str | None]:
        lam = self.config.idk_penalty
        qs = obs.data.get("questions", [])
        labels, rows = [], []
        for q, a in zip(qs, answers(obs)):
            if a is None:
                continue  # a failed call is neither right nor "I don't know"
            lab = read_answer(a)
            labels.append(lab)
            rows.append({"question": q["question"], "expected": q["expected"], "answer": a, "read_as": lab})
        counts = answer_counts(labels)
        ev: dict[str, Any] = {"answers": rows, "counts": counts}
        if not labels:
            return None, ev, "no_answers: every question failed"
        if counts[EMPTY] + counts[OTHER] == len(labels):
            return None, ev, ("no signal: the target answered none of the questions with yes, no or "
                              "'I don't know' (empty or unreadable answers)")
        n = len(labels)
        correct = sum(1 for r in rows if r["read_as"] == r["expected"]) / n
        idk = counts[IDK] / n
        raw = correct - lam * idk
        ev.update(correct_share=correct, idk_share=idk, raw_score=raw, idk_penalty=lam)
        return (raw + lam) / (1 + lam), ev, None
