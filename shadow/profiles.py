"""Target profiles: the kinds of RAG service a data owner meets, as reference targets.

Each profile says how its RagSystem is built (generator, prompt style, system
prompt, retrieval, chunking) and how it is served (``python -m shadow.serve
--profile NAME``): whether the endpoint returns logprobs and which API it
speaks. The benchmark (``python -m shadow.bench --profiles ...``) probes each
profile through the real client path over loopback, and every defense of
``shadow.defenses`` applies to every profile (``rag_config(defense=...)``).

* ``completion`` -- a base model (Gemma 3 270M) that continues plain text: the
  setting of the S-RAG paper's experiments and of the first benchmark.
* ``chat`` -- an instruct model (SmolLM2-135M-Instruct) through its chat
  template, the retrieved documents in the system prompt as production RAG
  puts them, the user's message as the user turn.
* ``chat-nologprobs`` -- the same service whose endpoint returns text only.
* ``chunked`` -- the chat service over a knowledge base of ~60-word chunks
  with overlap (a long document becomes several chunks), top-k 8, another
  system prompt.
* ``http-custom`` -- the chat service behind a non-OpenAI JSON API; the server
  and client of that API are ``api="custom"`` (built with the generic HTTP
  target); the RAG behind it is the ``chat`` profile's.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from audit_core.documents import Document
from shadow.rag import RagConfig

#: system prompt of the chunked service: another wording than the default, the
#: excerpts marked as such (production prompts vary; the auditor cannot know them)
CHUNKED_SYSTEM_TEMPLATE = (
    "You are the assistant of a medical question service. Answer with the help of these excerpts "
    "from our records. If they do not help, answer from general knowledge.\n\n"
    "Excerpts:\n{context}"
)


@dataclass(frozen=True)
class TargetProfile:
    """One kind of RAG service: how it is built and how it is served."""

    name: str
    description: str
    rag: RagConfig
    #: how the generator answers: "completion" (continues the text) or "chat"
    #: (instruct model through its chat template). The auditor's shadow and
    #: S-RAG's reading of the answers follow it.
    style: str
    #: whether the endpoint returns token logprobs (with alternatives)
    logprobs: bool = True
    #: "openai" (chat completions) or "custom" (the non-OpenAI JSON API)
    api: str = "openai"
    #: knowledge-base chunking: words per chunk (None: whole documents) and overlap
    chunk_words: int | None = None
    chunk_overlap: int = 15

    def rag_config(self, defense: str | None = None, **kw) -> RagConfig:
        """The profile's RagConfig with a defense (any of shadow.defenses) and overrides."""
        return replace(self.rag, defense=defense, **kw)

    def knowledge_base(self, docs: Sequence[Document]) -> list[Document]:
        """The documents as the service stores them (chunked when the profile chunks)."""
        if self.chunk_words is None:
            return list(docs)
        return [c for d in docs for c in chunk_document(d, self.chunk_words, self.chunk_overlap)]


CHUNK_SEP = "#chunk"


def chunk_document(doc: Document, words: int, overlap: int) -> list[Document]:
    """Split a document into windows of ``words`` words, consecutive windows sharing ``overlap`` words.

    Chunk ids are ``<doc id>#chunk<i>`` (``source_id`` maps them back); a
    document no longer than one window is one chunk. The last window is never
    shorter than ``overlap`` words beyond the previous one: a tail that short is
    merged into the window before it.
    """
    if overlap >= words:
        raise ValueError("the chunk overlap must be smaller than the chunk size")
    toks = doc.text.split()
    step = words - overlap
    starts = [0]
    while starts[-1] + words < len(toks):
        starts.append(starts[-1] + step)
    if len(starts) > 1 and len(toks) - (starts[-2] + words) <= overlap:
        starts.pop()
    out = []
    for i, s in enumerate(starts):
        end = len(toks) if i == len(starts) - 1 else s + words
        out.append(Document(f"{doc.id}{CHUNK_SEP}{i}", " ".join(toks[s:end])))
    return out


def source_id(chunk_id: str) -> str:
    """The document a knowledge-base entry came from (a chunk id, or a document id itself)."""
    return chunk_id.split(CHUNK_SEP, 1)[0]


_CHAT = RagConfig(generator="smollm2-135m-instruct", prompt_style="chat")

PROFILES: dict[str, TargetProfile] = {p.name: p for p in (
    TargetProfile("completion", "base model (Gemma 3 270M) continuing plain text",
                  RagConfig(generator="gemma-3-270m", prompt_style="completion"), style="completion"),
    TargetProfile("chat", "instruct model (SmolLM2-135M-Instruct), documents in the system prompt",
                  _CHAT, style="chat"),
    TargetProfile("chat-nologprobs", "the chat service, endpoint returns text only (no logprobs)",
                  _CHAT, style="chat", logprobs=False),
    TargetProfile("chunked", "the chat service over 60-word chunks (15 overlap), top-k 8, another system prompt",
                  replace(_CHAT, top_k=8, system_template=CHUNKED_SYSTEM_TEMPLATE), style="chat",
                  chunk_words=60, chunk_overlap=15),
    TargetProfile("http-custom", "the chat service behind a non-OpenAI JSON API (POST /ask)",
                  _CHAT, style="chat", api="custom"),
    # the chunked service behind the custom API, which cites what it put in context: the chunks
    TargetProfile("chunked-custom", "the chunked chat service behind the non-OpenAI JSON API, citing its chunks",
                  replace(_CHAT, top_k=8, system_template=CHUNKED_SYSTEM_TEMPLATE), style="chat", api="custom",
                  chunk_words=60, chunk_overlap=15),
)}


def get_profile(name: str) -> TargetProfile:
    if name not in PROFILES:
        raise ValueError(f"unknown target profile '{name}'; choose one of {', '.join(PROFILES)}")
    return PROFILES[name]
