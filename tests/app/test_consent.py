"""A secret given for one host is not sent to another when the target's URL changes (app/consent.py)."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.consent import bind_to_origin, origin
from tests.app.test_app import LONG_1, app  # noqa: F401  (fixture)

FILE = """type: http
url: URL
headers:
  X-Api-Key: $RPA_TEST_RAG_KEY
body:
  question: "{{prompt}}"
answer_path: $.answer
"""
SECRET = "env-secret-4711"


def test_an_origin_is_scheme_host_and_port_without_credentials_or_path():
    assert origin("https://User:pw@API.example.com/v1?k=1") == "https://api.example.com:443"
    assert origin("https://api.example.com:443/x") == origin("https://api.example.com")
    assert origin("http://api.example.com/v1") != origin("https://api.example.com/v1")
    assert origin("http://127.0.0.1:8100/ask") != origin("http://127.0.0.1:8101/ask")
    assert origin("") == origin("api.example.com/v1") == origin("http://[::1/v1") == ""


def test_binding_resets_the_secrets_only_when_a_named_origin_changes():
    state: dict = {}
    reset = {"key": "", "allowed": False}
    assert bind_to_origin(state, "g", "", reset) is None            # no host yet: nothing bound
    state.update(key="typed", allowed=True)
    assert bind_to_origin(state, "g", "https://a.example/v1", reset) is None   # the first host binds
    assert state["key"] == "typed" and state["allowed"] is True
    assert bind_to_origin(state, "g", "https://a.example/v2", reset) is None   # same origin, other path
    assert state["key"] == "typed"
    assert bind_to_origin(state, "g", "https://b.example/v1", reset) == "https://a.example:443"
    assert state["key"] == "" and state["allowed"] is False
    assert bind_to_origin(state, "g", "https://a.example/v1", reset) is None   # nothing held: no note



@pytest.mark.parametrize("odd", ["https://b.example:+443/v1", "http://127.0.0.1:\u0664\u0662\u0665/v1",
                                 "https://b.example:99999/v1", "http://[::1]x/v1"])
def test_a_key_does_not_follow_to_an_address_whose_port_cannot_be_read(odd):
    """HTTP clients read "+443" or non-ASCII digits as a port, Python refuses them: such an address is an
    origin of its own (the key is dropped) and is refused as a service address."""
    from audit_core.target.base import check_service_url

    state: dict = {}
    reset = {"key": ""}
    bind_to_origin(state, "g", "https://a.example/v1", reset)
    state["key"] = "typed"
    assert bind_to_origin(state, "g", odd, reset) == "https://a.example:443"
    assert state["key"] == ""
    assert origin(odd) != origin(odd.replace(odd.split("/")[2], "b.example"))
    with pytest.raises(ValueError, match="port"):
        check_service_url(odd, "url")


@pytest.fixture
def recording_server():
    """A local JSON API that records the key header of every request."""
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append(self.headers.get("X-Api-Key") or self.headers.get("Authorization"))
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps({"answer": "ok"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", seen
    srv.shutdown()


def test_an_environment_key_allowed_for_one_target_file_is_not_sent_to_the_next_files_host(
        app, recording_server, monkeypatch):  # noqa: F811
    url, seen = recording_server
    monkeypatch.setenv("RPA_TEST_RAG_KEY", SECRET)
    app.radio(key="target_kind").set_value("Any HTTP API (target file)").run()
    app.text_area(key="target_file_text").input(FILE.replace("URL", "http://localhost:9/ask")).run()
    app.checkbox(key="tf_env_RPA_TEST_RAG_KEY").check().run()
    # another file, pointing elsewhere: the permission stays with localhost:9
    app.text_area(key="target_file_text").input(FILE.replace("URL", url + "/ask")).run()
    assert not app.exception
    assert app.checkbox(key="tf_env_RPA_TEST_RAG_KEY").value is False
    assert "will not be sent to the new one" in " ".join(w.value for w in app.warning)
    app.button(key="check_connection").click().run(timeout=60)
    assert SECRET not in seen and "RPA_TEST_RAG_KEY" in " ".join(e.value for e in app.error)
    # allowed again, now for this host: sent
    app.checkbox(key="tf_env_RPA_TEST_RAG_KEY").check().run()
    app.button(key="check_connection").click().run(timeout=60)
    assert not app.exception and seen and seen[-1] == SECRET


def test_a_key_typed_for_one_endpoint_is_cleared_when_the_base_url_moves_to_another_host(app):  # noqa: F811
    app.radio(key="target_kind").set_value("OpenAI-compatible endpoint").run()
    app.text_input(key="base_url").input("http://127.0.0.1:9/v1")
    app.text_input(key="model").input("m")
    app.text_input(key="api_key").input("sk-typed-for-port-9").run()
    app.text_input(key="base_url").input("http://127.0.0.1:9/v2").run()  # same origin: kept
    assert app.text_input(key="api_key").value == "sk-typed-for-port-9"
    app.text_input(key="base_url").input("http://127.0.0.1:10/v1").run()
    assert not app.exception
    assert app.text_input(key="api_key").value == ""
    assert app.session_state["_api_key_typed"] == ""
    assert "will not be sent to the new one" in " ".join(w.value for w in app.warning)


def test_a_password_or_query_in_the_base_url_is_never_shown(app):  # noqa: F811
    from tests.app.test_app import _texts

    app.radio(key="target_kind").set_value("OpenAI-compatible endpoint").run()
    app.text_input(key="base_url").input("https://user:hunter2pass@127.0.0.1:9/v1")
    app.text_input(key="model").input("m").run()
    app.button(key="check_connection").click().run(timeout=60)
    assert not app.exception
    assert "user name or password" in " ".join(e.value for e in app.error)
    assert "hunter2pass" not in _texts(app, inputs=False)  # checked while the refusal is on the page
    app.text_input(key="base_url").input("http://127.0.0.1:9/v1?api_key=sk-query-secret").run()
    app.button(key="check_connection").click().run(timeout=60)
    shown = _texts(app, inputs=False)  # the URL field holds the query; nothing else may show it
    assert not app.exception and "hunter2pass" not in shown and "sk-query-secret" not in shown
    assert "127.0.0.1:9/v1 · m" in shown  # the Run tab's target line, without the query


def test_a_pasted_key_with_a_trailing_newline_is_sent_without_it(app, recording_server):  # noqa: F811
    url, seen = recording_server
    app.radio(key="target_kind").set_value("OpenAI-compatible endpoint").run()
    app.text_input(key="base_url").input(url + "/v1")
    app.text_input(key="model").input("m")
    app.text_input(key="api_key").input("sk-pasted-key\n").run()
    app.button(key="check_connection").click().run(timeout=60)
    assert not app.exception and "Bearer sk-pasted-key" in seen
    assert "header" not in " ".join(e.value for e in app.error).lower()



def test_a_connection_check_goes_stale_when_the_target_file_changes_at_the_same_url(
        app, recording_server, monkeypatch):  # noqa: F811
    """Only the URL and the name identified a file's check: another body or answer path kept the old result."""
    url, seen = recording_server
    monkeypatch.setenv("RPA_TEST_RAG_KEY", SECRET)
    file = FILE.replace("URL", url + "/ask")
    app.radio(key="target_kind").set_value("Any HTTP API (target file)").run()
    app.text_area(key="target_file_text").input(file).run()
    app.checkbox(key="tf_env_RPA_TEST_RAG_KEY").check().run()
    app.button(key="check_connection").click().run(timeout=60)
    said = lambda: " ".join(x.value for x in [*app.success, *app.warning, *app.error])  # noqa: E731
    assert not app.exception and "Connected" in said()
    unchecked = lambda: "not checked yet" in " ".join(c.value for c in app.caption)  # noqa: E731
    app.text_area(key="pasted").input(LONG_1).run()  # documents, so the Run tab shows its estimate
    assert not unchecked()  # the Run tab counts the style the check found
    app.text_area(key="target_file_text").input(file.replace("$.answer", "$.reply")).run()
    assert "Connected" not in said()  # another answer path: the old result is no longer shown
    assert unchecked()  # ... and the Run tab (which starts the audit with it) no longer uses it either
    app.text_area(key="target_file_text").input(file).run()
    app.text_input(key="tf_secret_RPA_TEST_RAG_KEY").input("another-key-typed").run()
    assert "Connected" not in said()  # another secret: stale too


def test_the_consent_names_a_look_alike_host_as_the_request_sends_it(app):  # noqa: F811
    """A file's base URL "https://аpi.openai.com/v1" (its first letter Cyrillic) read as OpenAI's host in the
    box that sends $RPA_TEST_RAG_KEY; the key would have gone to xn--pi-6kc.openai.com (a review, session 61)."""
    from audit_core.target.base import consent_host

    assert consent_host("https://api.openai.com/v1") == "api.openai.com"
    assert consent_host("http://user:pw@127.0.0.1:8000/v1") == "127.0.0.1:8000"
    assert consent_host("https://аpi.openai.com:8443/v1").startswith("xn--pi-6kc.openai.com:8443 (written аpi.openai.com")
    app.radio(key="target_kind").set_value("Any HTTP API (target file)").run()
    app.text_area(key="target_file_text").input(FILE.replace("URL", "https://аpi.openai.com/v1/ask")).run()
    assert not app.exception
    box = app.checkbox(key="tf_env_RPA_TEST_RAG_KEY").label
    assert "xn--pi-6kc.openai.com" in box and "not all its letters are ASCII" in box
