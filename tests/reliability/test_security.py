"""Issue 15: what an attacker on the network, or one who can write to the cache
directory, could get from the app. Each test failed on the code before the fix.

Servers here are local captures on 127.0.0.1: they record every request and
its headers, so "the key was not sent" is read from what arrived, not assumed.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from audit_core.target.base import ChatRequest
from audit_core.target.openai_compat import OpenAITarget, RequestRejected
from tests.fake_openai_server import FakeOpenAIServer, Reply

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_KEY = "rpaOperatorKey.only-for-the-named-host.7f3a"


def ask(text: str = "hi") -> ChatRequest:
    return ChatRequest.chat([{"role": "user", "content": text}], max_tokens=1)


# --------------------------------------------------------------------------- 1. listen on loopback only


def test_streamlit_listens_on_loopback_only():
    """Streamlit's own config loader, run where ``./run app`` runs it, reads 127.0.0.1."""
    code = ("from streamlit import config; config.get_config_options(force_reparse=True); "
            "print(config.get_option('server.address'))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "127.0.0.1"


# --------------------------------------------------------------------------- 2. the key goes to the named host only


def test_an_empty_key_field_sends_no_authorization_even_with_the_env_key_set(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", OPERATOR_KEY)
    with FakeOpenAIServer(models=["m"]) as capture:
        target = OpenAITarget(capture.base_url, "m", None, timeout_s=5, max_retries=0)
        caps = target.capabilities()
        target.complete(ask())
    assert caps.reachable
    assert capture.requests and not any(r["has_auth"] for r in capture.requests)


def test_a_redirect_to_another_host_is_not_followed(monkeypatch):
    """A (307) redirect to a second loopback server: it receives nothing, key or documents."""
    with FakeOpenAIServer(models=["m"]) as second, FakeOpenAIServer(models=["m"]) as first:
        first.script(Reply.json(307, {}, headers={"Location": f"{second.base_url}/chat/completions"}))
        target = OpenAITarget(first.base_url, "m", OPERATOR_KEY, timeout_s=5, max_retries=0)
        with pytest.raises(RequestRejected, match="redirects requests .*not followed") as info:
            target.complete(ask("my private document"))
        assert f"127.0.0.1:{second.port}" in str(info.value)
        assert [r["has_auth"] for r in first.requests] == [True]  # the named host got it
        assert second.requests == []  # the other one got nothing at all


def test_an_unreachable_url_without_a_key_is_reported_unreachable():
    """Issue 20 point 7: with no key the error was "authentication failed"."""
    caps = OpenAITarget("http://127.0.0.1:9/v1", "m", None, timeout_s=2, max_retries=0).capabilities()
    assert not caps.reachable and "cannot connect" in caps.detail


# --------------------------------------------------------------------------- 2 (app). the env key only when ticked

APP = str(ROOT / "app" / "main.py")


@pytest.fixture
def app(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("RPA_AUDIT_DB", str(tmp_path / "audits.sqlite"))
    monkeypatch.setenv("OPENAI_API_KEY", OPERATOR_KEY)  # the operator's key is there, the visitor types none
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.radio(key="target_kind").set_value("OpenAI-compatible endpoint").run()
    return at


def _captions(at) -> str:
    return " ".join(str(c.value) for c in at.caption)


def test_app_sends_the_env_key_only_when_its_box_is_ticked_and_names_the_host(app):
    with FakeOpenAIServer(models=["m"]) as capture:
        app.text_input(key="base_url").input(capture.base_url)
        app.text_input(key="model").input("m").run()
        assert not app.checkbox(key="use_env_key").value
        assert "Use the key in the OPENAI_API_KEY environment variable" == app.checkbox(key="use_env_key").label
        app.button(key="check_connection").click().run(timeout=60)
        assert not app.exception, app.exception
        assert capture.requests and not any(r["has_auth"] for r in capture.requests)
        assert app.success  # the server needs no key: connected

        capture.reset_stats()
        app.checkbox(key="use_env_key").check().run()
        assert f"will be sent to **127.0.0.1:{capture.port}** only" in _captions(app)
        assert not app.success  # the settings changed: the old message is gone
        app.button(key="check_connection").click().run(timeout=60)
        assert capture.requests and all(r["has_auth"] for r in capture.requests)


def test_a_typed_key_is_used_and_a_connection_message_goes_when_url_model_or_key_change(app):
    with FakeOpenAIServer(models=["m"], api_key="typed-key-123") as capture:
        app.text_input(key="base_url").input(capture.base_url)
        app.text_input(key="model").input("m")
        app.text_input(key="api_key").input("typed-key-123").run()
        assert f"The key you entered will be sent to **127.0.0.1:{capture.port}** only" in _captions(app)
        app.button(key="check_connection").click().run(timeout=60)
        assert app.success and not app.error
        app.text_input(key="api_key").input("another-key").run()
        assert not app.success and not app.error  # a message about the old key is not shown
        app.button(key="check_connection").click().run(timeout=60)
        assert "rejected" in " ".join(e.value for e in app.error)
        app.text_input(key="model").input("m2").run()
        assert not app.error
