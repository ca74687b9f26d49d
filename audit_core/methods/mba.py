"""MBA: the mask-based membership method (Liu et al., Section 4.4), a text-only second opinion.

A document is probed with a cloze test: M of its hardest words are hidden
(``mba_masks``) and the target is asked to fill them in (or, with the
"continue" elicitation, to continue the text up to each hidden word). A RAG system that
retrieves the document from its knowledge base fills the blanks correctly; one
that does not can only guess. The membership score is the fraction of masks
answered correctly; the threshold is set on the shadow RAG's non-members for a
stated false-positive rate (``audit_core.evidence.calibration``; the paper's
gamma = 0.5 is not used to decide). Empty, refused, "I don't know" or
unreadable replies are non-answers, not wrong answers.

Needs no logprobs, so it runs against any chat endpoint.
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

from audit_core.documents import Document
from audit_core.evidence.answers import MAX_NON_ANSWER_SHARE, non_answer, too_many_non_answers
from audit_core.evidence.calibration import decide_raw
from audit_core.methods.base import (Calibration, MembershipMethod, MethodResult, Observation, QueryCost,
                                     send_all, template_words)
from audit_core.methods.mba_masks import MaskGenerator, MaskPlan, MbaConfig, mask_label
from audit_core.methods.mba_parse import is_correct, parse_mask_answers
from audit_core.models import LocalLM
from audit_core.target.base import ChatRequest, Target

__all__ = ["MBA_CONTINUE_PROMPT", "MBA_PROMPT", "MbaConfig", "MbaMethod", "PLANNING", "PLANNING_STAGE",
           "build_request", "build_requests"]

#: The cloze prompt, in the spirit of the paper's Figure 6 (Appendix B.1). The
#: masked text sits in the middle so that it dominates the retrieval query; the
#: answer format comes last, where small models follow it best. No placeholder
#: answer lines: small models copy them verbatim.
MBA_PROMPT = (
    "In the text below, {n} words have been hidden and replaced by the labels "
    "[Mask_1] to [Mask_{n}]. Using the documents available to you, find the exact "
    "original word behind each label. Each label hides a single word, written as in "
    "the original text.\n\n"
    "Text:\n{masked_text}\n\n"
    "Reply with exactly {n} lines, one per label and nothing else, each in the form "
    "\"[Mask_i]: word\", from [Mask_1] to [Mask_{n}]."
)


#: The "continue" elicitation (MbaConfig.elicitation): the document up to one
#: hidden word, for targets that continue text rather than follow a cloze
#: instruction. Worded like S-RAG's completion prompt, which such targets follow.
MBA_CONTINUE_PROMPT = (
    "Continue the text below with its next words, exactly as they are written in "
    "the [context].\n\n"
    "{prefix}"
)

_FIRST_WORD = re.compile(r"[^\W_](?:[\w'\u2019-]*[^\W_])?", re.UNICODE)


def build_request(plan: MaskPlan, config: MbaConfig) -> ChatRequest:
    """The one chat request that probes a masked document (deterministic: temperature 0)."""
    n = plan.n_masks
    prompt = MBA_PROMPT.format(n=n, masked_text=plan.masked_text)
    max_tokens = config.answer_tokens_per_mask * n + config.answer_tokens_extra
    return ChatRequest.chat([{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0.0)


def build_requests(plan: MaskPlan, config: MbaConfig, doc_text: str) -> list[ChatRequest]:
    """Every request that probes one masked document, in mask order for "continue"."""
    if config.elicitation == "fill_in":
        return [build_request(plan, config)]
    return [
        ChatRequest.chat([{"role": "user", "content": MBA_CONTINUE_PROMPT.format(prefix=doc_text[: a.start].rstrip())}],
                         max_tokens=config.continue_tokens, temperature=0.0)
        for a in plan.answers
    ]


def first_word(text: str) -> str | None:
    """The first word of a continuation ("  amoxicillin, 500 mg" -> "amoxicillin")."""
    m = _FIRST_WORD.search(text or "")
    return m.group(0) if m else None


def continuation_correct(text: str, accepted: Sequence[str]) -> bool:
    """Whether a "continue" answer gives the hidden word, a hyphenated one cut by the token budget included.

    A hidden compound ("Chloride-Lidocaine") can need more tokens than one
    continuation may generate, so the answer stops inside it ("Chloride-",
    "Chloride-Lido"). Such an answer counts when nothing follows the cut and
    it reaches at least the compound's first whole part: a word the document
    has at that place, not a guess from its first letters.
    """
    pred = first_word(text)
    if is_correct(pred, accepted):
        return True
    if not pred or not re.fullmatch(r"[\s\W]*" + re.escape(pred) + r"-?", text or ""):
        return False  # the answer went on past the word: it was not cut
    p = pred.lower()
    for a in accepted:
        head = a.lower().split("-", 1)[0]
        if "-" in a and a.lower().startswith(p) and len(p) >= len(head):
            return True
    return False


#: what MBA does on this machine before probing: its proxy model chooses the masks
PLANNING = "planning the masks with the proxy model"
#: the progress stage of planning the masks of the documents probed together (``MbaMethod.probe_many``),
#: named as the shadow preparation names its stages ("MBA: probing the shadow")
PLANNING_STAGE = f"MBA: {PLANNING}"


class MbaMethod(MembershipMethod):
    """Mask-based membership inference: cloze accuracy of the target on the document."""

    name = "mba"
    version = "4"  # 2: a spelling correction counts only when it is the same word (issue 20);
    # 3: each document's requests form their own batch (probe_many); 4: no mask where its request shows
    # another occurrence of the word
    scoring_revision = "2"  # session 48: a refused mask is not a wrong fill-in
    requires_logprobs = False

    def __init__(self, config: MbaConfig | None = None, lm: LocalLM | None = None):
        self.config = config or MbaConfig()
        self.generator = MaskGenerator(self.config, lm)
        # M masks, pairwise non-adjacent, need at least 2M - 1 words; the
        # fewest this method probes at all is min_masks
        self.min_words = 2 * self.config.min_masks - 1

    #: prompt tokens per mask beyond the text: the "[Mask_i]" label (about 4
    #: tokens) and its "[Mask_i]: <word>" answer-format line (about 7)
    tokens_per_mask = 11

    def query_cost(self, n_words: int) -> QueryCost | None:
        """Which masks a document yields needs the proxy model; masks are never
        neighbours, so ``min_masks`` masks need ``2 * min_masks - 1`` words at
        least. Longer documents are counted with every mask (an upper bound)."""
        c = self.config
        if n_words < self.min_words:
            return None
        if c.elicitation == "continue":
            # one request per mask with the text before it; masks spread over
            # the document, so a prefix averages half of it
            return QueryCost(c.n_masks, c.n_masks * (template_words(MBA_CONTINUE_PROMPT) + n_words / 2),
                             c.n_masks * c.continue_tokens)
        return QueryCost(1, template_words(MBA_PROMPT) + n_words, c.max_answer_tokens,
                         extra_prompt_tokens=self.tokens_per_mask * c.n_masks)

    # ------------------------------------------------------------------ probing

    def _observation(self, doc: Document, plan: MaskPlan) -> Observation:
        obs = Observation(method=self.name, doc_id=doc.id,
                          data={"plan": plan.to_json(), "n_masks": self.config.n_masks,
                                "proxy_model": plan.proxy_model, "version": self.version,
                                "elicitation": self.config.elicitation})
        if plan.n_masks < self.config.min_masks:
            obs.skipped = (f"document too short for MBA: {plan.reason or 'no maskable words'}; "
                           f"MBA probes a document only with at least {self.config.min_masks} masks")
        return obs

    def probe(self, doc: Document, target: Target) -> Observation:
        """Mask the document and send its requests (none when it is too short).

        An audit plans each document here, just before its requests: planning every document of a
        collection before the first was sent (sessions 53-55) held the first verdict back by the whole
        collection's planning, about 0.3 s a document on 2 cores (2.5 minutes for 500).
        """
        plan = self.generator.plan(doc.text)
        obs = self._observation(doc, plan)
        if obs.skipped is None:
            send_all(target, build_requests(plan, self.config, doc.text), obs)
        return obs

    def probe_many(self, docs: Sequence[Document], target: Target,
                   progress: Callable[[int], None] | None = None,
                   stage_progress: Callable[[str, int, int], None] | None = None) -> list[Observation]:
        """Mask every document (batched proxy passes), then send each document's requests as one batch.

        Planning every document's masks with the proxy model (loading it first) comes before the first
        request: ``stage_progress(PLANNING_STAGE, done, total)`` reports it as a stage of its own, from
        0 / total before the model is touched, where ``progress`` (one tick per document probed) would
        stand at 0 throughout.

        One batch per document, not one for all: a shadow RAG in "shared"
        retrieval mode pools the retrievals of nested queries, and "continue"
        prefixes of different documents nest whenever the documents start
        alike (every MedQuAD text opens "Question: What are the ..."). Pooled
        across documents, a document's observation would depend on which
        others were probed with it, so the shipped preparation could not be
        reproduced one document at a time (tests/shadow/test_shipped.py).
        """
        plan_step = None if stage_progress is None else (lambda done, total: stage_progress(PLANNING_STAGE, done, total))
        plans = self.generator.plan_many([d.text for d in docs], plan_step)
        observations = [self._observation(d, p) for d, p in zip(docs, plans)]
        for doc, plan, obs in zip(docs, plans, observations):
            if obs.skipped is None:
                send_all(target, build_requests(plan, self.config, doc.text), obs)
            if progress is not None:
                progress(1)
        return observations

    # ------------------------------------------------------------------ scoring

    def prepare(self, members: Sequence[Observation], nonmembers: Sequence[Observation]) -> Calibration:
        """Calibrate the accuracy at a stated false-positive rate on shadow members / non-members.

        Accuracy is a raw score (nothing is fitted), so the shadow's scores are
        out-of-fold as they stand; ``fit_threshold`` sets the conformal
        threshold, Platt probability and abstain rule. Shadow documents with
        too many non-answers are left out, as audited ones are. Without both
        classes there is no validation, and the method abstains (the paper's
        gamma is kept in ``params`` only).
        """
        from audit_core.methods.baseline_common import fit_threshold
        from audit_core.progress import counted, step

        # the calibration stage's steps: each shadow document read, then the fit
        total = len(members) + len(nonmembers) + 1
        raw = [self._accuracy(o)[0] for o in counted([*members, *nonmembers], extra=1)]
        m_raw, n_raw = raw[:len(members)], raw[len(members):]
        cal = fit_threshold(self.name, m_raw, n_raw, default=self.config.gamma, params={
            "n_masks": self.config.n_masks,
            "min_masks": self.config.min_masks,
            "proxy_model": self.config.proxy_model,
            "max_non_answer_share": MAX_NON_ANSWER_SHARE,
        })
        cal.params["members_inconclusive"] = sum(x is None for x in m_raw)
        cal.params["nonmembers_inconclusive"] = sum(x is None for x in n_raw)
        step(total, total)
        return cal

    def _accuracy(self, obs: Observation) -> tuple[float | None, dict, str | None]:
        """Raw score (fraction of masks filled in correctly), its evidence, and why there is none.

        A reply that is empty, a refusal, "I don't know" or unreadable for a
        mask is a non-answer, not a wrong answer; a document with more than
        ``MAX_NON_ANSWER_SHARE`` of them has no score (``too_many_non_answers``).
        """
        if "plan" not in obs.data:
            return None, {}, "the observation carries no mask plan"
        plan = MaskPlan.from_json(obs.data["plan"])
        evidence: dict = {"masked_text": plan.masked_text, "n_masks": plan.n_masks, "requested": plan.requested}
        if plan.reason:
            evidence["mask_shortfall"] = plan.reason
        if obs.skipped:
            return None, evidence, obs.skipped
        elicitation = obs.data.get("elicitation", "fill_in")
        expected = 1 if elicitation == "fill_in" else plan.n_masks
        if len(obs.responses) < expected or any(r is None for r in obs.responses):
            err = next((e for e in obs.errors if e), None) or "no request was sent"
            return None, evidence, f"target call failed: {err}"
        rows, kinds = [], []
        if elicitation == "fill_in":
            response = obs.responses[0]
            raw = response.get("text") or ""
            whole = non_answer(raw)
            parsed = parse_mask_answers(raw, plan.n_masks, plan.masked_text)
            answered = len(parsed.answers)
            for a in plan.answers:
                pred = parsed.get(a.index)
                kinds.append(whole or (None if pred is not None else "unparseable"))
                rows.append({"mask": mask_label(a.index), "expected": a.accepted, "predicted": pred,
                             "correct": is_correct(pred, a.accepted), "read_as": parsed.sources.get(a.index)})
        else:
            texts = [r.get("text") or "" for r in obs.responses]
            raw = "\n".join(f"{mask_label(a.index)}: {t}" for a, t in zip(plan.answers, texts))
            response = obs.responses[-1]
            answered = 0
            for a, text in zip(plan.answers, texts):
                pred = first_word(text)
                answered += pred is not None
                kinds.append(non_answer(text) or (None if pred is not None else "unparseable"))
                rows.append({"mask": mask_label(a.index), "expected": a.accepted, "predicted": pred,
                             "correct": continuation_correct(text, a.accepted), "read_as": "continuation"})
        correct = sum(r["correct"] for r in rows)
        # a non-answer is not a wrong fill-in: the share is of the masks the target answered (too many
        # non-answers make the document inconclusive below)
        scored = sum(k is None for k in kinds) or plan.n_masks
        evidence.update({
            "rows": rows,
            "correct": correct,
            "answered": answered,
            "non_answers": sum(k is not None for k in kinds),
            "elicitation": elicitation,
            "raw_answer": raw,
            "finish_reason": response.get("finish_reason"),
            "accuracy": correct / scored,
        })
        too_many = too_many_non_answers(kinds)
        if too_many is not None:
            return None, evidence, too_many
        return correct / scored, evidence, None

    def score(self, obs: Observation, calibration: Calibration) -> MethodResult:
        """Fraction of masks filled in correctly, decided at the calibration's false-positive rate;
        inconclusive on failure, a short document or too many non-answers."""
        accuracy, evidence, why = self._accuracy(obs)
        if accuracy is None:
            return MethodResult(self.name, obs.doc_id, None, None, why, evidence)
        d = decide_raw(accuracy, calibration)
        return MethodResult(self.name, obs.doc_id, d.score, d.decision, d.reason, {**evidence, **d.evidence})
