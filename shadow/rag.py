"""RagSystem: a complete RAG system we build ourselves (chromadb + embedder + local generator).

It is both the shadow RAG of S-RAG (section 4.2.1) and the reference target of
the benchmark, and it implements ``audit_core.target.base.Target`` so that it
is probed through exactly the same code as a real endpoint.

Pipeline (S-RAG section 3.1, eq. 1; setup of section 5.1): the last user
message is the query; all-MiniLM-L6-v2 embeds it; chromadb returns the top-k
(k = 4) documents by L2 distance; the documents fill the ``{context}`` slot of
a system prompt; the chat (system prompt + the user's messages) is rendered
through the generator's chat template (a plain transcript for base models)
and the generator answers with per-token logprobs and top alternatives.

Knowledge bases persist in a chromadb directory under a collection named by a
hash of (embedder, document ids and texts): building is paid once; a second
RagSystem over the same documents reuses the stored embeddings.
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from audit_core.documents import Document
from audit_core.models import (DEFAULT_EMBEDDER, DEFAULT_PROXY_MODEL, REGISTRY, LocalLM, cache_dir, embed,
                               load_causal_lm)
from audit_core.scoring import (
    Generation,
    PrefixCache,
    TokenScore,
    _eos_ids,
    encode_prompt,
    generate_greedy_many,
    generate_ids,
    next_token_distributions,
    render_chat,
)
from audit_core.target.base import ChatRequest, Completion, ContextTooLong, Target, TargetError, TokenLogprob, Usage
from shadow.defenses import DEFENSES, PROMPT_MODIFICATION_TEMPLATE, MirabelDefense, QueryParaphraser
from shadow.generation_memo import GenerationMemo, memo_key

log = logging.getLogger(__name__)

#: System prompt of an undefended RAG: plain instructions around the retrieved
#: documents (S-RAG eq. 1 concatenates query and documents; a chat model needs
#: the documents in its prompt, which is where production RAG puts them).
DEFAULT_SYSTEM_TEMPLATE = (
    "You are a helpful assistant. Use the following context to answer the user.\n\n"
    "Context:\n{context}"
)

#: bump when the layout of a stored collection changes
_KB_FORMAT = 1


def default_paraphraser(generator: str) -> str:
    """Who rewrites queries under the paraphrasing defense when no one is named.

    S-RAG 5.3 has the generator paraphrase, which assumes an instruct model. A
    base model (Gemma 3 270M, the completion target's) cannot follow the
    rewriting instruction: it continues a probe or repeats a question four or
    five times instead of rewriting it, so it hides little from an attack (a
    member's own document stayed retrieved for 0.67 of S-RAG's probes) while
    honest users lose a third of their answers (0.61 of answering documents
    retrieved, against 0.91 without the defense).
    The packaged instruct model rewrites instead (member retrieval 0.09, honest
    answers 0.90) and 1.7 times as fast (BENCHMARKS.md, "Paraphraser of the
    paraphrasing defense" and "A defense's cost to honest users' answers"). So
    a generator without a chat template gets ``DEFAULT_PROXY_MODEL``; any
    other (an instruct model, or a model outside the registry) paraphrases
    itself.
    """
    spec = REGISTRY.get(generator)
    return DEFAULT_PROXY_MODEL if spec is not None and not spec.has_chat_template else generator


def other_paraphraser(generator: str, paraphraser: str | None) -> str | None:
    """The model that paraphrases for ``generator`` when it is not the generator itself (named, or by
    ``default_paraphraser``), else None: what names of stored answers must show, since answers differ with it."""
    who = paraphraser or default_paraphraser(generator)
    return who if who != generator else None


def paraphrase_variant(generator: str, paraphraser: str | None, min_similarity: float) -> str | None:
    """What names of stored answers under the paraphrasing defense add to "paraphrase", else None.

    Answers differ with who paraphrases (``other_paraphraser``) and with the
    rewrite check (``RagConfig.paraphrase_min_similarity``); the defense as
    first simulated (the generator paraphrasing itself, every rewrite kept)
    keeps its bare name so that the answers stored then are still its own.
    """
    other = other_paraphraser(generator, paraphraser)
    parts = [other] if other else []
    if min_similarity > 0:
        parts.append(f"rewrites under {min_similarity:g} similar dropped")
    return ", ".join(parts) or None


@dataclass
class RagConfig:
    """How a RagSystem is built. Defaults follow S-RAG section 5.1 unless noted."""

    #: the generator (registry name or Hugging Face id)
    generator: str = DEFAULT_PROXY_MODEL
    #: S-RAG embeds with all-MiniLM-L6-v2 and stores in Chroma
    embedder: str = DEFAULT_EMBEDDER
    #: retrieved documents per query: k = 4 in S-RAG ("a common setting")
    top_k: int = 4
    #: system prompt; ``{context}`` is replaced by the retrieved documents
    #: (plain replacement, so other braces in the template are literal)
    system_template: str = DEFAULT_SYSTEM_TEMPLATE
    #: how retrieved documents are joined inside ``{context}``
    document_separator: str = "\n\n"
    #: None, "prompt_modification" (S-RAG Fig. 3), "paraphrase" (S-RAG 5.3) or
    #: "mirabel" (detect-and-hide); prompt_modification replaces system_template
    defense: str | None = None
    #: Mirabel significance level rho (paper: 0.05)
    mirabel_rho: float = 0.05
    #: longest paraphrase the paraphrasing defense generates (our bound)
    paraphrase_max_tokens: int = 64
    #: the model that rewrites queries under the paraphrasing defense (registry
    #: name or Hugging Face id); None: ``default_paraphraser(generator)``, the
    #: generator itself as S-RAG 5.3 has it when it follows instructions, else
    #: the packaged instruct model (see there)
    paraphraser: str | None = None
    #: a rewrite whose embedding is less like its query's than this (cosine of
    #: the embedder's unit vectors) is no paraphrase, and the query is retrieved
    #: with as sent. Our choice, not the papers': a 135M paraphraser answers a
    #: yes/no question ("Yes.") or writes a stock sentence instead of
    #: rewriting, which a deployed rewriter's sanity check would catch; without
    #: the check such an answer, not a paraphrase, is what the retriever gets.
    #: At 0.5 (chosen before measuring) SmolLM2 rewrites of 60 honest MedQuAD
    #: questions all pass (median 0.84), and the answers it gave instead of a
    #: rewrite are dropped: 10 of RAG-MIA's 12 questions ("Yes.", about 0.0),
    #: and 15-33% of S-RAG's, Interrogation's and DCMI's probes (BENCHMARKS.md
    #: "Session 42"). 0 keeps every rewrite (the defense before session 42).
    paraphrase_min_similarity: float = 0.5
    #: chromadb directory; None: <cache_dir()>/chroma
    persist_dir: str | None = None
    #: recent prompts whose key/value states are kept for prefix reuse; 0 turns
    #: prefix caching off (the benchmark compares both). 32, least recently used
    #: first out (``PrefixCache``): several documents' probes arrive interleaved
    prefix_cache_entries: int = 32
    #: memory bound of those states, MB (Gemma 3 270M keeps about 37 kB per
    #: token, SmolLM2 about 46 kB: 512 MB is some 30 prompts of 400 tokens)
    prefix_cache_mb: int = 512
    #: greedy generations decoded together by ``complete_many`` (a decoding step
    #: costs about the same for 1 sequence as for 16 on a CPU); 1 decodes one by one
    decode_batch_size: int = 16
    #: documents per embedder call while building the knowledge base
    embed_batch_size: int = 64
    #: "chat" (the generator's chat template) or "completion" (plain text the
    #: generator continues); None: chat when the generator has a template
    prompt_style: str | None = None
    #: how a batch of greedy probes (``complete_many``) retrieves.
    #: "per_request": every request retrieves with its own query, as a served
    #: RAG does. "shared" (our speed-up for the shadow): requests whose queries
    #: are nested prefixes of one another (the probes of one document) all get
    #: the consensus of their retrievals (documents ranked by how many of the
    #: probes retrieved them, then by mean distance), so a chain of one-token
    #: probes is one teacher-forced forward pass instead of one pass per
    #: distinct document set, and a chain of short generations (MBA's
    #: "continue" requests) prefills each prompt on top of the previous one.
    probe_retrieval: str = "per_request"

    def __post_init__(self) -> None:
        if self.probe_retrieval not in ("per_request", "shared"):
            raise ValueError("probe_retrieval must be 'per_request' or 'shared'")
        if self.defense is not None and self.defense not in DEFENSES:
            raise ValueError(f"unknown defense '{self.defense}'; choose one of {', '.join(DEFENSES)} or None")
        if self.top_k < 1:
            raise ValueError("top_k must be at least 1")
        if self.decode_batch_size < 1:
            raise ValueError("decode_batch_size must be at least 1")
        if not 0.0 <= self.paraphrase_min_similarity < 1.0:
            raise ValueError("paraphrase_min_similarity must be at least 0 and below 1")
        if "{context}" not in self.system_template:
            raise ValueError("system_template needs a {context} slot")

    @property
    def effective_paraphraser(self) -> str:
        """The model that rewrites queries under the paraphrasing defense."""
        return self.paraphraser or default_paraphraser(self.generator)

    @property
    def effective_template(self) -> str:
        return PROMPT_MODIFICATION_TEMPLATE if self.defense == "prompt_modification" else self.system_template


@dataclass
class RetrievalRecord:
    """What the system retrieved for one request (the reference target knows it).

    ``distances`` are chromadb's squared L2 distances, ascending.
    """

    query: str
    retrieval_query: str  # the text embedded (differs under the paraphrasing defense)
    doc_ids: list[str]
    distances: list[float]
    defense: str | None = None
    defense_acted: bool = False
    detail: dict = field(default_factory=dict)  # e.g. Mirabel's s_max / tau, the hidden id

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class RequestTimings:
    """Where the time of the last ``complete`` went (seconds), for the latency benchmark."""

    retrieval_s: float = 0.0
    prefill_s: float = 0.0
    generation_s: float = 0.0
    cached_tokens: int = 0


class _InstrumentedPrefixCache(PrefixCache):
    """PrefixCache that also times the prefill and counts the tokens it let the model skip.

    ``audit_core.scoring._prefill`` calls ``lookup`` before running the prompt
    and ``store`` right after, so the two calls bracket the prefill (cache
    copies included). With
    ``enabled=False`` nothing is kept (the no-caching baseline) but the timing
    still works.
    """

    def __init__(self, max_entries: int, max_bytes: int | None = None):
        super().__init__(max_entries=max(1, max_entries), max_bytes=max_bytes)
        self.enabled = max_entries > 0
        self.last_cached = 0
        self._t_lookup = 0.0
        self.last_prefill_s = 0.0
        #: every prefill's seconds added up, and the cached tokens of each prompt looked up (by its token
        #: ids): what ``RagSystem.complete_many`` reports per request of a batch
        self.prefill_total_s = 0.0
        self.cached_by_prompt: dict[tuple[int, ...], int] = {}

    def lookup(self, ids):
        self._t_lookup = time.perf_counter()
        if not self.enabled:
            self.last_cached = 0
            return 0, None
        n, past = super().lookup(ids)
        self.last_cached = max(0, min(n, len(ids) - 1))
        self.cached_by_prompt[tuple(ids)] = self.last_cached
        return n, past

    def store(self, ids, past) -> None:
        # the copy into the cache is part of what prefix caching costs: counted as prefill
        if self.enabled:
            super().store(ids, past)
        self.last_prefill_s = time.perf_counter() - self._t_lookup
        self.prefill_total_s += self.last_prefill_s


class _MiniLMFunction:
    """chromadb embedding function over our offline embedder.

    chromadb's default embedding function downloads a model (fails offline), so
    every collection is opened with this one. We pass embeddings explicitly
    anyway, computed in batches; this object is what chromadb would call.
    """

    def __init__(self, model_name: str):
        self.model_name = model_name

    def __call__(self, input):  # chromadb's protocol names the argument "input"
        return [np.asarray(v, dtype=np.float32) for v in _encode(self.model_name, list(input))]

    @staticmethod
    def name() -> str:
        return "rpa-sentence-transformer"

    def get_config(self) -> dict:
        return {"model_name": self.model_name}

    @staticmethod
    def build_from_config(config: dict) -> "_MiniLMFunction":
        return _MiniLMFunction(config["model_name"])

    def default_space(self) -> str:
        return "l2"

    def supported_spaces(self) -> list[str]:
        return ["l2", "cosine", "ip"]

    def embed_query(self, input):
        return self(input)

    def is_legacy(self) -> bool:
        return False

    @staticmethod
    def validate_config(config: dict) -> None:
        return None

    def validate_config_update(self, old: dict, new: dict) -> None:
        return None


def _encode(model_name: str, texts: list[str], batch_size: int = 64) -> np.ndarray:
    """Unit-norm sentence embeddings: L2 order then equals cosine order (Mirabel uses cosine)."""
    return embed(texts, model_name, batch_size).astype(np.float32)


_CLIENTS: dict[str, object] = {}
_CLIENTS_LOCK = threading.Lock()


def _client(path: Path):
    """One chromadb client per directory (chromadb refuses two with different settings).

    The directory holds the owner's documents: made 0700, with what chromadb writes there 0600
    (``private_umask``; it takes no mode of its own) and what an older version left open taken private.
    """
    import chromadb

    from audit_core.io import make_tree_private, private_dir, private_umask

    key = str(path.resolve())
    with _CLIENTS_LOCK:
        c = _CLIENTS.get(key)
        if c is None:
            private_dir(path)
            make_tree_private(path)
            with private_umask():
                c = chromadb.PersistentClient(path=key, settings=chromadb.Settings(anonymized_telemetry=False))
            _CLIENTS[key] = c
        return c


def knowledge_base_hash(docs: Sequence[Document], embedder: str) -> str:
    """Content hash of a knowledge base: embedder + every (id, text), order included."""
    h = hashlib.sha256(f"rpa-kb|{_KB_FORMAT}|{embedder}|{len(docs)}".encode())
    for d in docs:
        for part in (d.id, d.text):
            b = part.encode("utf-8")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    return h.hexdigest()


#: the ``RagConfig`` fields, besides those ``system_name`` spells out, that change what the system answers
ANSWER_FIELDS = ("top_k", "system_template", "document_separator", "mirabel_rho", "paraphrase_max_tokens",
                 "prompt_style")


def system_name(config: RagConfig, content_hash: str) -> str:
    """The name the store keys a system's cached answers by: it changes with anything that changes the
    answers (knowledge base, generator, defense, and any ``ANSWER_FIELDS`` value off its default, as a short
    digest). Before session 61 only the first three counted, so a system with another top_k, prompt or
    Mirabel rho could be served the answers cached for the default one."""
    defense = config.defense or "none"
    variant = paraphrase_variant(config.generator, config.paraphraser, config.paraphrase_min_similarity)
    if defense == "paraphrase" and variant:
        defense += f"({variant})"
    name = f"rag:{config.generator}:{defense}:{content_hash[:12]}"
    defaults = RagConfig()
    changed = {f: getattr(config, f) for f in ANSWER_FIELDS if getattr(config, f) != getattr(defaults, f)}
    if changed:
        name += ":" + hashlib.sha256(json.dumps(changed, sort_keys=True).encode()).hexdigest()[:10]
    return name


class RagSystem(Target):
    """An in-process RAG system implementing the Target interface.

    Introspection the reference target offers (an auditor of a real system has
    none of this): ``last_retrieval`` (RetrievalRecord of the last request),
    ``last_retrievals`` (one per request of the last ``complete_many``, in
    its order; None for a request that could not be retrieved for),
    ``last_timings`` and ``retrieve(query)``.
    """

    def __init__(self, docs: Sequence[Document], config: RagConfig | None = None,
                 progress: Callable[[int], None] | None = None):
        super().__init__()
        self.config = config or RagConfig()
        docs = list(docs)
        if not docs:
            raise ValueError("a knowledge base needs at least one document")
        seen: set[str] = set()
        for d in docs:
            if d.id in seen:
                raise ValueError(f"duplicate document id '{d.id}'")
            if not d.text.strip():
                raise ValueError(f"document '{d.id}' is empty")
            seen.add(d.id)
        if self.config.defense == "mirabel" and len(docs) < 3:
            raise ValueError("the Mirabel defense needs at least 3 documents in the knowledge base")
        self.documents: dict[str, str] = {d.id: d.text for d in docs}
        self.content_hash = knowledge_base_hash(docs, self.config.embedder)
        self.name = system_name(self.config, self.content_hash)
        self.collection_name = f"rpa-kb-{self.content_hash[:40]}"
        self.reused_collection = False
        self._ef = _MiniLMFunction(self.config.embedder)
        self._collection = self._open_or_build(docs, progress)
        self._lm: LocalLM | None = None
        self._cache: _InstrumentedPrefixCache | None = None
        self._paraphraser: QueryParaphraser | None = None
        self._mirabel = MirabelDefense(self.config.mirabel_rho) if self.config.defense == "mirabel" else None
        self._kb_matrix: tuple[list[str], np.ndarray] | None = None
        self.last_retrieval: RetrievalRecord | None = None
        self.last_retrievals: list[RetrievalRecord | None] = []
        self.last_timings = RequestTimings()
        self.last_batch_timings = RequestTimings()
        self.last_cached_tokens: list[int] = []
        #: answers carry the texts put in context as their cited sources, as a service that cites
        #: them does (not part of ``name``: it adds to an answer, it changes none); the shadow
        #: preparation turns it on for the methods that read sources
        self.cite_sources = False
        #: generations kept by exact prompt (``shadow.generation_memo``); the benchmark's servers share
        #: one per run, so a defense leg that leaves a probe's prompt as it was reuses the answer
        self.generation_memo: GenerationMemo | None = None

    @classmethod
    def from_corpus(cls, path: str | Path, config: RagConfig | None = None,
                    progress: Callable[[int], None] | None = None) -> "RagSystem":
        from shadow.corpus import load_corpus  # written alongside; imported lazily

        return cls(load_corpus(path), config, progress)

    # ------------------------------------------------------------------ knowledge base

    @property
    def persist_dir(self) -> Path:
        return Path(self.config.persist_dir) if self.config.persist_dir else cache_dir() / "chroma"

    def _open_or_build(self, docs: list[Document], progress):
        """The collection of ``docs``: reused where complete, else built, under a lock per collection.

        Two processes building the same knowledge base at once (two audits, the app and the CLI) raced: the
        second found the first's collection incomplete and deleted it, and the first failed (NotFoundError).
        The lock file (``<persist_dir>.locks/<collection>.lock``, beside the chromadb folder, not inside what
        chromadb manages) makes the second wait for the first's build and then reuse it.
        """
        from audit_core.io import file_lock, private_umask

        client = _client(self.persist_dir)
        persist = self.persist_dir.resolve()  # "." has no name to put ".locks" after
        lock = persist.with_name(persist.name + ".locks") / f"{self.collection_name}.lock"
        with file_lock(lock), private_umask():
            return self._open_or_build_locked(client, docs, progress)

    def _open_or_build_locked(self, client, docs: list[Document], progress):
        from chromadb.errors import NotFoundError

        meta = {"content_hash": self.content_hash, "embedder": self.config.embedder,
                "n_docs": len(docs), "format": _KB_FORMAT}
        try:
            col = client.get_collection(self.collection_name, embedding_function=self._ef)
        except (NotFoundError, ValueError):
            col = None
        if col is not None:
            m = col.metadata or {}
            if m.get("complete") and m.get("content_hash") == self.content_hash and col.count() == len(docs):
                self.reused_collection = True
                if progress is not None:
                    progress(len(docs))
                return col
            log.info("collection %s is incomplete; rebuilding it", self.collection_name)
            client.delete_collection(self.collection_name)
        col = client.create_collection(
            self.collection_name,
            configuration={"hnsw": {"space": "l2"}},  # S-RAG 5.1: L2 distance
            metadata={**meta, "complete": False},
            embedding_function=self._ef,
        )
        step = max(1, self.config.embed_batch_size)
        for b in range(0, len(docs), step):
            chunk = docs[b : b + step]
            emb = _encode(self.config.embedder, [d.text for d in chunk], batch_size=step)
            col.add(ids=[d.id for d in chunk], embeddings=emb, documents=[d.text for d in chunk])
            if progress is not None:
                progress(len(chunk))
        # marked complete only at the end: a crash mid-build leaves a collection that is rebuilt
        col.modify(metadata={**meta, "complete": True})
        return col

    def _kb_embeddings(self) -> tuple[list[str], np.ndarray]:
        """All document embeddings (Mirabel scores a query against the whole knowledge base)."""
        if self._kb_matrix is None:
            got = self._collection.get(include=["embeddings"])
            self._kb_matrix = (list(got["ids"]), np.asarray(got["embeddings"], dtype=np.float32))
        return self._kb_matrix

    # ------------------------------------------------------------------ models (lazy)

    @property
    def lm(self) -> LocalLM:
        """The generator, loaded on first use (retrieval alone never loads it)."""
        if self._lm is None:
            self._lm = load_causal_lm(self.config.generator)
        return self._lm

    @property
    def prefix_cache(self) -> _InstrumentedPrefixCache:
        if self._cache is None:
            self._cache = _InstrumentedPrefixCache(self.config.prefix_cache_entries,
                                                   self.config.prefix_cache_mb * 2**20)
        return self._cache

    def _paraphraser_obj(self) -> QueryParaphraser:
        if self._paraphraser is None:
            name = self.config.effective_paraphraser
            if name == self.config.generator:
                self._paraphraser = QueryParaphraser(self.lm, self.config.paraphrase_max_tokens)
            else:
                self._paraphraser = QueryParaphraser.for_model(name, self.config.paraphrase_max_tokens)
        return self._paraphraser

    # ------------------------------------------------------------------ retrieval

    def retrieve(self, query: str) -> list[tuple[str, float]]:
        """(doc_id, squared L2 distance) of the documents the generator would get, with defenses applied."""
        rec = self.retrieve_records([query])[0]
        return list(zip(rec.doc_ids, rec.distances))

    def retrieve_records(self, queries: Sequence[str]) -> list[RetrievalRecord]:
        """Retrieval for a batch of queries: one embedder call, one chromadb query."""
        if not queries:
            return []
        k = self.config.top_k
        defense = self.config.defense
        retrieval_queries = list(queries)
        paraphrased: list[bool] = [False] * len(queries)
        unlike: dict[int, tuple[float, str]] = {}  # rewrites dropped by the check: (similarity to the query, rewrite)
        notes: dict[int, str] = {}
        if defense == "paraphrase":
            p = self._paraphraser_obj()
            for i, res in enumerate(p.paraphrase_many(queries, self.config.decode_batch_size)):
                if res.acted:
                    retrieval_queries[i], paraphrased[i] = res.paraphrase, True
                elif res.note:
                    notes[i] = res.note
        emb = _encode(self.config.embedder, retrieval_queries)
        rewritten = [i for i, acted in enumerate(paraphrased) if acted]
        if rewritten and self.config.paraphrase_min_similarity > 0:
            own = _encode(self.config.embedder, [queries[i] for i in rewritten])
            for row, i in enumerate(rewritten):
                sim = float(own[row] @ emb[i])
                if sim < self.config.paraphrase_min_similarity:
                    unlike[i] = (sim, retrieval_queries[i])
                    retrieval_queries[i], paraphrased[i], emb[i] = queries[i], False, own[row]
        count = self._collection.count()
        n = min(count, k + 1 if self._mirabel is not None else k)
        res = self._collection.query(query_embeddings=emb, n_results=n, include=["distances"])
        records = []
        for i, q in enumerate(queries):
            ranked = list(zip(res["ids"][i], (float(x) for x in res["distances"][i])))
            rec = RetrievalRecord(q, retrieval_queries[i], [], [], defense)
            if defense == "paraphrase":
                rec.defense_acted = paraphrased[i]
                if i in unlike:
                    sim, dropped = unlike[i]
                    rec.detail.update(note=f"the rewrite was no paraphrase (similarity {sim:.2f} to the query, under "
                                           f"{self.config.paraphrase_min_similarity:g}); the original query was used",
                                      dropped_rewrite=dropped)
                elif not paraphrased[i]:
                    rec.detail["note"] = notes.get(i, "the paraphrase was empty or identical; the original query "
                                                      "was used")
            if self._mirabel is not None:
                ids, mat = self._kb_embeddings()
                sims = mat @ emb[i]  # unit vectors: dot product = cosine similarity
                ranked, decision, hidden = self._mirabel.apply(sims, ids, ranked, k)
                rec.defense_acted = decision.flagged
                rec.detail.update(decision.to_json(), hidden_id=hidden)
            else:
                ranked = ranked[:k]
            rec.doc_ids = [d for d, _ in ranked]
            rec.distances = [x for _, x in ranked]
            records.append(rec)
        return records

    # ------------------------------------------------------------------ prompts

    def build_messages(self, request: ChatRequest, record: RetrievalRecord) -> list[dict]:
        """System prompt with the retrieved documents, then the user's messages as sent."""
        context = self.config.document_separator.join(self.documents[i] for i in record.doc_ids)
        system = self.config.effective_template.replace("{context}", context)
        return [{"role": "system", "content": system}] + request.message_dicts()

    def render_prompt(self, request: ChatRequest, record: RetrievalRecord | None = None) -> str:
        """The exact prompt string the generator sees for ``request``."""
        if record is None:
            record = self.retrieve_records([_query_of(request)])[0]
        return render_chat(self.lm, self.build_messages(request, record), self.config.prompt_style)

    def _prompt_ids(self, request: ChatRequest, record: RetrievalRecord) -> list[int]:
        ids = encode_prompt(self.lm, self.render_prompt(request, record), self.config.prompt_style)
        limit = getattr(self.lm.model.config, "max_position_embeddings", None)
        if limit and len(ids) + request.max_tokens > limit:
            raise ContextTooLong(
                f"prompt of {len(ids)} tokens + {request.max_tokens} new tokens exceeds the "
                f"context of {limit} tokens of {self.config.generator}"
            )
        return ids

    # ------------------------------------------------------------------ Target

    def answer_style(self):
        """Known, not probed: the in-process system renders every prompt in one style.

        Served over HTTP (``shadow.serve``), the same system is probed like any
        endpoint (``audit_core.target.style.detect_style``).
        """
        from audit_core.scoring import prompt_style
        from audit_core.target.style import StyleFinding

        style = prompt_style(self.lm, self.config.prompt_style)
        return StyleFinding(style, f"the in-process RAG renders its prompts in {style} style")

    def complete(self, request: ChatRequest) -> Completion:
        t0 = time.perf_counter()
        try:
            query = _query_of(request)
        except TargetError:
            self.account.record(failed=True)
            raise
        record = self.retrieve_records([query])[0]
        t_ret = time.perf_counter() - t0
        self.last_retrieval, self.last_retrievals = record, [record]
        try:
            ids = self._prompt_ids(request, record)
        except TargetError:
            self.account.record(failed=True)
            raise
        cache = self.prefix_cache
        cache.cached_by_prompt.clear()  # read by complete_many only; kept from growing here
        key = self._memo_key(request, ids)
        gen = self.generation_memo.get(key) if key else None
        if gen is not None:
            self.last_timings = RequestTimings(t_ret)
        else:
            t1 = time.perf_counter()
            gen = generate_ids(self.lm, ids, max_new_tokens=request.max_tokens, temperature=request.temperature,
                               top_logprobs=request.top_logprobs if request.logprobs else 0,
                               seed=request.seed, prefix_cache=cache, logprobs=request.logprobs)
            total = time.perf_counter() - t1
            self.last_timings = RequestTimings(t_ret, cache.last_prefill_s, max(0.0, total - cache.last_prefill_s),
                                               cache.last_cached)
            self._remember(key, gen)
        comp = self._to_completion(request, gen, record)
        self.account.record(comp.usage)
        return comp

    def complete_many(
        self, requests: Sequence[ChatRequest], progress: Callable[[int], None] | None = None
    ) -> list[Completion | TargetError]:
        """Batch answer with shared computation.

        Greedy one-token requests (audit probes) whose retrieval returns the
        same documents share a prompt prefix: their first-token distributions
        come from one ``next_token_distributions`` call (prefix once, tails as
        one batch), equal to separate ``complete`` calls up to float rounding.
        Other greedy requests are prefilled one by one with prefix caching and
        decoded together (``generate_greedy_many``, ``decode_batch_size`` at a
        time); sampled requests are generated one by one.
        """
        requests = list(requests)
        t0 = time.perf_counter()
        cache = self.prefix_cache
        cache.cached_by_prompt.clear()
        prefill0 = cache.prefill_total_s
        cached = [0] * len(requests)
        out: list[Completion | TargetError | None] = [None] * len(requests)
        queries: dict[int, str] = {}
        for i, req in enumerate(requests):
            try:
                queries[i] = _query_of(req)
            except TargetError as exc:
                self.account.record(failed=True)
                out[i] = exc
                if progress is not None:
                    progress(1)
        records = dict(zip(queries, self.retrieve_records(list(queries.values()))))
        t_ret = time.perf_counter() - t0
        if self.config.probe_retrieval == "shared":
            # every greedy probe: one-token S-RAG probes, and short generations
            # such as MBA's "continue" requests, which then reuse one another's
            # prompt through the prefix cache
            greedy = [i for i in records if requests[i].temperature <= 0]
            _share_nested_retrievals({i: queries[i] for i in greedy}, records, self.config.top_k)
        self.last_retrievals = [records.get(i) for i in range(len(requests))]  # None: no retrieval (bad request)
        if records:
            self.last_retrieval = list(records.values())[-1]
        groups: dict[tuple[str, ...], list[tuple[int, list[int]]]] = {}
        slow: list[tuple[int, list[int]]] = []
        keys: dict[int, str | None] = {}
        for i, rec in records.items():
            req = requests[i]
            try:
                ids = self._prompt_ids(req, rec)
            except TargetError as exc:
                self.account.record(failed=True)
                out[i] = exc
                if progress is not None:
                    progress(1)
                continue
            keys[i] = self._memo_key(req, ids)
            known = self.generation_memo.get(keys[i]) if keys[i] else None
            if known is not None:
                comp = self._to_completion(req, known, rec)
                self.account.record(comp.usage)
                out[i] = comp
                if progress is not None:
                    progress(1)
            elif req.max_tokens == 1 and req.temperature <= 0:
                groups.setdefault(tuple(rec.doc_ids), []).append((i, ids))
            else:
                slow.append((i, ids))
        for members in groups.values():
            k = max(1, max(requests[i].top_logprobs for i, _ in members))
            cache.last_cached = 0
            dists = next_token_distributions(self.lm, [ids for _, ids in members], top_k=k,
                                             prefix_cache=cache)
            for (i, ids), (top, greedy) in zip(members, dists):
                cached[i] = cache.last_cached  # the group's shared start, read from the cache once for all
                gen = self._first_token_generation(ids, top, greedy)
                self._remember(keys[i], gen)
                comp = self._to_completion(requests[i], gen, records[i])
                self.account.record(comp.usage)
                out[i] = comp
            if progress is not None:
                progress(len(members))
        greedy_slow = [(i, ids) for i, ids in slow if requests[i].temperature <= 0]
        for b in range(0, len(greedy_slow), self.config.decode_batch_size):
            chunk = greedy_slow[b : b + self.config.decode_batch_size]
            reqs = [requests[i] for i, _ in chunk]
            gens = generate_greedy_many(self.lm, [ids for _, ids in chunk], [r.max_tokens for r in reqs],
                                        [r.top_logprobs if r.logprobs else 0 for r in reqs], cache,
                                        logprobs=[r.logprobs for r in reqs])
            for (i, ids), req, gen in zip(chunk, reqs, gens):
                cached[i] = cache.cached_by_prompt.get(tuple(ids), 0)
                self._remember(keys[i], gen)
                comp = self._to_completion(req, gen, records[i])
                self.account.record(comp.usage)
                out[i] = comp
            if progress is not None:
                progress(len(chunk))
        for i, ids in slow:
            req = requests[i]
            if req.temperature <= 0:
                continue
            gen = generate_ids(self.lm, ids, max_new_tokens=req.max_tokens, temperature=req.temperature,
                               top_logprobs=req.top_logprobs if req.logprobs else 0, seed=req.seed,
                               prefix_cache=cache, logprobs=req.logprobs)
            cached[i] = cache.cached_by_prompt.get(tuple(ids), 0)
            self._remember(keys[i], gen)
            comp = self._to_completion(req, gen, records[i])
            self.account.record(comp.usage)
            out[i] = comp
            if progress is not None:
                progress(1)
        prefill = cache.prefill_total_s - prefill0
        #: the batch as a whole (its prefills added up; the rest of its time after retrieval is decoding)
        self.last_batch_timings = RequestTimings(t_ret, prefill, max(0.0, time.perf_counter() - t0 - t_ret - prefill),
                                                 sum(cached))
        #: per request: prompt tokens whose states came from the prefix cache (0: none, or answered from the memo)
        self.last_cached_tokens = cached
        return out  # type: ignore[return-value]

    def _memo_key(self, request: ChatRequest, ids: list[int]) -> str | None:
        """The generation memo's key for this prompt, or None without a memo."""
        if self.generation_memo is None:
            return None
        return memo_key(self.config.generator, ids, request)

    def _remember(self, key: str | None, gen: Generation) -> None:
        if key is not None and self.generation_memo is not None:
            self.generation_memo.put(key, gen)

    def _first_token_generation(self, ids: list[int], top: list[tuple[str, float]], greedy: int) -> Generation:
        """The Generation ``generate_ids`` would return for one greedy token, from its distribution."""
        if greedy in set(_eos_ids(self.lm)):
            return Generation("", [], len(ids), "stop")
        piece = self.lm.tokenizer.decode([greedy], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        text = self.lm.tokenizer.decode([greedy], skip_special_tokens=True, clean_up_tokenization_spaces=False)
        # top[0] is the greedy token (argmax of the same row)
        tok = TokenScore(greedy, piece, 0, len(piece), top[0][1], top)
        return Generation(text, [tok], len(ids), "length")

    def _to_completion(self, request: ChatRequest, gen: Generation, record: RetrievalRecord | None) -> Completion:
        tokens = None
        if request.logprobs:
            tokens = [TokenLogprob(t.text, float(t.logprob), list(t.top[: request.top_logprobs]))
                      for t in gen.tokens]
        return Completion(
            text=gen.text, tokens=tokens,
            usage=Usage(prompt_tokens=gen.prompt_tokens, completion_tokens=len(gen.tokens)),
            finish_reason=gen.finish_reason, model=self.config.generator,
            sources=[self.documents[i] for i in record.doc_ids] if self.cite_sources and record is not None else None,
        )


def _share_nested_retrievals(queries: dict[int, str], records: dict[int, RetrievalRecord], k: int) -> None:
    """Give every chain of nested queries the consensus of its retrievals (RagConfig.probe_retrieval="shared").

    A query belongs to the chain of the longest query that starts with it.
    Consensus: documents ranked by the number of the chain's retrievals that
    returned them, ties by mean distance; the top k replace each record's list
    (``detail["shared_from"]`` keeps how many retrievals were pooled).
    """
    heads: list[int] = []
    chain: dict[int, list[int]] = {}
    for i in sorted(queries, key=lambda j: len(queries[j]), reverse=True):
        head = next((h for h in heads if queries[h].startswith(queries[i])), None)
        if head is None:
            heads.append(i)
            chain[i] = [i]
        else:
            chain[head].append(i)
    for members in chain.values():
        if len(members) < 2:
            continue
        seen: dict[str, list[float]] = {}
        for i in members:
            for d, dist in zip(records[i].doc_ids, records[i].distances):
                seen.setdefault(d, []).append(dist)
        ranked = sorted(seen, key=lambda d: (-len(seen[d]), sum(seen[d]) / len(seen[d]), d))[:k]
        for i in members:
            rec = records[i]
            rec.doc_ids = list(ranked)
            rec.distances = [sum(seen[d]) / len(seen[d]) for d in ranked]
            rec.detail["shared_from"] = len(members)


def _query_of(request: ChatRequest) -> str:
    """The retrieval query: the last user message (what a RAG front end embeds)."""
    for role, content in reversed(request.messages):
        if role == "user":
            return content
    raise BadRequest("a RAG request needs at least one user message: it is the retrieval query")


class BadRequest(TargetError):
    """The request cannot be served as sent (e.g. no user message to retrieve with)."""

    reason = "bad_request"
