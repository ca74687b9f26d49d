"""The app's background model warm-up (issue 18): started once, thread-safe, reported."""
from __future__ import annotations

import functools
import os
import threading
import time

import pytest

import app.resources as resources

APP = os.path.join(os.path.dirname(__file__), "..", "..", "app", "main.py")


@pytest.fixture
def fresh(monkeypatch):
    """No warm-up started yet in this process; the warm-up switched on."""
    monkeypatch.setattr(resources, "_warmup", None)
    monkeypatch.setenv(resources.WARMUP_ENV, "1")
    yield
    w = resources.current_warmup()
    if w is not None and w.thread is not None:
        w.thread.join(10)


def _counting_steps(gate: threading.Event | None = None):
    calls = {"a": 0, "b": 0}

    def a():
        calls["a"] += 1
        if gate is not None:
            gate.wait(10)

    def b():
        calls["b"] += 1

    return (("a", a), ("b", b)), calls


def test_warmup_starts_once_from_many_threads(fresh):
    gate = threading.Event()
    steps, calls = _counting_steps(gate)
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(resources.start_warmup(steps))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(w) for w in got}) == 1
    warm = got[0]
    assert not warm.finished and "Loading the models in the background" in warm.status_line()
    assert not warm.wait("a", timeout=0.05)  # still loading: a waiter blocks
    gate.set()
    assert warm.wait("a", timeout=10) and warm.wait("b", timeout=10)
    warm.thread.join(10)
    assert calls == {"a": 1, "b": 1}
    assert resources.start_warmup(steps) is warm  # a later call (another rerun, session) starts nothing
    assert calls == {"a": 1, "b": 1}
    assert warm.finished and warm.status_line().startswith("Models ready (2 of 2 loaded")


def test_a_failing_step_is_reported_and_the_others_still_load(fresh):
    def broken():
        raise RuntimeError("no such package")

    done = []
    warm = resources.start_warmup((("broken", broken), ("fine", lambda: done.append(1))))
    warm.thread.join(10)
    assert done == [1]
    assert "broken" in warm.failed and "no such package" in warm.failed["broken"]
    assert "Not loaded: broken" in warm.status_line()


def test_warmup_can_be_switched_off(monkeypatch):
    monkeypatch.setattr(resources, "_warmup", None)
    monkeypatch.setenv(resources.WARMUP_ENV, "0")
    assert resources.start_warmup((("x", lambda: None),)) is None
    assert resources.current_warmup() is None


def test_concurrent_first_loads_of_one_model_load_it_once():
    from audit_core.models import _one_load_at_a_time

    loads: list[str] = []

    @_one_load_at_a_time()
    @functools.lru_cache(maxsize=4)
    def load(name: str):
        loads.append(name)
        time.sleep(0.2)  # long enough for every thread to arrive while the first load runs
        return object()

    out: list = []
    threads = [threading.Thread(target=lambda: out.append(load("m"))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loads == ["m"] and len({id(o) for o in out}) == 1
    load("other")
    assert loads == ["m", "other"]


def test_app_says_the_models_are_loading(fresh, monkeypatch, tmp_path):
    from streamlit.testing.v1 import AppTest

    gate = threading.Event()
    steps, calls = _counting_steps(gate)
    monkeypatch.setattr(resources, "WARMUP_STEPS", steps)
    monkeypatch.setenv("RPA_AUDIT_DB", str(tmp_path / "audits.sqlite"))
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    captions = [str(c.value) for c in at.caption]
    assert any("Loading the models in the background" in c for c in captions), captions
    gate.set()
    resources.current_warmup().thread.join(10)
    at.run()
    assert any(c.startswith("Models ready") for c in (str(x.value) for x in at.caption))
    assert calls == {"a": 1, "b": 1}  # the rerun did not start it again


def test_models_already_in_memory_are_not_said_to_load_in_0_s():
    instant = resources.Warmup((("embedder", lambda: None), ("generator", lambda: None))).start()
    instant.thread.join(5)
    assert instant.status_line() == "Models ready (2 of 2 loaded; they were already in memory)."
    slow = resources.Warmup((("generator", lambda: time.sleep(1.1)),)).start()
    slow.thread.join(5)
    assert slow.status_line() == "Models ready (1 of 1 loaded in 1 s)."
