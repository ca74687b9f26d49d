"""The ``http-custom`` target profile: a RAG behind a JSON API that is not OpenAI's.

Served by ``python -m shadow.serve --api custom ...`` over the same RagSystem
(knowledge base, generator, defense) as the OpenAI-compatible API; reached by
the auditor through the generic HTTP target (assets/targets/http_custom.yaml).

``POST /ask`` with ``X-Api-Key: <key>`` (the server reads it from
RPA_SERVE_API_KEY; none: no authentication, for loopback use) and the body::

    {"question": "...",            required: the user's message (the retrieval query)
     "system": "...",              optional: a system text
     "max_tokens": 128,            optional, 1..limits.max_tokens
     "temperature": 0.0,           optional, 0..2 (this service defaults to greedy)
     "logprobs": false,            optional: per-token logprobs in the answer
     "top_logprobs": 0,            optional, 0..20 alternatives per token
     "stream": false}              optional: server-sent events

answers ``{"answer": "...", "sources": [{"id": "...", "text": "..."}], "logprobs": [...]}``,
``logprobs`` only when asked for, in OpenAI's ``logprobs.content`` entry shape.
``sources`` lists the passages the system put in its context (documents, or
chunks on the chunked profile), as production RAG services cite them; the
auditor's cited-sources method reads them (assets/targets/http_custom.yaml
names the path), and the benchmark's retrieval check reads the ids.
``expose_sources=False`` leaves the list empty.

With ``"stream": true`` the answer comes as ``text/event-stream``: one event
``data: {"answer": "<piece>", "logprobs": [<entry>]}`` per generated token,
then ``data: {"sources": [...]}`` and ``data: [DONE]``. The model runs to the
end before the first event (a CPU model gains nothing from streaming); the
wire format is what a streaming service sends.

Errors are ``{"error": {"message", "type", "param", "code"}}`` (401 missing or
wrong key, 400 invalid request, 413 body too large, 500 internal).
"""
from __future__ import annotations

import hmac
import json
import logging
import re
from typing import Any, Iterator, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from audit_core.target.base import MAX_TOP_LOGPROBS, ChatRequest, Completion, TargetError
from shadow.rag import RagSystem
from shadow.serve import (ApiError, ServeLimits, _int_field, check_temperature, install_error_handlers, logprob_entries,
                          read_json_body)
from shadow.serve_batch import ModelQueue

log = logging.getLogger("shadow.serve_custom")

#: the header carrying the key (the OpenAI API's is Authorization: Bearer)
KEY_HEADER = "X-Api-Key"
_FIELDS = {"question", "system", "max_tokens", "temperature", "logprobs", "top_logprobs", "stream"}


def parse_ask(body: Any, limits: ServeLimits) -> tuple[ChatRequest, bool]:
    """Validate a /ask body; returns (request, stream) or raises ApiError(400)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise ApiError(400, f"unknown field(s): {', '.join(unknown)}", param=unknown[0])
    question = body.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ApiError(400, "'question' must be a non-empty string", param="question")
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        raise ApiError(400, "'system' must be a string", param="system")
    flags = {}
    for name in ("logprobs", "stream"):
        v = body.get(name)
        v = False if v is None else v  # null is the default, as for every optional field
        if not isinstance(v, bool):
            raise ApiError(400, f"'{name}' must be true or false", param=name)
        flags[name] = v
    temperature = body.get("temperature")
    temperature = 0.0 if temperature is None else temperature
    check_temperature(temperature)
    max_tokens = _int_field(body, "max_tokens", 1, limits.max_tokens, limits.default_max_tokens)
    top = _int_field(body, "top_logprobs", 0, MAX_TOP_LOGPROBS, 0) or 0
    if top and not flags["logprobs"]:
        raise ApiError(400, "'top_logprobs' requires 'logprobs' to be true", param="top_logprobs")
    messages = ((("system", system),) if system else ()) + (("user", question),)
    # no seed: this API has no field for one, so a sampled answer differs from one request to the next, as a
    # service's does (seed 0 had made every sample of a repeated question the same)
    req = ChatRequest(messages=messages, max_tokens=max_tokens, temperature=float(temperature),
                      logprobs=flags["logprobs"], top_logprobs=top, seed=None)
    return req, flags["stream"]


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def _pieces(comp: Completion) -> Iterator[dict]:
    """The stream's answer events: one per generated token (or per word without token data).

    Their answers join to the answer's text. A character whose bytes span several tokens decodes as
    U+FFFD token by token, so such tokens go out in one event with the next whole one, carrying the
    text between them; the project's own streaming client joined "こんにちは" as a row of U+FFFD."""
    if comp.tokens:
        entries, text = logprob_entries(comp.tokens), comp.text
        if "".join(e["token"] for e in entries) == text:
            for entry in entries:
                yield {"answer": entry["token"], "logprobs": [entry]}
            return
        pos, pending, events = 0, [], []
        for entry in entries:
            pending.append(entry)
            if "\ufffd" in entry["token"]:
                continue
            at = text.find(entry["token"], pos)
            if at < 0:  # not found as written: the whole answer in one event, every token with it
                yield {"answer": text, "logprobs": entries}
                return
            events.append({"answer": text[pos:at + len(entry["token"])], "logprobs": pending})
            pos, pending = at + len(entry["token"]), []
        if pending or pos < len(text):
            events.append({"answer": text[pos:], "logprobs": pending})
        yield from events
    else:
        for word in re.findall(r"\s*\S+\s*|\s+", comp.text):
            yield {"answer": word}


def create_custom_app(rag: RagSystem, api_key: str | Sequence[str] | None, limits: ServeLimits | None = None,
                      expose_sources: bool = True) -> FastAPI:
    """The FastAPI application of the http-custom profile over ``rag``.

    ``api_key``: one key or several (one per client); None or empty: no authentication.
    """
    limits = limits or ServeLimits()
    app = FastAPI(title="RAG Provenance Auditor custom-API target", docs_url=None, redoc_url=None,
                  openapi_url=None)
    model = ModelQueue(rag, limits.max_batch, limits.batch_window_s)
    keys = [api_key] if isinstance(api_key, str) else list(api_key or [])
    expected = [k.encode() for k in keys if k]

    def check_key(request: Request) -> None:
        if not expected:
            return
        given = request.headers.get(KEY_HEADER)
        if not given:
            raise ApiError(401, f"Missing API key: send it in the {KEY_HEADER} header.", code="missing_api_key")
        # every key is compared in constant time, so timing does not tell which one matched
        if not any([hmac.compare_digest(given.encode(), k) for k in expected]):
            raise ApiError(401, "Invalid API key.", code="invalid_api_key")

    install_error_handlers(app)

    def run(req: ChatRequest) -> tuple[Completion, list[dict]]:
        comp, rec, _ = model.submit(req)
        ids = rec.doc_ids if (rec is not None and expose_sources) else []
        return comp, [{"id": i, "text": rag.documents[i]} for i in ids]

    @app.post("/ask")
    async def ask(request: Request):
        check_key(request)
        req, stream = parse_ask(await read_json_body(request, limits), limits)
        try:
            comp, sources = await run_in_threadpool(run, req)
        except TargetError as exc:
            status = 400 if exc.reason in ("context_too_long", "bad_request") else 500
            raise ApiError(status, str(exc), "invalid_request_error" if status == 400 else "server_error",
                           code=exc.reason) from exc
        log.info("ask prompt=%d completion=%d stream=%s", comp.usage.prompt_tokens,
                 comp.usage.completion_tokens, stream)
        if stream:
            def events() -> Iterator[str]:
                for piece in _pieces(comp):
                    yield _sse(piece)
                yield _sse({"sources": sources})
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        body: dict[str, Any] = {"answer": comp.text, "sources": sources}
        if comp.tokens is not None and req.logprobs:
            body["logprobs"] = logprob_entries(comp.tokens)
        return JSONResponse(body)

    return app
