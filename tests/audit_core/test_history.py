"""Saving audits to the store and loading them back as the same dict."""
from __future__ import annotations

import json

from audit_core.documents import Document
from audit_core.history import history_rows, load_audit, mark_failed, result_recorder, save_audit, start_run
from audit_core.methods.base import Calibration, MethodResult, Observation
from audit_core.store import Store
from audit_core.verdict import VerdictConfig, decide

DOCS = [Document("a", "alpha " * 30), Document("b", "beta " * 30)]
CONFIG = {"methods": ["srag", "mba"], "shadow": {"n_members": 20}, "method_params": {},
          "verdict": {"retrieval_as_sent": True}}


def _results():
    return {
        "a": {"srag": MethodResult("srag", "a", 0.91, True, evidence={"words": [{"word": "alpha", "prob": 0.8}]}),
              "mba": MethodResult("mba", "a", 0.8, True)},
        "b": {"srag": MethodResult("srag", "b", 0.1, False), "mba": MethodResult("mba", "b", None, None, reason="x")},
    }


def _audit_dict(cancelled: bool = False) -> dict:
    from audit_core.audit import AuditResult

    res = _results()
    obs = {d: {m: Observation(m, d, requests=[{"q": 1}], responses=[None], errors=["unreachable: down"])
               for m in rs} for d, rs in res.items()}
    return AuditResult(
        target="http://127.0.0.1:1/v1 · m", created="2025-01-01T00:00:00+00:00", config=CONFIG,
        capabilities={"reachable": True, "logprobs": True, "max_top_logprobs": 20, "model": "m", "detail": ""},
        verdicts=[decide(d, list(rs.values()), VerdictConfig.from_json(CONFIG["verdict"])) for d, rs in res.items()], results=res, observations=obs,
        calibrations={"srag": Calibration("srag", 0.5, [0.9, 0.8], [0.1, 0.2], shadow_auc=0.93)},
        not_run={}, account={"queries": 4}, documents=DOCS, cancelled=cancelled,
    ).to_json()


def test_saved_audit_loads_back_as_the_same_dict(tmp_path):
    store = Store(tmp_path / "h.sqlite")
    d = _audit_dict()
    run_id = start_run(store, DOCS, d["target"], CONFIG)
    save_audit(store, run_id, d)
    store.close()
    again = Store(tmp_path / "h.sqlite")
    assert load_audit(again, run_id) == json.loads(json.dumps(d))
    [row] = history_rows(again)
    assert row["status"] == "finished" and row["member"] == 1 and row["not found"] == 1
    assert row["documents"] == 2
    assert row["methods"] == "S-RAG, MBA"  # the labels users know, not the registry's names
    assert list(row)[1:6] == ["created", "documents", "member", "not found", "inconclusive"]  # first in view


def test_cancelled_audit_is_marked_cancelled(tmp_path):
    store = Store(tmp_path / "h.sqlite")
    run_id = start_run(store, DOCS, "t", CONFIG)
    save_audit(store, run_id, _audit_dict(cancelled=True))
    assert history_rows(store)[0]["status"] == "cancelled"


def test_an_audit_stopped_by_a_fatal_target_error_is_marked_stopped_and_resumed_when_run_again(tmp_path):
    """Saved as 'finished' it could not be resumed, so running it again after the fix asked everything again."""
    from audit_core.history import resume_or_start_run

    store = Store(tmp_path / "h.sqlite")
    run_id = start_run(store, DOCS, "http://127.0.0.1:1/v1 · m", CONFIG)
    d = _audit_dict()
    d["failures"] = {"stopped": "authentication failed: 401", "documents_audited": 2}
    save_audit(store, run_id, d)
    assert history_rows(store)[0]["status"] == "stopped"
    assert resume_or_start_run(store, DOCS, "http://127.0.0.1:1/v1 · m", CONFIG) == (run_id, True)
    save_audit(store, run_id, _audit_dict())
    assert history_rows(store)[0]["status"] == "finished"
    assert resume_or_start_run(store, DOCS, "http://127.0.0.1:1/v1 · m", CONFIG)[1] is False


def test_failed_run_is_rebuilt_from_rows_saved_as_they_arrived(tmp_path):
    store = Store(tmp_path / "h.sqlite")
    run_id = start_run(store, DOCS, "http://u:pw@host/v1 · m", CONFIG)
    record = result_recorder(store, run_id)
    for m, r in _results()["a"].items():
        record("a", m, Observation(m, "a"), r)
    mark_failed(store, run_id, "the target went away")
    d = load_audit(store, run_id)
    # failed, not cancelled by its user: the report must not say the user chose to stop it
    assert d["rebuilt_from_rows"] and not d["cancelled"] and d["failures"]["stopped"] == "the target went away"
    assert [v["doc_id"] for v in d["verdicts"]] == ["a"]  # b was never answered
    assert d["verdicts"][0]["verdict"] == "member"
    assert d["documents"] == [{"id": "a", "text": DOCS[0].text}]
    assert "pw" not in d["target"]
    row = history_rows(store)[0]
    assert row["status"] == "failed" and row["error"] == "the target went away"


def test_history_names_the_demo_target_as_the_user_knows_it(tmp_path):
    store = Store(tmp_path / "h.sqlite")
    start_run(store, DOCS, "rag:gemma-3-270m:none:0123abcd", CONFIG)
    start_run(store, DOCS, "http://127.0.0.1:9/v1 · m", CONFIG)
    targets = {row["target"] for row in history_rows(store)}
    assert targets == {"demo target", "http://127.0.0.1:9/v1 · m"}


def test_a_resumed_audit_keeps_its_first_start_and_the_report_says_when_it_resumed(tmp_path):
    from audit_core import report
    from audit_core.history import resume_or_start_run

    store = Store(tmp_path / "h.sqlite")
    run_id = start_run(store, DOCS, "t", CONFIG)
    save_audit(store, run_id, _audit_dict(cancelled=True))
    again, resumed = resume_or_start_run(store, DOCS, "t", CONFIG)
    assert (again, resumed) == (run_id, True)
    first = store.get_run(run_id).created[:19]
    part = {**_audit_dict(), "created": "2099-01-01T10:00:00+00:00", "finished": "2099-01-01T10:05:00+00:00"}
    saved = save_audit(store, run_id, part, resumed)
    assert saved["created"].startswith(first) and saved["resumed"] == "2099-01-01T10:00:00+00:00"
    assert load_audit(store, run_id)["created"] == saved["created"]
    from tests.audit_core.test_report import _pages

    text = _pages(report.pdf_report(saved))[0]
    assert f"started {saved['created']}" in text and "resumed 2099-01-01T10:00:00+00:00 (5 min 0 s from there)" in text
    # a run that was not resumed keeps the start run_audit gave it
    fresh = start_run(store, DOCS, "t2", CONFIG)
    assert save_audit(store, fresh, part)["created"] == "2099-01-01T10:00:00+00:00"


def test_a_document_cut_off_mid_way_is_not_cleared_by_the_methods_that_came_first(tmp_path):
    """Rebuilt from its rows, a crashed audit called a document "not found" on S-RAG alone, MBA never having run."""
    store = Store(tmp_path / "h.sqlite")
    run_id = start_run(store, DOCS, "t", CONFIG)
    record = result_recorder(store, run_id)
    for m, r in _results()["a"].items():
        record("a", m, Observation(m, "a"), r)
    record("b", "srag", Observation("srag", "b"), MethodResult("srag", "b", 0.1, False))  # then it crashed
    mark_failed(store, run_id, "killed")
    v = {x["doc_id"]: x for x in load_audit(store, run_id)["verdicts"]}
    assert v["a"]["verdict"] == "member"
    assert v["b"]["verdict"] == "inconclusive" and "stopped before mba probed this document" in v["b"]["reason"]


def test_deleting_all_history_also_deletes_the_questions_made_from_the_documents(tmp_path, monkeypatch):
    """Interrogation's question cache quoted the documents ("Was Alice ... diagnosed with ...?") after the delete."""
    from audit_core.history import delete_all_history
    from audit_core.io import write_private_atomic

    monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path))
    store = Store(tmp_path / "audits.sqlite")
    start_run(store, DOCS, "t", CONFIG)
    q = write_private_atomic(tmp_path / "questions" / "k.json", '{"questions": ["Was Alice diagnosed in 2019?"]}')
    assert delete_all_history(store) and not q.exists()
    # a store elsewhere (a test's, a --store of the CLI) leaves the app's cache alone
    q = write_private_atomic(tmp_path / "questions" / "k.json", "{}")
    other = Store(tmp_path / "elsewhere" / "s.sqlite")
    delete_all_history(other)
    assert q.exists()


def test_an_audit_another_live_process_runs_is_neither_joined_nor_deleted(tmp_path):
    """A second process joined a live run (both sent its queries); the app deleted it under a CLI audit."""
    import subprocess
    import sys

    from audit_core.history import delete_all_history, delete_audit, resume_or_start_run

    store = Store(tmp_path / "h.sqlite")
    run_id, resumed = resume_or_start_run(store, DOCS, "t", CONFIG)
    assert not resumed and resume_or_start_run(store, DOCS, "t", CONFIG) == (run_id, True)  # this process: resumed
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        import socket

        store._transaction([("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                             (f"lease:{run_id}", f"{socket.gethostname()}:{other.pid}"))])
        again, resumed = resume_or_start_run(store, DOCS, "t", CONFIG)
        assert again != run_id and not resumed  # a run of its own
        for delete in (lambda: delete_audit(store, run_id), lambda: delete_all_history(store)):
            try:
                delete()
                raise AssertionError("deleted an audit another process is running")
            except ValueError as exc:
                assert "another program" in str(exc)
    finally:
        other.kill()
        other.wait()
    assert resume_or_start_run(store, DOCS, "t", CONFIG)[1]  # its process gone: resumable again



def test_a_damaged_run_stays_listed_openable_and_deletable_and_blocks_no_new_audit(tmp_path):
    """One run whose summary was cut short made the History tab fail (JSONDecodeError) and every new audit
    fail to start ("A setting is not valid: Expecting ',' delimiter")."""
    import sqlite3

    from audit_core.history import resume_or_start_run

    path = tmp_path / "h.sqlite"
    store = Store(path)
    rec = result_recorder(store, stopped := start_run(store, DOCS, "t", CONFIG))
    for doc, methods in _results().items():
        for m, res in methods.items():
            rec(doc, m, Observation(m, doc), res)
    mark_failed(store, stopped, "killed")
    done = start_run(store, DOCS, "t", CONFIG)
    save_audit(store, done, _audit_dict())
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE runs SET summary=? WHERE id=?", ('{"verdicts": [{"doc_id": "d2"', done))
        db.execute("UPDATE results SET result='{broken' WHERE run_id=? AND doc_id='b'", (stopped,))
    store = Store(path)
    rows = {r["id"]: r for r in history_rows(store)}
    assert rows[done]["status"] == "damaged" and "summary could not be read" in rows[done]["error"]
    assert rows[stopped]["status"] == "failed"  # its run row reads; only results are damaged
    opened = load_audit(store, done)  # rebuilt from the rows that read
    assert [v["doc_id"] for v in opened["verdicts"]] == []  # this finished run kept no rows: nothing to show
    partial = load_audit(store, stopped)
    assert [v["doc_id"] for v in partial["verdicts"]] == ["a"]
    run_id, resumed = resume_or_start_run(store, DOCS, "t", CONFIG)  # the damaged run is not resumed
    assert not resumed and run_id not in (done, stopped)
    assert store.delete_run(done) and done not in {r["id"] for r in history_rows(store)}


def test_a_member_call_cut_off_before_a_method_that_votes_first_is_not_confirmed(tmp_path):
    """Methods run in the order chosen (``--method mba,srag``): a crash after MBA's member call, before S-RAG (which
    votes first) probed the document, had rebuilt as "member", though S-RAG might have scored it below its member
    threshold (rule R7)."""
    store = Store(tmp_path / "h.sqlite")
    run_id = start_run(store, DOCS, "t", {**CONFIG, "methods": ["mba", "srag"]})
    record = result_recorder(store, run_id)
    for m, r in _results()["a"].items():
        record("a", m, Observation(m, "a"), r)
    record("b", "mba", Observation("mba", "b"), MethodResult("mba", "b", 0.9, True))  # then it crashed
    mark_failed(store, run_id, "killed")
    v = {x["doc_id"]: x for x in load_audit(store, run_id)["verdicts"]}
    assert v["a"]["verdict"] == "member"
    assert (v["b"]["verdict"], v["b"]["rule"]) == ("inconclusive", "R7")
    assert "stopped before srag probed this document" in v["b"]["reason"]
    # the other way round the member call stands: the missing method votes after the one that made it
    run2 = start_run(store, DOCS, "t2", CONFIG)
    record = result_recorder(store, run2)
    record("b", "srag", Observation("srag", "b"), MethodResult("srag", "b", 0.9, True))
    mark_failed(store, run2, "killed")
    assert {x["doc_id"]: x for x in load_audit(store, run2)["verdicts"]}["b"]["verdict"] == "member"


def test_the_history_reads_each_stored_summary_once_and_again_when_its_run_ends_again(tmp_path, monkeypatch):
    """The app lists the runs on every page run, and each listing parsed every stored summary (80 MB and 1.5 s
    for a 4,000-document audit, session 55): now the listing leaves summaries out and each is read once."""
    from audit_core.history import resume_or_start_run

    store = Store(tmp_path / "h.sqlite")
    run_id = start_run(store, DOCS, "http://127.0.0.1:1/v1 · m", CONFIG)
    d = _audit_dict()
    d["failures"] = {"stopped": "authentication failed: 401", "documents_audited": 2}
    save_audit(store, run_id, d)
    reads: list[str] = []
    real = Store.get_run
    monkeypatch.setattr(Store, "get_run", lambda self, rid: reads.append(rid) or real(self, rid))
    for _ in range(3):
        [row] = history_rows(store)
        assert row["status"] == "stopped" and row["member"] == 1 and row["not found"] == 1
    assert reads == [run_id]
    assert all(info.summary is None and info.summary_chars > 0 for info in store.list_runs(summaries=False))
    # resumed and ended again with another summary: read again, and the new counts shown
    assert resume_or_start_run(store, DOCS, "http://127.0.0.1:1/v1 · m", CONFIG) == (run_id, True)
    again = _audit_dict()
    again["verdicts"] = [{**v, "verdict": "member"} for v in again["verdicts"]]
    save_audit(store, run_id, again)
    [row] = history_rows(store)
    assert row["status"] == "finished" and row["member"] == 2 and row["not found"] == 0


def test_a_run_deleted_while_the_history_is_listed_is_left_out_not_an_error(tmp_path, monkeypatch):
    """Listed, then deleted by another page or the command line before its summary was read: a KeyError
    reached the History tab as a stack trace (review, session 55)."""
    store = Store(tmp_path / "h.sqlite")
    gone, kept = (start_run(store, DOCS, "t", CONFIG) for _ in range(2))
    for run_id in (gone, kept):
        save_audit(store, run_id, _audit_dict())
    real = Store.get_run

    def deleted_meanwhile(self, rid):
        if rid == gone:
            self.delete_run(gone)
        return real(self, rid)

    monkeypatch.setattr(Store, "get_run", deleted_meanwhile)
    assert [row["id"] for row in history_rows(store)] == [kept]


def test_an_audit_that_chose_its_methods_is_listed_with_those_it_used(tmp_path):
    """``--method auto``: the run is opened before the capability probe (its configuration says "auto", which
    resuming compares), and History lists the methods the audit then chose."""
    store = Store(tmp_path / "h.sqlite")
    asked = {**CONFIG, "methods": ["auto"]}
    run_id = start_run(store, DOCS, "t", asked)
    assert history_rows(store)[0]["methods"] == "auto"
    used = {**_audit_dict(), "config": {**CONFIG, "methods_source": "chosen for this target (--method auto)"}}
    save_audit(store, run_id, used)
    [row] = history_rows(store)
    assert row["methods"] == "S-RAG, MBA"
    assert store.get_run(run_id).params == asked  # what the same command run again is matched against
    # methods named by the user are listed as they were named
    other = start_run(store, DOCS, "t", CONFIG)
    save_audit(store, other, {**_audit_dict(), "config": {**CONFIG, "methods": ["srag"]}})
    assert store.get_run(other).methods == ["srag", "mba"]


def test_a_stored_summary_not_shaped_as_an_audit_is_listed_damaged_and_opened_from_its_rows(tmp_path):
    """An altered summary passed as finished and broke every view that read it (KeyError, TypeError). An older
    summary without the fields added since still opens as it was stored."""
    store = Store(tmp_path / "h.sqlite")
    full = _audit_dict()
    older = {k: v for k, v in full.items() if k not in ("collection", "what_this_shows", "no_signal", "freshness",
                                                        "method_power", "fpr", "finished")}
    altered = {
        "no reason": {**full, "verdicts": [{k: v for k, v in full["verdicts"][0].items() if k != "reason"}]},
        "unknown call": {**full, "verdicts": [{**full["verdicts"][0], "verdict": "weird"}]},
        "documents a mapping": {**full, "documents": {"a": 1}},
        "document without text": {**full, "documents": [{"id": "a"}]},
        "result not a mapping": {**full, "results": {"a": {"srag": "x"}}},
        "calibration none": {**full, "calibrations": {"srag": None}},
        "collection a text": {**full, "collection": "x"},
        "not_run a list": {**full, "not_run": ["srag"]},
        "no_signal a list": {**full, "no_signal": ["srag"]},
        "failures a text": {**full, "failures": "x"},
    }
    runs = {}
    for name, summary in {"older": older, **altered}.items():
        run_id = start_run(store, DOCS, "t", CONFIG)
        rec = result_recorder(store, run_id)
        for doc, methods in _results().items():
            for m, res in methods.items():
                rec(doc, m, Observation(m, doc), res)
        store.finish_run(run_id, "finished", summary=summary)  # as stored, then altered on disk
        runs[name] = run_id
    rows = {r["id"]: r for r in history_rows(store)}
    assert load_audit(store, runs["older"]) == json.loads(json.dumps(older))
    assert rows[runs["older"]]["status"] == "finished" and rows[runs["older"]]["member"] == 1
    for name in altered:
        row, opened = rows[runs[name]], load_audit(store, runs[name])
        assert row["status"] == "damaged" and "summary is incomplete or altered" in row["error"], name
        assert opened["rebuilt_from_rows"] and "altered" in opened["damaged"], name
        assert opened["failures"] == {}, name  # it finished: not said to have stopped
        assert [v["doc_id"] for v in opened["verdicts"]] == ["a", "b"], name
