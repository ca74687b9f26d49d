"""A small, scriptable OpenAI-compatible HTTP server for connector and fault-injection tests.

It listens on 127.0.0.1 only (a random free port) and runs in a background
thread, so a test talks to it through the real ``openai`` client and the real
network stack: retries, timeouts, headers and malformed bodies are exercised
exactly as they would be against a remote endpoint.

Two layers of behaviour:

1. **Realistic defaults.** With nothing scripted, ``POST /v1/chat/completions``
   answers like a well-behaved endpoint: it checks the bearer key (when
   ``api_key`` is set) and the model (against ``models``), rejects prompts longer
   than ``max_context_chars`` with a context-length error, and returns
   ``reply_text`` split into tokens, with logprobs and ``top_logprobs``
   alternatives when asked (deterministic values, the chosen token first).
   ``GET /v1/models`` lists ``models``. Replace the chat answer entirely with
   ``responder=callable(request_json) -> Reply``.

2. **A script.** ``server.script(reply, reply, ...)`` queues replies that are
   served, in order, before the defaults resume (one per request, for the chat
   path unless ``path=`` is given; a scripted reply skips the key and model
   checks). Build them with the ``Reply`` helpers::

       with FakeOpenAIServer(api_key="sk-x", models=["m"]) as srv:
           srv.script(Reply.error(429, "slow down", headers={"Retry-After": "0.2"}),
                      Reply.error(503, "overloaded"),
                      Reply.completion("Hello", logprobs=False),   # 200 without logprobs
                      Reply.malformed(),                           # 200, broken JSON
                      Reply.completion("late").after(5.0),         # slow: beyond a timeout
                      Reply.drop())                                # close without answering
           OpenAI(base_url=srv.base_url, api_key="sk-x", ...)

Observation: ``srv.requests`` (every request: method, path, query string, JSON body, the
Authorization header's presence and the header names, but never a value), ``srv.max_in_flight``
(highest number of requests handled at once) and ``srv.reset_stats()``.
"""
from __future__ import annotations

import collections
import json
import threading
import time
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"


@dataclass(frozen=True)
class Reply:
    """One scripted HTTP answer.

    ``body`` is JSON-encoded when it is a dict or list and sent as-is when it is
    bytes or str. ``delay_s`` waits before answering (to trip client timeouts);
    ``close_without_reply`` closes the connection without any response.
    """

    status: int = 200
    body: dict | list | str | bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    close_without_reply: bool = False
    content_type: str = "application/json"

    def after(self, delay_s: float) -> "Reply":
        """The same reply, sent only after ``delay_s`` seconds."""
        return replace(self, delay_s=delay_s)

    @classmethod
    def json(cls, status: int, body: dict | list, headers: dict[str, str] | None = None) -> "Reply":
        return cls(status=status, body=body, headers=dict(headers or {}))

    @classmethod
    def error(cls, status: int, message: str, *, code: str | None = None, type: str | None = None,
              headers: dict[str, str] | None = None) -> "Reply":
        """An error in OpenAI's envelope: {"error": {"message", "type", "code", "param"}}."""
        err = {"message": message, "type": type or _default_error_type(status), "code": code, "param": None}
        return cls(status=status, body={"error": err}, headers=dict(headers or {}))

    @classmethod
    def completion(cls, text: str = "OK", *, logprobs: bool = True, top_logprobs: int = 5,
                   model: str = "fake-model", prompt_tokens: int = 7, finish_reason: str = "stop") -> "Reply":
        """A normal 200 chat completion (see ``completion_body``)."""
        return cls(body=completion_body(text, logprobs=logprobs, top_logprobs=top_logprobs, model=model,
                                        prompt_tokens=prompt_tokens, finish_reason=finish_reason))

    @classmethod
    def malformed(cls) -> "Reply":
        """A 200 whose JSON body is cut off mid-way."""
        return cls(body=b'{"id": "chatcmpl-broken", "choices": [{"index": 0, "message": {"content": "O')

    @classmethod
    def drop(cls) -> "Reply":
        """Close the connection without sending anything."""
        return cls(close_without_reply=True)


def _default_error_type(status: int) -> str:
    if status in (401, 403):
        return "invalid_request_error" if status == 403 else "authentication_error"
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def tokenize(text: str) -> list[str]:
    """Split a reply into tokens the way BPE vocabularies show words: a leading space kept."""
    out: list[str] = []
    for i, word in enumerate(text.split(" ")):
        out.append(word if i == 0 else " " + word)
    return [t for t in out if t]


def completion_body(text: str, *, logprobs: bool = True, top_logprobs: int = 5, model: str = "fake-model",
                    prompt_tokens: int = 7, finish_reason: str = "stop") -> dict:
    """An OpenAI chat.completion object for ``text``.

    Token i gets logprob ``-0.1 * (i + 1)``; its alternatives are the token itself
    first, then ``"<alt{j}>"`` with logprob ``-(j + 1)``, so tests can check parsing
    against known values.
    """
    toks = tokenize(text)
    content = None
    if logprobs:
        content = []
        for i, tok in enumerate(toks):
            lp = round(-0.1 * (i + 1), 6)
            top = [{"token": tok, "logprob": lp, "bytes": list(tok.encode())}]
            top += [{"token": f"<alt{j}>", "logprob": float(-(j + 1)), "bytes": None}
                    for j in range(1, max(top_logprobs, 0))]
            content.append({"token": tok, "logprob": lp, "bytes": list(tok.encode()),
                            "top_logprobs": top[:top_logprobs]})
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": {"content": content} if logprobs else None,
            "finish_reason": finish_reason,
        }],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(toks),
                  "total_tokens": prompt_tokens + len(toks)},
    }


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-exchange (a capped or timed-out read) is no error of the server's: not
    printed as a traceback among the test output."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class FakeOpenAIServer:
    """An OpenAI-compatible server on 127.0.0.1 (see the module docstring)."""

    def __init__(self, *, api_key: str | None = None, models: list[str] | None = None,
                 reply_text: str = "OK", max_context_chars: int | None = None,
                 supports_logprobs: bool = True, models_endpoint: bool = True,
                 responder: Callable[[dict], Reply] | None = None) -> None:
        self.api_key = api_key
        self.models = list(models) if models is not None else ["fake-model"]
        self.reply_text = reply_text
        self.max_context_chars = max_context_chars
        self.supports_logprobs = supports_logprobs
        self.models_endpoint = models_endpoint
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._queues: dict[str, collections.deque[Reply]] = collections.defaultdict(collections.deque)
        self._lock = threading.Lock()
        self._query = threading.local()  # the query string of the request this handler thread serves
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "FakeOpenAIServer":
        handler = _make_handler(self)
        self._httpd = _QuietServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping in a scripted delay
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # ------------------------------------------------------------------ scripting

    def script(self, *replies: Reply, path: str = CHAT_PATH) -> None:
        """Queue replies for ``path``; each request takes the next one, then defaults resume."""
        with self._lock:
            self._queues[path].extend(replies)

    def pending(self, path: str = CHAT_PATH) -> int:
        """How many scripted replies are still waiting for ``path``."""
        with self._lock:
            return len(self._queues[path])

    def reset_stats(self) -> None:
        with self._lock:
            self.requests.clear()
            self.max_in_flight = 0

    def chat_requests(self) -> list[dict]:
        """The JSON bodies of the chat completion requests received so far."""
        with self._lock:
            return [r["json"] for r in self.requests if r["path"] == CHAT_PATH]

    # ------------------------------------------------------------------ behaviour

    def _next_scripted(self, path: str) -> Reply | None:
        with self._lock:
            q = self._queues.get(path)
            return q.popleft() if q else None

    def _authorized(self, auth_header: str | None) -> Reply | None:
        if self.api_key is None:
            return None
        given = (auth_header or "").removeprefix("Bearer ").strip()
        if given == self.api_key:
            return None
        # Like many real servers, echo the key it got: the client must scrub it.
        return Reply.error(401, f"Incorrect API key provided: {given}.", code="invalid_api_key")

    def _default_chat(self, body: dict) -> Reply:
        if self.responder is not None:
            return self.responder(body)
        model = body.get("model")
        if model not in self.models:
            return Reply.error(404, f"The model `{model}` does not exist or you do not have access to it.",
                               code="model_not_found")
        prompt_chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
        if self.max_context_chars is not None and prompt_chars > self.max_context_chars:
            return Reply.error(400, f"This model's maximum context length is {self.max_context_chars} "
                                    f"characters. However, your messages resulted in {prompt_chars}.",
                               code="context_length_exceeded")
        want = bool(body.get("logprobs")) and self.supports_logprobs
        return Reply.completion(self.reply_text, logprobs=want, top_logprobs=int(body.get("top_logprobs") or 0),
                                model=str(model), prompt_tokens=max(1, prompt_chars // 4))

    def _default_models(self) -> Reply:
        if not self.models_endpoint:
            return Reply.error(404, "Not Found")
        return Reply.json(200, {"object": "list", "data": [
            {"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]})

    def _handle(self, method: str, path: str, headers: dict[str, str], raw_body: bytes) -> Reply:
        try:
            body = json.loads(raw_body) if raw_body else {}
        except json.JSONDecodeError:
            body = {"_unparsed": raw_body.decode("utf-8", "replace")}
        with self._lock:
            self.requests.append({"method": method, "path": path, "query": getattr(self._query, "value", ""),
                                  "json": body,
                                  "has_auth": "authorization" in headers, "header_names": sorted(headers),
                                  "time": time.monotonic()})
        scripted = self._next_scripted(path)
        if scripted is not None:
            return scripted
        denied = self._authorized(headers.get("authorization"))
        if denied is not None:
            return denied
        if method == "POST" and path == CHAT_PATH:
            return self._default_chat(body)
        if method == "GET" and path == MODELS_PATH:
            return self._default_models()
        return Reply.error(404, f"No route for {method} {path}")


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            return

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            with server._lock:
                server._in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server._in_flight)
            try:
                path, _, server._query.value = self.path.partition("?")  # recorded by _handle, per thread
                reply = server._handle(method, path, headers, raw)
                if reply.delay_s:
                    server._stopping.wait(reply.delay_s)
                if reply.close_without_reply:
                    self.close_connection = True
                    return
                self._write(reply)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client gave up (timeout): nothing to answer
            finally:
                with server._lock:
                    server._in_flight -= 1

        def _write(self, reply: Reply) -> None:
            if isinstance(reply.body, (dict, list)):
                data = json.dumps(reply.body).encode()
            elif isinstance(reply.body, str):
                data = reply.body.encode()
            else:
                data = reply.body or b""
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(data)))
            for k, v in reply.headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

    return Handler
