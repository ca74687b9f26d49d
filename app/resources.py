"""Engines shared by every session of the app (st.cache_resource) and the
plain-words rendering of errors.

The store and the demo target are expensive to open and safe to share: the
store is thread-safe, and the demo target runs one audit at a time (its
lock), since two in-process audits on the same CPU would only slow each
other down and mix their query accounts.
"""
from __future__ import annotations

import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

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


class StoreUnavailable(Exception):
    """The history file cannot be opened (cut short, not a database, a folder): bad input, never a bug.
    Its message names the file and what to do."""


def get_store():
    """The app's store, or ``StoreUnavailable``. A failure is not cached (st.cache_resource keeps no
    exception), so a file moved aside is replaced by a new, empty one on the next page run."""
    from audit_core.history import STORE_OPEN_ERRORS, store_open_problem

    path = None
    try:
        path = store_path()  # the default one is in the cache folder, which may not be creatable
        return _store(path)
    except STORE_OPEN_ERRORS as exc:
        where = path or getattr(exc, "filename", None) or "audits.sqlite"
        raise StoreUnavailable(store_unusable(store_open_problem(str(where), exc))) from None


def store_unusable(problem: str) -> str:
    """``problem`` (``history.store_open_problem``) with what the app's user can do about it."""
    return (problem[:1].upper() + problem[1:] + ". Move that file aside (rename it: the app then starts a new, "
            f"empty history), or set {STORE_ENV} to another file and restart the app. Until then no audit can "
            "start and History cannot be shown.")


def store_problem() -> str | None:
    """Why the store cannot be used (``StoreUnavailable``'s message), or None: the Run tab disables Start."""
    try:
        get_store()
    except StoreUnavailable as exc:
        return str(exc)
    return None


@st.cache_resource(show_spinner="Starting the demo target (loading its knowledge base and model)...")
def get_demo_target():
    from shadow.demo import demo_target

    warm = current_warmup()
    if warm is not None:  # the warm-up may be building it right now: take its copy, not a second one
        warm.wait(DEMO_STEP)
    return demo_target()


# --------------------------------------------------------------------------- model warm-up
#: turn the warm-up off (``RPA_WARMUP=0``): tests, or a machine that audits endpoints only
WARMUP_ENV = "RPA_WARMUP"
DEMO_STEP = "demo target (knowledge base, Gemma 3 270M)"


def _load_smollm2() -> None:
    from audit_core.models import DEFAULT_PROXY_MODEL, load_causal_lm

    load_causal_lm(DEFAULT_PROXY_MODEL)


def _load_embedder() -> None:
    from audit_core.models import load_embedder

    load_embedder()


def _load_demo() -> None:
    from shadow.demo import demo_target

    demo_target().lm  # noqa: B018 -- the generator loads (de-quantizes, the first time) on first use


def _import_classifier() -> None:
    import autogluon.tabular  # noqa: F401 -- S-RAG's classifier; the import alone takes seconds


#: what the default audit (S-RAG + MBA on the demo target) needs, in the order
#: an audit needs it; an endpoint audit needs all but the demo target
WARMUP_STEPS: tuple[tuple[str, Callable[[], None]], ...] = (
    ("SmolLM2 (shadow and proxy model)", _load_smollm2),
    ("sentence embedder", _load_embedder),
    ("S-RAG classifier library", _import_classifier),
    (DEMO_STEP, _load_demo),
)


@dataclass
class Warmup:
    """Loads the default audit's models in a background thread, once per process.

    Pressing Start does not wait for work that could have been done while the
    user picked documents: the loaders are cached per process and safe to
    call from two threads (audit_core.models), so an audit that starts early
    shares the load in progress instead of repeating it.
    """

    steps: tuple[tuple[str, Callable[[], None]], ...]
    done: dict[str, float] = field(default_factory=dict)  # step -> seconds it took
    failed: dict[str, str] = field(default_factory=dict)  # step -> why (the audit reports it properly)
    current: str | None = None
    started: float = field(default_factory=time.time)
    _events: dict[str, threading.Event] = field(default_factory=dict)
    thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self._events = {name: threading.Event() for name, _ in self.steps}

    def start(self) -> "Warmup":
        self.thread = threading.Thread(target=self._run, name="rpa-warmup", daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        for name, load in self.steps:
            self.current = name
            t0 = time.time()
            try:
                load()
                self.done[name] = time.time() - t0
            except Exception as exc:  # a missing model is reported by the audit itself, in plain words
                self.failed[name] = f"{type(exc).__name__}: {exc}"
            finally:
                self._events[name].set()
        self.current = None

    @property
    def finished(self) -> bool:
        return all(e.is_set() for e in self._events.values())

    def wait(self, step: str, timeout: float | None = None) -> bool:
        """Block until ``step`` has finished (loaded or failed); False on timeout."""
        event = self._events.get(step)
        return True if event is None else event.wait(timeout)

    def status_line(self) -> str:
        if self.finished:
            secs = sum(self.done.values())
            took = f" in {secs:.0f} s" if secs >= 1 else "; they were already in memory"
            line = f"Models ready ({len(self.done)} of {len(self.steps)} loaded{took})."
            if self.failed:
                line += " Not loaded: " + "; ".join(self.failed) + " (an audit that needs them says why)."
            return line
        return (f"Loading the models in the background ({len(self.done) + len(self.failed)} of {len(self.steps)}"
                f" done; now: {self.current or 'starting'}). The first start also unpacks them, which takes a"
                " few minutes once; you can pick documents meanwhile.")


_warmup: Warmup | None = None
_warmup_lock = threading.Lock()


def current_warmup() -> Warmup | None:
    return _warmup


def start_warmup(steps: tuple[tuple[str, Callable[[], None]], ...] | None = None) -> Warmup | None:
    """Start the warm-up once per process (idempotent, thread-safe); None when turned off."""
    global _warmup
    if os.environ.get(WARMUP_ENV, "1") == "0":
        return None
    with _warmup_lock:
        if _warmup is None:
            _warmup = Warmup(steps if steps is not None else WARMUP_STEPS).start()
        return _warmup


def show_warmup() -> None:
    """Start the warm-up (first call) and say in one line where it stands."""
    warm = start_warmup()
    if warm is not None:
        st.caption(warm.status_line())


def no_full_gc_after_each_run() -> None:
    """Turn off Streamlit's full garbage collection after every script run (``runner.postScriptGC``).

    Why: Streamlit runs ``gc.collect(2)`` after each run, and the Run tab's progress fragment runs every
    ``tab_run.POLL_S`` seconds while an audit runs. With the audit's models in memory (torch, transformers,
    AutoGluon, chromadb, SmolLM2 and the embedder: some 590,000 tracked objects) one such collection took
    0.6-0.7 s on a 2-core machine, holding the interpreter lock that the audit's threads need: with a page
    open, the audit got 0.57 s of CPU in 30 s against 28.7 s without one. Python's own generational
    collector still runs as objects are allocated, so memory does not build up. Set from the app, not only
    in streamlit_config/config.toml, so that every way of starting it (tests, ``streamlit run`` without that
    folder) gets it; Streamlit reads the option at the end of each run.
    """
    from streamlit import config

    if config.get_option("runner.postScriptGC"):
        config.set_option("runner.postScriptGC", False)


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
    if isinstance(exc, StoreUnavailable):
        return str(exc)
    if isinstance(exc, sqlite3.DatabaseError):  # the file broke after it was opened (cut short, overwritten)
        from audit_core.history import store_open_problem

        return store_unusable(store_open_problem(store_path(), exc))
    return f"The audit stopped on an unexpected error ({type(exc).__name__}): {exc}"
