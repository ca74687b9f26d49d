"""Engines shared by every session of the app (st.cache_resource) and the
plain-words rendering of errors.

The store and the demo target are expensive to open and safe to share: the
store is thread-safe, and the demo target runs one audit at a time (its
lock), since two in-process audits on the same CPU would only slow each
other down and mix their query accounts.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

import streamlit as st

#: where past audits are kept; defaults to the store's own location
STORE_ENV = "RPA_AUDIT_DB"


def store_path() -> str:
    """The SQLite file of this app (``$RPA_AUDIT_DB`` or ``cache_dir()/audits.sqlite``)."""
    env = os.environ.get(STORE_ENV)
    if env:
        return env
    from audit_core.models import cache_dir

    return str(cache_dir() / "audits.sqlite")


@st.cache_resource(show_spinner=False)
def _store(path: str):
    from audit_core.store import Store

    return Store(Path(path))


def get_store():
    return _store(store_path())


@st.cache_resource(show_spinner="Starting the demo target (loading its knowledge base and model)...")
def get_demo_target():
    from shadow.demo import demo_target

    return demo_target()


@st.cache_resource(show_spinner=False)
def demo_lock() -> threading.Lock:
    """Held while an audit runs against the demo target."""
    return threading.Lock()


def plain_error(exc: BaseException) -> str:
    """A message a data owner can act on, without a stack trace.

    Target, input and model errors already carry plain messages (and never a
    key: connectors build them without it); anything else is named by its type.
    """
    from audit_core.documents import DocumentInputError
    from audit_core.models import ModelNotAvailableError
    from audit_core.target.base import TargetError

    if isinstance(exc, TargetError):
        return f"The target could not be used ({exc.reason.replace('_', ' ')}): {exc}"
    if isinstance(exc, DocumentInputError):
        return f"Your documents could not be read: {exc}"
    if isinstance(exc, ModelNotAvailableError):
        return f"A local model is missing: {exc}"
    if isinstance(exc, ValueError):
        return f"A setting is not valid: {exc}"
    return f"The audit stopped on an unexpected error ({type(exc).__name__}): {exc}"
