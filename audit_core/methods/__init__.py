"""Membership methods, one module each, declared in one registry.

``METHODS`` is the single place that says what methods exist: each entry names
the module and class that implement it, the label a person reads (app, CLI,
report, plots), what it requires of a target, and its role. What a method costs
per document is computed by the method itself (``MembershipMethod.query_cost``)
so that the estimate, the app and the CLI never keep a copy of it.

Adding a method is one new module in this package and one line in ``METHODS``.
Imports are lazy so that using one method never loads another's dependencies.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Iterable


@dataclass(frozen=True)
class MethodSpec:
    """What the rest of the project knows about a method without importing it."""

    name: str
    label: str
    module: str
    cls: str
    config: str
    #: the target must return token logprobs (with top alternatives)
    requires_logprobs: bool
    #: "primary", "second opinion", "baseline" or "text-only"
    role: str
    #: queries per document, in words, for help texts (the exact count is ``query_cost``)
    cost: str
    #: what the method does, in words a data owner reads in the report
    description: str = ""
    #: the kinds of target ("logprobs", "text only") for which the app proposes the method; "chat": also
    #: proposed for any target that answers like a chat model, where the benchmark found it the best method
    suggested_for: tuple[str, ...] = ()
    #: why the method never says "not found" (its documents under the member threshold stay "not
    #: cleared"), where the benchmark showed its shadow's clearing threshold missing target members
    #: far more often than the shadow promised; None: it clears by the shadow's rule
    no_clearing: str | None = None
    #: the target's answers must carry the sources they cite (``Capabilities.sources``)
    requires_sources: bool = False
    #: the shadow probes the full ``ShadowConfig.n_members`` + ``n_nonmembers`` documents (one or a few
    #: answer tokens per probe, cheap at that size); False: ``n_per_class_generative`` per class, for
    #: methods that decode whole answers (``shadow.prepare``)
    full_size_shadow: bool = False

    def config_class(self) -> type:
        return getattr(importlib.import_module(self.module), self.config)

    def method_class(self) -> type:
        return getattr(importlib.import_module(self.module), self.cls)


_M = "audit_core.methods."

#: every method the project offers, in the order the app and the report list them
METHODS: dict[str, MethodSpec] = {s.name: s for s in (
    MethodSpec("srag", "S-RAG", _M + "srag", "SragMethod", "SragConfig", True, "primary",
               "5-10 short probes (one per hard word)",
               description='asks the target to continue the document from just before hard-to-guess words and reads the '
                           'probability it gives to the true next word; a classifier trained on a shadow RAG turns the '
                           'histogram of these probabilities into a score, calibrated on the shadow',
               suggested_for=("logprobs",), full_size_shadow=True),
    MethodSpec("mba", "MBA", _M + "mba", "MbaMethod", "MbaConfig", False, "second opinion",
               "1 fill-in request, or one per hidden word",
               description='hides selected words of the document and asks the target to fill them in; a RAG that retrieved '
                           'the document fills in many more of them correctly',
               suggested_for=("logprobs", "text only")),
    MethodSpec("rag_mia", "RAG-MIA", _M + "rag_mia", "RagMiaMethod", "RagMiaConfig", False, "baseline",
               "1 yes/no question",
               description='asks the target directly whether the text appears in its context', full_size_shadow=True),
    MethodSpec("s2mia_t", "S2MIA-T", _M + "s2mia", "S2miaThresholdMethod", "S2miaConfig", False, "baseline",
               "1 continuation (shared with S2MIA-M)",
               description='gives the target the first half of the document and compares its continuation with the true '
                           'second half (similarity threshold)'),
    MethodSpec("s2mia_m", "S2MIA-M", _M + "s2mia", "S2miaModelMethod", "S2miaConfig", False, "baseline",
               "1 continuation (shared with S2MIA-T)",
               description='gives the target the first half of the document and compares its continuation with the true '
                           'second half (semantic similarity and perplexity)'),
    MethodSpec("mink", "Min-k% Prob", _M + "mink", "MinKMethod", "MinKConfig", True, "baseline",
               "1 continuation with logprobs",
               description='averages the lowest token probabilities the target assigns to the document',
               full_size_shadow=True),
    # text-only methods, in voting order (audit_core.verdict). Cited sources first where a target cites
    # them: it observes retrieval itself, with no model between the document and the evidence (chosen
    # before it was measured on any target). Then verbatim, the strongest on the chat profile in its
    # design runs (8 + 8 documents outside the benchmark's reported draw)
    MethodSpec("cited_sources", "Cited sources", _M + "cited_sources", "CitedSourcesMethod", "CitedSourcesConfig",
               False, "text-only", "4 questions (the document's beginning and its end, each also led by the most "
                                   "similar other document audited), 1 answer token each",
               description='for a service that lists the sources of its answers: sends the beginning and the end of the '
                           'document as questions, again led by up to 80 words of the most similar other document (which '
                           'gets past the Mirabel defense), and measures how much of its text is in the passages the '
                           'service cites',
               requires_sources=True, full_size_shadow=True,
               no_clearing='Cited sources says no "not found": its shadow cites whole documents, so where a service '
                           'cites chunks or snippets of a document it holds, the share of the document in them is '
                           'smaller than the shadow taught, and only member calls are safe (BENCHMARKS.md, session 27)'),
    MethodSpec("verbatim", "Verbatim continuation", _M + "verbatim", "VerbatimMethod", "VerbatimConfig",
               False, "text-only", "3 requests to quote how the document goes on (9 on a chat target)",
               description='gives the target the beginning of the document and asks it to quote the rest; a RAG that '
                           'retrieved the document copies word sequences from it that the question did not contain',
               suggested_for=("text only", "chat"),
               no_clearing='Verbatim continuation says no "not found": a chat model that holds a document copies '
                           'nothing from it for about a third of the shadow\'s members, so an answer without a copy '
                           'is no evidence of absence (BENCHMARKS.md, session 43)'),
    MethodSpec("srag_sampled", "S-RAG (text only)", _M + "srag_sampled", "SragSampledMethod", "SragSampledConfig",
               False, "text-only", "5-10 short probes (one per hard word; n per word when sampling)",
               description="like S-RAG, but estimates the probability of the true next word from the target's text answers "
                           'alone, for targets that return no token probabilities',
               no_clearing='S-RAG without logprobs says no "not found": on the completion benchmark its shadow\'s '
                           'rule cleared 7 of 50 documents that were in the target (BENCHMARKS.md, session 20)'),
    MethodSpec("interrogation", "Interrogation (IA)", _M + "interrogation", "InterrogationMethod",
               "InterrogationConfig", False, "text-only", "up to 10 natural yes/no questions",
               description='asks natural yes/no questions that only the document answers; a RAG that holds it answers more '
                           "of them correctly and says 'I do not know' less often"),
    MethodSpec("entailment", "Entailment (MEntA)", _M + "entailment", "EntailmentMethod", "EntailmentConfig",
               False, "text-only", "up to 5 broad questions",
               description="asks a few broad questions about the document's topic and measures how much of each answer it "
                           'took word for word from the document',
               no_clearing='Entailment says no "not found": its broad questions reached the member\'s own document for '
                           'only 29-30% of them on the benchmark\'s targets, so an answer that took nothing from a '
                           'document does not show that the service lacks it (BENCHMARKS.md, session 32)'),
    MethodSpec("perturbation", "Perturbation (DCMI)", _M + "perturbation", "PerturbationMethod",
               "PerturbationConfig", False, "text-only", "2 yes/no checks (original and altered copy)",
               description='asks whether a statement from the document is right, once as written and once with a few words '
                           'turned into their opposites; a RAG that holds the document tells the two apart'),
    MethodSpec("robustness", "Robustness (Tang et al.)", _M + "robustness", "RobustnessMethod", "RobustnessConfig",
               False, "text-only", "2 continuations (original and lightly edited query)",
               description="compares the target's answers to the document and to a lightly edited copy; answers grounded in "
                           'a retrieved document change less'),
    MethodSpec("extraction", "Extraction (personal data)", _M + "extraction", "ExtractionMethod",
               "ExtractionConfig", False, "text-only", "1 continuation per personal-data item (up to 3)",
               description='gives the target the text before a piece of personal data (an e-mail, phone number or name) and '
                           'checks whether it reproduces it word for word, the strongest evidence an owner can hold'),
)}

#: what a person reads in the app, the CLI and the report
LABELS: dict[str, str] = {n: s.label for n, s in METHODS.items()}


def method_label(method: str) -> str:
    """Display name of a method ("srag" -> "S-RAG"); unknown names are shown as given."""
    return LABELS.get(method, method)


def suggested_methods(logprobs: bool, sources: bool = False, style: str | None = None) -> list[str]:
    """The methods the app proposes for a target that returns token logprobs, or one that returns text only.

    ``sources``: the target's answers list their sources, so the methods that read them are proposed too.
    ``style``: how the target answers ("chat" or "completion", found by the capability probe or chosen), where
    known. A text-only target that answers like a chat model gets the methods proposed for chat models only:
    MBA, proposed for text-only targets that continue text, is at chance on every chat shadow in either
    elicitation and abstains there (BENCHMARKS.md, session 51), so proposing it offered a method known to
    decide nothing. A target with logprobs keeps its proposal (``unchosen_chat_methods`` adds to it).
    """
    if not logprobs and style == "chat":
        return [n for n, s in METHODS.items() if "chat" in s.suggested_for or (sources and s.requires_sources)]
    kind = "logprobs" if logprobs else "text only"
    return [n for n, s in METHODS.items() if kind in s.suggested_for or (sources and s.requires_sources)]


#: in a list of methods: the methods for this target, chosen once its capability probe has answered
#: (``methods_for_target``); the command line's default, so that a first audit of a chat service without
#: logprobs runs the method that can decide there instead of two that abstain
AUTO = "auto"


def methods_for_target(logprobs: bool, sources: bool = False, style: str | None = None) -> list[str]:
    """The methods an audit runs when the choice is left to it (``AUTO``), for what the capability probe found.

    Those the app proposes for such a target (``suggested_methods``) and, on a target with logprobs that answers
    like a chat model, the chat methods besides: S-RAG and MBA usually find no signal there and abstain, so an
    audit of them alone decides nothing. A method without signal on its shadow sends no query, so proposing one
    costs the owner nothing but its shadow's preparation.
    """
    chosen = suggested_methods(logprobs, sources, style)
    if logprobs and style == "chat":
        chosen += unchosen_chat_methods(chosen)
    return chosen


def expand_auto(names: Iterable[str], logprobs: bool, sources: bool = False, style: str | None = None) -> list[str]:
    """``names`` with ``AUTO`` replaced by ``methods_for_target`` (in its place), each method once."""
    out: list[str] = []
    for name in names:
        for m in (methods_for_target(logprobs, sources, style) if name == AUTO else [name]):
            if m not in out:
                out.append(m)
    return out


def auto_reason(logprobs: bool, sources: bool = False, style: str | None = None) -> str:
    """Why ``AUTO`` chose what it chose, in the words a person reads next to the methods."""
    kind = "returns logprobs" if logprobs else "returns text only (no logprobs)"
    way = {"chat": "answers like a chat model", "completion": "continues the text it is given"}.get(style or "",
                                                                                                  "answers")
    cites = " and lists the sources of its answers" if sources else ""
    return f"chosen for this target (--method {AUTO}): it {kind}, {way}{cites}"


def unchosen_source_methods(chosen: Iterable[str]) -> list[str]:
    """The methods that read cited sources and are not among ``chosen``: what to offer for a target that cites them."""
    chosen = set(chosen)
    return [n for n, s in METHODS.items() if s.requires_sources and n not in chosen]


def unchosen_chat_methods(chosen: Iterable[str]) -> list[str]:
    """The methods proposed for chat-style targets that are not among ``chosen``: what to offer once a target is
    found (or said) to answer like a chat model. There S-RAG and MBA usually find no signal on their shadow and
    abstain, so an audit without these decides nothing (BENCHMARKS.md, target zoo)."""
    chosen = set(chosen)
    return [n for n, s in METHODS.items() if "chat" in s.suggested_for and n not in chosen]


def method_spec(name: str) -> MethodSpec:
    if name not in METHODS:
        raise ValueError(f"unknown method '{name}'; known methods: {', '.join(METHODS)}")
    return METHODS[name]


def method_config(name: str, params: dict[str, Any] | None = None) -> Any:
    """The method's own config dataclass built with ``params`` (validates them too)."""
    return method_spec(name).config_class()(**(params or {}))


def reads_target_style(name: str) -> bool:
    """Whether the method probes or reads a chat target differently from a completion-style one.

    Such a method's config has a ``style`` field, which the audit, the shipped
    preparation and the benchmark set to the target's style.
    """
    return "style" in getattr(method_spec(name).config_class(), "__dataclass_fields__", {})


def in_target_style(params: dict[str, dict], names: Iterable[str], style: str) -> dict[str, dict]:
    """A copy of per-method ``params`` with ``style`` set on every method of ``names`` (and S-RAG) that reads it."""
    out = {name: dict(p) for name, p in params.items()}
    for name in sorted({"srag", *names} & set(METHODS)):
        if reads_target_style(name):
            out.setdefault(name, {})["style"] = style
    return out


def create_method(name: str, **params: Any):
    """A method instance by name, with its config built from ``params``."""
    spec = method_spec(name)
    return spec.method_class()(method_config(name, params))
