"""How the connectors' HTTP clients are set up: a deadline per exchange, no idle connections, and
proxies from the environment only where they can apply, no cookies kept, and an optional pace.

**A request ends by its deadline, however slowly the server sends.** httpx's
timeouts bound each read, not the exchange: a server that sends one byte of its
headers or body every second, a gzip body of empty blocks that decodes to
nothing, or an event-stream line that never ends holds a request (and the audit
waiting on it) for hours. ``Deadline`` closes the exchange's socket when the
time is up: the blocked read returns, httpx raises, and the connector reports
the request as unanswered in time (a per-document reason, retried like a
timeout). The socket is taken from httpx's ``trace`` extension when the
connection is made, so each request needs a connection of its own: no idle
connections are kept (``NO_KEEPALIVE``), a new TCP (and TLS) handshake per
request, which is small beside a model's answer.

**Proxies.** httpx honours HTTP_PROXY / ALL_PROXY from the environment. For a
target on this machine (127.0.0.1, localhost, ::1) a proxy is never what the
user meant, and it would receive the key in plain text: such targets ignore the
environment's proxy settings. So does every plain ``http://`` target: a proxy
forwards such a request whole, key and documents included, so it would be a
host the user never named for the key (an ``https://`` request only passes
through a proxy's tunnel, encrypted end to end, and keeps the proxy). A proxy setting httpx cannot use (a socks5 proxy
without its package, an ftp:// proxy) is said in plain words (``client_error``).

**Every request stands alone.** httpx keeps the cookies a server sets and sends
them back, and a chat service that keeps its conversation under a session cookie
would then read every probe of an audit as one conversation: a probe that sends
the first two thirds of a document puts them in the history that a later probe,
cut at a quarter, asks to be quoted, and a document the service never held
would look copied. No cookie is kept (``no_cookies``); a key or session the
service needs goes in a header, where the target file names it. A service that
keeps conversations by an id in the body gets a new one per request from the
``{{session_id}}`` placeholder (``http_api``).

**Pace.** A service may allow a few requests a minute, and an audit sent at
full speed spends its retries on 429s. ``Pacer`` spaces a connector's requests
(every attempt, retries included) to at most ``requests_per_minute``, across
all the threads that share it.
"""
from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any, Iterable, Iterator
from urllib.parse import quote, urlsplit

import httpx

#: the connection pool of a connector whose requests have a ``Deadline``: none kept idle, so that every
#: request makes its own connection and the trace sees its socket
NO_KEEPALIVE = httpx.Limits(max_keepalive_connections=0)

#: what an attempt may take beyond its ``timeout_s`` before its socket is shut: the connectors' own
#: timeouts and late-answer checks speak first, with their more precise messages
DEADLINE_GRACE_S = 1.0

_CONNECTED = ("connection.connect_tcp.complete", "connection.connect_unix_socket.complete")


class Deadline:
    """A timer that shuts the socket of the exchange it watches after ``seconds``.

    Use as a context manager around one exchange, made current for the thread
    (``current_deadline``) so that the client's request hook (``attach_current``)
    gives the request its ``trace``. ``expired`` says whether it fired (the
    exchange's error is then a late answer).
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def trace(self, event_name: str, info: dict[str, Any]) -> None:
        if event_name not in _CONNECTED:
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is None:
            return
        with self._lock:
            self._sockets.append(sock)
            late = self.expired
        if late:
            _shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def __enter__(self) -> "Deadline":
        self._timer = threading.Timer(self.seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # closed already: the exchange is over
        pass


#: the ``Deadline`` of the exchange running in this thread, for clients that build requests themselves
#: (the openai client): its request hook reads it (``attach_current``)
_current = threading.local()


def current_deadline(deadline: Deadline | None) -> None:
    """Set (or clear) the deadline of the exchange this thread is about to run."""
    _current.deadline = deadline


def attach_current(request: httpx.Request) -> None:
    """An httpx request hook: the thread's current ``Deadline`` watches this request."""
    deadline = getattr(_current, "deadline", None)
    if deadline is not None:
        request.extensions["trace"] = deadline.trace


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


#: the longest timeout a target file may set: an hour per answer is already more than any service takes (a
#: 1e300-second timeout passed the old check and then failed every request with OverflowError)
MAX_TIMEOUT_S = 3600.0


def check_timeout(value: Any) -> None:
    """A target file's ``timeout_s``: a number of seconds above 0 and at most ``MAX_TIMEOUT_S``, else ValueError
    (.nan and .inf are YAML floats; a bool is an int to Python)."""
    import math

    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not 0 < value <= MAX_TIMEOUT_S):
        raise ValueError(f"timeout_s must be a positive number of seconds, at most {MAX_TIMEOUT_S:.0f}")


def is_loopback(url: str) -> bool:
    """Whether ``url`` names this machine: a loopback address (127.0.0.0/8, ::1) or "localhost". A name that
    only begins like one ("127.attacker.example") is a name anyone can point anywhere: it had passed as this
    machine, and a key sent to it over plain http drew no warning (a review, session 61)."""
    import ipaddress

    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return False
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def no_cookies() -> CookieJar:
    """A cookie jar that refuses every cookie a server sets, so no request carries another's (module docstring)."""
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


def client_options(url: str) -> dict[str, Any]:
    """The httpx.Client settings every connector uses for ``url`` (see the module docstring); redirects are
    the connectors' to follow (httpx would carry custom key headers to any host)."""
    return {"follow_redirects": False, "limits": NO_KEEPALIVE, "event_hooks": {"request": [attach_current]},
            "trust_env": urlsplit(url).scheme.lower() == "https" and not is_loopback(url),
            "cookies": no_cookies()}


#: the fastest pace a target may set: faster than this is no pace at all
MAX_REQUESTS_PER_MINUTE = 60_000.0
#: the slowest pace: one request every 100 minutes. Slower is no quota anyone sets, and 1e-300 a minute made a
#: wait past what the clock holds ("timestamp out of range", an ended audit)
MIN_REQUESTS_PER_MINUTE = 0.01


def check_pace(value: Any) -> None:
    """A ``requests_per_minute``: None (no pace) or a number from ``MIN_REQUESTS_PER_MINUTE`` to
    ``MAX_REQUESTS_PER_MINUTE``."""
    if value is None:
        return
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not MIN_REQUESTS_PER_MINUTE <= value <= MAX_REQUESTS_PER_MINUTE):
        raise ValueError(f"requests_per_minute must be a number from {MIN_REQUESTS_PER_MINUTE:g} (one request every "
                         f"{1 / MIN_REQUESTS_PER_MINUTE:.0f} minutes) to {MAX_REQUESTS_PER_MINUTE:.0f}, for example "
                         "20; leave it out for no pace")


class Pacer:
    """Spaces requests ``60 / requests_per_minute`` seconds apart, across threads (module docstring).

    Each caller reserves the next free start time under a lock and sleeps until it, so threads that
    wait together leave in turn, one interval apart. The first request goes at once.
    """

    def __init__(self, requests_per_minute: float, clock: Any = time.monotonic, sleep: Any = time.sleep) -> None:
        check_pace(requests_per_minute)
        self.interval_s = 60.0 / float(requests_per_minute)
        self._clock, self._sleep = clock, sleep
        self._next = -math.inf
        self._lock = threading.Lock()

    def wait(self) -> float:
        """Block until this request may start; return the seconds waited."""
        with self._lock:
            now = self._clock()
            start = max(now, self._next)
            self._next = start + self.interval_s
        if start > now:
            self._sleep(start - now)
        return start - now


def client_error(exc: Exception) -> ValueError:
    """A client that could not be built (httpx reads the environment's proxy settings then), in plain words."""
    return ValueError(f"the HTTP client could not be set up ({type(exc).__name__}: {exc}); check the proxy "
                      "settings in the environment (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY): unset them or give a "
                      "proxy httpx can use (http:// or https://)")


#: the largest answer body read: far above any model's answer, far below what fills memory or the store
#: (a 500 KiB gzip body can decode to 500 MiB)
MAX_BODY_BYTES = 32 * 2 ** 20


#: the content codings a body may come in to be read: one layer at most (``single_coding``)
READABLE_CODINGS = frozenset({"gzip", "x-gzip", "deflate", "br", "zstd", "identity"})


def single_coding(headers: Any) -> str | None:
    """Why a body's ``Content-Encoding`` is not read, or None.

    httpx decodes every layer a server names, each chunk whole before ``capped`` can count it: two gzip layers
    took an 822-byte body to 400 MiB in memory, and 16 KiB would have taken gigabytes (a review, session 61).
    One layer multiplies a network read by about a thousand at most, which the cap then stops.
    """
    value = headers.get("content-encoding") or ""
    codings = [c.strip().lower() for c in value.split(",") if c.strip() and c.strip().lower() != "identity"]
    if len(codings) > 1 or any(c not in READABLE_CODINGS for c in codings):
        return f"it compressed its answer as {value[:60]!r}; one layer of gzip, deflate, br or zstd is read"
    return None


def capped(chunks: Iterable[bytes], source: str) -> Iterator[bytes]:
    """``chunks`` of a body as they arrive, until more than ``MAX_BODY_BYTES`` would have been read: then a
    BadResponse (the rest is never read)."""
    from audit_core.target.base import BadResponse

    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > MAX_BODY_BYTES:
            raise BadResponse(f"{source} sent an answer larger than {MAX_BODY_BYTES // 2 ** 20} MiB; it was not "
                              "read further")
        yield chunk


#: how much of an error response's body is read, to quote from: the rest is not read (an error body can be a
#: decompression bomb as well as an answer)
ERROR_BODY_BYTES = 64 * 1024


def error_head(chunks: Iterable[bytes], scrubber: "SecretScrubber") -> bytes:
    """The start of an error response's decoded body: at most ``ERROR_BODY_BYTES``, the rest never read.

    Where the body goes on past the cut, a secret the cut split in two is masked
    (``SecretScrubber.cut_end``): its first half no longer matches the secret, and
    would be quoted as it is.
    """
    head = b""
    for chunk in chunks:
        head += chunk
        if len(head) > ERROR_BODY_BYTES:
            return scrubber.cut_end(head[:ERROR_BODY_BYTES])
    return head


# --------------------------------------------------------------------------- secrets in server text


def secret_forms(secret: str) -> set[str]:
    """The spellings in which a server may echo ``secret``: as sent, escaped inside a JSON string (``"`` and
    ``\\``, and ``\\/`` for ``/`` as PHP writes it, and non-ASCII as ``\\uXXXX``), and percent-encoded as in
    a URL. An error body is quoted as the raw text the server sent, so a key echoed inside its JSON is in
    one of the escaped spellings, which an exact match misses."""
    forms = {secret}
    for escaped in (json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]):
        forms |= {escaped, escaped.replace("/", "\\/")}
    forms.add(quote(secret, safe=""))
    return {f for f in forms if f}


class SecretScrubber:
    """Masks a connector's secrets (every spelling of ``secret_forms``) in the text it keeps or shows.

    Two strengths, because masking a short value costs differently in each place:

    - ``answer``: answers, tokens, sources and raw bodies the methods read. Only secrets of at least
      ``MIN_SECRET_CHARS`` are masked: a tenant "a" or an API version "2" masked there would garble every
      word they occur in and change what the methods compare with the document.
    - ``error``: a server's own words quoted in an error message (its error body, a redirect's address,
      a connection error). Every secret is masked, whatever its length: such text is read by a person,
      stored with a failed request and shown in the history, and a short key is still a key. One of fewer
      than 4 characters is masked only where it stands as a token of its own (not inside a word, a number
      or a model id): a placeholder key "x" had made "does not e***ist", and "1" "llama-3.***-8b". One of
      4 to 7 wherever no letter or digit touches it: "Incorrect API key provided: Ab3xK9q." and
      "/keys/Ab3xK9q" had kept it.

    The scrubber never shows its secrets (no repr, no attributes).
    """

    __slots__ = ("_long", "_short", "_all")

    #: below this many characters a secret is masked only as a token of its own (class docstring)
    TINY_SECRET_CHARS = 4

    def __init__(self, secrets: Iterable[str]) -> None:
        from audit_core.target.base import MIN_SECRET_CHARS

        values = {s for s in secrets if s}
        # longest first: a secret that contains another is masked whole
        self._long = self._spellings(s for s in values if len(s) >= MIN_SECRET_CHARS)
        tiny = self._spellings(s for s in values if len(s) < self.TINY_SECRET_CHARS)
        short = self._spellings(s for s in values if self.TINY_SECRET_CHARS <= len(s) < MIN_SECRET_CHARS)
        self._all = tuple(f.encode("utf-8") for f in self._spellings(values))
        alternatives = ([r"(?<![A-Za-z0-9])(?:" + "|".join(map(re.escape, short)) + r")(?![A-Za-z0-9])"] if short
                        else []) + ([r"(?<![\w.\-/])(?:" + "|".join(map(re.escape, tiny)) + r")(?![\w.\-/])"]
                                    if tiny else [])
        self._short = re.compile("|".join(alternatives)) if alternatives else None

    @staticmethod
    def _spellings(secrets: Iterable[str]) -> tuple[str, ...]:
        return tuple(sorted({f for s in secrets for f in secret_forms(s)}, key=lambda f: (-len(f), f)))

    @staticmethod
    def _mask(text: str, spellings: tuple[str, ...]) -> str:
        from audit_core.target.base import storable_text

        text = storable_text(text)
        for form in spellings:
            text = text.replace(form, "***")
        return text

    def answer(self, text: str) -> str:
        """``text`` of an answer with every secret of key length masked (see the class docstring)."""
        return self._mask(text, self._long)

    def error(self, text: str) -> str:
        """A server's text quoted in an error, with every secret masked, however short (a short one as a token)."""
        text = self._mask(text, self._long)
        return text if self._short is None else self._short.sub("***", text)

    def cut_end(self, head: bytes) -> bytes:
        """``head``, the start of a longer text (UTF-8), with an end that begins any secret masked.

        A cut can fall inside a secret: what is left of it matches no spelling, so ``error``
        and ``answer`` would keep it, and a first half of a key is half a key. The end is
        masked wherever it is a prefix of a secret, however short (a lone letter too: text
        cut short loses nothing that matters by it).
        """
        longest = max((n for form in self._all for n in range(min(len(form), len(head)), 0, -1)
                       if head.endswith(form[:n])), default=0)
        return head[:len(head) - longest] + b"***" if longest else head

    def __repr__(self) -> str:
        return "SecretScrubber(***)"

    __str__ = __repr__
