"""Sidebar and Documents tab: bad input said in words, Start disabled while the audit cannot start, no key
repeated, and choices kept over a switch of the options that hide them (review of the app)."""
from __future__ import annotations

import pytest

from tests.app.test_app import LONG_1, LONG_2, SECRET, _texts, app  # noqa: F401 -- ``app`` is the fixture

FILE = "type: http\nurl: http://127.0.0.1:9/ask\nheaders: {X-Api-Key: $RPA_TEST_UNSET_KEY}\nbody: {q: '{{prompt}}'}\n" \
       "answer_path: $.a\n"
OTHER = "type: http\nurl: http://b.example/ask\nbody: {q: '{{prompt}}'}\nanswer_path: $.a\n"
LONG_3 = LONG_2.replace("knee", "hip").replace("March", "April")


def _upload_docs(app, csv: str) -> None:
    app.radio(key="docs_source").set_value("Upload a CSV").run()
    app.file_uploader(key="csv_file").set_value(("mine.csv", csv.encode(), "text/csv")).run()


def _errors(app) -> str:
    return " ".join(e.value for e in app.error)


@pytest.mark.parametrize("flag", ["1.0", "oui"])
def test_a_control_column_value_is_read_as_a_number_or_refused_never_made_a_document(app, flag):
    _upload_docs(app, f'text,control\n"{LONG_1}",\n"{LONG_2}",{flag}\n"{LONG_3}",\n')
    assert not app.exception
    if flag == "1.0":
        assert len(app.session_state["documents"]) == 2 and len(app.session_state["controls"]) == 1
    else:
        assert app.session_state["documents"] == [] and not app.session_state["controls"]
        assert "'oui' (row 2)" in _errors(app) and "Write yes" in _errors(app)


def test_a_file_whose_only_column_is_control_is_bad_input_not_a_bug(app):
    _upload_docs(app, "control\nyes\n")
    assert not app.exception
    assert "only column is 'control'" in _errors(app) and "bug" not in _errors(app)


def test_start_waits_for_a_value_of_the_target_files_variable(app, monkeypatch):
    from app.sidebar import HTTP_FILE

    monkeypatch.delenv("RPA_TEST_UNSET_KEY", raising=False)
    app.text_area(key="pasted").input(LONG_1).run()
    app.radio(key="target_kind").set_value(HTTP_FILE).run()
    app.text_area(key="target_file_text").input(FILE).run()
    assert app.button(key="start_audit").disabled
    assert "sends $RPA_TEST_UNSET_KEY to 127.0.0.1" in " ".join(w.value for w in app.warning)
    app.text_input(key="tf_secret_RPA_TEST_UNSET_KEY").input("a-typed-value-123").run()
    assert not app.exception and not app.button(key="start_audit").disabled


def test_start_waits_for_an_endpoint_url_with_a_scheme(app):
    from app.sidebar import ENDPOINT

    app.text_area(key="pasted").input(LONG_1).run()
    app.radio(key="target_kind").set_value(ENDPOINT).run()
    app.text_input(key="base_url").input("api.example.com/v1")
    app.text_input(key="model").input("m").run()
    assert app.button(key="start_audit").disabled
    assert "http:// or https://" in " ".join(w.value for w in app.warning)
    app.text_input(key="base_url").input("https://api.example.com/v1").run()
    assert not app.button(key="start_audit").disabled


def test_start_waits_for_a_public_corpus_with_usable_texts(app, tmp_path, monkeypatch):
    monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path))
    app.text_area(key="pasted").input(LONG_1).run()
    assert not app.button(key="start_audit").disabled
    app.radio(key="aux_choice").set_value("Upload a public corpus").run()
    app.file_uploader(key="aux_upload").set_value(("c.jsonl", b'{"text": null}\n{"text": ""}\n',
                                                   "application/json")).run()
    assert not app.exception and app.button(key="start_audit").disabled
    assert "gives 0 usable text(s)" in _errors(app)


@pytest.mark.parametrize("key", [SECRET, "0123456789abcdef0123456789abcdef"])
def test_a_key_pasted_into_the_base_url_is_refused_without_being_repeated(app, key):
    from app.sidebar import ENDPOINT

    app.text_area(key="pasted").input(LONG_1).run()
    app.radio(key="target_kind").set_value(ENDPOINT).run()
    app.text_input(key="base_url").input(key)
    app.text_input(key="model").input("m").run()
    app.button(key="check_connection").click().run(timeout=30)
    assert not app.exception and "http:// or https://" in _errors(app)
    assert key not in _texts(app, inputs=False)


def test_a_pasted_target_file_is_not_ignored_without_a_word_while_a_file_is_uploaded(app):
    from app.sidebar import HTTP_FILE

    app.radio(key="target_kind").set_value(HTTP_FILE).run()
    app.text_area(key="target_file_text").input(OTHER).run()
    app.file_uploader(key="target_file_upload").set_value(("t.yaml", FILE.encode(), "application/x-yaml")).run()
    assert app.text_area(key="target_file_text").disabled
    assert "The uploaded t.yaml is used; the pasted target file below it is not" in " ".join(i.value for i in app.info)


def test_a_target_file_upload_survives_another_target_and_its_secret_goes_with_it(app):
    from app.sidebar import DEMO, HTTP_FILE

    app.text_area(key="pasted").input(LONG_1).run()
    app.radio(key="target_kind").set_value(HTTP_FILE).run()
    app.file_uploader(key="target_file_upload").set_value(("t.yaml", FILE.encode(), "application/x-yaml")).run()
    app.text_input(key="tf_secret_RPA_TEST_UNSET_KEY").input("a-typed-value-123").run()
    app.radio(key="target_kind").set_value(DEMO).run()
    app.radio(key="target_kind").set_value(HTTP_FILE).run()
    assert not app.exception and not app.button(key="start_audit").disabled
    assert "Using t.yaml, uploaded earlier" in " ".join(c.value for c in app.caption)
    app.button(key="target_file_forget").click().run()
    assert not app.exception and app.button(key="start_audit").disabled
    assert "tf_secret_RPA_TEST_UNSET_KEY" not in app.session_state


def test_an_endpoints_pace_and_reuse_policy_survive_the_demo_and_back(app):
    from app.sidebar import DEMO, ENDPOINT

    app.radio(key="target_kind").set_value(ENDPOINT).run()
    app.number_input(key="requests_per_minute").set_value(20).run()
    app.checkbox(key="reuse_answers").check().run()
    app.number_input(key="reuse_days").set_value(3).run()
    app.radio(key="target_kind").set_value(DEMO).run()
    app.radio(key="target_kind").set_value(ENDPOINT).run()
    assert not app.exception
    assert app.number_input(key="requests_per_minute").value == 20
    assert app.checkbox(key="reuse_answers").value and app.number_input(key="reuse_days").value == 3


def test_a_controls_upload_survives_a_canary_kit_and_back(app):
    app.text_area(key="pasted").input(LONG_1).run()
    app.file_uploader(key="controls_file").set_value(("c.csv", f'id,text\nc1,"{LONG_2}"\n'.encode(),
                                                      "text/csv")).run()
    assert len(app.session_state["controls"]) == 1
    app.radio(key="docs_source").set_value("A canary kit").run()
    app.radio(key="docs_source").set_value("Paste text").run()
    assert not app.exception and len(app.session_state["controls"]) == 1
    app.button(key="controls_forget").click().run()
    assert not app.exception and not app.session_state["controls"]
