"""The Streamlit app driven by Streamlit's AppTest, as a data owner uses it.

Fast flows (document counts, a wrong CSV column, an unreachable endpoint,
history -> reopen -> PDF) run in seconds. The end-to-end audit against the
demo target is real (shadow preparation, the in-process reference RAG) and
therefore marked slow; it keeps its sizes small through the UI's settings.
"""
from __future__ import annotations

import io
import json
import os

import pytest

APP = os.path.join(os.path.dirname(__file__), "..", "..", "app", "main.py")
#: the end-to-end audit probes a shadow RAG and the demo RAG on CPU: minutes on a
#: free 2-core machine, much longer on a shared one
SLOW_TIMEOUT_S = 1800
SECRET = "sk-test-DO-NOT-LEAK-1234567890"

LONG_1 = ("My grandmother kept bees behind the old mill in Cressbrook for forty years, and every August she "
          "carried the frames down the lane in a wheelbarrow lined with damp sacking so the comb would not crack "
          "before she reached the kitchen where the extractor stood.")
LONG_2 = ("After the knee operation in March the physiotherapist gave me a sheet of exercises: straight leg raises, "
          "heel slides and quadriceps sets, ten of each three times a day, with ice for twenty minutes afterwards "
          "and a short walk around the block every evening.")


@pytest.fixture
def app(tmp_path, monkeypatch):
    """A fresh app run with its own history database."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("RPA_AUDIT_DB", str(tmp_path / "audits.sqlite"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    return at


def _texts(at, inputs: bool = True) -> str:
    """Every text the page shows (markdown, alerts, captions, metrics, tables), and with ``inputs`` what the
    text fields hold; a check that a key is never shown leaves the fields out (the key field holds it)."""
    parts = []
    for kind in ("markdown", "error", "warning", "info", "success", "caption", "title", "subheader"):
        parts += [str(e.value) for e in getattr(at, kind)]
    parts += [f"{m.label} {m.value}" for m in at.metric]
    parts += [e.value.to_csv() for e in at.dataframe]
    if inputs:
        parts += [str(w.value) for w in at.text_input]
    return "\n".join(parts)


def _metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def test_verbatims_decoy_probes_are_an_advanced_choice_with_their_cost(app):
    from app.sidebar import ENDPOINT

    app.text_area(key="pasted").input("\n\n".join([LONG_1, LONG_2])).run()
    app.radio(key="target_kind").set_value(ENDPOINT).run()  # not checked yet: counted as chat, nine probes
    app.multiselect(key="methods").set_value(["verbatim"]).run()

    def queries() -> int:
        est = next(d.value for d in app.dataframe if "queries" in d.value.columns)
        return int(est.loc[est["method"] == "total", "queries"].iloc[0])

    assert queries() == 2 * 9
    app.checkbox(key="verbatim_decoys").check().run()
    assert not app.exception
    assert queries() == 2 * 3


def test_pasted_texts_are_counted_before_anything_runs(app):
    pasted = "\n\n".join([LONG_1, "Too short to audit.", LONG_2, LONG_1, "   "])
    app.text_area(key="pasted").input(pasted).run()
    assert not app.exception
    assert (_metric(app, "Usable"), _metric(app, "Too short"), _metric(app, "Duplicate")) == ("2", "1", "1")
    assert "2 document(s) ready" in _texts(app)
    # the Run tab shows the cost: S-RAG 5 probes per document and its continuation check (completion style,
    # SragConfig.continuation_check_tokens) + MBA one per mask (10), as it asks the demo target
    # (DEMO_MBA_ELICITATION = "continue")
    est = next(d.value for d in app.dataframe if "queries" in d.value.columns)
    assert int(est.loc[est["method"] == "total", "queries"].iloc[0]) == 2 * (5 + 1) + 2 * 10
    # an endpoint is asked the paper's way: one cloze request per document
    from app.sidebar import ENDPOINT

    app.radio(key="target_kind").set_value(ENDPOINT).run()
    assert app.selectbox(key="elicitation_endpoint").value == "fill_in"
    est = next(d.value for d in app.dataframe if "queries" in d.value.columns)
    assert int(est.loc[est["method"] == "total", "queries"].iloc[0]) == 2 * 5 + 2
    # not checked yet, so counted as a chat model (the upper bound): S-RAG's probes may answer at length
    srag = est.loc[est["method"] == "S-RAG"].iloc[0]
    assert srag["completion tokens (max)"] > 10 * srag["queries"]
    assert "answers in chat style" in _texts(app)
    app.selectbox(key="target_style").set_value("completion").run()
    est = next(d.value for d in app.dataframe if "queries" in d.value.columns)
    srag = est.loc[est["method"] == "S-RAG"].iloc[0]
    from audit_core.methods.srag import SragConfig

    check = SragConfig().continuation_check_tokens  # one continuation check per document, the rest one token
    assert srag["completion tokens (max)"] == srag["queries"] - 2 + 2 * check
    # nothing to send to yet: Start waits for the URL and model, and says so
    assert app.button(key="start_audit").disabled
    assert "Enter the endpoint's base URL and model" in _texts(app)
    app.text_input(key="base_url").input("http://127.0.0.1:9/v1").run()
    app.text_input(key="model").input("m").run()
    assert not app.button(key="start_audit").disabled


def test_the_target_file_kind_waits_for_a_file(app):
    from app.sidebar import HTTP_FILE

    app.text_area(key="pasted").input(LONG_1).run()
    app.radio(key="target_kind").set_value(HTTP_FILE).run()
    assert not app.exception
    assert "Upload or paste a valid target file" in _texts(app)
    assert "base URL and model" not in _texts(app)
    assert app.button(key="start_audit").disabled


def test_every_registered_target_type_reaches_the_app_and_its_connection_check(app, monkeypatch):
    """The target-file option reads any type of the registry; "Check connection" shortened limits the dummy
    type does not have (timeout_s, max_retries) and stopped on "an unexpected error"."""
    from app.sidebar import HTTP_FILE
    from audit_core.target import TARGET_TYPES
    from tests.target_fixtures import minimal_target_file, registered

    registered(monkeypatch)
    app.radio(key="target_kind").set_value(HTTP_FILE).run()
    for spec in TARGET_TYPES.values():
        app.text_area(key="target_file_text").input(minimal_target_file(spec)).run()
        assert not app.exception and not app.error, (spec.name, [e.value for e in app.error])
        assert f"{spec.label}: http://127.0.0.1:9/v1" in " ".join(c.value for c in app.caption), spec.name
    app.button(key="check_connection").click().run(timeout=60)  # the dummy type, the last one pasted
    assert not app.exception and not app.error, [e.value for e in app.error]
    assert "Connected, but the target returns no token probabilities" in " ".join(w.value for w in app.warning)


def test_a_repeated_id_is_said_when_it_is_renamed(app):
    """Two rows with the id "A" became "A" and "A-2" without a word: the results no longer matched the ids."""
    csv = "doc_id,text\n" + "\n".join(f"A,\"{t}\"" for t in [LONG_1, LONG_2])
    app.radio(key="docs_source").set_value("Upload a CSV").run()
    app.file_uploader(key="csv_file").set_value(("mine.csv", csv.encode(), "text/csv")).run()
    assert not app.exception and _metric(app, "Usable") == "2"
    warned = " ".join(w.value for w in app.warning)
    assert "1 id(s) were used by an earlier row and were renamed" in warned and "'A' -> 'A-2'" in warned


def test_a_shadow_larger_than_the_corpus_allows_is_said_with_the_size_it_gets(app):
    """A custom 2000 + 2000 ran on a few hundred of the shipped corpus's texts while the Run tab said 2000."""
    from shadow.prepare import ShadowConfig, corpus_allows

    most_in, most_out = corpus_allows(ShadowConfig())  # the shipped texts of at most max_doc_words words
    assert 200 <= most_in < 2000  # "standard" (200 + 200) fits
    app.radio(key="audit_size").set_value("custom").run()
    app.number_input(key="n_members").set_value(2000).run()
    warned = " ".join(w.value for w in app.warning)
    assert f"gives at most {most_in} members + {most_out} non-members" in warned and f"uses {most_in} + 60" in warned
    app.number_input(key="n_members").set_value(most_in).run()
    assert "gives at most" not in " ".join(w.value for w in app.warning)


def test_csv_with_the_wrong_text_column_gets_a_clear_message(app):
    csv = "doc_id,note,text\n" + "\n".join(f"p{i},ok,\"{t}\"" for i, t in enumerate([LONG_1, LONG_2]))
    app.radio(key="docs_source").set_value("Upload a CSV").run()
    app.file_uploader(key="csv_file").set_value(("mine.csv", csv.encode(), "text/csv")).run()
    assert not app.exception
    assert app.selectbox(key="text_column").value == "text"  # guessed: the longest cells
    assert app.selectbox(key="id_column").value == "doc_id"
    assert _metric(app, "Usable") == "2" and not app.error
    app.selectbox(key="text_column").set_value("note").run()
    errors = " ".join(e.value for e in app.error)
    assert "Column 'note' gives no document to audit" in errors
    assert "The column with the longest cells is 'text'" in errors
    assert _metric(app, "Usable") == "0" and _metric(app, "Too short") == "2"
    assert app.button(key="start_audit").disabled


def test_an_uploaded_file_survives_a_switch_to_paste_and_back_until_removed(app):
    csv = "id,text\n" + "\n".join(f"p{i},\"{t}\"" for i, t in enumerate([LONG_1, LONG_2]))
    app.radio(key="docs_source").set_value("Upload a CSV").run()
    app.file_uploader(key="csv_file").set_value(("mine.csv", csv.encode(), "text/csv")).run()
    assert _metric(app, "Usable") == "2"
    app.radio(key="docs_source").set_value("Paste text").run()
    app.radio(key="docs_source").set_value("Upload a CSV").run()
    assert not app.exception and _metric(app, "Usable") == "2"
    assert len(app.session_state["documents"]) == 2
    assert "Using mine.csv, uploaded earlier" in " ".join(c.value for c in app.caption)
    app.button(key="csv_forget").click().run()
    assert not app.exception and app.session_state["documents"] == []


def test_how_an_uploaded_file_was_read_is_said_over_its_counts(app):
    """A note on the file as a whole (here one byte that means nothing in the encoding it was read in) is
    shown, not only kept in the batch."""
    body = "id,text\n" + "\n".join(f"p{i},\"{t}\"" for i, t in enumerate([LONG_1, LONG_2]))
    data = body.encode("cp1252") + f"\np9,\"stray \x9d {LONG_1}\"\n".encode("latin-1")
    app.radio(key="docs_source").set_value("Upload a CSV").run()
    app.file_uploader(key="csv_file").set_value(("mine.csv", data, "text/csv")).run()
    assert not app.exception and _metric(app, "Usable") == "3"
    assert "1 byte(s) of this file mean nothing" in " ".join(w.value for w in app.warning)


def test_a_file_that_is_not_a_csv_is_refused_in_plain_words(app):
    app.radio(key="docs_source").set_value("Upload a CSV").run()
    app.file_uploader(key="csv_file").set_value(("scan.csv", b"%PDF-1.4 binary", "text/csv")).run()
    assert not app.exception
    assert "a PDF file, not a CSV" in " ".join(e.value for e in app.error)


def test_a_header_only_csv_is_refused_with_a_clear_message(app):
    app.radio(key="docs_source").set_value("Upload a CSV").run()
    app.file_uploader(key="csv_file").set_value(("empty.csv", b"id,text\n", "text/csv")).run()
    assert not app.exception
    assert "header row ('id', 'text') but no data rows" in " ".join(e.value for e in app.error)
    assert not [s for s in app.selectbox if s.key == "text_column"]  # no column guessed from nothing
    assert app.button(key="start_audit").disabled


def test_unreachable_endpoint_is_reported_and_the_key_never_shown(app):
    app.radio(key="target_kind").set_value("OpenAI-compatible endpoint").run()
    app.text_input(key="base_url").input("http://127.0.0.1:9/v1")
    app.text_input(key="model").input("some-model")
    app.text_input(key="api_key").input(SECRET).run()
    app.button(key="check_connection").click().run(timeout=60)
    assert not app.exception
    errors = " ".join(e.value for e in app.error)
    assert "127.0.0.1:9" in errors or "unreachable" in errors.lower() or "did not answer" in errors
    assert app.text_input(key="api_key").value == SECRET  # still in its field: only there
    assert SECRET not in _texts(app, inputs=False)  # it used to be cut out of the page text before this check


def test_not_found_needs_the_operators_statement_for_an_endpoint_and_is_known_for_the_demo(app):
    """Verdict rule R5 in the sidebar: no checkbox for the demo target (known), unticked by default for an endpoint."""
    from app.sidebar import DEMO, ENDPOINT, Settings

    assert not [c for c in app.checkbox if c.key == "retrieval_as_sent"]
    app.radio(key="target_kind").set_value(ENDPOINT).run()
    box = app.checkbox(key="retrieval_as_sent")
    assert box.value is False and "rewriting" in box.help
    box.check().run()
    assert not app.exception and app.checkbox(key="retrieval_as_sent").value is True

    def verdict_cfg(kind, stated):
        return Settings(kind, "http://h/v1", "m", ["srag"], None, retrieval_as_sent=stated).audit_config().verdict
    assert verdict_cfg(DEMO, False).retrieval_as_sent and verdict_cfg(ENDPOINT, True).retrieval_as_sent
    assert not verdict_cfg(ENDPOINT, False).retrieval_as_sent


def test_the_operators_statement_does_not_carry_over_to_another_service(app):
    """It is one operator's word about one service: another host, or another kind of target, resets it."""
    from app.sidebar import ENDPOINT, HTTP_FILE

    app.radio(key="target_kind").set_value(ENDPOINT).run()
    app.text_input(key="base_url").input("https://a.example.com/v1").run()
    app.checkbox(key="retrieval_as_sent").check().run()
    app.text_input(key="base_url").input("https://a.example.com/v2").run()  # the same service, another path
    assert app.checkbox(key="retrieval_as_sent").value is True
    app.text_input(key="base_url").input("https://other-operator.example.net/v1").run()
    assert not app.exception and app.checkbox(key="retrieval_as_sent").value is False
    assert "does not carry over" in " ".join(i.value for i in app.info)
    app.checkbox(key="retrieval_as_sent").check().run()
    app.radio(key="target_kind").set_value(HTTP_FILE).run()
    assert not app.exception and app.checkbox(key="retrieval_as_sent").value is False


def test_unreachable_url_without_a_key_is_reported_unreachable(app):
    """Issue 20 point 7: it used to say the key was missing (authentication failed)."""
    app.radio(key="target_kind").set_value("OpenAI-compatible endpoint").run()
    app.text_input(key="base_url").input("http://127.0.0.1:9/v1")
    app.text_input(key="model").input("some-model").run()
    app.button(key="check_connection").click().run()
    assert not app.exception
    errors = " ".join(e.value for e in app.error)
    assert "cannot connect to http://127.0.0.1:9/v1" in errors and "key" not in errors.lower()


def _saved_audit(db_path) -> str:
    """A finished audit in the history, shaped exactly as run_audit returns it."""
    from audit_core.documents import Document
    from audit_core.history import save_audit, start_run
    from audit_core.methods.base import Calibration, MethodResult, Observation
    from audit_core.store import Store
    from audit_core.verdict import decide
    from audit_core.audit import AuditResult

    docs = [Document("grandmother-bees", LONG_1), Document("knee-exercises", LONG_2)]
    words = [{"word": w, "prob": p, "error": None} for w, p in [("Cressbrook", 0.71), ("extractor", 0.44)]]
    res = {
        "grandmother-bees": {
            "srag": MethodResult("srag", "grandmother-bees", 0.93, True,
                                 evidence={"words": words, "histogram": [0, 0, 0, 0, 1, 0, 0, 1, 0, 0],
                                           "below_topk_share": 0.0}),
            "mba": MethodResult("mba", "grandmother-bees", 0.8, True, evidence={
                "masked_text": "My grandmother kept [Mask_1] behind ...",
                "rows": [{"mask": "[Mask_1]", "expected": ["bees"], "predicted": "bees", "correct": True}]}),
            "verbatim": MethodResult("verbatim", "grandmother-bees", 0.9, True, evidence={
                "longest_reproduction": "carried the frames down the lane in a wheelbarrow", "reproduced_share": 0.4,
                "reproduced_ngrams": 6, "similarity_to_remainder": 0.72,
                "probes": [{"template": "quote", "share": 0.4, "ngrams": 6, "longest_words": 9, "non_answer": None}]}),
        },
        "knee-exercises": {
            "srag": MethodResult("srag", "knee-exercises", 0.07, False, evidence={"words": [], "histogram": None}),
            "mba": MethodResult("mba", "knee-exercises", 0.1, False),
        },
    }
    cal = {
        "srag": Calibration("srag", 0.5, [0.9, 0.8, 0.7, 0.95], [0.1, 0.2, 0.3, 0.05], shadow_auc=0.91,
                            params={"member_hist_mean": [0.1] * 10, "nonmember_hist_mean": [0.1] * 10}),
        "mba": Calibration("mba", 0.5, [0.8, 0.7, 0.9], [0.1, 0.3, 0.2], shadow_auc=0.84),
    }
    d = AuditResult(
        target="http://127.0.0.1:9/v1 · some-model", created="2025-05-01T10:00:00+00:00",
        config={"methods": ["srag", "mba"], "shadow": {}, "method_params": {}, "verdict": {}},
        capabilities={"reachable": True, "logprobs": True, "max_top_logprobs": 20, "model": "m", "detail": ""},
        verdicts=[decide(k, list(v.values())) for k, v in res.items()], results=res,
        observations={k: {m: Observation(m, k) for m in v} for k, v in res.items()},
        calibrations=cal, not_run={}, account={"queries": 14, "failures": 0}, documents=docs,
    ).to_json()
    store = Store(db_path)
    run_id = start_run(store, docs, d["target"], d["config"])
    save_audit(store, run_id, d)
    store.close()
    return run_id


def _app_with_saved_audit(tmp_path, monkeypatch, timeout: int = 120):
    """The app started on a history database that holds one finished audit: (app, database, run id)."""
    from streamlit.testing.v1 import AppTest

    db = tmp_path / "audits.sqlite"
    run_id = _saved_audit(db)
    monkeypatch.setenv("RPA_AUDIT_DB", str(db))
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.run()
    return at, db, run_id


def test_history_reopens_an_audit_and_its_pdf_has_the_verdicts_not_the_key(tmp_path, monkeypatch):
    from pypdf import PdfReader

    at, db, run_id = _app_with_saved_audit(tmp_path, monkeypatch, timeout=180)
    at.radio(key="target_kind").set_value("OpenAI-compatible endpoint").run()
    at.text_input(key="api_key").input(SECRET).run()
    history = next(d.value for d in at.dataframe if "status" in d.value.columns)
    assert list(history["status"]) == ["finished"] and list(history["member"]) == [1]
    assert at.selectbox(key="history_run").value == run_id
    at.button(key="history_open").click().run()
    assert not at.exception, at.exception
    verdicts = next(d.value for d in at.dataframe if "verdict" in d.value.columns)
    # nobody stated how this endpoint retrieves: what both methods missed is not cleared (rule R5)
    assert dict(zip(verdicts["document"], verdicts["verdict"])) == {
        "grandmother-bees": "member", "knee-exercises": "inconclusive"}
    assert any(c.value.startswith("Retrieval: not known") and "(1 document(s) not cleared for this reason)" in c.value
               for c in at.caption)
    assert "1/1 right" in list(verdicts["MBA accuracy"])  # the PDF's cell (report.score_cell)
    assert {"S-RAG shadow AUC", "MBA shadow AUC"} <= {m.label for m in at.metric}
    assert [m.value for m in at.metric if m.label == "S-RAG shadow AUC"] == ["0.91"]
    # the first document's evidence shows the run the target copied (Verbatim continuation)
    shown = [str(m.value) for m in at.markdown]
    assert "> carried the frames down the lane in a wheelbarrow" in shown  # quoted, apart from the document text
    assert any(x.startswith("**Verbatim continuation: what the target quoted") for x in shown)
    assert any(c.value.startswith("Closest an answer came in meaning to the unseen part: 0.72") for c in at.caption)
    copied = "Word runs of the unseen part that the best answer reproduced: 6 "
    assert any(c.value.startswith(copied) for c in at.caption)
    exports = at.session_state["exports"]
    text = "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(exports["pdf"])).pages)
    assert "grandmother-bees" in text and "knee-exercises" in text
    assert "member" in text and "not cleared" in text and "Retrieval not known" in " ".join(text.split())
    for blob in (text, exports["json"].decode(), exports["csv"], db.read_bytes().decode("latin-1")):
        assert SECRET not in blob
    assert SECRET not in _texts(at, inputs=False)


@pytest.mark.slow
def test_paste_audit_demo_target_shows_verdicts(tmp_path, monkeypatch):
    """End to end: paste 2 texts, small shadow, S-RAG + MBA against the demo target."""
    from pypdf import PdfReader
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("RPA_AUDIT_DB", str(tmp_path / "audits.sqlite"))
    at = AppTest.from_file(APP, default_timeout=SLOW_TIMEOUT_S)
    at.run()
    from shadow.demo import DEMO_KB
    from shadow.corpus import load_corpus

    kb = load_corpus(DEMO_KB)
    member = next(d.text for d in kb if 60 <= len(d.text.split()) <= 200)
    at.text_area(key="pasted").input(member + "\n\n" + LONG_2).run()
    at.radio(key="audit_size").set_value("custom").run()
    # the smallest shadow S-RAG's classifier accepts (4 per class to train, 2 held out)
    at.number_input(key="n_members").set_value(8)
    at.number_input(key="n_nonmembers").set_value(8)
    at.number_input(key="n_generative").set_value(6).run()
    assert at.multiselect(key="methods").value == ["srag", "mba"]
    at.button(key="start_audit").click().run(timeout=SLOW_TIMEOUT_S)
    assert not at.exception, at.exception
    success = " ".join(s.value for s in at.success)
    assert "Audit finished" in success, _texts(at)
    verdicts = next(d.value for d in at.dataframe if "verdict" in d.value.columns)
    assert len(verdicts) == 2
    assert set(verdicts["verdict"]) <= {"member", "not found", "inconclusive"}
    result = at.session_state["result"]
    assert set(result["calibrations"]) == {"srag", "mba"}
    assert result["account"]["queries"] > 0
    text = "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(at.session_state["exports"]["pdf"])).pages)
    for v in result["verdicts"]:
        assert v["doc_id"] in text
    history = next(d.value for d in at.dataframe if "status" in d.value.columns)
    assert list(history["status"]) == ["finished"]


def test_target_file_kind_checks_a_custom_api_and_sends_env_keys_only_when_allowed(app, monkeypatch):
    """The third target kind: a pasted target file, its secret typed or allowed by name, the probe's answer."""
    from tests.audit_core.test_http_target import KEY, StubRag
    from shadow.serve import serve_in_thread

    url, stop = serve_in_thread(StubRag(), api_key=KEY, api="custom")
    try:
        text = open(os.path.join(os.path.dirname(APP), "..", "assets", "targets", "http_custom.yaml")).read()
        text = text.replace("http://127.0.0.1:8100/ask", url + "/ask")
        monkeypatch.setenv("RPA_SERVE_API_KEY", KEY)
        app.radio(key="target_kind").set_value("Any HTTP API (target file)").run()
        app.text_area(key="target_file_text").input(text).run()
        assert not app.exception
        # the environment holds the key, but it is not sent until the box naming it is ticked
        app.button(key="check_connection").click().run(timeout=60)
        assert "RPA_SERVE_API_KEY" in " ".join(e.value for e in app.error)
        app.checkbox(key="tf_env_RPA_SERVE_API_KEY").check().run()
        app.button(key="check_connection").click().run(timeout=60)
        assert not app.exception and not app.error
        assert "up to 2 alternatives" in " ".join(s.value for s in app.success)
        assert KEY not in _texts(app)
        # the file names the list of cited sources: the app offers the method that reads them, in one click
        app.button(key="add_source_methods").click().run(timeout=60)
        assert "cited_sources" in app.session_state["methods"] and not app.exception
        assert not [b for b in app.button if b.key == "add_source_methods"]
        # a broken file: the registry's message, no stack trace
        app.text_area(key="target_file_text").input(text.replace("{{prompt}}", "{{question}}")).run()
        assert "unknown placeholder" in " ".join(e.value for e in app.error) and not app.exception
    finally:
        stop()


def test_deleting_an_audit_asks_first_and_keep_it_keeps_it(tmp_path, monkeypatch):
    """Issue 20 point 6: "Delete this audit" deletes nothing until confirmed."""
    from audit_core.store import Store

    at, db, run_id = _app_with_saved_audit(tmp_path, monkeypatch)
    at.button(key="history_delete").click().run()
    assert not at.exception, at.exception
    assert "This cannot be undone" in " ".join(w.value for w in at.warning)
    assert [r.id for r in Store(str(db)).list_runs()] == [run_id]  # asked, not deleted
    at.button(key="history_confirm_no").click().run()
    assert [r.id for r in Store(str(db)).list_runs()] == [run_id]
    assert not [b for b in at.button if b.key == "history_confirm_yes"]
    at.button(key="history_delete").click().run()
    at.button(key="history_confirm_yes").click().run()
    assert not at.exception, at.exception
    assert Store(str(db)).list_runs() == []
    assert "Deleted the audit" in " ".join(s.value for s in at.success) or "No audit has been run yet" in _texts(at)


def test_a_text_only_endpoint_offers_the_methods_that_need_no_logprobs(app):
    """The connection check finds no logprobs: S-RAG cannot run, one click selects the text-only set."""
    from audit_core.methods import suggested_methods
    from tests.fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer(models=["m"], supports_logprobs=False) as srv:
        app.radio(key="target_kind").set_value("OpenAI-compatible endpoint").run()
        app.text_input(key="base_url").input(srv.base_url)
        app.text_input(key="model").input("m").run()
        assert app.multiselect(key="methods").value == suggested_methods(logprobs=True)
        app.button(key="check_connection").click().run(timeout=60)
        assert not app.exception
        warned = " ".join(w.value for w in app.warning)
        assert "no token probabilities" in warned and "S-RAG and Min-k% Prob: no logprobs (the target" in warned
        assert warned.count("no logprobs") == 1  # one reason, said once for both methods
        # the fake answers every probe "OK": a reply, not a continuation of the text
        assert "Answer style: chat (found by the capability probe: it answered like a chat model in 3 of 3" \
            in _texts(app)
        app.selectbox(key="target_style").set_value("completion").run(timeout=60)
        assert "You chose to read the target as a completion model, but the capability probe found a chat " \
               "model" in " ".join(w.value for w in app.warning)
        # the estimate leaves out what cannot run here, and says so
        app.text_area(key="pasted").input(LONG_1).run(timeout=60)
        estimate = next(d.value for d in app.dataframe if "queries" in d.value.columns)
        assert "S-RAG" not in set(estimate["method"]) and "MBA" in set(estimate["method"])
        assert "Not counted, they cannot run on this target (the connection check found it): S-RAG" in _texts(app)
        app.button(key="use_text_only_methods").click().run(timeout=60)
    assert not app.exception
    chosen = app.multiselect(key="methods").value
    assert chosen == suggested_methods(logprobs=False) and "srag" not in chosen and "verbatim" in chosen
    assert not [b for b in app.button if b.key == "use_text_only_methods"]  # nothing left to switch to
    # read as the chat model the probe found, MBA is not offered: its chat shadows abstain (session 51)
    app.session_state["target_style"] = None  # "find out (capability probe)", which AppTest cannot select
    app.run(timeout=60)
    offer = [b for b in app.button if b.key == "use_text_only_methods"]
    assert offer and offer[0].label == "Use the methods for text-only chat targets: Verbatim continuation"
    offer[0].click().run(timeout=60)
    assert not app.exception and app.multiselect(key="methods").value == ["verbatim"]


def test_a_chat_endpoint_with_logprobs_offers_the_method_that_works_on_chat_models(app, monkeypatch):
    """The fake answers like a chat model and gives logprobs: S-RAG and MBA can run but usually abstain there
    (their shadows find no signal), so the sidebar offers Verbatim continuation, once."""
    from audit_core.methods import suggested_methods
    from tests.fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer(models=["m"]) as srv:
        app.radio(key="target_kind").set_value("OpenAI-compatible endpoint").run()
        app.text_input(key="base_url").input(srv.base_url)
        app.text_input(key="model").input("m").run()
        app.button(key="check_connection").click().run(timeout=60)
        assert not app.exception
        assert "Answer style: chat" in _texts(app)
        assert not [b for b in app.button if b.key == "use_text_only_methods"]
        import streamlit.elements.lib.policies as policies

        warned = []  # Streamlit logs a widget given a default and a value set by a button's callback
        monkeypatch.setattr(policies._LOGGER, "warning", lambda *a, **k: warned.append(a))
        app.button(key="add_chat_methods").click().run(timeout=60)
        assert not app.exception and not warned, warned
        assert app.multiselect(key="methods").value == suggested_methods(logprobs=True) + ["verbatim"]
        assert not [b for b in app.button if b.key == "add_chat_methods"]
        app.selectbox(key="target_style").set_value("completion").run(timeout=60)
        app.multiselect(key="methods").set_value(suggested_methods(logprobs=True)).run(timeout=60)
        assert not [b for b in app.button if b.key == "add_chat_methods"]  # read as completion: not offered


def test_the_verdict_table_shows_each_documents_p_value_against_the_controls_only_when_there_are_controls():
    from app.tab_results import _verdict_rows

    result = {"verdicts": [{"doc_id": "a", "verdict": "member", "reason": "r", "methods": {}},
                           {"doc_id": "b", "verdict": "inconclusive", "reason": "r", "methods": {}}]}
    assert all("p against your controls" not in row for row in _verdict_rows(result))
    result["collection"] = {"document_p_values": {"a": 1 / 21, "b": None}}
    rows = _verdict_rows(result)
    assert [row["p against your controls"] for row in rows] == ["0.048", None]


def test_typed_inputs_survive_a_switch_of_the_choices_that_hide_them(app):
    app.text_area(key="pasted").input(LONG_1).run()
    app.radio(key="docs_source").set_value("Upload a CSV").run()
    app.radio(key="docs_source").set_value("Paste text").run()
    assert app.text_area(key="pasted").value == LONG_1
    app.radio(key="target_kind").set_value("OpenAI-compatible endpoint").run()
    app.text_input(key="base_url").input("http://127.0.0.1:9/v1")
    app.text_input(key="model").input("m").run()
    app.radio(key="target_kind").set_value("Demo target (built-in, no key)").run()
    app.radio(key="target_kind").set_value("OpenAI-compatible endpoint").run()
    assert not app.exception
    assert app.text_input(key="base_url").value == "http://127.0.0.1:9/v1" and app.text_input(key="model").value == "m"


def test_a_rate_the_shadow_sizes_cannot_reach_is_said_before_start(app):
    assert "shadow non-members to decide" not in " ".join(w.value for w in app.warning)
    app.radio(key="fpr").set_value(0.01).run()
    assert not app.exception
    assert "at least 99 shadow non-members" in " ".join(w.value for w in app.warning)


def _results_part(part: str, shown: dict, *args):
    """One drawing function of the Results tab (app.tab_results) run alone on ``shown``, as AppTest sees it."""
    from streamlit.testing.v1 import AppTest

    def page():
        import streamlit as st

        import app.tab_results as tab

        getattr(tab, st.session_state["part"])(st.session_state["shown"], *st.session_state["args"])

    at = AppTest.from_function(page)
    at.session_state["part"], at.session_state["shown"], at.session_state["args"] = part, shown, list(args)
    at.run()
    return at


def test_results_say_when_an_audit_stopped_on_a_fatal_target_error():
    at = _results_part("_header", {"documents": [{"id": "a", "text": "t"}], "verdicts": [], "config": {},
                                   "failures": {"stopped": "authentication failed: 401 (8 document(s) not audited)"}})
    assert not at.exception
    assert "stopped before it finished: authentication failed: 401" in " ".join(e.value for e in at.error)


def test_results_show_the_collection_tests_note_and_do_not_settle_a_p_value_from_rewritten_controls():
    collection = {"p_value": 0.01, "n_documents": 20, "n_controls": 20, "power": 0.8, "alpha": 0.05,
                  "method": "srag", "controls_kind": "generated", "effect_size": 0.7,
                  "note": "measured bias of rewritten controls: 12.5% false rejections on one draw"}
    at = _results_part("_header", {"documents": [], "verdicts": [], "config": {}, "collection": collection})
    assert not at.exception and not at.success
    assert "measured bias of rewritten controls" in " ".join(c.value for c in at.caption)


def test_a_verbatim_reading_without_a_score_says_why_and_not_that_nothing_was_reproduced():
    ev = {"longest_reproduction": "", "reproduced_share": None,
          "probes": [{"template": "quote", "answer": "I cannot share that.", "non_answer": "refusal"},
                     {"template": "continue", "answer": "", "non_answer": "empty"}]}
    at = _results_part("_verbatim_detail", {"results": {"d1": {"verbatim": {
        "method": "verbatim", "score": None, "decision": None, "evidence": ev,
        "reason": "too many non-answers: 2 of 2 replies were refusals or empty"}}}}, "d1")
    assert not at.exception
    shown = " ".join(c.value for c in at.caption)
    assert "No reading: too many non" in shown and "reproduced no run" not in shown


def test_an_mba_score_that_decides_nothing_is_not_called_no_answer():
    """The Results tab said "MBA gave no answer: not cleared: ..." under an 8 of 10 fill-in."""
    rows = [{"mask": f"[Mask_{i}]", "expected": "w", "predicted": "w", "correct": i < 8} for i in range(10)]
    at = _results_part("_mba_detail", {"results": {"d1": {"mba": {
        "method": "mba", "score": 0.89, "decision": None, "evidence": {"rows": rows, "answered": 10},
        "reason": "not cleared: below the member threshold"}}}}, "d1")
    assert not at.exception
    shown = " ".join(c.value for c in at.caption)
    assert "MBA decides nothing: not cleared" in shown and "gave no answer" not in shown


def test_results_say_when_no_method_could_decide_and_what_to_add_on_a_chat_target():
    result = {"documents": [{"id": "a", "text": "t"}], "verdicts": [], "config": {"methods": ["srag", "mba"],
              "target_style": "chat"}, "no_signal": {"srag": "no signal"}, "not_run": {"mba": "uncalibrated"}}
    at = _results_part("_header", result)
    assert not at.exception
    warned = " ".join(w.value for w in at.warning)
    assert "None of the chosen methods could decide" in warned and "add Verbatim continuation" in warned
    at = _results_part("_header", {**result, "not_run": {}})
    assert "None of the chosen methods" not in " ".join(w.value for w in at.warning)


def test_the_verdict_table_has_a_column_for_each_method_that_ran():
    from app.tab_results import _verdict_rows

    result = {"config": {"methods": ["srag", "verbatim", "rag_mia"]}, "not_run": {"srag": "no logprobs"},
              "no_signal": {"rag_mia": "no signal: chance on the shadow"},
              "verdicts": [{"doc_id": "a", "verdict": "member", "reason": "r",
                            "methods": {"verbatim": {"score": 7.0}, "rag_mia": {"score": 0.5}}},
                           {"doc_id": "b", "verdict": "inconclusive", "reason": "r", "methods": {}}]}
    rows = _verdict_rows(result)
    assert "S-RAG probability" not in rows[0]
    assert rows[0]["Verbatim continuation"] == "7.00" and rows[1]["Verbatim continuation"] == "—"  # no result
    assert rows[0]["RAG-MIA"] == "0.50 (no signal, not counted)"


def test_the_estimate_says_where_its_answer_style_comes_from_before_any_probe(app):
    app.text_area(key="pasted").input(LONG_1 + "\n\n" + LONG_2).run()
    captions = " ".join(c.value for c in app.caption)
    assert "(the built-in demo target's style)" in captions and "capability probe" not in captions
    app.radio(key="target_kind").set_value("OpenAI-compatible endpoint").run()
    app.text_input(key="base_url").input("http://127.0.0.1:9/v1")
    app.text_input(key="model").input("m").run()
    assert "not checked yet: the upper bound" in " ".join(c.value for c in app.caption)


def test_a_public_corpus_without_texts_is_refused_when_uploaded(app, tmp_path, monkeypatch):
    monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path))
    app.radio(key="aux_choice").set_value("Upload a public corpus").run()
    app.file_uploader(key="aux_upload").set_value(("corpus.jsonl", b'{"title": "no text here"}\n',
                                                    "application/json")).run()
    assert not app.exception
    assert "This corpus cannot be used" in " ".join(e.value for e in app.error)


def test_a_public_corpus_from_windows_or_with_a_bom_is_read_and_errors_name_the_users_file(app, tmp_path,
                                                                                           monkeypatch):
    """A cp1252 JSONL crashed the sidebar (UnicodeDecodeError) and reset every setting after it; one with a BOM
    was refused as 'Unexpected UTF-8 BOM' under the cache's file name."""
    monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path))
    app.radio(key="fpr").set_value("10%").run()
    app.radio(key="aux_choice").set_value("Upload a public corpus").run()
    lines = "".join(f'{{"text": "Caf\u00e9 number {i}: a public text about knees and elbows"}}\n' for i in range(60))
    for data in (lines.encode("cp1252"), b"\xef\xbb\xbf" + lines.encode("utf-8")):
        app.file_uploader(key="aux_upload").set_value(("corpus.jsonl", data, "application/json")).run()
        assert not app.exception and not app.error, [e.value for e in app.error]
        assert "60 public texts read" in _texts(app)
    app.file_uploader(key="aux_upload").set_value(("mine.jsonl", b'{"title": "x"}\n', "application/json")).run()
    said = " ".join(e.value for e in app.error)
    assert "mine.jsonl:1: no 'text' field" in said and "uploads" not in said
    assert app.radio(key="fpr").value == 0.1


def test_a_failed_audit_does_not_leave_the_previous_audit_in_the_results_tab(tmp_path, monkeypatch):
    import threading

    from streamlit.testing.v1 import AppTest

    from app.jobs import AuditJob, job_registry
    from audit_core.history import load_audit
    from audit_core.store import Store

    db = tmp_path / "audits.sqlite"
    monkeypatch.setenv("RPA_AUDIT_DB", str(db))
    rid = _saved_audit(db)
    job = AuditJob("run-failed-0002", 1)
    job.thread = threading.Thread(target=lambda: None)
    job.thread.start()
    job.thread.join()
    job.error = "The target could not be used (authentication failed): 401"
    job_registry().add(job)
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["result"] = load_audit(Store(db), rid)
    at.session_state["result_run_id"] = rid
    at.session_state["job_run_id"] = job.run_id
    at.run()
    assert not at.exception
    assert "authentication failed" in " ".join(e.value for e in at.error)
    assert "result" not in at.session_state and not [s for s in at.subheader if s.value.startswith("Audit of")]
    assert "No results yet" in " ".join(i.value for i in at.info)


def test_a_pdf_that_cannot_be_made_leaves_the_json_and_csv_exports(tmp_path, monkeypatch):
    import audit_core.report

    def broken(*_a, **_k):
        raise RuntimeError("layout")

    monkeypatch.setattr(audit_core.report, "pdf_report", broken)
    at, _, run_id = _app_with_saved_audit(tmp_path, monkeypatch)
    at.selectbox(key="history_run").set_value(run_id).run()
    at.button(key="history_open").click().run()
    assert not at.exception
    exports = at.session_state["exports"]
    assert "pdf" not in exports and exports["json"] and exports["csv"]
    assert "The PDF could not be made (RuntimeError)" in " ".join(e.value for e in at.error)


def test_a_method_without_a_view_of_its_own_shows_its_result_and_evidence_per_document():
    """Only S-RAG, MBA and Verbatim had evidence in the Results tab; RAG-MIA's reading showed nothing."""
    result = {"documents": [{"id": "a", "text": "t"}], "config": {"methods": ["rag_mia", "entailment"]},
              "verdicts": [{"doc_id": "a", "verdict": "member", "reason": "r", "methods": {}}],
              "results": {"a": {
                  "rag_mia": {"method": "rag_mia", "doc_id": "a", "score": 0.83, "decision": True, "reason": None,
                              "evidence": {"answer": "Yes, it is.", "p_yes": 0.91, "asked": ["a", "b"]}},
                  "entailment": {"method": "entailment", "doc_id": "a", "score": None, "decision": None,
                                 "reason": "every answer was a refusal", "evidence": {}}}}}
    at = _results_part("_detail", result, "k")
    assert not at.exception
    shown = _texts(at, inputs=False).replace("\\", "")  # the markdown's escapes
    assert "RAG-MIA" in shown and "score 0.83; on its shadow" in shown and "member" in shown
    fields = next(d.value for d in at.dataframe if "field" in d.value.columns)
    assert dict(zip(fields["field"], fields["value"])) == {"answer": "Yes, it is.", "p_yes": "0.91"}  # no list
    assert "Entailment (MEntA)" in shown and "no answer (every answer was a refusal)" in shown


def test_the_pdf_is_made_with_a_progress_bar_of_its_documents(monkeypatch):
    """A spinner said nothing of how far a large audit's report had got; the bar counts its documents."""
    import app.tab_results as tab
    import audit_core.report as report

    seen: list[int] = []

    def pdf_report(result, progress=None, redact=True, **_):
        for _doc in result["verdicts"]:
            progress(1)
            seen.append(1)
        return b"%PDF-fake"

    monkeypatch.setattr(report, "pdf_report", pdf_report)
    monkeypatch.setattr(tab.PdfProgress, "done", lambda self: None)  # keep the bar to read it
    verdicts = [{"doc_id": d, "verdict": "inconclusive", "reason": "r", "methods": {}} for d in "abc"]
    at = _results_part("_exports", {"verdicts": verdicts, "documents": [], "config": {}}, "k")
    assert not at.exception and seen == [1, 1, 1]
    bar = at.get("progress")[-1]
    assert bar.proto.value == 100 and bar.proto.text == "Preparing the PDF report, documents laid out: 3 / 3 · done"
    assert at.session_state["exports"]["pdf"] == b"%PDF-fake"


def test_the_exports_hold_the_scores_behind_the_plots_and_a_redacted_csv(monkeypatch):
    """The PDF pointed to a CSV of the scores behind its plots that no export held; the verdicts CSV kept the
    reasons whole, a server's echo of a document included, whatever the redaction choice."""
    from audit_core import report
    from tests.audit_core.test_report import _quoting_result

    monkeypatch.setattr(report, "pdf_report", lambda *_a, **_k: b"%PDF-fake")  # the PDF has tests of its own
    result, word = _quoting_result()
    at = _results_part("_exports", result, "k")
    assert not at.exception
    exports = at.session_state["exports"]
    assert exports["redact"] and "pdf" in exports
    assert exports["scores"] == report.scores_csv(result, redact=True) and "calibrated_score,raw_score" in exports["scores"]
    assert word not in exports["csv"] and word not in exports["scores"]
    labels = [b.label for b in at.get("download_button")]
    assert "Scores behind the plots (CSV)" in labels


def test_the_results_tab_plots_no_method_that_sent_nothing_for_want_of_signal(monkeypatch):
    """The PDF left such a method out of its plots, while the Results tab still drew a plot with no document."""
    from audit_core import plots

    drawn: list[str] = []
    import plotly.graph_objects as go

    monkeypatch.setattr(plots, "kde_figure_plotly", lambda result, m: drawn.append(m) or go.Figure(go.Scatter()))
    cal = {"method": "x", "threshold": 0.5}
    result = {"documents": [{"id": "a", "text": "t"}], "config": {"methods": ["rag_mia", "mba"]},
              "calibrations": {"rag_mia": {**cal, "method": "rag_mia"}, "mba": {**cal, "method": "mba"}},
              "no_signal": {"mba": "no signal: shadow AUC 0.52"},
              "verdicts": [{"doc_id": "a", "verdict": "member", "reason": "r", "methods": {}}],
              "results": {"a": {"rag_mia": {"method": "rag_mia", "doc_id": "a", "score": 0.83, "decision": True,
                                            "reason": None, "evidence": {}}}}}
    at = _results_part("_kde", result, "k")
    assert not at.exception and drawn == ["rag_mia"]


def test_srags_evidence_says_a_score_that_decides_nothing_decides_nothing():
    """Under a table of five probabilities and a score of 0.78, the view said "S-RAG gave no probability: not
    cleared ...": any reason was read as a missing probability."""
    words = [{"word": f"w{i}", "prob": 0.5} for i in range(5)]
    result = {"documents": [{"id": "a", "text": "t"}], "config": {"methods": ["srag"]},
              "verdicts": [{"doc_id": "a", "verdict": "inconclusive", "reason": "r", "methods": {}}],
              "results": {"a": {"srag": {"method": "srag", "doc_id": "a", "score": 0.78, "decision": None,
                                         "reason": "not cleared: below the member threshold",
                                         "evidence": {"words": words}}}}}
    at = _results_part("_srag_detail", result, "a", "k")
    shown = _texts(at, inputs=False)
    assert not at.exception and "S-RAG decides nothing: not cleared" in shown and "gave no probability" not in shown
    result["results"]["a"]["srag"].update(score=None, reason="no logprobs")
    shown = _texts(_results_part("_srag_detail", result, "a", "k"), inputs=False)
    assert "S-RAG gave no answer: no logprobs" in shown


def test_an_endpoints_pace_is_counted_in_the_estimate_and_kept_by_the_connection_check(app):
    """The sidebar's requests a minute: the estimate says the least time they make, and the check's own
    requests go at that pace (``http_client.Pacer``)."""
    from tests.fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer(models=["m"]) as srv:
        app.radio(key="target_kind").set_value("OpenAI-compatible endpoint").run()
        app.text_input(key="base_url").input(srv.base_url)
        app.text_input(key="model").input("m").run()
        app.text_area(key="pasted").input(LONG_1).run()
        assert "requests a minute (the target's pace)" not in _texts(app)
        app.number_input(key="requests_per_minute").set_value(120.0).run()
        assert not app.exception
        assert "At 120 requests a minute (the target's pace), these" in _texts(app)
        app.button(key="check_connection").click().run(timeout=60)
        assert not app.exception
        times = [r["time"] for r in srv.requests if r["path"] == "/v1/chat/completions"]
    assert len(times) >= 2 and all(b - a >= 0.4 for a, b in zip(times, times[1:])), times


def test_a_large_audits_pdf_is_made_when_asked_for_and_the_other_exports_at_once(tmp_path, monkeypatch):
    """A finished audit of 1,000 documents held the page for about 50 s while its PDF was laid out (4,000:
    100 s), before anything could be read or downloaded (session 55). Beyond PDF_AT_ONCE it waits for a click."""
    import app.tab_results as tab
    import audit_core.report

    made: list[int] = []
    real = audit_core.report.pdf_report
    monkeypatch.setattr(audit_core.report, "pdf_report", lambda *a, **k: made.append(1) or real(*a, **k))
    monkeypatch.setattr(tab, "PDF_AT_ONCE", 1)  # the saved audit has two documents
    at, _, run_id = _app_with_saved_audit(tmp_path, monkeypatch)
    at.selectbox(key="history_run").set_value(run_id).run()
    at.button(key="history_open").click().run()
    assert not at.exception
    exports = at.session_state["exports"]
    assert exports["json"] and exports["csv"] and exports["scores"] and "pdf" not in exports and made == []
    make = next(b for b in at.button if b.label == "Make the PDF audit report")
    make.click().run()
    assert not at.exception and made == [1] and at.session_state["exports"]["pdf"].startswith(b"%PDF")
    at.run()
    assert made == [1]  # made once, kept


def test_choices_hidden_by_a_switch_are_kept_the_columns_the_sizes_the_elicitation_the_corpus(app, tmp_path,
                                                                                              monkeypatch):
    """A switch of the Source to "Paste text" and back kept the file but not its chosen columns (other texts and
    ids were audited without a word); custom shadow sizes went back to 60, an endpoint's MBA elicitation to its
    default and an uploaded public corpus to the shipped one when a switch hid them (a review, session 61)."""
    monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path))
    csv = "doc_id,ref,abstract,text\n" + "\n".join(
        f"p{i},R{i},\"{a}\",\"{t} {t}\"" for i, (a, t) in enumerate([(LONG_1, LONG_2), (LONG_2, LONG_1)]))
    app.radio(key="docs_source").set_value("Upload a CSV").run()
    app.file_uploader(key="csv_file").set_value(("a.csv", csv.encode(), "text/csv")).run()
    app.selectbox(key="text_column").set_value("abstract").run()
    app.selectbox(key="id_column").set_value("ref").run()
    app.radio(key="docs_source").set_value("Paste text").run()
    app.radio(key="docs_source").set_value("Upload a CSV").run()
    assert not app.exception
    assert (app.selectbox(key="text_column").value, app.selectbox(key="id_column").value) == ("abstract", "ref")
    assert [d.id for d in app.session_state["documents"]] == ["R0", "R1"]

    app.radio(key="audit_size").set_value("custom").run()
    app.number_input(key="n_members").set_value(150).run()
    app.radio(key="audit_size").set_value("quick").run()
    app.radio(key="audit_size").set_value("custom").run()
    assert not app.exception and app.number_input(key="n_members").value == 150
    assert not any("Session State API" in str(w.value) for w in app.warning)

    # the endpoint's MBA elicitation, and an uploaded public corpus, through a switch that hides them
    from app.sidebar import DEMO, ENDPOINT

    app.radio(key="target_kind").set_value(ENDPOINT).run()
    assert app.selectbox(key="elicitation_endpoint").value == "fill_in"  # the default for an endpoint
    app.selectbox(key="elicitation_endpoint").set_value("continue").run()
    app.radio(key="target_kind").set_value(DEMO).run()
    app.radio(key="target_kind").set_value(ENDPOINT).run()
    assert app.selectbox(key="elicitation_endpoint").value == "continue"
    lines = "".join(f'{{"text": "Public text number {i} about knees and elbows and stairs"}}\n' for i in range(40))
    app.radio(key="aux_choice").set_value("Upload a public corpus").run()
    app.file_uploader(key="aux_upload").set_value(("corpus.jsonl", lines.encode(), "application/json")).run()
    app.radio(key="aux_choice").set_value("Shipped corpus (MedQuAD answers)").run()
    app.radio(key="aux_choice").set_value("Upload a public corpus").run()
    assert not app.exception and "40 public texts read" in _texts(app)


def test_a_resumed_audit_gets_exports_of_its_own():
    """A resumed run keeps its first start as "created": cancelled during the controls, resumed and cancelled
    again, it had the same key as the run before, and its PDF, JSON and CSVs were that run's (a review, 61)."""
    from app.tab_results import result_key

    first = {"target": "t", "created": "2026-12-02T18:49:11+00:00", "verdicts": [{"doc_id": "a"}], "cancelled": True,
             "finished": "2026-12-02T18:50:00+00:00", "account": {"queries": 7},
             "collection": {"control_scores": {"c1": 0.1, "c2": 0.2}}}
    resumed = {**first, "finished": "2026-12-02T18:52:00+00:00", "account": {"queries": 9},
               "collection": {"control_scores": {"c1": 0.1, "c2": 0.2, "c3": 0.3, "c4": 0.4}}}
    assert result_key(first) != result_key(resumed)
    assert result_key(first) == result_key(json.loads(json.dumps(first)))  # the same audit, read back
