"""A request ends by its deadline however slowly a server sends (audit_core/target/http_client.py)."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from audit_core.target.base import ChatRequest, TargetError, Unreachable

REQUEST = ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4)


class TrickleServer:
    """A raw-socket server that reads a request, then sends ``head`` and a byte every 0.2 s, forever."""

    def __init__(self, head: bytes, drip: bytes = b" ") -> None:
        self.head, self.drip = head, drip
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            conn.sendall(self.head)
            while not self.stop.is_set():
                conn.sendall(self.drip)
                time.sleep(0.2)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


HEADERS_TRICKLE = b"HTTP/1.1 200 OK\r\nX-Slow: "
BODY_TRICKLE = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
SSE_LINE_TRICKLE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: {\"answer\": \""


def _openai(url: str):
    from audit_core.target.openai_compat import OpenAITarget

    return OpenAITarget(url + "/v1", "m", None, timeout_s=1, max_retries=0)


def _http(url: str, stream: bool = False):
    from audit_core.target.http_api import HttpTarget, HttpTargetConfig

    return HttpTarget(HttpTargetConfig(url=url + "/ask", body={"q": "{{prompt}}"}, answer_path="$.answer",
                                       timeout_s=1, stream=stream, max_retries=0))


@pytest.mark.parametrize("make, head", [
    (_openai, HEADERS_TRICKLE), (_openai, BODY_TRICKLE), (_http, HEADERS_TRICKLE),
    (lambda url: _http(url, stream=True), SSE_LINE_TRICKLE),
])
def test_a_server_that_trickles_forever_is_cut_off_at_the_deadline(make, head):
    """Each of these held the request for hours: httpx's timeout bounds each read, not the answer."""
    server = TrickleServer(head)
    try:
        target = make(server.url)
        t0 = time.monotonic()
        with pytest.raises(Unreachable, match="within 1s"):
            target.complete(REQUEST)
        assert time.monotonic() - t0 < 6
    finally:
        server.close()


def test_a_target_on_this_machine_ignores_the_environments_proxy(monkeypatch):
    """With HTTP_PROXY set, requests (and the key in them) to a 127.0.0.1 target went to the proxy."""
    from tests.fake_openai_server import FakeOpenAIServer

    proxied: list[bytes] = []
    proxy = TrickleServer(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n", drip=b"")
    proxy._one = lambda conn: (proxied.append(conn.recv(65536)), conn.close())  # records what reached it
    try:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("ALL_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        with FakeOpenAIServer(api_key="sk-loopback-key-123", models=["m"], reply_text="fine") as srv:
            from audit_core.target.openai_compat import OpenAITarget

            assert OpenAITarget(srv.base_url, "m", "sk-loopback-key-123", timeout_s=5).complete(REQUEST).text == "fine"
            assert _http(f"http://127.0.0.1:{srv.port}").config.url  # built without error
        assert proxied == []
    finally:
        proxy.close()


def test_a_plain_http_target_elsewhere_never_goes_through_the_environments_proxy(monkeypatch):
    """A proxy forwards a plain-http request whole: the key went to a host the user never named for it."""
    from audit_core.target.http_client import client_options
    from audit_core.target.openai_compat import OpenAITarget

    proxied: list[bytes] = []
    proxy = TrickleServer(b"", drip=b"")
    proxy._one = lambda conn: (proxied.append(conn.recv(65536)), conn.close())
    try:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
            monkeypatch.setenv(name, proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        target = OpenAITarget("http://10.255.255.1:9/v1", "m", "sk-plain-http-key-123", timeout_s=1, max_retries=0)
        with pytest.raises(TargetError):  # unreachable, or whatever a sandbox's network answers in its place
            target.complete(REQUEST)
        assert proxied == []
        # an https request only passes through the proxy's tunnel: the environment's setting is kept there
        assert client_options("https://api.example.com/v1")["trust_env"] is True
        assert client_options("HTTP://api.example.com/v1")["trust_env"] is False
    finally:
        proxy.close()


@pytest.mark.parametrize("setting", ["socks5://127.0.0.1:9", "ftp://127.0.0.1:21"])
def test_a_proxy_setting_httpx_cannot_use_is_said_in_plain_words(setting, monkeypatch):
    from audit_core.target.openai_compat import OpenAITarget

    monkeypatch.setenv("ALL_PROXY", setting)
    monkeypatch.setenv("HTTPS_PROXY", setting)
    with pytest.raises(ValueError, match="check the proxy settings"):
        OpenAITarget("https://api.example.com/v1", "m", None)
    with pytest.raises(ValueError, match="check the proxy settings"):
        _http("https://api.example.com")
