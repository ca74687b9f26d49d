"""The calibration and decision shared by the one-score text-only methods.

Interrogation, entailment, perturbation, robustness and extraction each turn
an observation into one score in [0, 1] (Verbatim continuation: a count of
copied word runs), or a reason why they cannot;
calibration is a threshold fitted on the shadow's scores (``fit_threshold``,
balanced accuracy) and the decision is that threshold, withheld when the
shadow showed no signal. Only ``observation_score`` differs between them.
"""
from __future__ import annotations

from dataclasses import asdict, is_dataclass
from typing import Any, Sequence

from audit_core.documents import Document
from audit_core.methods.base import Calibration, MembershipMethod, MethodResult, Observation, send_all
from audit_core.methods.baseline_common import decide, fit_threshold, unusable
from audit_core.target.base import ChatRequest, Completion, Target

#: a natural suffix that lets an ordinary user's question be answered yes, no or "I don't know"
YES_NO_SUFFIX = " Please answer yes, no, or I don't know."


def user_request(text: str, max_tokens: int, temperature: float = 0.0, seed: int | None = 0) -> ChatRequest:
    """One ordinary user message (no system prompt, no logprobs): what a text-only method sends."""
    return ChatRequest.chat([{"role": "user", "content": text}], max_tokens=max_tokens,
                            temperature=temperature, seed=seed)


def answers(obs: Observation) -> list[str | None]:
    """The answer text of every request, None where the call failed."""
    return [None if r is None else Completion.from_json(r).text for r in obs.responses]


class ThresholdTextMethod(MembershipMethod):
    """Base of the text-only methods whose score is thresholded on the shadow."""

    requires_logprobs = False
    #: used only when the shadow gave no scores of one class (no principled default: None)
    default_threshold: float | None = None

    def observation_score(self, obs: Observation) -> tuple[float | None, dict[str, Any], str | None]:
        """(score, evidence, reason); the score is None with a reason when there is no signal.

        Higher means more like a member. A share or probability in [0, 1], except Verbatim's count.
        """
        raise NotImplementedError

    def send(self, doc: Document, target: Target, prompts: Sequence[str], data: dict, max_tokens: int,
             temperature: float = 0.0) -> Observation:
        obs = Observation(self.name, doc.id, data=data)
        send_all(target, [user_request(p, max_tokens, temperature) for p in prompts], obs)
        return obs

    def prepare(self, members: Sequence[Observation], nonmembers: Sequence[Observation]) -> Calibration:
        """The member threshold at the chosen rate, from the shadow's scores.

        Reading a chat shadow's answers takes a minute or two (Verbatim: 98 s
        measured), so the calibration stage counts each shadow document read,
        then the fit, instead of sitting at 0 / 1.
        """
        from audit_core.progress import counted, step

        total = len(members) + len(nonmembers) + 1
        scores = [self._score_or_none(o) for o in counted([*members, *nonmembers], extra=1)]
        cfg = getattr(self, "config", None)
        cal = fit_threshold(self.name, scores[:len(members)], scores[len(members):], self.default_threshold,
                            params={"config": asdict(cfg) if is_dataclass(cfg) else {}})
        step(total, total)
        return cal

    def _score_or_none(self, obs: Observation) -> float | None:
        if unusable(self.name, obs, check_answer=False) is not None:
            return None
        return self.observation_score(obs)[0]

    def score(self, obs: Observation, calibration: Calibration) -> MethodResult:
        bad = unusable(self.name, obs, check_answer=False)
        if bad is not None:
            return bad
        score, ev, reason = self.observation_score(obs)
        if score is None:
            return MethodResult(self.name, obs.doc_id, None, None, reason or "no_signal", ev)
        ev["shadow_auc"] = calibration.shadow_auc
        return decide(self.name, obs, score, calibration, ev)


class QuestionMethod(ThresholdTextMethod):
    """Base of the methods that ask generated questions (interrogation, entailment).

    Subclasses set ``kind`` ("yes_no" or "broad"), ``suffix`` (appended to
    each question) and ``words_per_question`` (for ``query_cost``); their
    config has ``n_questions``, ``min_questions``, ``max_tokens`` and a
    ``questions`` QuestionConfig.
    """

    kind = "yes_no"
    suffix = ""
    words_per_question = 15
    min_words = 10

    def __init__(self, config) -> None:
        from audit_core.methods.questions import QuestionConfig

        self.config = config
        if isinstance(self.config.questions, dict):
            self.config.questions = QuestionConfig(**self.config.questions)

    def query_cost(self, n_words: int):
        """At most ``n_questions`` questions (fewer when the document has few sentences): an upper bound."""
        from audit_core.methods.base import QueryCost, template_words

        if n_words < self.min_words:
            return None
        q = self.config.n_questions
        return QueryCost(q, q * (self.words_per_question + template_words(self.suffix)), q * self.config.max_tokens)

    def probe_data(self, doc: Document) -> dict:
        """What the observation keeps beside the questions (entailment: the document)."""
        return {}

    def probe(self, doc: Document, target: Target) -> Observation:
        from audit_core.methods.questions import questions_for

        c = self.config
        if doc.n_words < self.min_words:
            obs = Observation(self.name, doc.id)
            obs.skipped = f"too short: {self.name} needs at least {self.min_words} words"
            return obs
        qs = questions_for(doc.text, self.kind, c.n_questions, c.questions, target_name=getattr(target, "name", None),
                           phrases=getattr(c, "phrases_per_question", 1))
        data = {"questions": [q.to_json() for q in qs], "generator": c.questions.identity(), **self.probe_data(doc)}
        if len(qs) < c.min_questions:
            obs = Observation(self.name, doc.id, data=data)
            obs.skipped = (f"no_questions: only {len(qs)} question(s) could be made from this document "
                           f"(at least {c.min_questions} needed)")
            return obs
        return self.send(doc, target, [q.question + self.suffix for q in qs], data, c.max_tokens)
