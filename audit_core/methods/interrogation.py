"""Interrogation attack (IA), after "Riddle Me This!" (Naseh et al., CCS 2025, arXiv 2502.00306).

Natural yes/no questions that only the document answers are asked as an
ordinary user would ask them; a RAG system that holds the document answers
them correctly, one that does not guesses or says it does not know.

Score (the paper's, not its public code's plain accuracy):
    raw = share of correct answers - lambda * share of "I don't know" answers, lambda = 5,
over the replies that are answers or "I don't know" (a refusal, an empty or an
unreadable reply is no evidence either way and is left out; too many of them
make the document inconclusive),
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

from audit_core.evidence.answers import non_answer, too_many_non_answers
from audit_core.methods.base import Observation
from audit_core.methods.questions import (EMPTY, IDK, NO, OTHER, YES, QuestionConfig, answer_counts, read_answer,
                                          refusal)
from audit_core.methods.textonly_base import YES_NO_SUFFIX, QuestionMethod, answers


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


#: how an answer read as neither yes nor no counts among the non-answers
_KIND = {IDK: "I don't know", EMPTY: "empty", OTHER: "unparseable"}


class InterrogationMethod(QuestionMethod):
    name = "interrogation"
    version = "1"
    #: 2, session 48: non-answers are no score; 3, session 49: a reply that opens as a
    #: non-answer (in any of nine languages) is "I don't know", even after a leading "no"
    #: 4, session 51: "No idea" is "I don't know", not "no"; 5, session 53: refusals, empty and unreadable
    #: replies leave the share's denominator and take no penalty (only "I don't know" does)
    scoring_revision = "5"
    kind = "yes_no"
    suffix = YES_NO_SUFFIX
    words_per_question = 20  # a question restates about one sentence (20.1 words on MedQuAD, session 51)

    def __init__(self, config: InterrogationConfig | None = None) -> None:
        super().__init__(config or InterrogationConfig())

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
        # the paper's penalty reads a few "I don't know"s; mostly non-answers (refusals, "I don't know", empty,
        # unreadable) are no evidence either way, and never a "not found"
        too_many = too_many_non_answers([non_answer(r["answer"]) or _KIND.get(r["read_as"]) for r in rows])
        if too_many is not None:
            return None, ev, too_many
        # the penalty is for a target that says it does not know; a refusal (a guarded service may refuse
        # because it holds sensitive context), an empty or an unreadable reply says nothing either way
        scored = [r for r in rows if r["read_as"] in (YES, NO) or (r["read_as"] == IDK and not refusal(r["answer"]))]
        if not scored:
            return None, ev, "no signal: every answer was a refusal, empty or unreadable"
        n = len(scored)
        correct = sum(1 for r in scored if r["read_as"] == r["expected"]) / n
        idk = sum(1 for r in scored if r["read_as"] == IDK) / n
        raw = correct - lam * idk
        ev.update(correct_share=correct, idk_share=idk, raw_score=raw, idk_penalty=lam, scored_answers=n)
        return (raw + lam) / (1 + lam), ev, None
