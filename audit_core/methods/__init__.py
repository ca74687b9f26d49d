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
from typing import Any


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

    def config_class(self) -> type:
        return getattr(importlib.import_module(self.module), self.config)

    def method_class(self) -> type:
        return getattr(importlib.import_module(self.module), self.cls)


_M = "audit_core.methods."

#: every method the project offers, in the order the app and the report list them
METHODS: dict[str, MethodSpec] = {s.name: s for s in (
    MethodSpec("srag", "S-RAG", _M + "srag", "SragMethod", "SragConfig", True, "primary",
               "5-10 short probes (one per hard word)"),
    MethodSpec("mba", "MBA", _M + "mba", "MbaMethod", "MbaConfig", False, "second opinion",
               "1 fill-in request, or one per hidden word"),
    MethodSpec("rag_mia", "RAG-MIA", _M + "rag_mia", "RagMiaMethod", "RagMiaConfig", False, "baseline",
               "1 yes/no question"),
    MethodSpec("s2mia_t", "S2MIA-T", _M + "s2mia", "S2miaThresholdMethod", "S2miaConfig", False, "baseline",
               "1 continuation (shared with S2MIA-M)"),
    MethodSpec("s2mia_m", "S2MIA-M", _M + "s2mia", "S2miaModelMethod", "S2miaConfig", False, "baseline",
               "1 continuation (shared with S2MIA-T)"),
    MethodSpec("mink", "Min-k% Prob", _M + "mink", "MinKMethod", "MinKConfig", True, "baseline",
               "1 continuation with logprobs"),
    MethodSpec("srag_sampled", "S-RAG (text only)", _M + "srag_sampled", "SragSampledMethod", "SragSampledConfig",
               False, "text-only", "5-10 short probes (one per hard word; n per word when sampling)"),
    MethodSpec("interrogation", "Interrogation (IA)", _M + "interrogation", "InterrogationMethod",
               "InterrogationConfig", False, "text-only", "up to 10 natural yes/no questions"),
    MethodSpec("entailment", "Entailment (MEntA)", _M + "entailment", "EntailmentMethod", "EntailmentConfig",
               False, "text-only", "up to 5 broad questions"),
    MethodSpec("perturbation", "Perturbation (DCMI)", _M + "perturbation", "PerturbationMethod",
               "PerturbationConfig", False, "text-only", "2 yes/no checks (original and altered copy)"),
    MethodSpec("robustness", "Robustness (Tang et al.)", _M + "robustness", "RobustnessMethod", "RobustnessConfig",
               False, "text-only", "2 continuations (original and lightly edited query)"),
    MethodSpec("extraction", "Extraction (personal data)", _M + "extraction", "ExtractionMethod",
               "ExtractionConfig", False, "text-only", "1 continuation per personal-data item (up to 3)"),
)}

#: what a person reads in the app, the CLI and the report
LABELS: dict[str, str] = {n: s.label for n, s in METHODS.items()}


def method_spec(name: str) -> MethodSpec:
    if name not in METHODS:
        raise ValueError(f"unknown method '{name}'; known methods: {', '.join(METHODS)}")
    return METHODS[name]


def method_config(name: str, params: dict[str, Any] | None = None) -> Any:
    """The method's own config dataclass built with ``params`` (validates them too)."""
    return method_spec(name).config_class()(**(params or {}))


def create_method(name: str, **params: Any):
    """A method instance by name, with its config built from ``params``."""
    spec = method_spec(name)
    return spec.method_class()(method_config(name, params))
