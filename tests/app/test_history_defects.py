"""History as a data owner uses it when something is off: two audits and a delete, a history file that is not
a database, a stored audit that was altered, an audit running while a past one is opened.

Each was reproduced in review: the wrong audit deleted, "this is a bug" for a damaged file (and Start still
enabled), a KeyError in Results for an altered summary, and Results showing another audit than the one
History said it had opened.
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from tests.app.test_app import APP, LONG_1, _saved_audit


def _app(db: Path):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    return at


def _run_ids(db: Path) -> set[str]:
    with sqlite3.connect(db) as con:
        return {r[0] for r in con.execute("SELECT id FROM runs")}


def _buttons(at) -> set[str]:
    return {b.key for b in at.button}


def test_a_delete_confirmation_goes_when_another_audit_is_selected_and_deletes_only_the_one_shown(
        tmp_path, monkeypatch):
    """Delete on one audit, then another picked: "Yes, delete" deleted the first while the second was shown."""
    db = tmp_path / "audits.sqlite"
    first = _saved_audit(db)
    time.sleep(1.1)  # the picker names audits by their start, to the second
    ids = {first, _saved_audit(db)}
    monkeypatch.setenv("RPA_AUDIT_DB", str(db))
    at = _app(db)
    asked = at.selectbox(key="history_run").value
    at.button(key="history_delete").click().run()
    assert "history_confirm_yes" in _buttons(at)
    (other,) = ids - {asked}
    at.selectbox(key="history_run").set_value(other).run()
    assert not at.exception
    assert "history_confirm_yes" not in _buttons(at)  # no confirmation left over for the audit no longer shown
    assert not [w.value for w in at.warning if w.value.startswith("Delete")]
    assert _run_ids(db) == ids

    at.button(key="history_delete").click().run()
    label = at.selectbox(key="history_run").format_func(other)
    (question,) = [w.value for w in at.warning if w.value.startswith("Delete")]
    assert "selected above" in question and label in question
    at.button(key="history_confirm_yes").click().run()
    assert not at.exception
    assert _run_ids(db) == {asked}  # the audit shown went, the one first asked about stayed


def _not_a_database(path: Path) -> None:
    path.write_bytes(b"this is not a database" * 100)


def _a_folder(path: Path) -> None:
    path.mkdir()


def _cut_short(path: Path) -> None:
    _saved_audit(path)
    for extra in ("-wal", "-shm"):
        Path(str(path) + extra).unlink(missing_ok=True)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("spoil", [_not_a_database, _a_folder, _cut_short])
def test_a_history_file_that_cannot_be_opened_is_named_with_what_to_do_and_start_waits_for_it(
        tmp_path, monkeypatch, spoil):
    """It was "Something went wrong in the History tab (DatabaseError); this is a bug", and Start stayed
    enabled and failed the same way."""
    db = tmp_path / "audits.sqlite"
    spoil(db)
    monkeypatch.setenv("RPA_AUDIT_DB", str(db))
    at = _app(db)
    at.text_area(key="pasted").input(LONG_1).run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert errors and not [e for e in errors if "bug" in e]
    assert all(str(db) in e and "RPA_AUDIT_DB" in e and "aside" in e for e in errors), errors
    assert at.button(key="start_audit").disabled

    db.rename(tmp_path / "audits-damaged.sqlite")  # what the message says to do; nothing of it is lost
    at.run()
    assert not at.exception and not [e.value for e in at.error if str(db) in e.value]
    assert not at.button(key="start_audit").disabled
    assert (tmp_path / "audits-damaged.sqlite").exists()


def _audit_with_rows(db: Path) -> str:
    """``_saved_audit``'s audit with its results also saved as they arrive, as the app saves them."""
    from audit_core.history import load_audit, result_recorder
    from audit_core.methods.base import MethodResult, Observation
    from audit_core.store import Store

    run_id = _saved_audit(db)
    store = Store(db)
    summary = load_audit(store, run_id)
    record = result_recorder(store, run_id)
    for doc_id, per in summary["results"].items():
        for method, res in per.items():
            record(doc_id, method, Observation(method, doc_id), MethodResult(**res))
    store.close()
    return run_id


@pytest.mark.parametrize("alter", [
    lambda d: d["verdicts"][0].pop("reason"),
    lambda d: d["verdicts"][0].update(verdict="weird"),
    lambda d: d.update(documents=[{"id": "grandmother-bees"}]),
    lambda d: d["results"].update({"grandmother-bees": ["srag"]}),
    lambda d: d["calibrations"].update(srag=None),
    lambda d: d.update(not_run=["srag"]),
    lambda d: d.update(what_this_shows=5),
], ids=["no reason", "unknown call", "document without text", "results not a mapping", "calibration none",
        "not_run a list", "statement a number"])
def test_an_altered_stored_audit_is_listed_damaged_and_opens_from_its_rows(tmp_path, monkeypatch, alter):
    """An altered summary was listed as finished, and opening it broke the Results tab ("this is a bug")."""
    db = tmp_path / "audits.sqlite"
    run_id = _audit_with_rows(db)
    with sqlite3.connect(db) as con:
        (text,) = con.execute("SELECT summary FROM runs WHERE id=?", (run_id,)).fetchone()
        summary = json.loads(text)
        alter(summary)
        con.execute("UPDATE runs SET summary=? WHERE id=?", (json.dumps(summary), run_id))
    monkeypatch.setenv("RPA_AUDIT_DB", str(db))
    at = _app(db)
    (table,) = [d.value for d in at.dataframe if "status" in d.value.columns]
    assert list(table["status"]) == ["damaged"]
    at.button(key="history_open").click().run()
    assert not at.exception and not at.error
    assert any("damaged" in w.value and "rebuilt from the rows" in w.value for w in at.warning)
    verdicts = next(d.value for d in at.dataframe if "verdict" in d.value.columns)
    assert list(verdicts["document"]) == ["grandmother-bees", "knee-exercises"]


def test_open_in_results_waits_while_results_shows_a_running_audit(tmp_path, monkeypatch):
    """History said "Opened: see tab 3 Results" while Results went on showing the running audit, whose
    result then replaced the opened one when it ended."""
    import streamlit as st

    from app.jobs import AuditJob, job_registry
    from audit_core.audit import AUDIT_STAGE

    db = tmp_path / "audits.sqlite"
    _saved_audit(db)
    monkeypatch.setenv("RPA_AUDIT_DB", str(db))
    st.cache_resource.clear()  # the job registry of earlier tests
    stop = threading.Event()
    job = AuditJob("run-history-open-0001", 20)
    job.thread = threading.Thread(target=stop.wait, daemon=True)
    job.thread.start()
    try:
        job.progress(AUDIT_STAGE, 1, 20)
        job.note_partial({"verdicts": [{"doc_id": "d0", "verdict": "member", "reason": "", "results": {}}],
                          "documents": [{"id": "d0", "text": "x"}]})
        job_registry().add(job)
        at = _app(db)
        assert at.button(key="history_open").disabled
        assert any("Tab 3 Results shows the running audit until it ends" in c.value for c in at.caption)
        assert not any(s.value.startswith("Opened") for s in at.success)
    finally:
        stop.set()
        job.thread.join()
        st.cache_resource.clear()


def test_srag_words_that_are_not_records_show_no_table_rather_than_break_the_results_tab(tmp_path, monkeypatch):
    """The PDF already skipped such entries; the Results tab called .get on each (AttributeError)."""
    db = tmp_path / "audits.sqlite"
    run_id = _saved_audit(db)
    with sqlite3.connect(db) as con:
        (text,) = con.execute("SELECT summary FROM runs WHERE id=?", (run_id,)).fetchone()
        summary = json.loads(text)
        summary["results"]["grandmother-bees"]["srag"]["evidence"]["words"] = "abc"
        con.execute("UPDATE runs SET summary=? WHERE id=?", (json.dumps(summary), run_id))
    monkeypatch.setenv("RPA_AUDIT_DB", str(db))
    at = _app(db)
    at.button(key="history_open").click().run()
    assert not at.exception and not at.error
    assert any(m.value.startswith("**S-RAG: probed words") for m in at.markdown)


def test_a_history_file_that_breaks_while_in_use_is_named_not_an_unexpected_error(tmp_path, monkeypatch):
    from app.resources import plain_error

    monkeypatch.setenv("RPA_AUDIT_DB", str(tmp_path / "audits.sqlite"))
    said = plain_error(sqlite3.DatabaseError("database disk image is malformed"))
    assert str(tmp_path / "audits.sqlite") in said and "RPA_AUDIT_DB" in said and "unexpected" not in said
