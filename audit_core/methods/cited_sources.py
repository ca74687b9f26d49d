"""Cited sources: whether the target names the owner's document among the sources of its answers.

Many RAG services return, beside each answer, the passages they retrieved (or
their titles and addresses), so that users can check the answer. Where a
target does, its retrieval can be read directly instead of through what its
model writes: the method sends the document's beginning and its end as
questions and measures how much of the document's own text comes back in the
passages the answers cite. Nothing depends on the model behind the service
(chat or completion, with or without logprobs, small or large); only retrieval
does, and a defense that hides a document from the model's context (Mirabel)
hides it from the citations as well.

The score is the share of the document's distinct word 4-grams found in the
cited sources of any answer. A cited source counts only where it holds at
least one 4-gram of the document that its own question did not send: a source
made only of the question's words could be an echo of the question rather
than a retrieved passage. Answers without a sources field, answers that all
cite nothing, or sources that are only titles or addresses (no cited
item of ``min_passage_words`` words, so no text to compare with the document)
leave the document inconclusive with that reason, never "not found": the
retrieval was not seen. The answer text is not read, so one answer token is
asked for (``max_tokens``), to keep the service's cost low.

Behind Mirabel, which hides a question's best match when it stands out from
every other document, a document's own half stands out and is hidden. So each
half is also sent a second time, led by the first ``lead_words`` words (80: most
of a short document) of the most similar other document of the collection
audited together (by the shipped embedder): the question then matches that
neighbour best, so Mirabel hides the neighbour rather than the owner's
document, which stays among the passages retrieved. Four questions per
document, two where the collection has no other document. The words of that neighbouring document
are not counted for the audited one, so a neighbour that is itself retrieved
and cited never lends its phrases to the document it led. This works best where
the service retrieves by embeddings (as measured in the zoo); against a
retriever that matches words (TF-IDF, retrieval only) a half partly stands out
by its rare words, and behind Mirabel 0.48-0.60 of members stay in context
(0.17-0.32 with a 20-word lead; BENCHMARKS.md, "when the service retrieves by
words"). The shadow leads its questions with its own collection's neighbours
(``probing_collection``), never with the owner's documents.

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

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from audit_core.documents import Document
from audit_core.methods.base import Observation, QueryCost
from audit_core.methods.baseline_common import split_at
from audit_core.methods.textonly_base import ThresholdTextMethod
from audit_core.methods.verbatim import word_ngrams
from audit_core.scoring import norm_words
from audit_core.target.base import Completion, Target


@dataclass
class CitedSourcesConfig:
    """Questions per document: the words before ``cut``, the words after it, and both again led by a neighbour."""

    #: where the document is cut into its two halves (a share of its words)
    cut: float = 0.5
    #: words of the collection's most similar other document put before each half, in a second pair of
    #: questions that gets past Mirabel's outlier test (0: the two plain halves only). 80, about a whole
    #: neighbour, was chosen on retrieval alone, on the padded shadow and on AG News, dense and TF-IDF
    #: retrievers (BENCHMARKS.md, "when the service retrieves by words"); 20 kept as many members in
    #: context behind a dense retriever but far fewer behind a lexical one
    lead_words: int = 80
    #: the embedder that finds each document's most similar other document (the shipped one)
    embedder: str = "all-minilm-l6-v2"
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
        if self.lead_words < 0:
            raise ValueError("cited_sources' lead_words cannot be negative")


class _Collection:
    """The texts audited together, with what finding a neighbour needs: computed once, not per probe."""

    def __init__(self, texts: tuple[str, ...]) -> None:
        self.texts = texts
        self._words = [norm_words(t) for t in texts]
        self._index = {t: i for i, t in enumerate(texts)}
        self._embeddings: Any = None  # of ``texts``, computed when the first neighbour is looked for

    def nearest_other(self, text: str, embedder: str) -> str | None:
        """The most similar text whose words differ from ``text``'s; None where there is none."""
        own = norm_words(text)
        others = [i for i, w in enumerate(self._words) if w != own]
        if not others:
            return None
        import numpy as np

        from audit_core.models import embed

        if self._embeddings is None:
            self._embeddings = embed(self.texts, embedder)
        i = self._index.get(text)
        vec = self._embeddings[i] if i is not None else embed([text], embedder)[0]  # a text outside it
        return self.texts[others[int(np.argmax(self._embeddings[others] @ vec))]]


class CitedSourcesMethod(ThresholdTextMethod):
    name = "cited_sources"
    version = "2"
    scoring_revision = "1"  # session 60: words compared after Unicode and typographic normalisation (norm_words)
    requires_sources = True
    min_words = 8  # each question needs a few words of its own to retrieve by
    collection_takes_controls = False  # leads are other audited documents, never a never-published control

    def __init__(self, config: CitedSourcesConfig | None = None) -> None:
        self.config = config or CitedSourcesConfig()
        self._collection = _Collection(())

    def query_cost(self, n_words: int) -> QueryCost | None:
        """Four questions where the collection holds another document to lead them (assumed), else two."""
        if n_words < self.min_words:
            return None
        c = self.config
        if not c.lead_words:
            return QueryCost(2, float(n_words), 2 * c.max_tokens)
        return QueryCost(4, float(2 * n_words + 2 * c.lead_words), 4 * c.max_tokens)

    @property
    def collection(self) -> tuple[str, ...]:
        """The texts a neighbour is looked for among (each once)."""
        return self._collection.texts

    def use_collection(self, texts: Sequence[str]) -> None:
        self._collection = _Collection(tuple(dict.fromkeys(t for t in texts if t.strip())))

    @contextmanager
    def probing_collection(self, texts: Sequence[str]) -> Iterator[None]:
        saved = self._collection
        self.use_collection(texts)
        try:
            yield
        finally:
            self._collection = saved

    def neighbour(self, text: str) -> str | None:
        """The collection's most similar other document (by the embedder), None where there is none.

        A text whose words are the same as the document's (a duplicate) is no neighbour: its words
        would all be left out of the document's own.
        """
        if not self.config.lead_words:
            return None
        return self._collection.nearest_other(text, self.config.embedder)

    def questions(self, text: str) -> dict[str, Any] | None:
        """What ``probe`` sends for a text (``queries``), with its ``halves`` and ``neighbour``; None: too short.

        Public so that a retrieval study (``scripts/mirabel_retrieval_check.py``) asks exactly these.
        """
        parts = split_at(text, self.config.cut, self.min_words)
        if parts is None:
            return None
        halves = [parts.first, parts.second]
        queries = list(halves)
        lead_doc = self.neighbour(text)
        if lead_doc is not None:
            lead = " ".join(lead_doc.split()[: self.config.lead_words])
            queries += [f"{lead}\n\n{h}" for h in halves]
        return {"halves": halves, "queries": queries, "neighbour": lead_doc or ""}

    def probe(self, doc: Document, target: Target) -> Observation:
        data = self.questions(doc.text)
        if data is None:
            obs = Observation(self.name, doc.id)
            obs.skipped = f"too short: {self.name} needs at least {self.min_words} words"
            return obs
        return self.send(doc, target, data["queries"], data, self.config.max_tokens)

    def observation_score(self, obs: Observation) -> tuple[float | None, dict[str, Any], str | None]:
        n = self.config.ngram
        queries = obs.data.get("queries") or []
        document = set(word_ngrams(norm_words(" ".join(obs.data.get("halves") or [])), n))
        if not document:
            return None, {}, f"too short: no {n}-word run to look for in the sources"
        neighbours = document & set(word_ngrams(norm_words(obs.data.get("neighbour") or ""), n))
        document -= neighbours
        if not document:
            return None, {}, (f"no_own_words: every {n}-word run of the document is also in the neighbouring "
                              "document that led its questions")
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
        evidence = {"questions": len(queries), "ngrams_shared_with_the_neighbour": len(neighbours),
                    "answers_with_sources": answers_with_field, "sources_cited": sources_seen,
                    "passages_cited": passages, "sources_holding_the_document": sources_matching,
                    "document_ngrams": len(document), "cited_ngrams": len(cited)}
        if not answers_with_field:
            return None, evidence, ("no_sources: the target's answers carried no sources, so its retrieval "
                                    "cannot be seen")
        if not sources_seen:
            return None, evidence, ("no_source_cited: the target cited no source for any question about this "
                                    "document, so its retrieval was not seen")
        if not passages and not cited:
            return None, evidence, ("no_passage: the target cited only titles or addresses (no item of "
                                    f"{self.config.min_passage_words} words or more), which cannot be compared "
                                    "with the document's text")
        share = len(cited) / len(document)
        evidence["share"] = share
        return share, evidence, None
