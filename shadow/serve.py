"""Reference target server: an OpenAI-compatible HTTP API over a RagSystem.

    python -m shadow.serve --corpus kb.jsonl [--model smollm2-135m-instruct]
        [--defense prompt_modification|paraphrase|mirabel] [--port 8000]
        [--host 127.0.0.1] [--top-k 4] [--no-prefix-cache] [--debug-retrieval]
        [--api openai|custom]

The API key(s) come from the environment variable RPA_SERVE_API_KEY only
(several clients: comma-separated), never from the command line, where any
user of the machine could read them in ``ps``.

Endpoints (OpenAI's request/response JSON):

* ``POST /v1/chat/completions`` -- non-streaming chat completions with
  ``logprobs`` / ``top_logprobs`` (at most 20), ``usage`` including
  ``prompt_tokens_details.cached_tokens`` (tokens whose key/value states were
  reused from a recent request, as production servers report; 0 when the
  server has several keys, since its one cache would tell one client that
  another asked the same);
* ``GET /v1/models`` and ``GET /v1/models/{id}``;
* vendor extension for the benchmark only: every chat.completion carries
  ``"rpa_retrieval": {"doc_ids", "distances", "retrieval_query", "defense",
  "defense_acted", "detail"}`` (what the system retrieved: document ids,
  squared L2 distances, whether a defense acted), and, with
  ``--debug-retrieval`` only, ``GET /v1/rpa/last_retrieval`` returns the same
  record for the last request *of the same client* (the same key; without
  keys, the same address) with where its time went (retrieval / prefill /
  generation): one client never sees what another asked. A real target has
  neither; the auditor never relies on them. ``--hide-retrieval`` (or
  ``expose_retrieval=False``) removes the field.

``--api custom`` serves the ``http-custom`` profile instead: ``POST /ask``,
key in ``X-Api-Key`` (see ``shadow.serve_custom``).

Errors always come as ``{"error": {"message", "type", "param", "code"}}`` with
OpenAI's status codes: 401 bad or missing key, 404 unknown model
(``model_not_found``) or route, 413 body too large, 400 invalid request.
Requests go through the model one batch at a time: those that arrive together
are answered together (``shadow.serve_batch``), which on a CPU decodes several
sequences for about the price of one.
The API key is compared in constant time and never logged or echoed.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import hmac
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from collections import OrderedDict
from typing import Any, Callable, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from audit_core.target.base import MAX_TOP_LOGPROBS, ChatRequest, Completion, TargetError, TokenLogprob
from shadow.rag import RagConfig, RagSystem
from shadow.serve_batch import ModelQueue

log = logging.getLogger("shadow.serve")

API_KEY_ENV = "RPA_SERVE_API_KEY"
#: clients whose last request /v1/rpa/last_retrieval remembers (--debug-retrieval)
_MAX_DEBUG_CLIENTS = 256


@dataclass
class ServeLimits:
    """Request limits of the reference server (ours; OpenAI's are far larger)."""

    max_body_bytes: int = 1_000_000
    max_tokens: int = 512
    max_messages: int = 64
    #: max_tokens when the request does not say (OpenAI: up to the context)
    default_max_tokens: int = 128
    #: requests that arrive within ``batch_window_s`` of one another are answered together, up to this
    #: many (``shadow.serve_batch.ModelQueue``); 1: strictly one at a time
    max_batch: int = 8
    #: 50 ms: a client's concurrent requests reach the queue over a few tens of milliseconds, and with
    #: 10 ms the benchmark's twelve Verbatim probes came as two batches of six, each decoded 128 steps
    #: (session 38); against answers that take seconds, the wait is negligible
    batch_window_s: float = 0.05


class ApiError(Exception):
    """An error answered in OpenAI's shape."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code

    def response(self) -> JSONResponse:
        return _error(self.status, self.message, self.type, self.param, self.code)


def _error(status: int, message: str, type_: str = "invalid_request_error",
           param: str | None = None, code: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type_, "param": param, "code": code}},
                        status_code=status)


# --------------------------------------------------------------------------- request parsing

_UNSUPPORTED_DEFAULTS: dict[str, Any] = {
    # field -> the only value we honour (anything else would be silently ignored)
    "n": 1, "stream": False, "stop": None, "top_p": 1, "presence_penalty": 0, "frequency_penalty": 0,
    "logit_bias": None, "tools": None, "tool_choice": None, "response_format": None,
}
#: the defaults as a client may spell them out
_SPELLED_DEFAULTS: dict[str, Any] = {"response_format": {"type": "text"}, "tool_choice": "none"}
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


def _content_text(content: Any, idx: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: only text is served
        parts = []
        for p in content:
            if not isinstance(p, dict) or p.get("type") != "text" or not isinstance(p.get("text"), str):
                raise ApiError(400, "only text content parts are supported", param=f"messages[{idx}].content")
            parts.append(p["text"])
        return "".join(parts)
    raise ApiError(400, "message content must be a string or a list of text parts", param=f"messages[{idx}].content")


def _int_field(body: dict, name: str, lo: int, hi: int, default: int | None) -> int | None:
    v = body.get(name)
    if v is None:  # absent or null: the default
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise ApiError(400, f"'{name}' must be an integer", param=name)
    if not lo <= v <= hi:
        raise ApiError(400, f"'{name}' must be between {lo} and {hi}, got {v}", param=name)
    return v


def parse_chat_request(body: Any, limits: ServeLimits) -> tuple[str, ChatRequest]:
    """Validate an OpenAI chat request body; returns (model, ChatRequest) or raises ApiError(400)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "'model' is required", param="model")
    for name, allowed in _UNSUPPORTED_DEFAULTS.items():
        # an empty list, object or string ("stop": [], "stop": "", "tools": []) asks for nothing, as the default
        # does, and so do the defaults spelled out ("response_format": {"type": "text"}, "tool_choice": "none");
        # a bool is no number ("n": true equals 1 in Python, not in JSON)
        v = body.get(name)
        if v in (None, [], {}, "") or v == _SPELLED_DEFAULTS.get(name):
            continue
        if isinstance(v, bool) != isinstance(allowed, bool) or v != allowed:
            raise ApiError(400, f"'{name}' is not supported by this server", param=name, code="unsupported_parameter")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ApiError(400, "'messages' must be a non-empty array", param="messages")
    if len(msgs) > limits.max_messages:
        raise ApiError(400, f"at most {limits.max_messages} messages per request", param="messages")
    pairs = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            raise ApiError(400, f"messages[{i}] needs a role among {', '.join(_ROLES)}", param=f"messages[{i}].role")
        pairs.append((_ROLES[m["role"]], _content_text(m.get("content"), i)))
    if not any(r == "user" for r, _ in pairs):
        raise ApiError(400, "at least one user message is required (it is the retrieval query)", param="messages")
    if "max_completion_tokens" in body and body["max_completion_tokens"] is not None:
        max_tokens = _int_field(body, "max_completion_tokens", 1, limits.max_tokens, None)
    else:
        max_tokens = _int_field(body, "max_tokens", 1, limits.max_tokens, limits.default_max_tokens)
    temperature = body.get("temperature", 1.0)  # OpenAI's default
    if temperature is None:
        temperature = 1.0
    check_temperature(temperature)
    logprobs = body.get("logprobs", False)
    if logprobs is None:
        logprobs = False
    if not isinstance(logprobs, bool):
        raise ApiError(400, "'logprobs' must be a boolean", param="logprobs")
    top = _int_field(body, "top_logprobs", 0, MAX_TOP_LOGPROBS, 0) or 0
    if top and not logprobs:
        raise ApiError(400, "'top_logprobs' requires 'logprobs' to be true", param="top_logprobs")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 63):
        raise ApiError(400, "'seed' must be a whole number from 0 to 2^63 - 1", param="seed")
    try:
        req = ChatRequest(messages=tuple(pairs), max_tokens=max_tokens, temperature=float(temperature),
                          logprobs=logprobs, top_logprobs=top, seed=seed)
    except ValueError as exc:
        raise ApiError(400, str(exc)) from exc
    return model, req


#: the smallest temperature above 0 that sampling takes: below it the logits divided by it overflow (1e-300 made
#: the probabilities inf and the request, with its whole batch, a 500)
MIN_TEMPERATURE = 1e-2


def check_temperature(value: Any) -> None:
    """0 (greedy) or a number from ``MIN_TEMPERATURE`` to 2, else a 400."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 2
            or 0 < value < MIN_TEMPERATURE):
        raise ApiError(400, f"'temperature' must be 0 or a number from {MIN_TEMPERATURE} to 2", param="temperature")


# --------------------------------------------------------------------------- response shape


def _token_json(token: str, logprob: float) -> dict:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


def logprob_entries(tokens: list[TokenLogprob]) -> list[dict]:
    """Tokens in OpenAI's ``logprobs.content`` shape (also what the custom API sends)."""
    return [{**_token_json(t.token, t.logprob), "top_logprobs": [_token_json(a, lp) for a, lp in t.top]}
            for t in tokens]


def completion_json(comp: Completion, model: str, cached_tokens: int) -> dict:
    """OpenAI's chat.completion object for one Completion."""
    logprobs = None if comp.tokens is None else {"content": logprob_entries(comp.tokens), "refusal": None}
    u = comp.usage
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": comp.text, "refusal": None},
            "logprobs": logprobs,
            "finish_reason": comp.finish_reason,
        }],
        "usage": {
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "total_tokens": u.prompt_tokens + u.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        },
    }


# --------------------------------------------------------------------------- the app


def install_error_handlers(app: FastAPI) -> None:
    """Every error answered in one JSON shape: ours, routing's (404/405), and a bare 500."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return _error(exc.status_code, str(exc.detail), code=code)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s %s", request.method, request.url.path)
        return _error(500, "The server had an error while processing your request.", "server_error")


async def read_json_body(request: Request, limits: ServeLimits) -> Any:
    """The request's JSON body, refused with 413 past ``limits.max_body_bytes`` (read in chunks)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise ApiError(413, f"request body larger than {limits.max_body_bytes} bytes", code="request_too_large")
    buf = bytearray()
    async for chunk in request.stream():
        buf.extend(chunk)
        if len(buf) > limits.max_body_bytes:
            raise ApiError(413, f"request body larger than {limits.max_body_bytes} bytes",
                           code="request_too_large")
    try:
        body = json.loads(bytes(buf))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from exc
    except RecursionError:  # "[[[[..." three thousand deep: json gives up, and it was a 500 with a traceback
        raise ApiError(400, "the request body is nested too deeply to be a request") from None
    try:  # a lone surrogate ("\ud800", half an emoji cut by a client) breaks the tokenizer and every message
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, "the request body holds a lone UTF-16 surrogate (half of a character); send whole "
                            "characters") from None
    return body


def create_app(rag: RagSystem, api_key: str | Sequence[str] | None, model_name: str | None = None,
               limits: ServeLimits | None = None, expose_retrieval: bool = True,
               debug_retrieval: bool = False, logprobs: bool = True) -> FastAPI:
    """The FastAPI application serving ``rag`` under the model id ``model_name``.

    ``api_key`` None or empty: no authentication (loopback use); otherwise every
    /v1 route needs ``Authorization: Bearer <key>`` with one of the keys (a
    list: one per client). ``debug_retrieval`` turns on
    ``/v1/rpa/last_retrieval``, which answers each client (key, or address
    without keys) with its own last request only. ``logprobs=False`` answers
    like an endpoint without logprobs: the text only, whatever was asked.
    """
    model_name = model_name or rag.config.generator
    limits = limits or ServeLimits()
    app = FastAPI(title="RAG Provenance Auditor reference target", docs_url=None, redoc_url=None, openapi_url=None)
    model = ModelQueue(rag, limits.max_batch, limits.batch_window_s)
    #: client id -> its last request's retrieval record (the most recent clients only)
    last_by_client: OrderedDict[str, dict[str, Any]] = OrderedDict()
    created = int(time.time())
    keys = [api_key] if isinstance(api_key, str) else list(api_key or [])
    expected = [f"Bearer {k}".encode() for k in keys if k]

    def check_auth(request: Request) -> str:
        """Refuse a request without a valid key; return the client's id (a hash, never the key)."""
        if not expected:
            return "address:" + (request.client.host if request.client else "unknown")
        header = request.headers.get("authorization")
        if not header:
            raise ApiError(401, "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'.",
                           code="invalid_api_key")
        scheme, _, token = header.partition(" ")
        given = (f"Bearer {token}" if scheme.lower() == "bearer" else header).encode()  # the scheme is any case
        # every key is compared, each in constant time, so timing does not tell which one matched
        matched = [hmac.compare_digest(given, e) for e in expected]
        if not any(matched):
            raise ApiError(401, "Incorrect API key provided.", code="invalid_api_key")
        return "key:" + hashlib.sha256(given).hexdigest()[:16]

    install_error_handlers(app)

    def run(req: ChatRequest) -> tuple[Completion, dict | None, dict]:
        comp, rec, timings = model.submit(req)
        return comp, (rec.to_json() if rec is not None else None), timings

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> JSONResponse:
        t0 = time.perf_counter()
        client = check_auth(request)
        model, req = parse_chat_request(await read_json_body(request, limits), limits)
        if model != model_name:
            raise ApiError(404, f"The model '{model}' does not exist or you do not have access to it.",
                           param="model", code="model_not_found")
        try:
            comp, rec, timings = await run_in_threadpool(run, req)
        except TargetError as exc:
            status = 400 if exc.reason in ("context_too_long", "bad_request") else 500
            raise ApiError(status, str(exc), "invalid_request_error" if status == 400 else "server_error",
                           code=exc.reason) from exc
        if not logprobs:
            comp = dataclasses.replace(comp, tokens=None)
        # one cache serves every client: with several keys, its hits would tell one client what another asked
        body = completion_json(comp, model_name, timings["cached_tokens"] if len(expected) <= 1 else 0)
        if expose_retrieval and rec is not None:
            body["rpa_retrieval"] = {k: v for k, v in rec.items() if k != "query"}
        if debug_retrieval:
            # what was retrieved, not what was asked: a client id by address is shared by every local user
            kept = None if rec is None else {k: v for k, v in rec.items() if k not in ("query", "retrieval_query")}
            last_by_client[client] = {"retrieval": kept, "timings": timings, "request_id": body["id"]}
            last_by_client.move_to_end(client)
            while len(last_by_client) > _MAX_DEBUG_CLIENTS:
                last_by_client.popitem(last=False)
        log.info("chat.completions %s prompt=%d completion=%d cached=%d in %.3fs", body["id"],
                 comp.usage.prompt_tokens, comp.usage.completion_tokens, timings["cached_tokens"],
                 time.perf_counter() - t0)
        return JSONResponse(body)

    def model_json() -> dict:
        return {"id": model_name, "object": "model", "created": created, "owned_by": "rag-provenance-auditor"}

    @app.get("/v1/models")
    async def list_models(request: Request) -> JSONResponse:
        check_auth(request)
        return JSONResponse({"object": "list", "data": [model_json()]})

    @app.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str, request: Request) -> JSONResponse:
        check_auth(request)
        if model_id != model_name:
            raise ApiError(404, f"The model '{model_id}' does not exist.", param="model", code="model_not_found")
        return JSONResponse(model_json())

    @app.get("/v1/rpa/last_retrieval")
    async def last_retrieval(request: Request) -> JSONResponse:
        client = check_auth(request)
        if not debug_retrieval:
            raise ApiError(404, "Not Found (the server serves this route with --debug-retrieval only)",
                           code="not_found")
        mine = last_by_client.get(client) or {"retrieval": None, "timings": None, "request_id": None}
        return JSONResponse({"object": "rpa.last_retrieval", **mine})

    return app


# --------------------------------------------------------------------------- running it


def serve_in_thread(rag: RagSystem, api_key: str | Sequence[str] | None = None, model_name: str | None = None,
                    host: str = "127.0.0.1", port: int = 0, limits: ServeLimits | None = None,
                    timeout_s: float = 30.0, expose_retrieval: bool = True,
                    debug_retrieval: bool = False, api: str = "openai",
                    logprobs: bool = True) -> tuple[str, Callable[[], None]]:
    """Serve ``rag`` from a background thread; returns (base URL, stop function).

    ``api="openai"``: the base URL ends in /v1; ``api="custom"``: the
    ``http-custom`` profile (shadow.serve_custom), the URL is the server root.
    ``logprobs=False``: an endpoint that answers with text only.

    ``port=0`` picks a free port: the socket is bound here, so the URL is known
    before the server starts and no other process can take the port meanwhile.
    """
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    port = sock.getsockname()[1]
    app = _build_app(api, rag, api_key, model_name, limits, expose_retrieval, debug_retrieval, logprobs)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False,
                                           proxy_headers=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"rpa-serve-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError(f"the reference server did not start on {host}:{port}")
        time.sleep(0.02)

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()

    return f"http://{host}:{port}" + ("/v1" if api == "openai" else ""), stop


def _build_app(api: str, rag: RagSystem, api_key: str | Sequence[str] | None, model_name: str | None,
               limits: ServeLimits | None, expose_retrieval: bool, debug_retrieval: bool = False,
               logprobs: bool = True) -> FastAPI:
    """The OpenAI-compatible API or the custom one (``http-custom``) over the same system."""
    if api == "custom":
        from shadow.serve_custom import create_custom_app

        return create_custom_app(rag, api_key, limits, expose_sources=expose_retrieval)
    if api != "openai":
        raise ValueError(f"api must be 'openai' or 'custom', got {api!r}")
    return create_app(rag, api_key, model_name, limits, expose_retrieval, debug_retrieval, logprobs)


def exit_with_parent(parent_pid: int, on_gone: Callable[[], None] | None = None,
                     poll_s: float = 1.0) -> threading.Thread:
    """End this process once ``parent_pid`` is no longer its parent.

    The benchmark starts its reference targets as child processes; when the
    benchmark is killed (a SIGKILL runs no ``finally``), an orphaned server
    would go on holding gigabytes and, while a request is in flight, the CPU
    that the next run measures on. A child whose parent dies is re-parented,
    so ``os.getppid()`` changing is the signal, with no platform-specific call.
    """
    def gone() -> None:
        log.warning("parent process %d is gone: stopping", parent_pid)
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        (on_gone or gone)()

    t = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    t.start()
    return t


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m shadow.serve", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True, help="knowledge base: JSONL of {id, text} (see shadow.corpus)")
    p.add_argument("--model", default=RagConfig.generator, help="generator (registry name or HF id)")
    p.add_argument("--served-model-name", default=None, help="model id clients must send (default: --model)")
    p.add_argument("--defense", choices=["prompt_modification", "paraphrase", "mirabel"], default=None)
    p.add_argument("--paraphraser", default=None,
                   help="model that rewrites queries under --defense paraphrase (default: the generator when it is an "
                        "instruct model, else smollm2-135m-instruct: shadow.rag.default_paraphraser)")
    p.add_argument("--paraphrase-min-similarity", type=float, default=RagConfig.paraphrase_min_similarity,
                   metavar="COS", help="under --defense paraphrase, a rewrite less similar to its query than this is "
                                       "no paraphrase and the query is retrieved with as sent (0: keep every rewrite)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--top-k", type=int, default=RagConfig.top_k)
    p.add_argument("--no-prefix-cache", action="store_true", help="run every prompt from scratch (benchmark)")
    p.add_argument("--max-batch", type=int, default=ServeLimits.max_batch,
                   help="most requests answered together when they arrive at once (1: one at a time)")
    p.add_argument("--hide-retrieval", action="store_true",
                   help="omit the rpa_retrieval vendor field and endpoint (as a real target would)")
    p.add_argument("--persist-dir", default=None, help="chromadb directory (default: the project cache)")
    p.add_argument("--profile", default=None,
                   help="target profile of shadow.profiles (completion, chat, chat-nologprobs, chunked, http-custom, "
                        "chunked-custom; the -custom ones serve the non-OpenAI JSON API): sets the "
                        "model, prompt style, system prompt, top-k, chunking and logprobs; --model/--top-k are ignored")
    p.add_argument("--debug-retrieval", action="store_true",
                   help="serve GET /v1/rpa/last_retrieval (each client sees its own last request only)")
    p.epilog = (f"API keys: set {API_KEY_ENV} (comma-separated for several clients). There is no command-line "
                "option for them: other users of the machine can read command lines.")
    p.add_argument("--api", choices=["openai", "custom"], default=None,
                   help="openai (the default): /v1/chat/completions; custom: the http-custom profile, POST /ask "
                        "with the key in X-Api-Key (see shadow.serve_custom and assets/targets/http_custom.yaml); "
                        "with --profile, the profile's own")
    p.add_argument("--generation-memo", default=None, metavar="SQLITE",
                   help="keep generations in this file and answer a repeated prompt from it "
                        "(the benchmark's servers share one per run; shadow.generation_memo)")
    p.add_argument("--exit-with-parent", type=int, default=None, metavar="PID",
                   help="stop when process PID (the one that started this server) is gone")
    a = p.parse_args(argv)
    if a.max_batch < 1:
        p.error("--max-batch must be at least 1")
    if a.hide_retrieval and a.debug_retrieval:
        p.error("--hide-retrieval and --debug-retrieval contradict each other: the debug endpoint shows the "
                "retrieval that --hide-retrieval hides")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if a.exit_with_parent is not None:
        exit_with_parent(a.exit_with_parent)
    key = [k.strip() for k in os.environ.get(API_KEY_ENV, "").split(",") if k.strip()] or None
    if key and not all(k.isascii() and k.isprintable() and " " not in k for k in key):
        # a header carries ASCII only: a key with "é" starts a server that no client can ever authenticate to
        p.error(f"{API_KEY_ENV} holds a key with a space or a character outside ASCII, which no client can send "
                "in a header; choose keys of letters, digits and punctuation")
    if key is None and a.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("serving on %s without an API key: anyone who can reach it can query it", a.host)
    if not 0.0 <= a.paraphrase_min_similarity < 1.0:
        p.error("--paraphrase-min-similarity must be at least 0 and below 1")
    cache = dict(persist_dir=a.persist_dir, paraphraser=a.paraphraser,
                 paraphrase_min_similarity=a.paraphrase_min_similarity,
                 prefix_cache_entries=0 if a.no_prefix_cache else RagConfig.prefix_cache_entries)
    with_logprobs = True
    if a.profile:
        from shadow.corpus import load_corpus
        from shadow.profiles import get_profile

        prof = get_profile(a.profile)
        if a.api is not None and a.api != prof.api:
            p.error(f"--profile {a.profile} serves the {prof.api} API; leave --api out, or choose a profile "
                    f"of the {a.api} API")
        config, with_logprobs, a.api = prof.rag_config(a.defense, **cache), prof.logprobs, prof.api
        rag = RagSystem(prof.knowledge_base(load_corpus(a.corpus)), config)
        a.model = config.generator
    else:
        a.api = a.api or "openai"
        config = RagConfig(generator=a.model, top_k=a.top_k, defense=a.defense, **cache)
        rag = RagSystem.from_corpus(a.corpus, config)
    if a.generation_memo:
        from shadow.generation_memo import GenerationMemo

        rag.generation_memo = GenerationMemo(a.generation_memo)
    _ = rag.lm  # load the generator before accepting requests
    name = a.served_model_name or a.model
    log.info("serving %s over %d documents at http://%s:%d%s (auth %s, defense %s, prefix cache %s)",
             name, len(rag.documents), a.host, a.port, "/v1" if a.api == "openai" else "/ask",
             "on" if key else "off", a.defense or "none",
             "off" if a.no_prefix_cache else "on")
    import uvicorn

    app = _build_app(a.api, rag, key, name, ServeLimits(max_batch=a.max_batch), not a.hide_retrieval,
                     a.debug_retrieval, with_logprobs)
    # proxy_headers off: X-Forwarded-For from a local caller would otherwise choose its client id
    uvicorn.run(app, host=a.host, port=a.port, log_level="info", access_log=False, proxy_headers=False)


if __name__ == "__main__":
    main()
