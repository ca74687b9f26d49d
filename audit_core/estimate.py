"""What an audit will cost before it runs: target queries and tokens per method.

Every query to a real target is paid by the user, so the app shows this
estimate before the explicit start. Query counts follow each method's probe
(from the word count, or from the text where a method's requests depend on it
and that is cheap to read: ``MembershipMethod.document_cost``); token counts
are estimated from word counts, because the target's tokenizer is unknown to
us. What the figures assume and leave out (tokens per word, the capability
probe, retries) is said beside them (``assumptions``).

Queries per document come from each method's own ``query_cost`` (declared
next to its ``probe``, so the two cannot drift apart).

Methods that send identical probes name one shared probe scope
(``MembershipMethod.probe_scope``: S2MIA-T and S2MIA-M); the app's caching
target answers the later ones from the store, so each scope is charged once,
to the first of its methods chosen.

Methods that cannot run on the target (the connection check found it) send
nothing and are left out of the total, named with why (``estimate_audit``'s
``caps``).

A word is a maximal run of non-space characters, the project's definition
(``audit_core.scoring.split_words``); it is counted with ``str.split`` here so
that estimating never imports torch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from audit_core.documents import Document
from audit_core.methods import create_method, method_config, method_label  # noqa: F401 - method_config re-exported

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
    #: documents that no chosen method can probe (each one is skipped at no cost)
    skipped_by_every_method: int = 0
    #: chosen methods that cannot run on the checked target, and why: they send nothing and are not counted
    not_run: dict[str, str] = field(default_factory=dict)

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
                    "completion tokens (max)": self.completion_tokens,
                    "documents skipped": self.skipped_by_every_method,
                    "note": "documents skipped: those that no method can probe"})
        return out


def srag_probe_count(n_words: int, srag_cfg: Any) -> int:
    """Number of S-RAG probes for a document of ``n_words`` words (its queries are these and, in completion
    style, one continuation check: ``SragMethod.query_cost``)."""
    from audit_core.methods.srag import probe_count

    return probe_count(n_words, srag_cfg)


def _tokens(words: float, cfg: EstimateConfig) -> int:
    return int(math.ceil(words * cfg.tokens_per_word))


def method_estimate(name: str, costs: Sequence[Any], cfg: EstimateConfig | None = None) -> MethodEstimate:
    """Add up the method's own ``query_cost`` (``costs``: one per document, None where it skips it)."""
    cfg = cfg or EstimateConfig()
    est = MethodEstimate(name)
    per_query = cfg.chat_overhead_tokens + cfg.context_tokens_per_query
    for cost in costs:
        if cost is None:
            est.skipped_documents += 1
            continue
        est.queries += cost.queries
        est.prompt_tokens += _tokens(cost.prompt_words, cfg) + cost.extra_prompt_tokens + cost.queries * per_query
        est.completion_tokens += cost.completion_tokens
    return est


def capability_probe() -> tuple[int, int]:
    """(queries, completion tokens) the capability probe sends before any method: one request asking what
    the target returns (1 token), then the style probes (``style.STYLE_PROBES``)."""
    from audit_core.target.style import STYLE_PROBE_TOKENS, STYLE_PROBES

    return 1 + len(STYLE_PROBES), 1 + len(STYLE_PROBES) * STYLE_PROBE_TOKENS


def will_not_run(methods: Sequence[str], caps: Any) -> dict[str, str]:
    """Methods of ``methods`` that cannot run on a target with capabilities ``caps`` (None: not checked yet),
    and why: they send nothing, so an estimate that counted them overstated the bill."""
    from audit_core.audit import cannot_run
    from audit_core.methods import METHODS

    if caps is None:
        return {}
    why = {name: cannot_run(METHODS[name].requires_logprobs, METHODS[name].requires_sources, caps)
           for name in methods if name in METHODS}
    return {name: reason for name, reason in why.items() if reason}


def controls_queries(controls: Sequence[Document], methods: Sequence[str],
                     method_params: dict[str, dict] | None = None, cfg: EstimateConfig | None = None) -> int:
    """The most queries the collection test's controls can cost: they are probed with one method only
    (``evidence.collection.choose_method`` picks it during the audit), so the dearest of ``methods``."""
    if not controls or not methods:
        return 0
    return max(estimate_audit(controls, [m], method_params, cfg).queries for m in methods)


def assumptions(cfg: EstimateConfig | None = None, max_retries: int = 5, bad_response_retries: int = 2) -> str:
    """What the estimate assumes and leaves out, in one paragraph for the app and the CLI."""
    cfg = cfg or EstimateConfig()
    n, tok = capability_probe()
    context = (f"{cfg.context_tokens_per_query} tokens of retrieved context per query" if cfg.context_tokens_per_query
               else "not the retrieved context the target adds to each prompt")
    return (f"Tokens are estimated at {cfg.tokens_per_word} per word, as English text comes out of common "
            f"tokenizers (other languages, numbers and codes take up to 3 or more), plus "
            f"{cfg.chat_overhead_tokens} per query for the chat framing, and {context}. Not counted: the "
            f"capability probe ({n} short queries, up to {tok} completion tokens) and retries: a request the "
            f"target rate-limits, fails or answers too late is sent again up to {max_retries} times, one whose "
            f"answer could not be read up to {bad_response_retries} times, and a provider may bill each try.")


def pace_note(queries: int, pace: float) -> str:
    """What a target's pace of ``pace`` requests a minute means for ``queries`` queries, in words (CLI and app)."""
    from audit_core.progress import format_duration

    return (f"At {pace:g} requests a minute (the target's pace), these {queries} queries for the documents take "
            f"at least {format_duration(queries / pace * 60)}, more with retries.")


def estimate_audit(
    docs: Sequence[Document],
    methods: Sequence[str],
    method_params: dict[str, dict] | None = None,
    cfg: EstimateConfig | None = None,
    caps: Any = None,
) -> AuditEstimate:
    """Queries and tokens an audit of ``docs`` with ``methods`` will send to the target.

    ``caps``: the target's capabilities where a connection check found them; the methods that cannot run
    on it are left out of every figure and named in ``not_run`` (None: not checked, all are counted).
    Shadow preparation is not counted: it runs on the local shadow RAG and
    costs the user no target query.
    """
    cfg = cfg or EstimateConfig()
    method_params = method_params or {}
    not_run = will_not_run(methods, caps)
    methods = [m for m in methods if m not in not_run]
    out = AuditEstimate(len(docs), not_run=not_run)
    made = {name: create_method(name, **(method_params.get(name) or {})) for name in methods}
    costs = {name: [m.document_cost(d) for d in docs] for name, m in made.items()}
    out.skipped_by_every_method = sum(all(costs[m][i] is None for m in methods) for i in range(len(docs))) \
        if methods else 0
    charged: dict[str, str] = {}  # probe scope -> the method its requests are counted for
    for name in methods:
        est = method_estimate(name, costs[name], cfg)
        first = charged.setdefault(made[name].probe_scope, name)
        if first != name:
            est = MethodEstimate(name, skipped_documents=est.skipped_documents,
                                 note=f"same requests as {method_label(first)}, answered from the cache")
        out.methods[name] = est
    return out
