"""S-RAG without logprobs: the next-word probability estimated from sampled text.

S-RAG (``srag``) reads, for each hard word of a document, the probability the
target gives to that word as its next output. A text-only endpoint returns no
probabilities, so here each probe is answered ``n_samples`` times with a few
tokens and the probability is estimated as the share of answers whose first
word is the true word (temperature ``temperature``, one seed per sample). With
``n_samples = 1`` the probe is answered greedily and the estimate is a hit (1)
or a miss (0). The estimates feed S-RAG's own histogram features, classifier
and shadow training (this class inherits them; segmentation, features,
``prepare`` and ``score`` are S-RAG's).

A chat model answering S-RAG's prompt often restates the paragraph before it
goes on (the capability probe finds this: ``audit_core.target.style``): in
"chat" style a probe asks for as many tokens as chat S-RAG does, the answer is
aligned with the document (S-RAG's ``align_answer``, on the answer's words),
and the word read is the one where the answer reaches the probed word. A
sample that never gets there is not counted; a probe none of whose samples
gets there has no estimate ("not aligned"), never 0. Without this every probe
of a chat model read a miss (BENCHMARKS.md, text-only section: 0 hits on every
probe of SmolLM2-Instruct).

The default is greedy (n = 1): one query per hard word keeps a document at
5-10 queries (the issue's budget), while n samples cost n times that, and
more samples buy no AUC. On a completion-style shadow (50 + 50) n = 1, 3
and 5 gave 0.978, 0.978 and 0.974 (BENCHMARKS.md, "S-RAG without logprobs:
AUC against n"): a member's next word is the greedy choice, and sampling
only adds misses.
"""
from __future__ import annotations

from audit_core.evidence.answers import non_answer

import re
from dataclasses import dataclass, field
from typing import Sequence

from audit_core.methods.base import Observation, QueryCost, template_words
from audit_core.methods.srag import (Probe, SragConfig, SragMethod, WordObservation, align_answer, normalise_word,
                                     probe_count)
from audit_core.target.base import ChatRequest, Completion


@dataclass
class SragSampledConfig(SragConfig):
    #: continuations per probe; 1 = greedy hit/miss
    n_samples: int = 1
    #: sampling temperature when n_samples > 1 (the target's own default is usually 0.7-1)
    temperature: float = 1.0
    #: a few tokens: enough to finish the first word
    sample_tokens: int = 3
    #: no continuation check (S-RAG's, for one-token probes): every probe here is answered in text
    #: that ``non_answer`` reads, so a refusal is seen in the probes themselves
    continuation_check_tokens: int = field(default=0, metadata={"audit_only": True})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_samples < 1:
            raise ValueError("n_samples must be at least 1")


def first_word(text: str) -> str:
    """The first word of an answer, normalised like S-RAG's words ("" when there is none)."""
    for w in text.split():
        n = normalise_word(w)
        if n:
            return n
    return ""


def word_hit(answer: Completion, word: str) -> bool:
    """Whether an answer starts with the true word.

    A first word cut by the token limit (the answer is nothing but that word
    and stopped on length) counts when the true word starts with it and it
    has at least 3 characters.
    """
    return _same_word(first_word(answer.text), word, answer.finish_reason == "length" and len(answer.text.split()) == 1)


def _same_word(got: str, word: str, cut: bool) -> bool:
    """``got`` (normalised) is the true word, or -- cut by the token limit -- a start of it of 3+ characters."""
    want = normalise_word(word)
    if not got or not want:
        return False
    return got == want or (cut and len(got) >= 3 and want.startswith(got))


def aligned_word_hit(answer: Completion, prefix: str, word: str) -> tuple[str, bool | None]:
    """Where a chat answer reaches the probed word, and whether it writes the true word there.

    Returns (how, hit): how as S-RAG's ``align_answer`` ("first", "restated",
    "not_aligned") and hit None when the answer never reaches the word.
    """
    pieces = re.findall(r"\s*\S+", answer.text)
    how, i = align_answer(prefix, pieces)
    if i is None:
        return how, None
    cut = answer.finish_reason == "length" and i == len(pieces) - 1
    return how, _same_word(first_word(pieces[i]), word, cut)


class SragSampledMethod(SragMethod):
    name = "srag_sampled"
    #: 2: chat style (longer answers, aligned with the document); with S-RAG's chat prefix
    #: tail set (``chat_tail_words``) it sends the tail and scores the reproduction too
    version = "2"
    scoring_revision = "2"  # session 48: non-answers are no score
    requires_logprobs = False

    def __init__(self, config: SragSampledConfig | None = None):
        super().__init__(config or SragSampledConfig())

    def query_cost(self, n_words: int) -> QueryCost | None:
        q = probe_count(n_words, self.config)
        if q == 0:
            return None
        n = self.config.n_samples
        mid = self.config.mean_sent_words(n_words)
        return QueryCost(q * n, q * n * (template_words(self.config.prompt) + mid), q * n * self._tokens(int(mid)))

    def _tokens(self, prefix_words: int) -> int:
        """Tokens a probe asks for: a few in completion style, chat S-RAG's budget in chat style."""
        c = self.config
        return c.sample_tokens if c.style == "completion" else max(c.sample_tokens, c.probe_tokens(prefix_words))

    def build_requests(self, probes: Sequence[Probe], top_logprobs: int | None = None) -> list[ChatRequest]:
        """``n_samples`` text-only requests per probe (S-RAG's ``probe`` sends them): no logprobs asked."""
        c = self.config
        greedy = c.n_samples == 1
        sent = [c.sent_text(p.prefix) for p in probes]
        return [ChatRequest.chat([{"role": "user", "content": c.prompt.format(prefix=text)}],
                                 max_tokens=self._tokens(len(text.split())),
                                 temperature=0.0 if greedy else c.temperature,
                                 seed=0 if greedy else s)
                for text in sent for s in range(c.n_samples)]

    def word_observations(self, obs: Observation) -> list[WordObservation]:
        """One estimate per probe: the share of its samples that start with the true word.

        A probe whose samples all failed gives no estimate (None, with the
        error); one with some failures is estimated from the rest. Every
        answer empty means the target gives no text signal at all: the
        estimate is None with that reason, never a guessed 0.
        """
        probes = obs.data.get("probes", [])
        n = len(obs.responses) // len(probes) if probes else 1  # samples per probe, as sent
        out = []
        for i, p in enumerate(probes):
            resp = obs.responses[i * n:(i + 1) * n]
            errs = obs.errors[i * n:(i + 1) * n]
            comps = [Completion.from_json(r) for r in resp if r is not None]
            if not comps:
                out.append(WordObservation(p["word"], None, error=next((e for e in errs if e), "no response")))
                continue
            kinds = [non_answer(c.text) for c in comps]
            if all(k is not None for k in kinds):
                out.append(WordObservation(p["word"], None, aligned="not_aligned",
                                           error=f"non_answer ({kinds[0]}): the target did not answer"))
                continue
            shown = re.sub(r"\s+", " ", comps[0].text.strip())[:40]
            if self.config.style == "chat":
                read = [aligned_word_hit(c, self.config.sent_text(p["prefix"]), p["word"]) for c in comps]
                hits = [h for _, h in read if h is not None]
                if not hits:
                    out.append(WordObservation(p["word"], None, aligned="not_aligned", first_token=shown,
                                               error="not_aligned: no answer reached the probed word"))
                    continue
                how = next(h for h, x in read if x is not None)
            else:
                hits, how = [word_hit(c, p["word"]) for c in comps], "first"
            prob = sum(hits) / len(hits)
            out.append(WordObservation(p["word"], prob, below_top_k=prob == 0.0, first_token=shown, aligned=how))
        return out
