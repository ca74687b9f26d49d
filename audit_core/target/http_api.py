"""Any HTTP API as an audit target, described by a small target file.

Many RAG services are not OpenAI-compatible: they take ``{"question": ...}``
and answer ``{"answer": ..., "sources": [...]}``, with the key in a header of
their own. This connector reaches them from a declaration in the shape that
users of garak's REST generator and promptfoo's HTTP provider know:

.. code-block:: yaml

    type: http
    name: support-bot
    url: https://rag.example.com/ask
    method: POST
    headers:
      X-Api-Key: $SUPPORT_BOT_KEY      # expanded from the environment, never stored
    body:                              # JSON template, filled per request
      question: "{{prompt}}"
      system: "{{system}}"             # optional
    answer_path: $.answer              # JSONPath to the answer text
    response_json: true                # false: the whole body (or each event's data) is the answer's text
    logprobs_path: $.logprobs          # optional: OpenAI's logprobs.content shape
    sources_path: $.sources            # optional: the sources the answer cites (texts, or objects
                                       # whose text fields are read: passage, title, address)
    stream: false                      # true: server-sent events, paths per event
    timeout_s: 60
    retry_on: [408, 429, 500, 502, 503, 504]
    requests_per_minute: 20            # optional: the pace the service allows (default: none)

Placeholders are written ``{{name}}`` (promptfoo's spelling; garak's ``$INPUT``
is not used so that ``$`` means one thing only: an environment variable in a
header). ``{{prompt}}`` is required; ``{{system}}`` is optional and, when the
template has none, the system text is put before the prompt so nothing the
auditor sends is dropped. ``{{session_id}}`` is a new random id for every
request (each try of it too): a service that keeps a conversation under an id
in the body then starts a new one for each question, so no probe reads the
text an earlier one sent (cookies a service sets are never sent back, for the
same reason: ``http_client``). A string that is exactly ``{{max_tokens}}``,
``{{temperature}}``, ``{{top_logprobs}}`` or ``{{logprobs}}`` is replaced by the
number or boolean itself, for APIs that take them.

Secrets: ``$VAR`` / ``${VAR}`` in a header value is read from the environment
when the target is built. The value is never in a repr, log line, error
message or stored raw response (it is scrubbed from server text too), and it
is sent only to the target file's own origin: a redirect is followed only to
the same scheme, host and port, any other is refused with a message naming
where it pointed.

Retries run through the OpenAI connector's loop (``RetryingConnector``, ``RetryPolicy``,
``Retry-After`` parsing); failures become the typed ``TargetError``s of ``base``.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import random
import re
import string
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator, Mapping
from urllib.parse import urljoin, urlsplit

import httpx

from audit_core.target.base import (
    MAX_TOP_LOGPROBS,
    MIN_SECRET_CHARS,
    AuthenticationFailed,
    BadResponse,
    Capabilities,
    ChatRequest,
    Completion,
    ContextTooLong,
    NoLogprobs,
    RateLimited,
    ServerError,
    Target,
    TargetError,
    Unreachable,
    Usage,
    check_service_url,
    credential_digest,
    display_url,
    url_origin,
)
from audit_core.target.http_client import (Pacer, SecretScrubber, capped, check_pace, check_timeout, client_error,
                                           client_options, error_head, is_loopback, single_coding)
from audit_core.target.jsonpaths import compile_jsonpath, read_sources
from audit_core.target.openai_compat import (
    RequestRejected,
    RetryingConnector,
    RetryPolicy,
    _Attempt,
    _Secret,
    decode_json,
    header_safe,
    parse_retry_after,
    scrub_json,
    spans_a_secret,
    tokens_from_logprob_entries,
)

log = logging.getLogger(__name__)

#: placeholder -> the type its value has when a template string is exactly that placeholder
PLACEHOLDERS: dict[str, type] = {
    "prompt": str, "system": str, "max_tokens": int, "temperature": float, "top_logprobs": int, "logprobs": bool,
    "session_id": str,
}
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_METHODS = ("POST", "PUT", "PATCH", "GET")
#: same-origin redirects followed before giving up
MAX_REDIRECTS = 3
#: how much of a server's error text is quoted in our messages (``http_client.ERROR_BODY_BYTES`` of its body are read)
_MAX_QUOTED_CHARS = 300
_LINE_END = re.compile(rb"\r\n|\r|\n")
#: a header name as HTTP defines it (a "token")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: header names that carry credentials: their values must come from the environment, never the file
_CREDENTIAL_HEADER = re.compile(r"auth|key|token|secret|password|cookie|credential|signature", re.I)


class _Failed(Exception):
    """One failed exchange, already translated for the retry loop."""

    def __init__(self, attempt: _Attempt):
        super().__init__(str(attempt.error))
        self.attempt = attempt


class RedirectRefused(TargetError):
    """The endpoint redirected to another origin: not followed, so the key is not sent there."""

    reason = "redirect_refused"


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class HttpTargetConfig:
    """One HTTP API, as a target file declares it (``type: http``). Validated on creation."""

    url: str  # the full URL requests go to (secrets belong in headers, not here)
    body: Any  # JSON template (object or array) with {{prompt}} and optionally {{system}}
    #: JSONPath to the answer text; several matches are joined. Required unless ``response_json`` is false
    answer_path: str = ""
    method: str = "POST"  # POST, PUT or PATCH send the JSON body; GET sends it as query parameters
    #: header values may name environment variables: "Bearer $MY_KEY"
    headers: Mapping[str, str] = field(default_factory=dict)
    name: str = ""  # a short label for reports (default: "http")
    #: JSONPath to per-token logprobs in OpenAI's logprobs.content shape; None: text only
    logprobs_path: str | None = None
    #: JSONPath to the sources each answer cites: a list of texts, or of objects whose text
    #: fields (passage, title, address) are read; None: the API returns none
    sources_path: str | None = None
    #: server-sent events: the JSONPaths are applied to each event and the pieces concatenated
    stream: bool = False
    timeout_s: float = 60.0
    #: HTTP statuses worth sending again (garak's ratelimit_codes); Retry-After is honoured
    retry_on: tuple[int, ...] = (408, 429, 500, 502, 503, 504)
    max_retries: int = 5  # retries after the first attempt (RetryPolicy)
    max_concurrency: int = 4
    #: at most this many requests a minute, every try counted (``http_client.Pacer``); None: no pace
    requests_per_minute: float | None = None
    #: whether the service answers in JSON (garak's ``response_json``); false: the body, or each
    #: server-sent event's data, is the answer's text itself (no paths: no logprobs, no sources)
    response_json: bool = True

    def __post_init__(self) -> None:
        check_service_url(self.url, "url")
        method = str(self.method).upper()
        if method not in _METHODS:
            raise ValueError(f"method must be one of {', '.join(_METHODS)}, got {self.method!r}")
        object.__setattr__(self, "method", method)
        if not isinstance(self.body, (dict, list)):
            raise ValueError("body must be a JSON object or array (the request template)")
        if method == "GET" and not isinstance(self.body, dict):
            raise ValueError("with method GET, body must be an object: its fields become query parameters")
        used = template_placeholders(self.body)
        unknown = sorted(used - set(PLACEHOLDERS))
        if unknown:
            raise ValueError(f"body uses unknown placeholder(s) {', '.join('{{' + u + '}}' for u in unknown)}; "
                             f"known: {', '.join('{{' + p + '}}' for p in PLACEHOLDERS)}")
        if "prompt" not in used:
            raise ValueError("body must contain the placeholder {{prompt}} where the question goes")
        try:  # YAML reads 2024-01-01 as a date and .nan as a float: neither can be sent as JSON
            json.dumps(self.body, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"body: a value cannot be sent as JSON ({exc}); quote dates and other text") from None
        keyed = _template_keys(self.body)
        if any(_PLACEHOLDER.search(k) for k in keyed):
            raise ValueError("body: placeholders go in values, not in field names (a name is sent as written)")
        var = next((v for v in _template_strings(self.body) if _ENV_VAR.search(v)), None)
        if var is not None:
            raise ValueError(f"body: {_ENV_VAR.search(var).group(0)!r} would be sent as written; a secret from the "
                             "environment goes in a header ($NAME is read only there)")
        if not isinstance(self.headers, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.headers.items()):
            raise ValueError("headers must map header names to text values")
        for k, v in self.headers.items():
            if not _HEADER_NAME.fullmatch(k):
                raise ValueError(f"header name {k!r} is not a valid HTTP header name (letters, digits and "
                                 "- only; no spaces or ':')")
            template = string.Template(v)
            if not template.is_valid():
                raise ValueError(f"header {k!r}: a '$' must start an environment variable name "
                                 "($NAME or ${NAME}); write '$$' for a literal '$'")
            for m in template.pattern.finditer(v):
                name = m.group("named")
                if name and v[m.end():m.end() + 2][:1] == "-" and v[m.end() + 1:m.end() + 2].isalnum():
                    rest = re.match(r"-[\w-]*", v[m.end():]).group(0)
                    raise ValueError(
                        f"header {k!r}: ${name}{rest} would read the variable ${name} and send '{rest}' after it "
                        f"(a variable's name has letters, digits and _ only); write ${{{name}}}{rest} if that is "
                        f"meant, or name the variable {name}{rest.replace('-', '_')}")
            literal = template.safe_substitute({n: "" for n in template.get_identifiers()})
            # said without the value: it may be a key, and httpx would quote it in its own error
            if not (literal.isascii() and literal.isprintable()):
                raise ValueError(f"header {k!r}: its value holds a line break, a control character or a "
                                 "non-ASCII letter, which no header can carry (a YAML '|' block ends with a "
                                 "line break: write the value on one line)")
            keyish = [w for w in literal.replace(",", " ").split()  # letters and digits, as keys are, not a date
                      if len(w) >= 12 and any(c.isalpha() for c in w) and any(c.isdigit() for c in w)]
            if _CREDENTIAL_HEADER.search(k) and keyish:
                raise ValueError(f"header {k!r} holds its credential in the file; put it in an environment "
                                 f"variable and write it as $NAME (for example 'Bearer $MY_KEY'): a key written "
                                 "in a file is shown, shared and stored with it")
        elsewhere = [where for where, text in [("url", self.url), *((f"header {k!r}", v)
                                                                    for k, v in self.headers.items())]
                     if _PLACEHOLDER.search(text)]
        if elsewhere:
            raise ValueError(f"{elsewhere[0]}: placeholders such as {{{{session_id}}}} are filled in the body only "
                             "(a URL or a header would send them as written, the same on every request)")
        if not isinstance(self.response_json, bool):
            raise ValueError("response_json must be true or false")
        if not self.response_json:
            given = [k for k in ("answer_path", "logprobs_path", "sources_path") if getattr(self, k)]
            if given:
                raise ValueError(f"with response_json: false the whole answer is text, so {', '.join(given)} "
                                 "cannot be read; leave them out (or set response_json: true)")
        elif not self.answer_path:
            raise ValueError("answer_path is required: a JSONPath to the answer text (for example $.answer); a "
                             "service that answers in plain text takes response_json: false instead")
        else:
            compile_jsonpath(self.answer_path, "answer_path")
        if self.logprobs_path is not None:
            compile_jsonpath(self.logprobs_path, "logprobs_path")
        if self.sources_path is not None:
            compile_jsonpath(self.sources_path, "sources_path")
        check_timeout(self.timeout_s)
        codes = tuple(self.retry_on)
        if not all(isinstance(c, int) and not isinstance(c, bool) and 400 <= c <= 599 for c in codes):
            raise ValueError("retry_on must list HTTP error statuses (400-599), for example [429, 503]")
        object.__setattr__(self, "retry_on", codes)
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError("max_retries must be a whole number, 0 or more")
        if not isinstance(self.max_concurrency, int) or self.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        check_pace(self.requests_per_minute)

    def caps_answers(self) -> bool:
        """Whether requests carry the auditor's answer-length cap: only where the body has ``{{max_tokens}}``
        (else the service writes answers as long as it likes, and bills them)."""
        return "max_tokens" in template_placeholders(self.body)

    def env_vars(self) -> list[str]:
        """The environment variables the headers read, in order (their values are secrets)."""
        names: list[str] = []
        for v in self.headers.values():
            names += [n for n in string.Template(v).get_identifiers() if n not in names]
        return names

    def fingerprint(self) -> str:
        """A short hash of what shapes the answers (never a secret: headers hold only variable names)."""
        shape = {k: v for k, v in asdict(self).items() if k in ("url", "method", "headers", "body", "answer_path",
                                                                "logprobs_path")}
        if self.sources_path is not None:  # only when set: the identity of older files stays as it was
            shape["sources_path"] = self.sources_path
        if not self.response_json:
            shape["response_json"] = False
        blob = json.dumps(shape, sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:8]


#: what reads like an environment variable in a body string ($NAME, ${NAME}); "$.a" or "$5" do not
_ENV_VAR = re.compile(r"\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")


def _template_strings(template: Any) -> list[str]:
    """Every string value of a JSON template."""
    if isinstance(template, str):
        return [template]
    items = template.values() if isinstance(template, dict) else template if isinstance(template, list) else []
    return [s for v in items for s in _template_strings(v)]


def _template_keys(template: Any) -> list[str]:
    """Every field name of a JSON template, at any depth."""
    if isinstance(template, dict):
        return [str(k) for k in template] + [k for v in template.values() for k in _template_keys(v)]
    if isinstance(template, list):
        return [k for v in template for k in _template_keys(v)]
    return []


def template_placeholders(template: Any) -> set[str]:
    """The {{names}} used anywhere in a JSON template's string values."""
    return {name for text in _template_strings(template) for name in _PLACEHOLDER.findall(text)}


def fill_template(template: Any, values: Mapping[str, Any]) -> Any:
    """A copy of ``template`` with placeholders filled.

    A string that is exactly one placeholder becomes that value (a number stays
    a number); inside longer text the value is inserted as text. Filling the
    decoded template, then serialising, keeps quotes in a prompt valid JSON.
    """
    if isinstance(template, str):
        whole = _PLACEHOLDER.fullmatch(template.strip())
        if whole:
            return values[whole.group(1)]
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)
    if isinstance(template, dict):
        return {k: fill_template(v, values) for k, v in template.items()}
    if isinstance(template, list):
        return [fill_template(v, values) for v in template]
    return template


# --------------------------------------------------------------------------- the target


class HttpTarget(RetryingConnector, Target):
    """A RAG system behind any JSON-over-HTTP API, as an audit target."""

    def __init__(self, config: HttpTargetConfig, environ: Mapping[str, str] | None = None,
                 *, backoff_base_s: float = 0.5, backoff_cap_s: float = 30.0,
                 max_total_wait_s: float = 300.0, bad_response_retries: int = 2) -> None:
        """``environ``: where ``$VAR`` in headers is read (default: the process environment).

        The app and the CLI pass only the variables their user agreed to send to this host (the app's
        boxes, ``--allow-env``).
        """
        super().__init__()
        self.config = config
        self.url = display_url(config.url)
        env = os.environ if environ is None else environ
        headers, secrets, from_env = {}, [], {}
        for k, v in config.headers.items():
            missing = [n for n in string.Template(v).get_identifiers() if not env.get(n)]
            if missing:
                raise AuthenticationFailed(
                    f"the target file's header {k!r} reads ${missing[0]} from the environment, and it is not set "
                    f"(set it before running; the key for {self.url} is never written into the file)")
            values = {n: env[n].strip() for n in string.Template(v).get_identifiers()}
            bad = [n for n, value in values.items() if not header_safe(value)]
            if bad:  # said without the value: httpx would quote it in its own error
                raise AuthenticationFailed(
                    f"${bad[0]} (for the target file's header {k!r}) has characters no key has (a space, a line "
                    "break or a non-ASCII letter): set it again, copied from the provider")
            secrets += list(values.values())
            headers[k] = string.Template(v).substitute(values)
            if values:
                from_env[k.lower()] = headers[k]
        lowered = {k.lower() for k in headers}
        if config.method != "GET" and "content-type" not in lowered:
            headers["Content-Type"] = "application/json"
        if config.stream and "accept" not in lowered:
            headers["Accept"] = "text/event-stream"
        if secrets and urlsplit(config.url).scheme == "http" and not is_loopback(config.url):
            log.warning("%s: the target file sends a key over plain http; anyone on the way can read it", self.url)
        self._headers = _Secret(headers)  # type: ignore[arg-type] - holds the expanded headers, never shown
        # the secrets of key length name whose answers these are (``credential_id``); every secret, however
        # short, is masked in a server's error text, and those of key length in answers too (``SecretScrubber``)
        self._secrets = _Secret(sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len,
                                       reverse=True))  # type: ignore[arg-type]
        # whose answers these are: every header read from the environment, whole and by name, however short its
        # value (a tenant id of 4 letters; two such tenants had shared one cache) and whichever header holds it
        self._credential = _Secret(json.dumps(sorted(from_env.items())) if from_env else "")  # type: ignore
        self._scrubber = SecretScrubber(secrets)
        self._answer = compile_jsonpath(config.answer_path, "answer_path") if config.response_json else None
        self._logprobs = None if config.logprobs_path is None else compile_jsonpath(config.logprobs_path,
                                                                                     "logprobs_path")
        self._sources = None if config.sources_path is None else compile_jsonpath(config.sources_path,
                                                                                   "sources_path")
        self._has_system = "system" in template_placeholders(config.body)
        self.max_concurrency = config.max_concurrency
        self.timeout_s = float(config.timeout_s)
        self.retry = RetryPolicy(max_retries=config.max_retries, backoff_base_s=backoff_base_s,
                                 backoff_cap_s=backoff_cap_s, max_total_wait_s=max_total_wait_s,
                                 bad_response_retries=bad_response_retries)
        try:
            self._client = httpx.Client(timeout=self.timeout_s, **client_options(config.url))
        except (ImportError, ValueError) as exc:  # the environment's proxy settings, read here
            raise client_error(exc) from None
        self._slots = threading.BoundedSemaphore(self.max_concurrency)
        self._pacer = None if config.requests_per_minute is None else Pacer(config.requests_per_minute)
        self._rng = random.Random()
        self._rng_lock = threading.Lock()
        self._cooldown_lock = threading.Lock()
        self._cooldown_until = 0.0  # monotonic time before which no request is sent (after a 429)

    @classmethod
    def from_config(cls, config: HttpTargetConfig, environ: Mapping[str, str] | None = None) -> "HttpTarget":
        return cls(config, environ)

    # ------------------------------------------------------------------ identity

    @property
    def name(self) -> str:  # type: ignore[override]
        """URL, label and a fingerprint of the request shape: stored answers never mix two templates."""
        return f"{self.url} · {self.config.name or 'http'} · {self.config.fingerprint()}"

    def __repr__(self) -> str:
        c = self.config
        return (f"HttpTarget(url={self.url!r}, method={c.method!r}, headers={list(c.headers)!r}, "
                f"answer_path={c.answer_path!r}, logprobs_path={c.logprobs_path!r}, stream={c.stream}, "
                f"timeout_s={c.timeout_s}, retry_on={c.retry_on!r})")

    __str__ = __repr__

    # ------------------------------------------------------------------ public API

    def complete(self, request: ChatRequest) -> Completion:
        """Send one request; raise a TargetError subclass when it cannot be answered.

        A request for logprobs to a target file without ``logprobs_path`` is
        refused with ``NoLogprobs`` before anything is sent (it would be paid
        for and could not be read).
        """
        if request.logprobs and self._logprobs is None:
            raise NoLogprobs(f"{self.url}: the target file names no logprobs_path, so this target gives text "
                             "only; methods that need token probabilities cannot run on it")
        # filled for each try: ``{{session_id}}`` is new every time
        return self._complete_accounted(request,
                                        lambda: self._exchange(fill_template(self.config.body, self._values(request))),
                                        lambda comp: comp,
                                        f"{self.url} answered without logprobs at {self.config.logprobs_path}")

    def capabilities(self) -> Capabilities:
        """One tiny request; logprobs are asked for only when the file says where they are.

        A rejected key is raised (the file or the environment must be fixed);
        any other failure is ``reachable=False`` with the reason.
        """
        wants = self._logprobs is not None
        probe = ChatRequest.chat([{"role": "user", "content": "Say OK."}], max_tokens=1, logprobs=wants,
                                 top_logprobs=MAX_TOP_LOGPROBS if wants else 0)
        label = self.config.name or self.url
        try:
            comp = self.complete(probe)
        except AuthenticationFailed:
            raise
        except NoLogprobs as exc:
            self.account.answered_after_all(exc)
            return self.with_style(Capabilities(True, False, 0, model=label, detail=str(exc)))
        except TargetError as exc:
            return Capabilities(False, False, 0, model=label, detail=str(exc))
        cites = comp.sources is not None
        if not wants:
            return self.with_style(Capabilities(True, False, 0, model=label, sources=cites,
                                                detail="text only: the target file names no logprobs_path"))
        n = max((len(t.top) for t in comp.tokens or []), default=0)
        return self.with_style(Capabilities(True, True, n, model=label, sources=cites,
                                            detail=f"logprobs with up to {n} alternatives per token"))

    def close(self) -> None:
        self._client.close()

    # ------------------------------------------------------------------ request

    def _values(self, request: ChatRequest) -> dict[str, Any]:
        system = "\n\n".join(c for r, c in request.messages if r == "system")
        prompt = "\n\n".join(c for r, c in request.messages if r != "system")
        if system and not self._has_system:
            prompt = f"{system}\n\n{prompt}"
        return {"prompt": prompt, "system": system, "max_tokens": request.max_tokens,
                "temperature": request.temperature, "top_logprobs": request.top_logprobs,
                "logprobs": request.logprobs, "session_id": uuid.uuid4().hex}

    def _exchange(self, payload: Any) -> Completion:
        """One attempt: send, follow same-origin redirects only, read the answer."""
        url, c = self.config.url, self.config
        fields = {k: v if isinstance(v, str) else json.dumps(v) for k, v in payload.items()} \
            if c.method == "GET" else None
        deadline = time.monotonic() + self.timeout_s
        for _ in range(MAX_REDIRECTS + 1):
            # GET: the body's fields join the URL's own query (httpx's params= would replace it: ?api-version=...)
            kwargs: dict[str, Any] = ({"params": httpx.URL(url).params.merge(fields)} if fields is not None
                                      else {"content": json.dumps(payload).encode()})
            try:
                with self._client.stream(c.method, url, headers=self._headers.reveal(), **kwargs) as resp:
                    if resp.is_redirect:
                        url = self._follow(url, resp)
                        continue
                    if resp.status_code >= 400:
                        raise _Failed(self._status_error(resp, self._error_text(resp)))
                    kind = resp.headers.get("content-type", "").lower()
                    if c.stream and kind.startswith("text/event-stream"):
                        if not c.response_json:
                            return self._from_text_events(list(self._events(resp, deadline, as_text=True)))
                        return self._from_events(list(self._events(resp, deadline)))
                    if not c.response_json:
                        return self._from_text(self._body(resp, deadline), resp.charset_encoding)
                    return self._from_json(self._decode(self._body(resp, deadline)))
            except httpx.TimeoutException:
                raise _Failed(_Attempt(Unreachable(f"{self.url} did not answer within {self.timeout_s:g}s"),
                                       retryable=True)) from None
            except httpx.DecodingError:  # a body whose compression is broken: an answer, not a connection
                raise _Failed(_Attempt(BadResponse(f"{self.url} sent a compressed body that could not be "
                                                   "decompressed"), retryable=True)) from None
            except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
                raise _Failed(_Attempt(Unreachable(
                    f"the answer from {self.url} broke off before it was complete: {type(exc).__name__}"),
                    retryable=True)) from None
            except httpx.HTTPError as exc:
                raise _Failed(_Attempt(Unreachable(
                    f"cannot connect to {self.url}: {type(exc).__name__}: {self._scrub_error(str(exc))}"),
                    retryable=True)) from None
        raise _Failed(_Attempt(RedirectRefused(f"{self.url} redirected more than {MAX_REDIRECTS} times; put "
                                               "the final URL in the target file"), retryable=False))

    def _follow(self, url: str, resp: httpx.Response) -> str:
        """The next URL of a redirect, only if it stays on the configured origin."""
        location = resp.headers.get("location", "")
        nxt = urljoin(url, location)
        if resp.status_code == 303 or url_origin(nxt) != url_origin(self.config.url):
            where = self._scrub_error(display_url(nxt)) if location else "nowhere"
            raise _Failed(_Attempt(RedirectRefused(
                f"{self.url} redirected (HTTP {resp.status_code}) to {where}; it was not followed, so the "
                "headers (and any key in them) were not sent there. If that address is right, put it in the "
                "target file's url"), retryable=False))
        return nxt

    # ------------------------------------------------------------------ response

    def _late(self, deadline: float) -> None:
        """``timeout_s`` bounds the whole answer, not each read: a server that trickles bytes or sends
        keep-alive comments forever would otherwise hold the audit without end."""
        if time.monotonic() > deadline:
            raise _Failed(_Attempt(Unreachable(f"{self.url} did not finish its answer within {self.timeout_s:g}s"),
                                   retryable=True))

    def _capped(self, resp: httpx.Response, deadline: float) -> Iterator[bytes]:
        """The body's decoded bytes as they arrive: late only when more of it still arrives after the
        deadline (a body that was complete when the deadline passed is kept), and never more than
        ``MAX_BODY_BYTES`` (a 500 KiB gzip body can decode to 500 MiB, in memory and in the store)."""
        why = single_coding(resp.headers)
        if why is not None:
            raise BadResponse(f"{self.url} sent an answer that was not read: {why}")
        for i, chunk in enumerate(capped(resp.iter_bytes(), self.url)):
            if i:
                self._late(deadline)
            yield chunk

    def _body(self, resp: httpx.Response, deadline: float) -> bytes:
        """The whole body (``_capped``)."""
        return b"".join(self._capped(resp, deadline))

    def _lines(self, resp: httpx.Response, deadline: float) -> Iterator[str]:
        """An event stream's lines, split where the SSE format ends a line (CR LF, CR or LF) and read as
        UTF-8, which the format prescribes whatever the charset label says. (httpx's ``iter_lines`` also
        splits at U+2028, U+2029 and U+0085, which JSON allows inside strings, and decodes by the label.)"""
        buf = bytearray()
        for chunk in self._capped(resp, deadline):
            # only the new bytes are searched (and a CR held back before them): a line that never ended was
            # copied and searched whole for every chunk, 17 s of CPU for a 16 MiB line (a review, session 61)
            scan = max(len(buf) - 1, 0)
            buf += chunk
            start = 0
            for m in _LINE_END.finditer(buf, scan):
                if m.group() == b"\r" and m.end() == len(buf):
                    break  # perhaps the first half of a CR LF: the next chunk says
                yield buf[start:m.start()].decode("utf-8", "replace")
                start = m.end()
            del buf[:start]
        if buf:
            yield (buf[:-1] if buf.endswith(b"\r") else buf).decode("utf-8", "replace")

    def _decode(self, body: bytes) -> Any:
        return decode_json(body, self.url, self._scrub_error)

    def _events(self, resp: httpx.Response, deadline: float = float("inf"), as_text: bool = False) -> Iterator[Any]:
        """The JSON data of each server-sent event (``as_text``: its data as text), until the stream ends or
        sends [DONE].

        An error event (``event: error``, or data with a top-level ``error``, as vLLM and
        OpenAI-style servers send when generation fails midway) fails the request: the text
        streamed before it is not a whole answer.
        """
        data: list[str] = []
        event = ""
        # read as it arrives; when the stream ends, what it sent is kept, however late
        for i, line in enumerate(itertools.chain(self._lines(resp, deadline), [""])):
            if i == 0:
                line = line.lstrip("\ufeff")
            if line.startswith("data:"):
                data.append(line[5:][1:] if line[5:6] == " " else line[5:])
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line == "" and (data or event):
                text, data, kind, event = "\n".join(data), [], event, ""
                if text.strip() == "[DONE]":
                    return
                if as_text and kind not in ("", "message", "error"):  # a named event of its own (metadata, ping)
                    continue
                decoded = self._decode(text.encode()) if text.strip() and not as_text else None
                if kind == "error" or (isinstance(decoded, dict) and decoded.get("error")):
                    said = self._scrub_error(text.strip())[:_MAX_QUOTED_CHARS]
                    raise _Failed(_Attempt(ServerError(f"{self.url} broke off its streamed answer with an error "
                                                       f"event: {said}"), retryable=True))
                if as_text:
                    yield text
                elif decoded is not None:
                    yield decoded

    def _matches(self, expr: Any, data: Any) -> list[Any]:
        try:
            return [m.value for m in expr.find(data)]
        except Exception as exc:  # noqa: BLE001 - a path that cannot be applied to this answer's shape
            raise BadResponse(f"a JSONPath of the target file could not be applied to the answer from {self.url} "
                              f"({type(exc).__name__}); check answer_path, logprobs_path and sources_path") from None

    def _from_json(self, data: Any) -> Completion:
        found = self._matches(self._answer, data)
        if not found:
            keys = self._scrub_error(", ".join(map(str, list(data)[:10]))) if isinstance(data, dict) \
                else type(data).__name__
            raise BadResponse(f"the answer_path {self.config.answer_path} matched nothing in the "
                              f"response from {self.url} (its top level: {keys})")
        entries = self._logprob_entries(data) if self._logprobs is not None else None
        return self._completion(self._text(found), entries, self._scrub_obj(data), self._sources_of([data]))

    def _from_events(self, events: list[Any]) -> Completion:
        if not events:
            raise BadResponse(f"{self.url} sent an event stream with no data events")
        pieces: list[Any] = []
        entries: list[Any] | None = None
        for ev in events:
            pieces += self._matches(self._answer, ev)
            if self._logprobs is not None:
                got = self._logprob_entries(ev)
                if got is not None:
                    entries = (entries or []) + got
        if not pieces:
            raise BadResponse(f"the answer_path {self.config.answer_path} matched nothing in any of the "
                              f"{len(events)} events from {self.url}")
        if spans_a_secret([p for p in pieces if isinstance(p, str)], self._scrub):  # kept event by event
            raise BadResponse(f"{self.url} echoed a secret in pieces across its streamed events; the answer "
                              "was not kept")
        return self._completion(self._text(pieces), entries, {"events": self._scrub_obj(events)},
                                self._sources_of(events))

    def _from_text(self, body: bytes, charset: str | None = None) -> Completion:
        """A plain-text answer (``response_json: false``): the body itself, read in the charset its
        Content-Type declares (UTF-8 where it declares none, or one Python does not know)."""
        try:
            text = body.decode(charset or "utf-8", "replace")
        except LookupError:
            text = body.decode("utf-8", "replace")
        return self._completion(text, None, None, None)

    def _from_text_events(self, pieces: list[str]) -> Completion:
        """A plain-text answer streamed as server-sent events: each event's data is a piece of it."""
        if not pieces:
            raise BadResponse(f"{self.url} sent an event stream with no data events")
        if spans_a_secret(pieces, self._scrub):  # kept event by event
            raise BadResponse(f"{self.url} echoed a secret in pieces across its streamed events; the answer "
                              "was not kept")
        return self._completion("".join(pieces), None, {"events": [self._scrub(p) for p in pieces]}, None)

    def _sources_of(self, documents: list[Any]) -> list[str] | None:
        return None if self._sources is None else read_sources(self._sources, documents, self._scrub, self.url)

    def _logprob_entries(self, data: Any) -> list[Any] | None:
        found = self._matches(self._logprobs, data)
        if not found or all(v is None for v in found):
            return None
        if len(found) == 1 and isinstance(found[0], list):
            return found[0]
        return [v for v in found if v is not None]

    def _text(self, pieces: list[Any]) -> str:
        """The answer's text; null is an empty answer (a non-answer downstream).

        Anything else that is not a string is refused: an object read as its JSON text
        (``{"role": "assistant", ...}``) would look to the style probe like a model that
        continues text, and an error object would be read as an answer.
        """
        odd = [p for p in pieces if p is not None and not isinstance(p, str)]
        if odd:
            kind = {dict: "an object", list: "a list", bool: "true/false"}.get(type(odd[0]), "a number")
            raise BadResponse(f"the answer_path {self.config.answer_path} found {kind} in the answer from "
                              f"{self.url}, not text; point it at the text itself (e.g. its .content)")
        return "".join(p or "" for p in pieces)

    def _completion(self, text: str, entries: list[Any] | None, raw: Any, sources: list[str] | None) -> Completion:
        tokens = None if entries is None else tokens_from_logprob_entries(entries, self._scrub, self.url)
        return Completion(text=self._scrub(text), tokens=tokens,
                          usage=Usage(0, len(tokens) if tokens else 0, reported=False),  # no usage field
                          finish_reason="stop", model=self.config.name or "http", raw=raw, sources=sources)

    # ------------------------------------------------------------------ errors

    def _classify(self, exc: Exception) -> _Attempt | None:
        """What the retry loop (RetryingConnector) does with a failure of ``_exchange``."""
        return exc.attempt if isinstance(exc, _Failed) else None

    def _error_text(self, resp: httpx.Response) -> str:
        """The start of an error response's body, enough to quote (``http_client.error_head``)."""
        if single_coding(resp.headers) is not None:  # not decoded: no quote rather than a bomb
            return ""
        return error_head(resp.iter_bytes(), self._scrubber).decode("utf-8", "replace")

    def _status_error(self, resp: httpx.Response, text: str) -> _Attempt:
        """An HTTP error status -> the typed error, retryable when retry_on lists it."""
        status = resp.status_code
        said = self._scrub_error(text.strip())[:_MAX_QUOTED_CHARS]  # scrubbed before it is cut
        quote = f": {said}" if said else ""
        if status in (401, 403):
            err: TargetError = AuthenticationFailed(f"the key was rejected by {self.url} (HTTP {status}){quote}")
        elif status == 429:
            err = RateLimited(f"{self.url} is rate-limiting requests (HTTP 429){quote}")
        elif status >= 500 or status == 408:
            err = ServerError(f"{self.url} failed with HTTP {status}{quote}")
        elif status == 413:
            err = ContextTooLong(f"{self.url} refused the request as too large (HTTP 413){quote}")
        elif status == 404:
            err = RequestRejected(f"{self.url} has no such route (HTTP 404){quote}; check the url in the target file")
        else:
            err = RequestRejected(f"{self.url} rejected the request (HTTP {status}){quote}; check the body template")
        if status in self.config.retry_on and status not in (401, 403):
            return _Attempt(err, retryable=True, retry_after=parse_retry_after(resp.headers))
        return _Attempt(err, retryable=False)

    # ------------------------------------------------------------------ secrecy

    def _scrub(self, text: str) -> str:
        """An answer's text without the secrets of key length, in any spelling (``SecretScrubber.answer``)."""
        return self._scrubber.answer(text)

    def _scrub_error(self, text: str) -> str:
        """A server's text quoted in an error, without any secret, however short (``SecretScrubber.error``)."""
        return self._scrubber.error(text)

    def _scrub_obj(self, obj: Any) -> Any:
        return scrub_json(obj, self._scrub)

    def credential_id(self, salt: bytes) -> str:
        """Whose answers these are, without the secrets (``credential_digest``), "" without any."""
        memo = self.__dict__.setdefault("_credential_ids", {})  # scrypt once per store salt, not per method
        if salt not in memo:
            memo[salt] = credential_digest(salt, self._credential.reveal())
        return memo[salt]
