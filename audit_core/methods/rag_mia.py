"""RAG-MIA baseline (Anderson et al., 2024): ask the RAG system whether the document is in its context.

The target's yes/no answer is the membership signal. With logprobs, the
first answer position that puts probability on "yes" or "no" gives a
continuous score P(yes) / (P(yes) + P(no)), where a word absent from the
top-k alternatives counts as probability 0 (the same rule as every method).
Without logprobs the method degrades to the answer text (yes -> 1, no -> 0)
and says so in the evidence; an answer that is neither is inconclusive.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

from audit_core.documents import Document
from audit_core.methods.base import (Calibration, MembershipMethod, MethodResult, Observation, QueryCost,
                                     no_signal_reason, send_all, template_words)
from audit_core.methods.baseline_common import decide, fit_threshold, last_completion, unusable
from audit_core.target.base import MAX_TOP_LOGPROBS, ChatRequest, Completion, NoLogprobs, Target, TokenLogprob

#: the prompt quoted by Liu et al. (MBA, 2024) for RAG-MIA; {document} is the whole text
PROMPT = "Does this: {document} appear in the context? Answer with Yes or No."

_YES_WORDS = {"yes", "yeah", "yep", "yup"}
_NO_WORDS = {"no", "nope"}
_NEG_PHRASE = re.compile(
    r"\b(?:does not|doesn't|did not|didn't|is not|isn't|was not|wasn't|not)\s+"
    r"(?:appear|appears|present|included|in the context|part of|mentioned|found)\b"
)
_POS_PHRASE = re.compile(r"\b(?:does appear|appears in|is present|is included|is part of|is in the context)\b")
#: a reply that opens with "no" without answering it ("No idea", "No way to tell"); read on lower-cased text
HEDGE = re.compile(r"^[\W_]*no\s+(?:idea|clue|way\s+(?:to|of)\s+(?:know|tell|say|be\s+sure|knowing|telling))\b")
_UNSURE = re.compile(r"\b(?:not sure|unsure|uncertain|cannot|can't|unable|don't know|do not know|not certain"
                     r"|not able|impossible|(?:can|could) not|couldn't|no way to)\b")
#: characters a tokenizer may leave around a word token ("▁Yes", "ĠYes", "Yes.")
_TOKEN_STRIP = " \t\n\r\u2581\u0120\"'*.,:;!?()[]`_"


def parse_yes_no(text: str) -> bool | None:
    """Read a yes/no answer: True, False, or None when the text commits to neither.

    Order of evidence: the first word; else yes/no words that all agree; else
    an explicit "does (not) appear" phrase. Hedges ("No idea", "I cannot say")
    and contradictory answers are None, never guessed.
    """
    low = text.lower()
    if HEDGE.match(low):
        return None
    words = re.findall(r"[a-z]+", low)
    if not words:
        return None
    if words[0] in _YES_WORDS:
        return True
    if words[0] in _NO_WORDS:
        return False
    said = {w in _YES_WORDS for w in words if w in _YES_WORDS or w in _NO_WORDS}
    if len(said) == 1:
        return said.pop()
    if said or _UNSURE.search(low):
        return None  # contradictory, or a hedge around a phrase ("not sure it is present")
    neg, pos = bool(_NEG_PHRASE.search(low)), bool(_POS_PHRASE.search(low))
    if neg != pos:
        return pos
    return None


def _normalise_token(token: str) -> str:
    return token.strip(_TOKEN_STRIP).lower()


def yes_no_mass(position: TokenLogprob) -> tuple[float, float]:
    """P(yes) and P(no) at one answer position, summed over case/space variants.

    The chosen token is merged with its alternatives (an endpoint may or may
    not list it among them); each distinct token string is counted once.
    """
    cands: dict[str, float] = {t: lp for t, lp in position.top}
    cands.setdefault(position.token, position.logprob)
    p_yes = p_no = 0.0
    for tok, lp in cands.items():
        norm = _normalise_token(tok)
        if norm == "yes":
            p_yes += math.exp(lp)
        elif norm == "no":
            p_no += math.exp(lp)
    return p_yes, p_no


def p_yes_from_tokens(tokens: Sequence[TokenLogprob]) -> tuple[float, int, float, float] | None:
    """(P(yes)/(P(yes)+P(no)), position, P(yes), P(no)) at the first position with any yes/no mass.

    Answers often open with markup ("**Yes**") or a word ("Answer: No"), so
    the position is searched rather than assumed to be the first token.
    """
    for i, pos in enumerate(tokens):
        p_yes, p_no = yes_no_mass(pos)
        if p_yes + p_no > 0:
            return p_yes / (p_yes + p_no), i, p_yes, p_no
    return None


@dataclass
class RagMiaConfig:
    """Request parameters. A yes/no answer needs a few tokens only."""

    max_tokens: int = 8  # room for "Yes." or "**No**" while staying cheap
    use_logprobs: bool = True  # ask for logprobs; set False for endpoints that refuse them
    top_logprobs: int = MAX_TOP_LOGPROBS  # OpenAI's maximum (20): more alternatives, fewer zeros
    default_threshold: float = 0.5  # "yes" more likely than "no"; used only without shadow data


class RagMiaMethod(MembershipMethod):
    """Membership = the target says the document appears in its context."""

    name = "rag_mia"
    version = "1"
    scoring_revision = "3"  # session 48: non-answers are no score; session 51: "No clue", "**No idea**" are hedges
    requires_logprobs = False
    min_words = 1

    def __init__(self, config: RagMiaConfig | None = None) -> None:
        self.config = config or RagMiaConfig()

    def query_cost(self, n_words: int) -> QueryCost | None:
        """One question with the whole document (a second only when logprobs are refused,
        which the capability probe rules out)."""
        if n_words == 0:
            return None
        return QueryCost(1, template_words(PROMPT) + n_words, self.config.max_tokens)

    def request(self, doc: Document, logprobs: bool) -> ChatRequest:
        c = self.config
        return ChatRequest.chat(
            [{"role": "user", "content": PROMPT.format(document=doc.text)}],
            max_tokens=c.max_tokens, temperature=0.0, logprobs=logprobs,
            top_logprobs=c.top_logprobs if logprobs else 0,
        )

    def probe(self, doc: Document, target: Target) -> Observation:
        obs = Observation(self.name, doc.id, data={"logprobs_requested": self.config.use_logprobs})
        if not doc.text.strip():
            obs.skipped = "document_empty"
            return obs
        out = send_all(target, [self.request(doc, self.config.use_logprobs)], obs)
        if isinstance(out[0], NoLogprobs):
            # the endpoint refuses logprobs: the text answer still carries the baseline's signal
            send_all(target, [self.request(doc, False)], obs)
            obs.data["logprobs_refused"] = True
        return obs

    def observation_score(self, obs: Observation) -> tuple[float | None, dict]:
        """The score of one observation and how it was read (``mode``: logprobs / text / none)."""
        comp: Completion | None = last_completion(obs)
        if comp is None:
            return None, {"mode": "none"}
        answer = parse_yes_no(comp.text)
        ev: dict = {"answer": comp.text, "parsed_answer": answer}
        if comp.tokens:
            found = p_yes_from_tokens(comp.tokens)
            if found is not None:
                score, pos, p_yes, p_no = found
                ev.update(mode="logprobs", p_yes=p_yes, p_no=p_no, answer_position=pos)
                return score, ev
            ev["logprobs_note"] = "neither yes nor no among the returned alternatives"
        else:
            ev["logprobs_note"] = "the target returned no logprobs: score from the answer text"
        if answer is None:
            ev["mode"] = "none"
            return None, ev
        ev["mode"] = "text"
        return (1.0 if answer else 0.0), ev

    def prepare(self, members: Sequence[Observation], nonmembers: Sequence[Observation]) -> Calibration:
        """Calibrate P(yes) at a stated false-positive rate (``fit_threshold``), and the bare
        yes/no answer the same way for targets without logprobs (``params["evidence_text"]``)."""
        from audit_core.evidence.calibration import fit_evidence

        # the shadow's replies are read as the audit reads the target's: a refusal or "I don't know" is no score
        ms = [self.observation_score(o) for o in members if unusable(self.name, o) is None]
        ns = [self.observation_score(o) for o in nonmembers if unusable(self.name, o) is None]
        lm = [s for s, e in ms if e["mode"] == "logprobs"]
        ln = [s for s, e in ns if e["mode"] == "logprobs"]
        cal = fit_threshold(self.name, lm, ln, self.config.default_threshold)
        cal.params["threshold_source"] = "shadow_logprob_scores" if lm and ln else "none"
        cal.params["shadow_logprob_scores"] = len(lm) + len(ln)
        cal.params["shadow_text_scores"] = sum(e["mode"] == "text" for _, e in ms + ns)

        def text_scores(group: Sequence[Observation]) -> list[float]:
            out = []
            for o in group:
                comp = last_completion(o)
                ans = parse_yes_no(comp.text) if comp is not None else None
                if ans is not None:
                    out.append(1.0 if ans else 0.0)
            return out

        cal.params["evidence_text"] = fit_evidence(text_scores(members), text_scores(nonmembers),
                                                   source="the yes/no answer text: nothing is fitted")
        return cal

    def score(self, obs: Observation, calibration: Calibration) -> MethodResult:
        bad = unusable(self.name, obs)
        if bad is not None:
            return bad
        score, ev = self.observation_score(obs)
        if score is None:
            return MethodResult(self.name, obs.doc_id, None, None, "unparseable_answer", ev)
        if ev["mode"] == "text":
            text_ev = calibration.params.get("evidence_text")
            if text_ev is not None:
                # a bare yes / no, against how often the shadow's non-members got a "yes"
                from dataclasses import replace

                text_cal = replace(calibration, params={**calibration.params, "evidence": text_ev})
                return decide(self.name, obs, score, text_cal, {**ev, "decision_rule": "yes/no answer at a stated FPR"})
            # a hand-built calibration: Anderson et al.'s rule, the binary answer is the decision
            no_signal = no_signal_reason(calibration)
            return MethodResult(self.name, obs.doc_id, score, None if no_signal else bool(score >= 0.5), no_signal,
                                {**ev, "decision_rule": "answer text (yes = member)"})
        return decide(self.name, obs, score, calibration, {**ev, "decision_rule": "P(yes) threshold"})
