"""A request ends by its deadline however slowly a server sends (audit_core/target/deadline.py)."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from audit_core.target.base import ChatRequest, Unreachable

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
