"""Connector to any OpenAI-compatible chat completions endpoint.

This is how the auditor reaches a real user's target (OpenAI, vLLM, llama.cpp,
a company gateway) and our own reference server over loopback. It is built on
the official ``openai`` client for request building, authentication and
transport, but the client's own retries are switched off: every paid query is
accounted for here, so retries, waiting and concurrency are ours to control
and count.

Failures become typed ``TargetError``s with messages a user can act on; they
never contain the API key (it is scrubbed from server text, and kept out of
reprs, logs and the stored raw responses).
"""
from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import random
import re
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, TypeVar
from urllib.parse import urlsplit

import httpx
import openai

from audit_core.target.base import (
    MAX_TOP_LOGPROBS,
    AuthenticationFailed,
    BadResponse,
    Capabilities,
    ChatRequest,
    Completion,
    ContextTooLong,
    NoLogprobs,
    QueryAccount,
    RateLimited,
    ServerError,
    Target,
    TargetError,
    TokenLogprob,
    Unreachable,
    UnknownModel,
    Usage,
    credential_digest,
    check_service_url,
    display_url,
)
from audit_core.target.http_client import (DEADLINE_GRACE_S, Deadline, Pacer, SecretScrubber, capped, check_pace,
                                           check_timeout, client_error, client_options, current_deadline,
                                           error_head, is_loopback)
from audit_core.target.jsonpaths import compile_jsonpath, read_sources

log = logging.getLogger(__name__)

T = TypeVar("T")

#: how much of a server's error text is quoted in our messages
_MAX_QUOTED_CHARS = 300
#: how far above 0 a logprob may come from a server's float rounding before it is refused
_LOGPROB_SLACK = 1e-3
#: a query string (it may hold a token) is not quoted from a redirect's Location
_URL_QUERY_RE = re.compile(r"\?.*$")

#: what the openai client is given when there is no key (it refuses none); never sent, see _no_auth
_NO_KEY_PLACEHOLDER = "no-key"

_CONTEXT_WORDING = ("context length", "context_length", "maximum context", "context window",
                    "too many tokens", "prompt is too long", "maximum number of tokens")


class RequestRejected(TargetError):
    """The endpoint refused this request as invalid (a 4xx that fits no other class)."""

    reason = "request_rejected"


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before sending a failed request again.

    Rate limits (429), server errors (5xx, 408) and connection failures or
    timeouts are retried; a malformed response only ``bad_response_retries``
    times; everything else (bad key, unknown model, context too long) never,
    since sending it again cannot help and would be paid for.
    """

    max_retries: int = 5  # retries after the first attempt, per request
    backoff_base_s: float = 0.5  # first backoff; doubles with each retry
    backoff_cap_s: float = 30.0  # no single backoff is longer
    max_total_wait_s: float = 300.0  # total sleeping per request; beyond it we give up
    bad_response_retries: int = 2

    def backoff(self, retry: int, rng: random.Random) -> float:
        """Exponential backoff with "equal jitter": half fixed, half random.

        The fixed half keeps the wait growing; the random half spreads the
        concurrent workers apart so they do not hit the server in lockstep.
        """
        step = min(self.backoff_cap_s, self.backoff_base_s * (2 ** retry))
        return step / 2 + rng.uniform(0, step / 2)

    def delay(self, retry: int, retry_after: float | None, rng: random.Random) -> float:
        """The wait before retry number ``retry`` (0-based): never shorter than the server asked."""
        wait = self.backoff(retry, rng)
        return wait if retry_after is None else max(retry_after, wait)


def parse_retry_after(headers: Any, now: float | None = None) -> float | None:
    """Seconds to wait from ``Retry-After`` (seconds or HTTP date) or ``retry-after-ms``.

    Returns None when absent or unreadable; a date in the past gives 0.
    """
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
            if math.isfinite(value) and value >= 0:
                return value
        except ValueError:
            pass
    header = headers.get("retry-after")
    if header is None:
        return None
    header = header.strip()
    try:
        value = float(header)
        return value if math.isfinite(value) and value >= 0 else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


def spans_a_secret(pieces: Sequence[str], scrub: Callable[[str], str]) -> bool:
    """Whether a secret appears only across ``pieces`` (tokens, streamed events), which ``scrub`` would miss
    piece by piece: a server that echoes the key a token at a time would put it into the store."""
    return scrub("".join(pieces)) != "".join(scrub(p) for p in pieces)


def tokens_from_logprob_entries(content: Any, scrub: Callable[[str], str], source: str) -> list[TokenLogprob]:
    """OpenAI's ``logprobs.content`` list -> tokens with alternatives sorted best first.

    Each entry is ``{"token", "logprob", "top_logprobs": [{"token", "logprob"}, ...]}``;
    vLLM, llama.cpp and other APIs that report logprobs use the same shape, so
    any connector reads it here. ``scrub`` removes secrets from token texts.
    """
    if not isinstance(content, list):
        raise BadResponse(f"{source} sent logprobs that are not a list of token entries")
    def number(x: Any) -> float:
        """A logprob as sent: a JSON number only (float() had read false as 0.0, a certain token, and "-0.5")."""
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise TypeError("not a number")
        return float(x)

    tokens = []
    try:
        for entry in content:
            top = [(scrub(str(alt["token"])), number(alt["logprob"])) for alt in (entry.get("top_logprobs") or [])]
            top.sort(key=lambda a: a[1], reverse=True)
            tokens.append(TokenLogprob(scrub(str(entry["token"])), number(entry["logprob"]), top))
    except (KeyError, TypeError, ValueError, AttributeError):
        raise BadResponse(f"{source} sent a logprobs entry without token or logprob") from None
    if spans_a_secret([str(entry["token"]) for entry in content], scrub):
        raise BadResponse(f"{source} echoed a secret in pieces across its answer's tokens; the answer was not "
                          "kept")
    def odd(lp: float) -> bool:  # at most 0, with room for a server's rounding; NaN (JSON parsers accept it)
        return math.isnan(lp) or lp > _LOGPROB_SLACK  # would sort anywhere and decide at random

    # the token the model produced cannot have had probability 0: -inf there (a server's processed logprobs)
    # would read as "the model never says this", i.e. a member as not found
    if any(odd(t.logprob) or math.isinf(t.logprob) or any(odd(lp) for _, lp in t.top) for t in tokens):
        raise BadResponse(f"{source} sent a logprob that is not a log-probability (NaN, infinite for the token "
                          "it produced, or above 0)")
    # an alternative the server ruled out (-inf) is as improbable as OpenAI's own floor, and sorts last
    return [TokenLogprob(t.token, t.logprob, [(a, max(lp, _LOGPROB_FLOOR)) for a, lp in t.top]) for t in tokens]


#: the HTTP library the openai client runs on (httpx2), and httpx: their failures while a body is read
_HTTP_LIBS = [httpx]
try:
    import httpx2

    _HTTP_LIBS.append(httpx2)
except ImportError:  # an openai client on httpx itself
    pass
_HTTP_ERRORS = tuple(lib.HTTPError for lib in _HTTP_LIBS)
_TIMEOUTS = tuple(lib.TimeoutException for lib in _HTTP_LIBS)
_DECODING_ERRORS = tuple(lib.DecodingError for lib in _HTTP_LIBS)

#: the headers of a request that HTTP derives from its body (``OpenAITarget._only_chosen_headers``), and the
#: openai client's mark of a streamed response, which it reads back from the request once answered
_FRAMING_HEADERS = ("content-length", "transfer-encoding", "x-stainless-raw-response")

#: the lowest logprob OpenAI reports (its stand-in for "impossible")
_LOGPROB_FLOOR = -9999.0


def header_safe(value: str) -> bool:
    """Whether a secret can go into an HTTP header as it is: printable ASCII without spaces.

    Checked before anything is sent, so that the error can name where the
    value came from without quoting it: httpx would fail on it with a codec or
    header error that quotes the value (a key pasted with a line break or a
    typographic quote).
    """
    return value.isascii() and value.isprintable() and " " not in value


def scrub_json(obj: Any, scrub: Callable[[str], str]) -> Any:
    """A copy of a decoded JSON value with ``scrub`` applied to every string in it, keys included."""
    if isinstance(obj, str):
        return scrub(obj)
    if isinstance(obj, dict):
        return {scrub(str(k)): scrub_json(v, scrub) for k, v in obj.items()}
    if isinstance(obj, list):
        return [scrub_json(v, scrub) for v in obj]
    return obj


def decode_json(body: bytes, source: str, scrub_error: Callable[[str], str]) -> Any:
    """A response body's JSON, or a BadResponse that quotes its start without a secret (``scrub_error``).

    Python's parser refuses more than bad syntax: an integer of more digits than
    ``sys.get_int_max_str_digits`` allows is a plain ValueError, which would have
    ended the whole audit instead of failing this one answer.
    """
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        snippet = scrub_error(body.decode("utf-8", "replace"))[:120]  # scrubbed before it is cut
        raise BadResponse(f"{source} sent a body that is not valid JSON: {snippet!r}") from None
    except ValueError:
        raise BadResponse(f"{source} sent JSON that cannot be read: a number longer than the "
                          f"{sys.get_int_max_str_digits()} digits Python reads") from None


class _Secret:
    """Holds the API key so that no repr, vars() dump or f-string shows it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "'***'"

    __str__ = __repr__


@dataclass
class _Attempt:
    """One failed attempt, translated: the error to raise, and how to retry it."""

    error: TargetError
    retryable: bool
    retry_after: float | None = None


class RetryingConnector:
    """The retry loop of an HTTP connector: one policy, one bound on requests in flight, one 429 pause.

    A connector sets ``retry`` (RetryPolicy), ``_slots`` (a semaphore of its
    concurrency), ``_rng``, ``_rng_lock``, ``_cooldown_lock`` and
    ``_cooldown_until``, and says in ``_classify`` which exceptions of its
    transport are failures to translate (an ``_Attempt``) rather than bugs.
    """

    name: str
    account: QueryAccount
    #: seconds one attempt may take in all (``http_client.Deadline``), besides each read's timeout
    timeout_s: float
    #: spaces every attempt to the target's allowed pace (``http_client.Pacer``); None: as fast as answered
    _pacer: Pacer | None = None

    def _classify(self, exc: Exception) -> _Attempt | None:  # pragma: no cover - interface
        raise NotImplementedError

    def _scrubbed(self, exc: TargetError) -> TargetError:
        return exc

    def _with_retries(self, send: Callable[[], Any], parse: Callable[[Any], T]) -> tuple[T, int]:
        """Run send+parse until it succeeds or retrying cannot help; return (value, retries).

        The error raised at the end carries ``exc.retries`` for the account.
        """
        waited = 0.0
        retries = 0
        bad_responses = 0
        while True:
            self._wait_turn()
            deadline = Deadline(self.timeout_s + DEADLINE_GRACE_S)
            try:
                with self._slots, deadline:  # bounds in-flight requests even across callers' threads
                    current_deadline(deadline)
                    try:
                        body = send()
                    finally:
                        current_deadline(None)
                return parse(body), retries
            except BadResponse as exc:
                attempt = _Attempt(self._scrubbed(exc), retryable=True)
            except (RecursionError, OverflowError, ValueError) as exc:
                # an answer nested thousands deep, a token count of 1e999, text no codec takes (UnicodeError
                # is a ValueError), a number of 5000 digits: this document's answer cannot be read
                # (inconclusive), which must not end the whole audit
                attempt = _Attempt(BadResponse(f"{self.name}: the answer could not be read "
                                               f"({type(exc).__name__})"), retryable=True)
            except Exception as exc:  # noqa: BLE001 - the connector says which failures are its own
                found = self._classify(exc)
                if found is None and not deadline.expired:
                    raise
                attempt = found  # None only when late: set just below
            if deadline.expired:  # the watchdog cut the exchange: whatever httpx made of that, it was late
                attempt = _Attempt(Unreachable(f"{self.name} did not finish its answer within "
                                               f"{self.timeout_s:g}s"), retryable=True)
            err = attempt.error
            if isinstance(err, BadResponse):
                bad_responses += 1
                can_retry = bad_responses <= self.retry.bad_response_retries
            else:
                can_retry = attempt.retryable
            if can_retry and retries < self.retry.max_retries:
                with self._rng_lock:
                    delay = self.retry.delay(retries, attempt.retry_after, self._rng)
                if waited + delay <= self.retry.max_total_wait_s:
                    if isinstance(err, RateLimited):
                        self._start_cooldown(delay)
                    log.debug("%s: %s; retry %d in %.2fs", self.name, err.reason, retries + 1, delay)
                    time.sleep(delay)
                    waited += delay
                    retries += 1
                    continue
                err = type(err)(f"{err} (gave up: waiting {delay:.1f}s more would exceed the "
                                f"{self.retry.max_total_wait_s:.0f}s budget for one request)")
            if retries:
                err = type(err)(f"{err} (after {retries} {'retry' if retries == 1 else 'retries'})")
            err.retries = retries  # type: ignore[attr-defined]
            raise err

    def _complete_accounted(self, request: ChatRequest, send: Callable[[], Any], parse: Callable[[Any], Completion],
                            no_logprobs: str) -> Completion:
        """Send with retries and record the outcome in ``self.account`` (every attempt is paid).

        An answer without the logprobs the request asked for raises ``NoLogprobs``
        (``no_logprobs`` says who answered) with the answer as ``exc.completion``.
        An empty answer has no token to give a logprob for: it is returned as the
        non-answer it is, not taken as proof that the endpoint withholds logprobs.
        """
        try:
            comp, retries = self._with_retries(send, parse)
        except TargetError as exc:
            self.account.record(failed=True, retries=getattr(exc, "retries", 0))
            raise
        if request.logprobs and not comp.tokens and comp.text:
            self.account.record(comp.usage, failed=True, retries=retries)
            exc = NoLogprobs(f"{no_logprobs}; methods that need token probabilities cannot run on this endpoint")
            exc.completion = comp  # type: ignore[attr-defined]
            raise exc
        self.account.record(comp.usage, retries=retries)
        return comp

    def _wait_turn(self) -> None:
        """Before each try: the 429 pause, then the pace (before the deadline starts: waiting for one's turn is
        not lateness). A try that waited for its pace while another worker was told 429 waits out that pause
        and then takes a new turn, so the pace holds after the pause too."""
        while True:
            self._wait_cooldown()
            if self._pacer is None:
                return
            self._pacer.wait()
            with self._cooldown_lock:
                if time.monotonic() >= self._cooldown_until:
                    return

    def _wait_cooldown(self) -> None:
        """After a 429 every worker holds back, not only the one that was told to."""
        with self._cooldown_lock:
            until = self._cooldown_until
        remaining = until - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)

    def _start_cooldown(self, delay: float) -> None:
        with self._cooldown_lock:
            self._cooldown_until = max(self._cooldown_until, time.monotonic() + delay)


class OpenAITarget(RetryingConnector, Target):
    """A chat model behind an OpenAI-compatible HTTP API, as an audit target.

    ``base_url`` is the API root (it usually ends in ``/v1``). The key is
    ``api_key`` and nothing else: None or "" means requests go without an
    Authorization header (a local server that needs no key). The connector
    never reads ``OPENAI_API_KEY`` by itself, because the base URL may be one
    a visitor typed; whoever reads an environment variable does so for the
    host the user named (the app's checkbox, the CLI's ``--api-key-env``),
    and nothing else the openai client reads from the environment (custom
    headers, organization, project) goes out with a request
    (``_only_chosen_headers``). Redirects are not followed: a 3xx is
    reported, so neither the key nor the documents go to a host the user did
    not name.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 60.0,
        max_retries: int = 5,
        max_concurrency: int = 4,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = 30.0,
        max_total_wait_s: float = 300.0,
        bad_response_retries: int = 2,
        sources_path: str | None = None,
        requests_per_minute: float | None = None,
    ) -> None:
        """``requests_per_minute``: the pace the endpoint allows, every try counted (``http_client.Pacer``)."""
        super().__init__()
        check_service_url(base_url, "base_url")
        if not model:
            raise ValueError("model must be given (the model name the endpoint serves)")
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        #: how the endpoint is named in messages, caches and reports: without a query string
        self.base_url = display_url(base_url.rstrip("/"))
        self.model = model
        #: where the response lists the sources the answer cites (e.g. Azure OpenAI's
        #: $.choices[0].message.context.citations); None: the endpoint cites none
        self._sources = None if sources_path is None else compile_jsonpath(sources_path, "sources_path")
        self._sources_path = sources_path
        key = (api_key or "").strip()
        if key and not header_safe(key):
            # said without the key: httpx would fail on it with a codec or header error naming neither
            raise ValueError("the API key has characters no key has (a space, a line break or a non-ASCII "
                             "letter): copy it again from the provider")
        self._key = _Secret(key)
        self._scrubber = SecretScrubber([key])
        if key and urlsplit(base_url).scheme == "http" and not is_loopback(base_url):
            log.warning("%s: the API key is sent over plain http; anyone on the way can read it", self.base_url)
        #: sent with every request when there is no key: the openai client insists on a key,
        #: so it gets a placeholder and the header it would build from it is removed
        self._no_auth = None if key else {"Authorization": openai.Omit()}
        self.timeout_s = float(timeout_s)
        self.max_concurrency = int(max_concurrency)
        self.retry = RetryPolicy(max_retries=max_retries, backoff_base_s=backoff_base_s,
                                 backoff_cap_s=backoff_cap_s, max_total_wait_s=max_total_wait_s,
                                 bad_response_retries=bad_response_retries)
        # The client's retries are off: ours count every attempt and share rate-limit waits.
        # Redirects are not followed (see the class docstring); a 3xx becomes a RequestRejected naming it.
        # What the openai client reads from the environment and would send to any host (OPENAI_CUSTOM_HEADERS,
        # OPENAI_ORG_ID, OPENAI_PROJECT_ID) is taken off every request on the way out (``_only_chosen_headers``)
        options = client_options(base_url)
        options["event_hooks"]["request"].append(self._only_chosen_headers)
        options["event_hooks"]["response"] = [self._cap_error_body]
        try:
            http_client = openai.DefaultHttpxClient(**options)
            self._client = openai.OpenAI(base_url=base_url.rstrip("/"), api_key=key or _NO_KEY_PLACEHOLDER,
                                         timeout=self.timeout_s, max_retries=0, http_client=http_client)
        except (ImportError, ValueError) as exc:  # the environment's proxy settings, read here
            raise client_error(exc) from None
        #: every header a request carries that HTTP does not derive from the request itself: the key the user
        #: gave (none without one), and the openai client's own values of the rest, not the environment's
        chosen = {"Accept": "application/json", "User-Agent": self._client.user_agent,
                  **{k: http_client.headers[k] for k in ("accept-encoding", "connection")},
                  **({"Authorization": f"Bearer {key}"} if key else {})}
        self._headers = _Secret(chosen)  # type: ignore[arg-type] - holds the headers, never shown
        self._slots = threading.BoundedSemaphore(self.max_concurrency)
        self._pacer = None if requests_per_minute is None else Pacer(requests_per_minute)
        self._rng = random.Random()
        self._rng_lock = threading.Lock()
        self._cooldown_lock = threading.Lock()
        self._cooldown_until = 0.0  # monotonic time before which no request is sent (after a 429)

    # ------------------------------------------------------------------ the requests' headers and error bodies

    def _only_chosen_headers(self, request: Any) -> None:
        """An httpx request hook: the request goes out with the headers this connector chose and no others.

        The openai client adds what it reads from the environment of whoever runs the
        auditor: the headers of OPENAI_CUSTOM_HEADERS (an Authorization line there even
        replaced the key the user gave), OPENAI_ORG_ID and OPENAI_PROJECT_ID. They are
        that operator's credentials for their own endpoint, and the base URL may be one a
        visitor typed. The telemetry headers (X-Stainless-OS and the like) go too: the
        project never chose them.
        """
        kept = {name: request.headers[name] for name in _FRAMING_HEADERS if name in request.headers}
        if "content-type" in request.headers:  # a body: the JSON every request of ours sends
            kept["Content-Type"] = "application/json"
        for name in list(request.headers.keys()):
            del request.headers[name]
        request.headers.update({"Host": request.url.netloc.decode("ascii"), **self._headers.reveal(), **kept})

    def _cap_error_body(self, response: Any) -> None:
        """An httpx response hook: an error response's body is cut to its start (``http_client.error_head``).

        The openai client reads an error's body whole, decompressed, before it raises: a
        gzip body of 1 MiB in a 500 reply took a gigabyte of memory. Its body becomes
        that start, already decoded; a body that cannot be decoded is not quoted at all.
        """
        if response.is_success:
            return
        lib = next(lib for lib in _HTTP_LIBS if isinstance(response, lib.Response))
        body = lib.Response(response.status_code, headers=response.headers, stream=response.stream,
                            request=response.request)
        try:
            head = error_head(body.iter_bytes(), self._scrubber)
        except _DECODING_ERRORS:
            head = b""
        finally:
            body.close()
        for name in ("content-encoding", "content-length", "transfer-encoding"):
            response.headers.pop(name, None)
        response.stream = lib.ByteStream(head)

    # ------------------------------------------------------------------ identity

    @property
    def name(self) -> str:  # type: ignore[override]
        """Base URL and model; and where the sources are read, when set (answers stored without them
        would otherwise be reused for a file that reads them, and cite nothing)."""
        where = f" · sources {self._sources_path}" if self._sources_path else ""
        return f"{self.base_url} · {self.model}{where}"

    def __repr__(self) -> str:
        return (f"OpenAITarget(base_url={self.base_url!r}, model={self.model!r}, timeout_s={self.timeout_s}, "
                f"max_concurrency={self.max_concurrency}, retry={self.retry!r})")

    def credential_id(self, salt: bytes) -> str:
        """Who the answers were given to, without the key (``credential_digest``), "" with no key."""
        memo = self.__dict__.setdefault("_credential_ids", {})  # scrypt once per store salt, not per method
        if salt not in memo:
            memo[salt] = credential_digest(salt, self._key.reveal())
        return memo[salt]

    # ------------------------------------------------------------------ public API

    def complete(self, request: ChatRequest) -> Completion:
        """Send one chat request; raise a TargetError subclass when it cannot be answered.

        Raises ``NoLogprobs`` when logprobs were asked for and the endpoint sent
        none; the completion it did send is attached as ``exc.completion``.
        """
        params = self._params(request)
        return self._complete_accounted(
            request,
            lambda: self._decode(self._client.chat.completions.with_streaming_response.create(
                **params, extra_headers=self._no_auth)),
            self._to_completion,
            f"{self.base_url} answered without logprobs for model {self.model!r}")

    def list_models(self) -> list[str]:
        """The model ids the endpoint lists at GET /models (not every server has this route)."""
        ids, _ = self._with_retries(lambda: self._decode(self._client.models.with_streaming_response.list(
                                        extra_headers=self._no_auth)),
                                    parse=self._to_model_ids)
        return ids

    def capabilities(self) -> Capabilities:
        """Check the model exists (via /models when served), then send the capability probe.

        Raises ``AuthenticationFailed`` or ``UnknownModel``: they mean the
        connection is misconfigured, which the user must fix before anything
        else. Any other failure is reported as ``reachable=False`` with the
        reason in ``detail``, as the base class does.
        """
        try:
            models: list[str] | None = self.list_models()
        except (AuthenticationFailed, Unreachable) as exc:
            if isinstance(exc, AuthenticationFailed):
                raise
            return Capabilities(False, False, 0, model=self.model, detail=str(exc))
        except TargetError as exc:  # no /models route, or an odd one: the probe below still decides
            log.debug("%s: /models unavailable (%s); probing directly", self.name, exc.reason)
            models = None
        if models is not None and self.model not in models:
            shown = self._scrub_error(", ".join(models[:10])) + (" …" if len(models) > 10 else "")
            raise UnknownModel(f"{self.base_url} does not serve a model named {self.model!r}; "
                               f"it lists: {shown or 'no models'}")
        # The base class's probe request, interpreted the same way, except that a
        # rejected key or model is raised rather than folded into "unreachable".
        probe = ChatRequest.chat([{"role": "user", "content": "Say OK."}], max_tokens=1,
                                 logprobs=True, top_logprobs=MAX_TOP_LOGPROBS)
        try:
            comp = self.complete(probe)
        except (AuthenticationFailed, UnknownModel):
            raise
        except NoLogprobs as exc:
            self.account.answered_after_all(exc)
            answered = getattr(exc, "completion", None)
            return self.with_style(Capabilities(True, False, 0, model=answered.model if answered else self.model,
                                                detail=str(exc)))
        except TargetError as exc:
            return Capabilities(False, False, 0, model=self.model, detail=str(exc))
        if not comp.tokens:  # an empty answer: no token to carry a logprob, so nothing is known either way
            return self.with_style(Capabilities(
                True, False, 0, model=comp.model or self.model,
                detail="it answered the capability request with nothing, so whether it gives logprobs is "
                       "unknown; methods that need token probabilities will not run"))
        n = max((len(t.top) for t in comp.tokens), default=0)
        return self.with_style(Capabilities(True, True, n, model=comp.model or self.model,
                                            detail=f"logprobs with up to {n} alternatives per token"))

    # ------------------------------------------------------------------ request / response

    def _params(self, request: ChatRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": request.message_dicts(),
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
        }
        if request.seed is not None:
            params["seed"] = request.seed
        if request.logprobs:
            params["logprobs"] = True
            if request.top_logprobs > 0:
                params["top_logprobs"] = min(request.top_logprobs, MAX_TOP_LOGPROBS)
        return params

    def _decode(self, streaming: Any) -> Any:
        """The JSON body of a 2xx response, read by us (a streaming response of the openai client) so that a
        broken body is a BadResponse and no more than ``MAX_BODY_BYTES`` of it is read."""
        with streaming as raw:
            body = b"".join(capped(raw.http_response.iter_bytes(), self.base_url))
        return decode_json(body, self.base_url, self._scrub_error)

    def _to_completion(self, data: Any) -> Completion:
        if not isinstance(data, dict):
            raise BadResponse(f"{self.base_url} sent JSON that is not a chat completion object")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise BadResponse(f"{self.base_url} sent a chat completion without choices")
        choice = choices[0]
        message = choice.get("message")
        if not isinstance(message, dict):
            raise BadResponse(f"{self.base_url} sent a choice without a message")
        text = message.get("content")
        if text is not None and not isinstance(text, str):
            raise BadResponse(f"{self.base_url} sent a message whose content is not text")
        usage_d = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        try:
            counts = [int(usage_d.get("prompt_tokens") or 0), int(usage_d.get("completion_tokens") or 0)]
        except (TypeError, ValueError, OverflowError):
            raise BadResponse(f"{self.base_url} sent unreadable token usage") from None
        if min(counts) < 0:  # the account would go down (a review, session 61)
            raise BadResponse(f"{self.base_url} sent a negative token count")
        usage = Usage(*counts, reported="prompt_tokens" in usage_d)
        # a server that echoes the key in any field must not carry it into the store, the history or a report
        return Completion(
            text=self._scrub(text or ""),
            tokens=self._to_tokens(choice.get("logprobs")),
            usage=usage,
            finish_reason=self._scrub(str(choice.get("finish_reason") or "")),
            model=self._scrub(str(data.get("model") or self.model)),
            raw=self._scrub_obj(data),
            sources=None if self._sources is None else read_sources(self._sources, [data], self._scrub,
                                                                     self.base_url),
        )

    def _to_tokens(self, logprobs: Any) -> list[TokenLogprob] | None:
        """choices[0].logprobs.content → tokens with alternatives sorted best first; None if absent."""
        if logprobs is None:
            return None
        if not isinstance(logprobs, dict):
            raise BadResponse(f"{self.base_url} sent logprobs in an unknown shape")
        content = logprobs.get("content")
        if content is None:
            return None
        return tokens_from_logprob_entries(content, self._scrub, self.base_url)

    def _to_model_ids(self, data: Any) -> list[str]:
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise BadResponse(f"{self.base_url}/models sent no model list")
        try:
            return [self._scrub(str(m["id"])) for m in items]
        except (KeyError, TypeError):
            raise BadResponse(f"{self.base_url}/models sent a model without an id") from None

    # ------------------------------------------------------------------ retries (RetryingConnector)

    def _classify(self, exc: Exception) -> _Attempt | None:
        if isinstance(exc, openai.OpenAIError):
            return self._translate(exc)
        if isinstance(exc, _HTTP_ERRORS):  # raised while ``_decode`` reads the streamed body itself
            return self._body_error(exc)
        return None

    def _body_error(self, exc: Exception) -> _Attempt:
        """A failure while the answer's body was read: late, undecodable, or broken off."""
        url = self.base_url
        if isinstance(exc, _TIMEOUTS):
            return _Attempt(Unreachable(f"{url} did not answer within {self.timeout_s:g}s"), retryable=True)
        if isinstance(exc, _DECODING_ERRORS):
            return _Attempt(BadResponse(f"{url} sent a compressed body that could not be decompressed"),
                            retryable=True)
        return _Attempt(Unreachable(f"the answer from {url} broke off before it was complete: "
                                    f"{type(exc).__name__}"), retryable=True)

    def _translate(self, exc: openai.OpenAIError) -> _Attempt:
        """An openai exception → our typed error, with whether and when to retry."""
        url = self.base_url
        if isinstance(exc, openai.APITimeoutError):
            return _Attempt(Unreachable(f"{url} did not answer within {self.timeout_s:g}s"), retryable=True)
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            why = f": {type(cause).__name__}: {self._scrub_error(str(cause))}" if cause is not None else ""
            if isinstance(cause, (httpx.RemoteProtocolError, httpx.ReadError)):
                # connected, then the answer broke off (a truncated body or a dropped connection)
                return _Attempt(Unreachable(self._scrub(f"the answer from {url} broke off before it was complete{why}")),
                                retryable=True)
            return _Attempt(Unreachable(self._scrub(f"cannot connect to {url}{why}")), retryable=True)
        if isinstance(exc, openai.APIStatusError):
            return self._translate_status(exc)
        if isinstance(exc, openai.APIResponseValidationError):
            return _Attempt(BadResponse(f"{url} sent a response of the wrong shape"), retryable=True)
        return _Attempt(TargetError(self._scrub(f"request to {url} failed: {type(exc).__name__}: "
                                                f"{self._scrub_error(str(exc))}")), retryable=False)

    def _translate_status(self, exc: openai.APIStatusError) -> _Attempt:
        url, status = self.base_url, exc.status_code
        said, code = self._server_message(exc)
        quote = f": {said}" if said else ""
        retry_after = parse_retry_after(exc.response.headers)
        if status in (401, 403):
            if not self._key.reveal():
                return _Attempt(AuthenticationFailed(self._scrub(
                    f"{url} asks for an API key (HTTP {status}) and none was given{quote}")), retryable=False)
            return _Attempt(AuthenticationFailed(self._scrub(
                f"the API key was rejected by {url} (HTTP {status}){quote}")), retryable=False)
        if 300 <= status < 400:
            where = self._scrub_error(exc.response.headers.get("location") or "another address")
            return _Attempt(RequestRejected(self._scrub(
                f"{url} redirects requests (HTTP {status}) to {_URL_QUERY_RE.sub('', where)}; redirects are not "
                "followed, so that neither your key nor your documents go to a host you did not name. If you "
                "trust that address, enter it as the base URL.")), retryable=False)
        if status == 429:
            return _Attempt(RateLimited(self._scrub(f"{url} is rate-limiting requests (HTTP 429){quote}")),
                            retryable=True, retry_after=retry_after)
        if status >= 500 or status == 408:
            return _Attempt(ServerError(self._scrub(f"{url} failed with HTTP {status}{quote}")),
                            retryable=True, retry_after=retry_after)
        lowered = f"{said} {code or ''}".lower()
        if status == 404 and ("model" in lowered):
            return _Attempt(UnknownModel(self._scrub(
                f"{url} does not serve a model named {self.model!r} (HTTP 404){quote}")), retryable=False)
        if status in (400, 413, 422) and (code == "context_length_exceeded"
                                          or any(w in lowered for w in _CONTEXT_WORDING)):
            return _Attempt(ContextTooLong(self._scrub(
                f"the prompt is longer than {self.model!r} accepts at {url}{quote}")), retryable=False)
        if status == 404:
            return _Attempt(RequestRejected(self._scrub(
                f"{url} has no such route (HTTP 404){quote}; check the base URL (it usually ends in /v1)")),
                retryable=False)
        return _Attempt(RequestRejected(self._scrub(f"{url} rejected the request (HTTP {status}){quote}")),
                        retryable=False)

    def _server_message(self, exc: openai.APIStatusError) -> tuple[str, str | None]:
        """The server's own explanation, from OpenAI's error envelope or the raw body, scrubbed, then cut.

        Scrubbed before it is cut: a key cut in two would no longer match, and its first half would stay.
        """
        body, code = exc.body, exc.code
        if isinstance(body, dict):
            inner = body.get("error", body)
            if isinstance(inner, dict):
                text = str(inner.get("message") or inner.get("detail") or "")
                code = str(inner["code"]) if inner.get("code") is not None else exc.code
            else:
                text = str(inner)
        elif isinstance(body, str):
            text = body
        else:
            try:
                text = exc.response.text
            except Exception:  # noqa: BLE001 - a body we cannot read is simply not quoted
                text = ""
        return self._scrub_error(text.strip())[:_MAX_QUOTED_CHARS], code

    # ------------------------------------------------------------------ secrecy

    def _scrub(self, text: str) -> str:
        """Text without the key, in any spelling, where it is of key length: a placeholder key ("1", "x") for a
        local server is left in answers, which masking would garble (``SecretScrubber.answer``)."""
        return self._scrubber.answer(text)

    def _scrub_error(self, text: str) -> str:
        """A server's text quoted in an error, without the key however short (``SecretScrubber.error``)."""
        return self._scrubber.error(text)

    def _scrubbed(self, exc: TargetError) -> TargetError:
        clean = self._scrub(str(exc))
        return exc if clean == str(exc) else type(exc)(clean)

    def _scrub_obj(self, obj: Any) -> Any:
        """A copy of a decoded JSON value with the key removed from every string in it."""
        return scrub_json(obj, self._scrub)

    # ------------------------------------------------------------------ as a registered target type

    @classmethod
    def from_config(cls, config: "OpenAITargetConfig", environ: Mapping[str, str] | None = None) -> "OpenAITarget":
        """The connector a target file of type ``openai`` describes.

        The key is read from ``environ`` (default: the process environment)
        under the variable the file names, and only for the file's base URL.
        """
        env = os.environ if environ is None else environ
        key = env.get(config.api_key_env)
        if not key:
            raise AuthenticationFailed(f"no API key for {config.base_url}: the target file reads it from the "
                                       f"{config.api_key_env} environment variable, which is not set")
        return cls(config.base_url, config.model, key, timeout_s=config.timeout_s,
                   max_retries=config.max_retries, max_concurrency=config.max_concurrency,
                   sources_path=config.sources_path, requests_per_minute=config.requests_per_minute)


@dataclass(frozen=True)
class OpenAITargetConfig:
    """An OpenAI-compatible endpoint as a target file declares it (``type: openai``)."""

    base_url: str  # the API root, usually ending in /v1
    model: str  # the model name the endpoint serves
    #: the environment variable holding the key (the file names the variable, never the key)
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 60.0
    max_retries: int = 5  # retries after the first attempt (RetryPolicy)
    max_concurrency: int = 4
    #: JSONPath to the sources each answer cites, for services that add them to the chat completion
    #: (Azure OpenAI "on your data": $.choices[0].message.context.citations); None: none
    sources_path: str | None = None
    #: at most this many requests a minute, every try counted (``http_client.Pacer``); None: no pace
    requests_per_minute: float | None = None

    def __post_init__(self) -> None:
        check_service_url(self.base_url, "base_url")
        if not isinstance(self.model, str) or not self.model.strip():
            raise ValueError("model must name the model the endpoint serves")
        if not isinstance(self.api_key_env, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.api_key_env):
            raise ValueError("api_key_env must be the name of an environment variable (letters, digits, _)")
        check_timeout(self.timeout_s)
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError("max_retries must be a whole number, 0 or more")
        if isinstance(self.max_concurrency, bool) or not isinstance(self.max_concurrency, int) \
                or self.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if self.sources_path is not None:
            compile_jsonpath(self.sources_path, "sources_path")
        check_pace(self.requests_per_minute)

    def env_vars(self) -> list[str]:
        """The environment variables this target reads (their values are secrets)."""
        return [self.api_key_env]
