"""What an audit will cost before it runs: target queries and tokens per method.

Every query to a real target is paid by the user, so the app shows this
estimate before the explicit start. Query counts follow each method's probe
exactly (they depend only on word counts); token counts are estimated from
word counts, because the target's tokenizer is unknown to us.

Queries per document:

* S-RAG: its number of probes, n = clamp(floor(l / segment_factor),
  min_probes, max_probes) for a suffix of l = words - floor(words / 2) words,
  never more than l (``audit_core.methods.srag.segment``); 0 below min_words;
* MBA, RAG-MIA, S2MIA-T, S2MIA-M, Min-k%: 1 (RAG-MIA sends a second one only
  when the endpoint refuses logprobs, which the capability probe rules out).

S2MIA-T and S2MIA-M send the same request; the app's caching target answers
the second from the store, so when both are chosen S2MIA-M costs nothing.

A word is a maximal run of non-space characters, the project's definition
(``audit_core.scoring.split_words``); it is counted with ``str.split`` here so
that estimating never imports torch.
"""
from __future__ import annotations

import importlib
import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from audit_core.documents import Document

#: per-method: (module, name of its prompt template constant)
_PROMPTS = {
    "srag": ("audit_core.methods.srag", "SRAG_PROMPT"),
    "mba": ("audit_core.methods.mba", "MBA_PROMPT"),
    "mba_continue": ("audit_core.methods.mba", "MBA_CONTINUE_PROMPT"),
    "rag_mia": ("audit_core.methods.rag_mia", "PROMPT"),
    "s2mia_t": ("audit_core.methods.s2mia", "PROMPT"),
    "s2mia_m": ("audit_core.methods.s2mia", "PROMPT"),
    "mink": ("audit_core.methods.mink", "PROMPT"),
}

_PLACEHOLDER = re.compile(r"\{[a-z_]+\}")


@dataclass
class EstimateConfig:
    """Assumptions behind the token estimate (queries need none)."""

    #: tokens per word of English text for common BPE tokenizers (GPT-4's
    #: cl100k averages about 1.3; names, numbers and medical terms push it up)
    tokens_per_word: float = 1.4
    #: role markers and message framing added by the chat template, per query
    chat_overhead_tokens: int = 8
    #: tokens of retrieved context a RAG target adds to each prompt. We cannot
    #: see it; 0 counts only what we send. A user who knows the target retrieves
    #: k documents of about t tokens sets k * t to include what the target bills.
    context_tokens_per_query: int = 0
    #: MBA's extra prompt tokens per mask: the "[Mask_i]" label in the text
    #: (about 4 tokens) and its "[Mask_i]: <word>" answer-format line (about 7)
    mba_tokens_per_mask: int = 11


@dataclass
class MethodEstimate:
    """Cost of one method over all documents."""

    method: str
    queries: int = 0
    prompt_tokens: int = 0
    #: an upper bound: the max_tokens of every request
    completion_tokens: int = 0
    #: documents this method will skip (too short), at no cost
    skipped_documents: int = 0
    note: str = ""


@dataclass
class AuditEstimate:
    n_documents: int
    methods: dict[str, MethodEstimate] = field(default_factory=dict)

    @property
    def queries(self) -> int:
        return sum(m.queries for m in self.methods.values())

    @property
    def prompt_tokens(self) -> int:
        return sum(m.prompt_tokens for m in self.methods.values())

    @property
    def completion_tokens(self) -> int:
        return sum(m.completion_tokens for m in self.methods.values())

    def rows(self) -> list[dict[str, Any]]:
        """One row per method plus a total, for a table."""
        out = [
            {"method": m.method, "queries": m.queries, "prompt tokens (est.)": m.prompt_tokens,
             "completion tokens (max)": m.completion_tokens, "documents skipped": m.skipped_documents,
             "note": m.note}
            for m in self.methods.values()
        ]
        out.append({"method": "total", "queries": self.queries, "prompt tokens (est.)": self.prompt_tokens,
                    "completion tokens (max)": self.completion_tokens, "documents skipped": None, "note": ""})
        return out


def method_config(name: str, params: dict[str, Any] | None = None) -> Any:
    """The method's own config dataclass built with ``params`` (validates them too)."""
    from audit_core.methods import METHODS

    if name not in METHODS:
        raise ValueError(f"unknown method '{name}'; known methods: {', '.join(METHODS)}")
    module, _, cfg_name = METHODS[name]
    cls = getattr(importlib.import_module(module), cfg_name)
    return cls(**(params or {}))


def _template_words(name: str) -> int:
    """Words of a method's prompt template, without its {placeholders}."""
    module, attr = _PROMPTS[name]
    template = getattr(importlib.import_module(module), attr)
    return len(_PLACEHOLDER.sub(" ", template).split())


def srag_probe_count(n_words: int, srag_cfg: Any) -> int:
    """Number of S-RAG probes (= target queries) for a document of ``n_words`` words."""
    if n_words < srag_cfg.min_words:
        return 0
    suffix = n_words - n_words // 2
    n = max(srag_cfg.min_probes, suffix // srag_cfg.segment_factor)
    return min(n, srag_cfg.max_probes, suffix)


def _tokens(words: float, cfg: EstimateConfig) -> int:
    return int(math.ceil(words * cfg.tokens_per_word))


def _one_method(name: str, word_counts: Sequence[int], mcfg: Any, cfg: EstimateConfig) -> MethodEstimate:
    est = MethodEstimate(name)
    tmpl = _template_words(name)
    per_query = cfg.chat_overhead_tokens + cfg.context_tokens_per_query
    for n in word_counts:
        half = n // 2
        second = n - half
        if name == "srag":
            q = srag_probe_count(n, mcfg)
            if q == 0:
                est.skipped_documents += 1
                continue
            # probes are suffix words; a prefix averages the middle of the suffix
            mean_prefix = half + second / 2
            est.queries += q
            est.prompt_tokens += q * (_tokens(tmpl + mean_prefix, cfg) + per_query)
            est.completion_tokens += q * mcfg.max_tokens
        elif name == "mba":
            # which masks a document yields needs the proxy model; masks are never
            # neighbours, so min_masks masks need 2 * min_masks - 1 words at least.
            # Longer documents are counted (an upper bound).
            if n < 2 * mcfg.min_masks - 1:
                est.skipped_documents += 1
                continue
            if mcfg.elicitation == "continue":
                # one request per mask with the text before it; masks spread
                # over the document, so a prefix averages half of it
                q = mcfg.n_masks
                est.queries += q
                est.prompt_tokens += q * (_tokens(_template_words("mba_continue") + n / 2, cfg) + per_query)
                est.completion_tokens += q * mcfg.continue_tokens
                continue
            est.queries += 1
            est.prompt_tokens += _tokens(tmpl + n, cfg) + cfg.mba_tokens_per_mask * mcfg.n_masks + per_query
            est.completion_tokens += mcfg.max_answer_tokens
        elif name == "rag_mia":
            if n == 0:
                est.skipped_documents += 1
                continue
            est.queries += 1
            est.prompt_tokens += _tokens(tmpl + n, cfg) + per_query
            est.completion_tokens += mcfg.max_tokens
        elif name in ("s2mia_t", "s2mia_m"):
            if n < max(2, mcfg.min_words):
                est.skipped_documents += 1
                continue
            budget = max(mcfg.min_answer_tokens, min(mcfg.max_answer_tokens, math.ceil(mcfg.tokens_per_word * second)))
            est.queries += 1
            est.prompt_tokens += _tokens(tmpl + half, cfg) + per_query
            est.completion_tokens += budget
        elif name == "mink":
            if n < max(2, mcfg.min_words):
                est.skipped_documents += 1
                continue
            est.queries += 1
            est.prompt_tokens += _tokens(tmpl + half, cfg) + per_query
            est.completion_tokens += max(1, min(mcfg.max_tokens_cap, second))
        else:  # pragma: no cover - METHODS and this module are kept in step
            raise ValueError(f"no estimate for method '{name}'")
    return est


def estimate_audit(
    docs: Sequence[Document],
    methods: Sequence[str],
    method_params: dict[str, dict] | None = None,
    cfg: EstimateConfig | None = None,
) -> AuditEstimate:
    """Queries and tokens an audit of ``docs`` with ``methods`` will send to the target.

    Shadow preparation is not counted: it runs on the local shadow RAG and
    costs the user no target query.
    """
    cfg = cfg or EstimateConfig()
    method_params = method_params or {}
    counts = [len(d.text.split()) for d in docs]
    out = AuditEstimate(len(docs))
    for name in methods:
        mcfg = method_config(name, method_params.get(name))
        est = _one_method(name, counts, mcfg, cfg)
        if name == "s2mia_m" and "s2mia_t" in methods:
            est = MethodEstimate(name, skipped_documents=est.skipped_documents,
                                 note="same requests as S2MIA-T, answered from the cache")
        out.methods[name] = est
    return out

