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
