"""The Run tab's audit jobs as a data owner meets them (issue 20 points 4 and 5, issue 18 point 4).

The demo target is replaced by a fast in-process fake that counts every
request it is sent and can hold one request until the test lets it go; the
shadow preparation by a fixed calibration. Everything else is the real app:
the job registry, the store and its CachingTarget, run_audit, the tabs.
"""
from __future__ import annotations

import os
import threading
import time

import pytest

from audit_core.methods.base import Calibration
from audit_core.target.base import ChatRequest, Completion, Target, TokenLogprob, Usage
from tests.reliability.support import make_documents

APP = os.path.join(os.path.dirname(__file__), "..", "..", "app", "main.py")
N_DOCS = 5
HOLD_AT = 3  # the third probe waits for the test


class HeldDemo(Target):
    """An in-process stand-in for the demo RAG: says Yes with logprobs, counts probes, holds one."""

    name = "rag:fake-model:none:0123456789ab"

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []
        self.held = threading.Event()  # set when a probe is waiting
        self.release = threading.Event()
        self._lock = threading.Lock()

    def answer_style(self):
        """Known, as the real demo target knows its own (``RagSystem.answer_style``): no style probe is sent."""
        from audit_core.target.style import StyleFinding

        return StyleFinding("completion", "the in-process demo renders its prompts in completion style")

    def complete(self, request: ChatRequest) -> Completion:
        answer = Completion("Yes", [TokenLogprob("Yes", -0.1, [("Yes", -0.1), ("No", -2.5)])], Usage(10, 1), "m")
        if request.messages[-1][1] == "Say OK.":  # the capability check
            return answer
        with self._lock:
            self.sent.append(request.key())
            n = len(self.sent)
        if n == HOLD_AT:
            self.held.set()
            self.release.wait(60)
        self.account.record(Usage(10, 1))
        return answer


def _prepare(methods, shadow, progress=None):
    if progress:
        progress("rag_mia: probing shadow members", 4, 4)

    class Prep:
        calibrations = {m.name: Calibration(m.name, 0.5, [0.9, 0.8, 0.7], [0.2, 0.3, 0.85], shadow_auc=0.9)
                        for m in methods}

    return Prep()


@pytest.fixture
def demo(tmp_path, monkeypatch):
    import streamlit as st

    import shadow.demo
    import shadow.prepare

    fake = HeldDemo()
    monkeypatch.setenv("RPA_AUDIT_DB", str(tmp_path / "audits.sqlite"))
    monkeypatch.setattr(shadow.demo, "demo_target", lambda *a, **k: fake)
    monkeypatch.setattr(shadow.prepare, "prepare_shadow", _prepare)
    st.cache_resource.clear()  # the demo target, the store and the job registry of earlier tests
    yield fake
    fake.release.set()
    st.cache_resource.clear()


def _open_app():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def _start(at) -> None:
    at.multiselect(key="methods").set_value(["rag_mia"]).run()
    at.text_area(key="pasted").input("\n\n".join(t for _, t in make_documents(N_DOCS))).run()
    at.button(key="start_audit").click().run()
    assert not at.exception, at.exception


def _texts(at) -> str:
    parts = [str(e.value) for kind in ("markdown", "info", "warning", "success", "caption", "subheader")
             for e in getattr(at, kind)]
    parts += [str(p.proto.text) for p in at.get("progress")]
    return "\n".join(parts)


def _wait_for_result(at, done=lambda r: True, timeout_s: float = 60) -> dict:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        at.run()
        assert not at.exception, at.exception
        try:
            result = at.session_state["result"]
        except KeyError:
            result = None
        if result is not None and done(result):
            return result
        time.sleep(0.3)
    raise AssertionError("the audit did not finish:\n" + _texts(at))


def test_rerun_after_cancel_sends_only_what_was_never_answered(demo):
    from audit_core.store import Store

    at = _open_app()
    _start(at)
    assert demo.held.wait(30)
    at.run()
    assert "Audit in progress" in _texts(at)
    at.button(key="cancel_audit").click().run()
    demo.release.set()
    first = _wait_for_result(at)
    assert first["cancelled"] and len(first["verdicts"]) == HOLD_AT
    before = list(demo.sent)
    assert len(before) == HOLD_AT

    at.button(key="start_audit").click().run()
    second = _wait_for_result(at, done=lambda r: not r["cancelled"])
    again = demo.sent[len(before):]
    assert not second["cancelled"] and len(second["verdicts"]) == N_DOCS
    # the promise of the banner: every answer already received is re-used
    assert len(again) == N_DOCS - HOLD_AT and not set(again) & set(before)
    assert second["account"]["queries"] == N_DOCS - HOLD_AT
    # the same run was resumed: History keeps one entry, now finished
    runs = Store(os.environ["RPA_AUDIT_DB"]).list_runs()
    assert [r.status for r in runs] == ["finished"]


def test_a_reloaded_page_reattaches_to_the_running_audit(demo):
    at = _open_app()
    _start(at)
    assert demo.held.wait(30)
    # a reload is a new session: no session state, the audit thread still running
    fresh = _open_app()
    shown = _texts(fresh)
    assert "Audit in progress" in shown and f"documents: {HOLD_AT - 1} / {N_DOCS}" in shown
    # results as they come: the documents decided so far are in the Results tab already
    assert f"{HOLD_AT - 1} of {N_DOCS} document(s) decided so far" in shown
    verdicts = next(d.value for d in fresh.dataframe if "verdict" in d.value.columns)
    assert len(verdicts) == HOLD_AT - 1
    # History offers the cancel too; the Run tab's cancel is used here
    assert "An audit is running" in shown
    fresh.button(key="cancel_audit").click().run()
    demo.release.set()
    result = _wait_for_result(fresh)
    assert result["cancelled"] and len(result["verdicts"]) == HOLD_AT
    assert "Audit cancelled" in " ".join(s.value for s in fresh.success)


def _checked_without_signal(monkeypatch):
    """The app after "Check calibration" of RAG-MIA on a shadow without signal (AUC 0.52): its "Run anyway"
    box is drawn."""
    import shadow.prepare

    def flat(methods, shadow_cfg, progress=None):
        prep = _prepare(methods, shadow_cfg, progress)
        for cal in prep.calibrations.values():
            cal.shadow_auc = 0.52
        return prep

    monkeypatch.setattr(shadow.prepare, "prepare_shadow", flat)
    at = _open_app()
    at.multiselect(key="methods").set_value(["rag_mia"]).run()
    at.text_area(key="pasted").input("\n\n".join(t for _, t in make_documents(N_DOCS))).run()
    at.button(key="check_calibration").click().run()
    deadline = time.time() + 30
    while not [c for c in at.checkbox if c.key == "insist_rag_mia"] and time.time() < deadline:
        time.sleep(0.3)
        at.run()
    return at


def test_a_method_without_signal_is_announced_before_the_run_and_sends_nothing(demo, monkeypatch):
    demo.release.set()  # nothing is held in this test
    at = _checked_without_signal(monkeypatch)
    warned = " ".join(w.value for w in at.warning)
    assert "RAG-MIA: no signal" in warned and "0.52" in warned and "None of its queries will be sent" in warned
    assert demo.sent == []  # announced before any query

    at.button(key="start_audit").click().run()
    result = _wait_for_result(at)
    assert demo.sent == [] and result["account"]["queries"] == 0
    table = next(d.value for d in at.dataframe if "verdict" in d.value.columns)
    assert set(table["verdict"]) == {"inconclusive"}
    assert not any("agree" in r for r in table["reason"])
    assert "none of its queries were sent" in " ".join(w.value for w in at.warning)

    # the user insists: the queries go out, the method still does not vote
    at.checkbox(key="insist_rag_mia").check().run()
    at.button(key="start_audit").click().run()
    result = _wait_for_result(at, done=lambda r: r["account"]["queries"] > 0)
    assert len(demo.sent) == N_DOCS
    assert all(v["verdict"] == "inconclusive" for v in result["verdicts"])
    assert all(rs["rag_mia"]["score"] is not None for rs in result["results"].values())


def test_run_anyway_stays_ticked_through_a_cancelled_run_so_start_resumes_it(demo, monkeypatch):
    """The box is not drawn while an audit runs, and Streamlit dropped it: Start after a Cancel began another
    audit, without the method the user had insisted on, that sent nothing (a review of the app, session 61)."""
    at = _checked_without_signal(monkeypatch)
    at.checkbox(key="insist_rag_mia").check().run()
    at.button(key="start_audit").click().run()
    assert demo.held.wait(30)
    at.run()
    at.button(key="cancel_audit").click().run()
    demo.release.set()
    assert _wait_for_result(at)["cancelled"]
    assert at.checkbox(key="insist_rag_mia").value is True
    before = len(demo.sent)
    at.button(key="start_audit").click().run()
    result = _wait_for_result(at, done=lambda r: not r["cancelled"])
    assert len(demo.sent) - before == N_DOCS - before  # resumed: only the documents never answered
    assert all(rs["rag_mia"]["score"] is not None for rs in result["results"].values())


def test_a_cancelled_calibration_check_says_so_and_no_unexpected_error(demo, monkeypatch):
    """Cancel during "Check calibration" read "The audit stopped on an unexpected error (Cancelled)": no audit ran,
    and nothing unexpected happened (a review of the app, session 61)."""
    import shadow.prepare

    def slow(methods, shadow_cfg, progress=None):
        for i in range(400):
            if progress:
                progress("rag_mia: probing shadow members", i, 400)
            time.sleep(0.05)
        return _prepare(methods, shadow_cfg, progress)

    monkeypatch.setattr(shadow.prepare, "prepare_shadow", slow)
    demo.release.set()
    at = _open_app()
    at.multiselect(key="methods").set_value(["rag_mia"]).run()
    at.text_area(key="pasted").input("\n\n".join(t for _, t in make_documents(N_DOCS))).run()
    at.button(key="check_calibration").click().run()
    time.sleep(1)
    at.run()
    at.button(key="cancel_audit").click().run()
    deadline = time.time() + 30
    while not any("cancelled" in i.value for i in at.info) and time.time() < deadline:
        time.sleep(0.3)
        at.run()
    said = " ".join(i.value for i in at.info) + " ".join(e.value for e in at.error)
    assert "Calibration check cancelled" in said and "unexpected" not in said and demo.sent == []


def test_controls_marked_in_the_csv_are_probed_after_the_documents_and_tested(demo):
    """Issue 17 point 3(a) in the app: a 'control' column (or a second upload) gives the collection test."""
    import csv
    import io

    demo.release.set()  # nothing is held in this test
    rows = make_documents(N_DOCS + 3)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["id", "text", "Control"])
    for i, (doc_id, text) in enumerate(rows):
        w.writerow([doc_id, text, "yes" if i >= N_DOCS else ""])
    at = _open_app()
    at.multiselect(key="methods").set_value(["rag_mia"]).run()
    at.radio(key="docs_source").set_value("Upload a CSV").run()
    at.file_uploader(key="csv_file").set_value(("mine.csv", buf.getvalue().encode(), "text/csv")).run()
    assert not at.exception, at.exception
    assert at.selectbox(key="text_column").value == "text"  # the control column is never a candidate
    assert "Control" not in at.selectbox(key="id_column").options
    shown = _texts(at)
    assert "3 control(s) ready" in " ".join(s.value for s in at.success)
    assert f"{N_DOCS} document(s) ready" in " ".join(s.value for s in at.success)
    assert "**Controls:** 3" in shown and "The 3 controls add at most 3 queries" in shown

    at.button(key="start_audit").click().run()
    result = _wait_for_result(at)
    assert len(result["verdicts"]) == N_DOCS  # controls get no verdict of their own
    assert len(demo.sent) == N_DOCS + 3  # one RAG-MIA probe each, controls after the documents
    coll = result["collection"]
    assert coll["n_documents"] == N_DOCS and coll["n_controls"] == 3 and coll["controls_kind"] == "declared"
    assert set(coll["control_scores"]) == {f"control-{doc_id}" for doc_id, _ in rows[N_DOCS:]}
    # the Results tab opens with the collection's line (a p-value, or why there is none)
    first = next(a.value for a in list(at.success) + list(at.info) if str(a.value).startswith("Your collection"))
    assert f"from {N_DOCS} documents against 3 controls" in first or "no collection-level test" in first
    assert any(str(e.label).startswith("What each method's calls are worth") for e in at.expander)

    # a second upload adds to them
    extra = "id,text\n" + "\n".join(f'x{i},"{t.replace("Record", "Entry")}"' for i, (_, t) in enumerate(rows[:2]))
    at.file_uploader(key="controls_file").set_value(("never.csv", extra.encode(), "text/csv")).run()
    assert "5 control(s) ready" in " ".join(s.value for s in at.success)


@pytest.mark.parametrize("interruption", ["StopException", "RerunException"])
def test_a_start_interrupted_while_the_demo_loads_does_not_leave_it_busy(demo, monkeypatch, interruption):
    """Found in the browser walk: Start pressed while the models still loaded, then the page was closed.

    Streamlit stops (page closed) or reruns (another widget used) the script by raising a
    BaseException, which `except Exception` let through with the demo lock still held: every
    later Start said "The demo target is busy with another audit" until the app was restarted.
    """
    import shadow.demo
    from streamlit.runtime.scriptrunner_utils import exceptions

    calls = []

    def loads_then_interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 1:  # the first load is cut short as Streamlit cuts a script run
            exc = getattr(exceptions, interruption)
            raise exc(None) if interruption == "RerunException" else exc()
        return demo

    monkeypatch.setattr(shadow.demo, "demo_target", loads_then_interrupted)
    at = _open_app()
    at.multiselect(key="methods").set_value(["rag_mia"]).run()
    at.text_area(key="pasted").input("\n\n".join(t for _, t in make_documents(N_DOCS))).run()
    at.button(key="start_audit").click().run()
    assert len(calls) == 1
    at.run()
    assert "busy" not in " ".join(str(e.value) for e in at.error)
    demo.release.set()  # the fake holds its third probe; let it go
    at.button(key="start_audit").click().run()
    assert not any("busy" in str(e.value) for e in at.error), [e.value for e in at.error]
    result = _wait_for_result(at)
    assert len(result["verdicts"]) == N_DOCS and len(calls) == 2
