"""Perturbation differential (DCMI-style), after arXiv 2509.06026.

The same "is this right?" question is asked about the document and about a
copy in which ~6% of its adjectives/adverbs are replaced by antonyms (the
paper's rate; its public code uses 3%). A RAG system that holds the document
confirms the original and not the altered copy; one that does not answers
both alike. Two queries per document.

f(answer) = P(yes) / (P(yes) + P(no)) when the target returns logprobs (the
RAG-MIA reader), else 1 for yes, 0 for no and 0.5 for "I don't know" or an
unreadable answer. Score = (f(original) - f(perturbed) + 1) / 2, in [0, 1];
thresholded on the shadow. When neither answer commits to yes or no the
method abstains.

Adjectives/adverbs are the words of the shipped antonym lexicon
(``antonyms``): no WordNet or POS tagger installs offline. A document with
none of them is skipped with that reason.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from audit_core.documents import Document
from audit_core.methods.base import Observation, QueryCost, send_all, template_words
from audit_core.methods.questions import IDK, NO, YES, read_answer
from audit_core.methods.rag_mia import p_yes_from_tokens
from audit_core.methods.text_edits import perturb_antonyms
from audit_core.methods.textonly_base import ThresholdTextMethod
from audit_core.target.base import MAX_TOP_LOGPROBS, ChatRequest, Completion, NoLogprobs, Target

#: the "is this right?" query; {statement} is the whole document or its perturbed copy
PROMPT = "Is the following information correct? Please answer yes or no.\n\n{statement}"


@dataclass
class PerturbationConfig:
    #: share of adjectives/adverbs replaced (DCMI paper: ~6%)
    ratio: float = 0.06
    #: at least this many words change (6% of a short document rounds to 0)
    min_changes: int = 1
    max_tokens: int = 8
    #: ask for logprobs (continuous P(yes)); endpoints that refuse get a text retry
    use_logprobs: bool = True
    top_logprobs: int = MAX_TOP_LOGPROBS


def answer_value(resp: dict | None) -> tuple[float | None, str]:
    """f of one answer and how it was read ("logprobs", "text", "unsure" or "failed")."""
    if resp is None:
        return None, "failed"
    comp = Completion.from_json(resp)
    lab = read_answer(comp.text)
    if lab == IDK:  # "No idea" opens with "no": its first token's P(yes) would read it as a committed no
        return 0.5, "unsure"
    if comp.tokens:
        found = p_yes_from_tokens(comp.tokens)
        if found is not None:
            return found[0], "logprobs"
    if lab == YES:
        return 1.0, "text"
    if lab == NO:
        return 0.0, "text"
    return 0.5, "unsure"


class PerturbationMethod(ThresholdTextMethod):
    name = "perturbation"
    version = "2"  # session 53: adjectives and adverbs only (antonyms._NOT_ADJECTIVE left out)
    #: 2, session 48: non-answers are no score; 3, session 49: a reply that opens as a
    #: non-answer (in any of nine languages) is "I don't know", even after a leading "no"
    scoring_revision = "4"  # session 51: "No idea" is unsure, not "no"
    min_words = 5

    def __init__(self, config: PerturbationConfig | None = None) -> None:
        self.config = config or PerturbationConfig()

    def query_cost(self, n_words: int) -> QueryCost | None:
        """Two questions, each with the whole document (skipped documents cost nothing)."""
        if n_words < self.min_words:
            return None
        return QueryCost(2, 2 * (template_words(PROMPT) + n_words), 2 * self.config.max_tokens)

    def _requests(self, texts: list[str], logprobs: bool) -> list[ChatRequest]:
        c = self.config
        return [ChatRequest.chat([{"role": "user", "content": PROMPT.format(statement=t)}], max_tokens=c.max_tokens,
                                 temperature=0.0, logprobs=logprobs, top_logprobs=c.top_logprobs if logprobs else 0)
                for t in texts]

    def probe(self, doc: Document, target: Target) -> Observation:
        c = self.config
        obs = Observation(self.name, doc.id)
        pert = perturb_antonyms(doc.text, c.ratio, c.min_changes)
        if not pert.edits:
            obs.skipped = "no_perturbation: the document has no adjective or adverb with a known antonym"
            return obs
        obs.data = {"edits": [asdict(e) for e in pert.edits], "logprobs_requested": c.use_logprobs}
        out = send_all(target, self._requests([doc.text, pert.text], c.use_logprobs), obs)
        if any(isinstance(o, NoLogprobs) for o in out):
            # the refused calls stay on record; the last two responses are the answers
            send_all(target, self._requests([doc.text, pert.text], False), obs)
            obs.data["logprobs_refused"] = True
        return obs

    def observation_score(self, obs: Observation) -> tuple[float | None, dict[str, Any], str | None]:
        (f_o, how_o), (f_p, how_p) = (answer_value(r) for r in obs.responses[-2:])
        texts = [None if r is None else r["text"] for r in obs.responses[-2:]]
        ev: dict[str, Any] = {"edits": obs.data.get("edits"), "answers": texts,
                              "f_original": f_o, "f_perturbed": f_p, "read": [how_o, how_p]}
        if f_o is None or f_p is None:
            return None, ev, "target_error: one of the two questions failed"
        if "unsure" in (how_o, how_p):  # a difference needs two answers; a non-answer is not a 0.5
            return None, ev, ("non-answer: " + ("neither answer" if how_o == how_p else "one of the two answers")
                              + " said yes or no (empty, refused or unreadable)")
        d = f_o - f_p
        ev["difference"] = d
        return (d + 1) / 2, ev, None
