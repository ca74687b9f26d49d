"""A running audit as the page shows it: the tabs stay put, one reading of its progress, the sidebar's note.

Found in a browser walk: pressing Start sent the user from tab 2 Run back to tab 1 (the banner was inserted
above the tabs); the banner's time left and the Run tab's disagreed; after a reload the sidebar showed its
defaults as if they were the running audit's.
"""
from __future__ import annotations

import itertools
import threading

import pytest

from app.jobs import AuditJob, job_registry
from audit_core.audit import AUDIT_STAGE
from audit_core.progress import ProgressClock
from tests.app.test_app import APP


@pytest.fixture
def running(tmp_path, monkeypatch):
    """A job entered in the app's registry whose thread runs until the test ends (no audit behind it)."""
    import streamlit as st

    monkeypatch.setenv("RPA_AUDIT_DB", str(tmp_path / "audits.sqlite"))
    st.cache_resource.clear()  # the job registry of earlier tests
    stop = threading.Event()
    jobs: list[AuditJob] = []

    def make(run_id: str = "run-view-0001", n: int = 20, **kw) -> AuditJob:
        job = AuditJob(run_id, n, **kw)
        job.thread = threading.Thread(target=stop.wait, daemon=True)
        job.thread.start()
        jobs.append(job)
        return job

    yield make
    stop.set()
    st.cache_resource.clear()


def _app():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=120)
    return at


def _main_shape(at) -> list[str]:
    """The kinds of the page's top-level elements, in order (what decides where st.tabs sits)."""
    return [getattr(node, "type", type(node).__name__) for node in at.main.children.values()]


def test_a_running_audit_does_not_move_the_tabs_so_the_selected_tab_stays(running):
    """Streamlit keeps the selected tab only while the tabs keep their place in the page: a banner inserted
    above them on Start moved them, and the browser showed tab 1 again."""
    at = _app()
    at.run()
    assert not at.exception
    idle = _main_shape(at)
    job = running()
    job.progress(AUDIT_STAGE, 3, 20)
    job_registry().add(job)
    at.run()
    assert not at.exception
    busy = _main_shape(at)
    assert busy == idle  # the same elements above the tabs, the tabs at the same index
    tabs_at = busy.index("tab_container")
    banner = list(at.main.children.values())[tabs_at - 1]
    assert "An audit is running (documents: 3 / 20" in " ".join(i.value for i in banner.info)


def test_the_banner_and_the_run_tab_say_the_same_time_left_from_one_reading(running):
    """The banner was drawn by the page run and the Run tab by its fragment, each reading the job's clock: their
    time left disagreed. Here the clock moves a minute at every reading, so two readings never agree."""
    ticks = itertools.count(0, 60)
    job = running(clock=ProgressClock(clock=lambda: float(next(ticks))))
    job.progress(AUDIT_STAGE, 0, 20)
    job.progress(AUDIT_STAGE, 2, 20)
    job_registry().add(job)
    at = _app()
    at.run()
    assert not at.exception
    bar = next(p.proto.text for p in at.get("progress") if p.proto.text.startswith("documents: 2 / 20"))
    assert "left" in bar
    banner = next(i.value for i in at.info if i.value.startswith("An audit is running"))
    assert f"({bar})" in banner


def test_the_history_notice_gives_no_time_left_that_would_go_stale(running):
    job = running()
    job.progress(AUDIT_STAGE, 3, 20)
    job_registry().add(job)
    at = _app()
    at.run()
    notice = [i.value for i in at.info if i.value.startswith("An audit is running (documents: 3 / 20)")]
    assert notice and "about" not in notice[0] and "measuring" not in notice[0]


def _summary(methods: list[str]) -> dict[str, str]:
    from app.sidebar import DEMO, Settings
    from shadow.prepare import ShadowConfig

    return Settings(DEMO, "", "", methods, ShadowConfig(n_members=60, n_nonmembers=60,
                                                        n_per_class_generative=30)).summary()


def _sidebar_infos(at) -> str:
    return " ".join(i.value for i in at.sidebar.info)


def test_a_reloaded_page_says_which_settings_the_running_audit_uses_where_the_sidebar_differs(running):
    at = _app()
    at.run()
    shown = at.multiselect(key="methods").value
    assert shown and "verbatim" not in shown
    job = running(settings=_summary(["verbatim"]))
    job_registry().add(job)
    at.run()  # as a reload finds it: the sidebar keeps its own choice, and says what the audit runs with
    assert not at.exception
    assert at.multiselect(key="methods").value == shown
    said = _sidebar_infos(at)
    assert "The running audit uses other settings than those below (methods: Verbatim continuation)" in said
    assert "the settings below are for your next audit" in said
    at.multiselect(key="methods").set_value(["verbatim"]).run()  # the same settings: nothing to say
    assert "other settings" not in _sidebar_infos(at)


def test_the_progress_redraw_names_only_the_last_documents_answered(running):
    """Every redraw (once a second) rebuilt and sent the whole list of answered documents."""
    job = running(n=5000)
    job.progress(AUDIT_STAGE, 5000, 5000)
    for i in range(5000):
        job.note_result(f"doc-{i}", "rag_mia")
        job.note_result(f"doc-{i}", "mba")
    job_registry().add(job)
    at = _app()
    at.run()
    answered = next(c.value for c in at.caption if c.value.startswith("Results so far"))
    # one result per (document, method), not per query: they were called "probes", the app's word for a query
    assert answered.startswith("Results so far: 10000 (one per document and method); the last: doc-4995 "
                               "(RAG-MIA, MBA);")
    assert answered.endswith("doc-4999 (RAG-MIA, MBA)") and "doc-4994 " not in answered


def test_the_app_turns_off_streamlits_full_garbage_collection_after_each_run(running):
    """Streamlit collected all garbage after every run, the progress redraw's included: 0.6-0.7 s of the
    interpreter lock each second with the audit's models in memory, which stalled the audit while a page was
    open."""
    from streamlit import config

    before = config.get_option("runner.postScriptGC")
    config.set_option("runner.postScriptGC", True)  # Streamlit's default
    try:
        at = _app()
        at.run()
        assert not at.exception
        assert config.get_option("runner.postScriptGC") is False
    finally:
        config.set_option("runner.postScriptGC", before)


def test_after_the_first_verdict_page_reruns_wait_for_three_times_the_pages_own_cost():
    """Each decided document reran the whole page (every tab; about a second with thousands of verdicts), so
    with a fast target the page kept the interpreter the audit needs busy: reruns are paced by their cost."""
    from app.tab_run import PageReruns

    now = [100.0]
    state: dict = {}
    clock = lambda: now[0]  # noqa: E731
    PageReruns.page_starts(state, clock)
    now[0] += 2.0  # the page drew its tabs for 2 s before the view's first run
    reruns = PageReruns(state, clock)
    reruns.measure()
    assert state["page_run_cost_s"] == 2.0
    assert reruns.due(1)  # the first verdict: at once
    state["live_decided"] = 1
    assert not reruns.due(1)  # nothing new
    now[0] += 5.9
    assert not reruns.due(2)  # under 3 x 2 s since the page run ended
    reruns.measure()  # the view's later (fragment) runs measure nothing
    assert state["page_run_cost_s"] == 2.0
    now[0] += 0.1
    assert reruns.due(2)
    # a cheap page reruns for every newly decided document, as before
    PageReruns.page_starts(state, clock)
    now[0] += 0.01
    PageReruns(state, clock).measure()
    state["live_decided"] = 2
    now[0] += 0.05
    assert PageReruns(state, clock).due(3)
