"""Cited sources: whether the target names the owner's document among the sources of its answers.

Many RAG services return, beside each answer, the passages they retrieved (or
their titles and addresses), so that users can check the answer. Where a
target does, its retrieval can be read directly instead of through what its
model writes: the method sends the document's beginning and its end as two
questions and measures how much of the document's own text comes back in the
passages the two answers cite. Nothing depends on the model behind the service
(chat or completion, with or without logprobs, small or large); only retrieval
does, and a defense that hides a document from the model's context (Mirabel)
hides it from the citations as well.

The score is the share of the document's distinct word 4-grams found in the
cited sources of either answer. A cited source counts only where it holds at
least one 4-gram of the document that its own question did not send: a source
made only of the question's words could be an echo of the question rather
than a retrieved passage. An answer without a sources field, two answers that
cite nothing at all, or sources that are only titles or addresses (no cited
item of ``min_passage_words`` words, so no text to compare with the document)
leave the document inconclusive with that reason, never "not found": the
retrieval was not seen. The answer text is not read, so one answer token is
asked for (``max_tokens``), to keep the service's cost low.

Calibrated like every single-score method (``textonly_base``): a threshold on
the shadow's non-members at the stated false-positive rate, where the shadow
RAG cites the passages it puts in its context (``RagSystem.cite_sources``).
The shadow cites whole documents; a service that cites chunks or snippets
gives a member a smaller share than the shadow taught, so the method makes
member calls only and never says "not found" (``MethodSpec.no_clearing``;
BENCHMARKS.md, "Cited sources", measured on a chunked service). Scoring the
share of the best passage instead, with the genre's stock phrases left out,
was tried and dropped: it called a third of a target's non-members members.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from audit_core.documents import Document
from audit_core.methods.base import Observation, QueryCost
from audit_core.methods.baseline_common import split_at
from audit_core.methods.textonly_base import ThresholdTextMethod
from audit_core.methods.verbatim import word_ngrams
from audit_core.scoring import norm_words
from audit_core.target.base import Completion, Target


@dataclass
class CitedSourcesConfig:
    """Two questions per document: the words before ``cut`` and the words after it."""

    #: where the document is cut into its two questions (a share of its words)
    cut: float = 0.5
    #: words per n-gram: four words in a row rarely match by chance outside stock phrases
    ngram: int = field(default=4, metadata={"scoring_only": True})
    #: answer tokens asked for: only the sources are read, so one keeps the service's cost low
    max_tokens: int = 1
    #: a cited item of fewer words is a title or an address, not a passage that could hold the document
    min_passage_words: int = field(default=8, metadata={"scoring_only": True})

    def __post_init__(self) -> None:
        if not 0 < self.cut < 1:
            raise ValueError(f"cited_sources' cut must lie between 0 and 1 (got {self.cut})")
        if self.ngram < 2:
            raise ValueError("cited_sources' n-grams need at least 2 words")
        if self.max_tokens < 1:
            raise ValueError("cited_sources' max_tokens must be at least 1")


class CitedSourcesMethod(ThresholdTextMethod):
    name = "cited_sources"
    version = "1"
    requires_sources = True
    min_words = 8  # each question needs a few words of its own to retrieve by

    def __init__(self, config: CitedSourcesConfig | None = None) -> None:
        self.config = config or CitedSourcesConfig()

    def query_cost(self, n_words: int) -> QueryCost | None:
        if n_words < self.min_words:
            return None
        return QueryCost(2, float(n_words), 2 * self.config.max_tokens)

    def probe(self, doc: Document, target: Target) -> Observation:
        parts = split_at(doc.text, self.config.cut, self.min_words)
        if parts is None:
            obs = Observation(self.name, doc.id)
            obs.skipped = f"too short: {self.name} needs at least {self.min_words} words"
            return obs
        queries = [parts.first, parts.second]
        return self.send(doc, target, queries, {"queries": queries}, self.config.max_tokens)

    def observation_score(self, obs: Observation) -> tuple[float | None, dict[str, Any], str | None]:
        n = self.config.ngram
        queries = obs.data.get("queries") or []
        document = set(word_ngrams(norm_words(" ".join(queries)), n))
        if not document:
            return None, {}, f"too short: no {n}-word run to look for in the sources"
        cited: set[tuple[str, ...]] = set()
        answers_with_field = sources_seen = passages = sources_matching = 0
        for query, response in zip(queries, obs.responses):
            if response is None:
                continue
            sources = Completion.from_json(response).sources
            if sources is None:
                continue
            answers_with_field += 1
            sent = set(word_ngrams(norm_words(query), n))
            for source in sources:
                sources_seen += 1
                words = norm_words(source)
                passages += len(words) >= self.config.min_passage_words
                shared = set(word_ngrams(words, n)) & document
                if shared - sent:
                    cited |= shared
                    sources_matching += 1
        evidence = {"answers_with_sources": answers_with_field, "sources_cited": sources_seen,
                    "passages_cited": passages, "sources_holding_the_document": sources_matching,
                    "document_ngrams": len(document), "cited_ngrams": len(cited)}
        if not answers_with_field:
            return None, evidence, ("no_sources: the target's answers carried no sources, so its retrieval "
                                    "cannot be seen")
        if not sources_seen:
            return None, evidence, ("no_source_cited: the target cited no source for either question about this "
                                    "document, so its retrieval was not seen")
        if not passages and not cited:
            return None, evidence, ("no_passage: the target cited only titles or addresses (no item of "
                                    f"{self.config.min_passage_words} words or more), which cannot be compared "
                                    "with the document's text")
        share = len(cited) / len(document)
        evidence["share"] = share
        return share, evidence, None
