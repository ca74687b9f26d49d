"""Membership methods, one module each; ``create_method`` builds one by name.

Imports are lazy so that using one method never loads another's dependencies.
"""
from __future__ import annotations

import importlib
from typing import Any

#: name -> (module, method class, config class)
METHODS: dict[str, tuple[str, str, str]] = {
    "srag": ("audit_core.methods.srag", "SragMethod", "SragConfig"),
    "mba": ("audit_core.methods.mba", "MbaMethod", "MbaConfig"),
    "rag_mia": ("audit_core.methods.rag_mia", "RagMiaMethod", "RagMiaConfig"),
    "s2mia_t": ("audit_core.methods.s2mia", "S2miaThresholdMethod", "S2miaConfig"),
    "s2mia_m": ("audit_core.methods.s2mia", "S2miaModelMethod", "S2miaConfig"),
    "mink": ("audit_core.methods.mink", "MinKMethod", "MinKConfig"),
}

#: what a person reads in the app, the CLI and the report
LABELS = {
    "srag": "S-RAG",
    "mba": "MBA",
    "rag_mia": "RAG-MIA",
    "s2mia_t": "S2MIA-T",
    "s2mia_m": "S2MIA-M",
    "mink": "Min-k% Prob",
}


def create_method(name: str, **params: Any):
    """A method instance by name, with its config built from ``params``."""
    if name not in METHODS:
        raise ValueError(f"unknown method '{name}'; known methods: {', '.join(METHODS)}")
    module, cls_name, cfg_name = METHODS[name]
    mod = importlib.import_module(module)
    cfg = getattr(mod, cfg_name)(**params)
    return getattr(mod, cls_name)(cfg)
