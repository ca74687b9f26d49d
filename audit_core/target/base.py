"""The Target interface: everything the auditor knows about a RAG system.

A target takes a chat request and returns a completion with (optionally)
per-token logprobs and top alternatives, in OpenAI's shape. Two kinds of
implementation exist: the HTTP connectors of the target-type registry
(``audit_core.target``: OpenAI-compatible, or any HTTP API described by a
target file; a real user's target, or our reference server over loopback) and
``shadow.rag.RagSystem`` in-process. The shadow is probed through exactly the same code as the target,
so every method sees the same kind of observation from both.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence
from urllib.parse import urlsplit

#: OpenAI's API caps top_logprobs at 20
MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion request, as sent to any target."""

    messages: tuple[tuple[str, str], ...]  # (role, content) pairs; hashable and ordered
    max_tokens: int = 16
    temperature: float = 0.0
    logprobs: bool = False
    top_logprobs: int = 0
    seed: int | None = 0

    def __post_init__(self) -> None:
        if not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}")
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs=True")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")

    @classmethod
    def chat(cls, messages: Sequence[dict], **kw) -> "ChatRequest":
        return cls(messages=tuple((m["role"], m["content"]) for m in messages), **kw)

    def message_dicts(self) -> list[dict]:
        return [{"role": r, "content": c} for r, c in self.messages]

    def to_json(self) -> dict:
        d = asdict(self)
        d["messages"] = self.message_dicts()
        return d

    def key(self) -> str:
        """Stable content hash: the same request always maps to the same stored answer."""
        blob = json.dumps(self.to_json(), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class TokenLogprob:
    """One generated token with its logprob and the top alternatives (best first)."""

    token: str
    logprob: float
    top: list[tuple[str, float]] = field(default_factory=list)


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: False where the target did not say what an answer used (a custom API, an OpenAI-compatible server that
    #: leaves ``usage`` out): its zeros are unknowns, and the account says so rather than "0 tokens"
    reported: bool = True


@dataclass
class Completion:
    text: str
    tokens: list[TokenLogprob] | None  # None: the endpoint returned no logprobs
    usage: Usage
    finish_reason: str = "stop"
    model: str = ""
    raw: dict | None = None  # what the endpoint sent, kept as evidence
    #: the texts of the sources the answer cites (a passage, title or address each), for services
    #: that return them beside the answer; None: this endpoint returns no sources field at all
    sources: list[str] | None = None

    def to_json(self) -> dict:
        out = {
            "text": self.text,
            "tokens": None if self.tokens is None else [
                {"token": t.token, "logprob": t.logprob, "top": [list(a) for a in t.top]} for t in self.tokens
            ],
            # "reported" only where it is False: answers and shipped observations stored before it read the same
            "usage": {k: v for k, v in asdict(self.usage).items() if k != "reported" or not v},
            "finish_reason": self.finish_reason,
            "model": self.model,
            "raw": self.raw,
        }
        if self.sources is not None:  # absent, not null: answers stored before sources existed read the same
            out["sources"] = list(self.sources)
        return out

    @classmethod
    def from_json(cls, d: dict) -> "Completion":
        toks = d.get("tokens")
        return cls(
            text=d["text"],
            tokens=None if toks is None else [
                TokenLogprob(t["token"], float(t["logprob"]), [(a[0], float(a[1])) for a in t["top"]]) for t in toks
            ],
            usage=Usage(**d.get("usage", {})),
            finish_reason=d.get("finish_reason", "stop"),
            model=d.get("model", ""),
            raw=d.get("raw"),
            sources=None if d.get("sources") is None else [str(x) for x in d["sources"]],
        )


@dataclass
class Capabilities:
    """What an endpoint returns, found by a capability probe."""

    reachable: bool
    logprobs: bool
    max_top_logprobs: int
    model: str = ""
    detail: str = ""
    #: how the target's model answers a request to complete a text: "completion"
    #: (continues at once), "chat" (restates or replies first) or None (unknown);
    #: found by ``audit_core.target.style.detect_style``
    style: str | None = None
    style_detail: str = ""
    #: the answers carry the sources they cite (``Completion.sources``), which the
    #: cited-sources method reads
    sources: bool = False


# --------------------------------------------------------------------------- secrets in answers

#: secrets shorter than this ("x", "1", "ollama" given to a local server) are not masked in answers: masking
#: every "1" or "x" garbled the answers and their tokens, which methods then compare with the document
MIN_SECRET_CHARS = 8


def storable_text(text: str) -> str:
    """``text`` that SQLite and JSON can hold: a lone surrogate (an answer cut in the middle of an emoji,
    as JavaScript's JSON.stringify writes it) becomes U+FFFD instead of failing every write of it."""
    return _LONE_SURROGATE.sub("\ufffd", text)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


# --------------------------------------------------------------------------- service addresses


def check_service_url(url: object, field: str) -> None:
    """Refuses an address that cannot be a service's, or that carries a secret in itself.

    A key belongs in a header or the key field, where it is kept out of names,
    messages, caches and reports; a URL is shown and stored.

    An address is also refused here, in words, where it could only fail once sent:
    one with a control or invisible character (a line end read with it from a CRLF
    file: Python's URL parser drops a CR or tab the HTTP client then refuses), or
    a host name no resolver takes. Those messages do not quote the address.
    """
    odd = next((c for c in url if not c.isprintable()), None) if isinstance(url, str) else None
    if odd is not None:
        raise ValueError(f"{field} holds a character no address can have ({_char_name(odd)}): a line end or "
                         "tab copied with it, perhaps; type it again on one line")
    try:
        parts = urlsplit(url) if isinstance(url, str) else None
        host = parts.hostname if parts is not None else None
    except ValueError:
        parts = host = None
    if parts is None or parts.scheme not in ("http", "https") or not host:
        text = str(url)
        shown = display_url(text) if "://" in text else text.split("?", 1)[0].rsplit("@", 1)[-1]
        raise ValueError(f"{field} must be an http:// or https:// address with a host "
                         f"(for example https://api.example.com/v1), got {shown!r}")
    if url_origin(url).startswith("unreadable:"):
        raise ValueError(f"{field} has a port that is not a number from 0 to 65535 in plain digits, "
                         f"got {display_url(url)!r}")
    if "$" in url:
        raise ValueError(f"{field} must not name environment variables: put the key in a header, "
                         "for example  X-Api-Key: $MY_KEY")
    if parts.username or parts.password:
        raise ValueError(f"{field} must not carry a user name or password: give the key where keys go "
                         "(the API key field or environment variable, or a header of a target file)")
    if not _host_resolvable(url):
        raise ValueError(f"{field} names a host that is not a valid host name ({_shown_host(host)}): each "
                         "dot-separated part must be 1 to 63 letters, digits or hyphens (or a valid "
                         "international name)")


def _char_name(char: str) -> str:
    """A character said so that a reader can find it: its escape and, where Unicode has one, its name."""
    import unicodedata

    name = unicodedata.name(char, "")
    return f"{char!r} {name.lower()}" if name else repr(char)


def _shown_host(host: str) -> str:
    """A host name quoted in a message, cut where it would run on."""
    return repr(host if len(host) <= 80 else host[:77] + "...")


def _host_resolvable(url: str) -> bool:
    """Whether the HTTP client can encode the host of ``url`` and the resolver then take it.

    httpx writes an international name in IDNA 2008 (and refuses what that cannot
    write); the socket library then encodes the result with Python's own IDNA codec,
    which refuses an empty part or one over 63 characters. Either failure came out,
    once sent, as a connection error retried as an unreadable answer.
    """
    import httpx

    try:
        host = httpx.URL(url).raw_host.decode("ascii")
        if host and not host.startswith("["):  # an IPv6 address has no labels
            host.encode("idna")
    except (httpx.InvalidURL, ValueError):  # UnicodeError and idna's IDNAError are ValueErrors
        return False
    return True


def _port_text_ok(netloc: str) -> bool:
    """Whether a netloc's port, if it has one, is written in ASCII digits only.

    Python refuses "+443" or non-ASCII digits as a port, but an HTTP client may
    read them as a port of some host: an address whose port the auditor cannot
    read is one whose origin it cannot bind a key to, so it is refused.
    """
    hostport = netloc.rsplit("@", 1)[-1]
    if hostport.startswith("["):  # [v6 address] or [v6 address]:port
        rest = hostport.partition("]")[2]
        if rest and not rest.startswith(":"):
            return False
        port = rest[1:]
    else:
        port = hostport.rpartition(":")[2] if ":" in hostport else ""
    return port == "" or (port.isascii() and port.isdigit())


def display_url(url: str) -> str:
    """scheme://host[:port]/path: no query string or credentials in names and messages."""
    try:
        p = urlsplit(url)
    except ValueError:
        return "(not a valid URL)"
    if not p.scheme or not p.netloc:  # "not a url" had been shown as "://not a url"
        return "(not a valid URL)"
    return f"{p.scheme}://{p.netloc.rsplit('@', 1)[-1]}{p.path}"


#: default ports, so that https://h and https://h:443 are one origin
_DEFAULT_PORTS = {"http": 80, "https": 443}


def consent_host(url: str) -> str:
    """The host (and port) a secret would be sent to, as a person must read it before allowing that; "" when the
    URL names none (or cannot be read).

    In the ASCII form the request uses. A host written with other letters is named as sent, with how it was
    written beside it: "аpi.openai.com" (its first letter Cyrillic) read as OpenAI's host in the consent box,
    and the key went to xn--pi-6kc.openai.com (a review, session 61).
    """
    try:
        parts = urlsplit((url or "").strip())
        netloc, host = parts.netloc.rsplit("@", 1)[-1], parts.hostname or ""
    except ValueError:
        return ""
    if host.isascii():
        return netloc
    try:
        import httpx

        sent = httpx.URL((url or "").strip()).raw_host.decode("ascii")
    except Exception:  # noqa: BLE001 - a host httpx cannot encode is sent nowhere; say what was written
        sent = "an address that cannot be encoded"
    port = netloc.rsplit(":", 1)[1] if netloc.rsplit("]", 1)[-1].count(":") == 1 else ""
    return (f"{sent}{':' + port if port else ''} (written {host}: not all its letters are ASCII, as in addresses "
            "made to look like another's)")


def url_origin(url: str) -> str:
    """scheme://host:port of a URL, lower-cased; "" when it names no host (or cannot be parsed);
    "unreadable:<url>" when it names a host but its port cannot be read.

    Where a secret may go: a key given for one origin is never sent to another.
    """
    text = (url or "").strip()
    try:
        parts = urlsplit(text)
        host = parts.hostname
    except ValueError:
        return ""
    if not host:
        return ""
    # a host whose port cannot be read: an origin equal to no other address, so a key bound elsewhere is dropped
    unreadable = f"unreadable:{display_url(text)}"
    if not _port_text_ok(parts.netloc):
        return unreadable
    try:
        port = parts.port
    except ValueError:
        return unreadable
    scheme = parts.scheme.lower()
    return f"{scheme}://{host.lower()}:{port or _DEFAULT_PORTS.get(scheme, '')}"


# --------------------------------------------------------------------------- errors


#: scrypt's cost for credential ids: about 0.1 s and 16 MiB per id, once per target object
CREDENTIAL_SCRYPT = {"n": 2 ** 14, "r": 8, "p": 1}


def credential_digest(salt: bytes, secret: str) -> str:
    """The store's name for whoever holds ``secret`` ("" without one): scrypt(secret, salt), 32 hex digits.

    Answers are keyed by it so that two tenants of one API never share them.
    The salt sits in the same file as the ids, so a fast hash (HMAC) would let
    anyone who reads that file test guesses of a short password at millions a
    second; scrypt makes each guess cost what one audit pays once.
    """
    if not secret:
        return ""
    return hashlib.scrypt(secret.encode("utf-8"), salt=salt, dklen=16, maxmem=64 * 1024 * 1024,
                          **CREDENTIAL_SCRYPT).hex()


class TargetError(RuntimeError):
    """A target call failed. ``reason`` is a short machine-readable code.

    Messages never contain the API key: connectors build them from status
    codes and the server's error text only.
    """

    reason = "target_error"
    retryable = False


class AuthenticationFailed(TargetError):
    reason = "authentication_failed"


class UnknownModel(TargetError):
    reason = "unknown_model"


class NoLogprobs(TargetError):
    reason = "no_logprobs"


class ContextTooLong(TargetError):
    reason = "context_too_long"


class Unreachable(TargetError):
    reason = "unreachable"
    retryable = True


class RateLimited(TargetError):
    reason = "rate_limited"
    retryable = True


class ServerError(TargetError):
    reason = "server_error"
    retryable = True


class BadResponse(TargetError):
    reason = "bad_response"
    retryable = True


# --------------------------------------------------------------------------- accounting


@dataclass
class QueryAccount:
    """Per-run account of what was sent: every query is paid by the user."""

    queries: int = 0
    failures: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: answers whose token usage the target did not report (``Usage.reported``)
    unreported: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, usage: Usage | None = None, failed: bool = False, retries: int = 0) -> None:
        with self._lock:
            self.queries += 1
            self.retries += retries
            if failed:
                self.failures += 1
            if usage is not None:
                self.prompt_tokens += usage.prompt_tokens
                self.completion_tokens += usage.completion_tokens
                self.unreported += not usage.reported

    def answered_after_all(self, exc: Exception) -> None:
        """Take back the failure recorded for ``exc`` where its answer was what the sender wanted to know: the
        capability probe's request for logprobs answered without them. Counted as failed, every audit of a
        text-only endpoint said "1 failed" with no failure to show for it. Only a ``NoLogprobs`` that carries
        the answer it was recorded with (``exc.completion``) is taken back; one refused before sending was
        never recorded."""
        if getattr(exc, "completion", None) is None:
            return
        with self._lock:
            self.failures = max(0, self.failures - 1)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("queries", "failures", "retries", "prompt_tokens", "completion_tokens",
                                              "unreported")}


# --------------------------------------------------------------------------- the interface


class Target:
    """Base class of every target. Subclasses implement ``complete``.

    ``complete_many`` answers a batch; the default runs ``complete`` with
    bounded concurrency and returns a TargetError in place of a completion
    that failed, so one failure never loses the rest. In-process systems
    override it to share computation across requests.
    """

    #: human-readable identity (base URL + model); never contains a secret
    name: str = "target"
    max_concurrency: int = 1

    def __init__(self) -> None:
        self.account = QueryAccount()

    def complete(self, request: ChatRequest) -> Completion:  # pragma: no cover - interface
        raise NotImplementedError

    def complete_many(
        self, requests: Sequence[ChatRequest], progress: Callable[[int], None] | None = None
    ) -> list[Completion | TargetError]:
        def one(req: ChatRequest) -> Completion | TargetError:
            try:
                return self.complete(req)
            except TargetError as exc:
                return exc
            finally:
                if progress is not None:
                    progress(1)

        if self.max_concurrency <= 1 or len(requests) <= 1:
            return [one(r) for r in requests]
        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            return list(pool.map(one, requests))

    def capabilities(self) -> Capabilities:
        """Probe with one tiny request asking for the maximum of alternatives, then the answer style."""
        req = ChatRequest.chat([{"role": "user", "content": "Say OK."}], max_tokens=1,
                               logprobs=True, top_logprobs=MAX_TOP_LOGPROBS)
        try:
            comp = self.complete(req)
        except NoLogprobs as exc:
            self.account.answered_after_all(exc)
            return self.with_style(Capabilities(True, False, 0, detail=str(exc)))
        except TargetError as exc:
            return Capabilities(False, False, 0, detail=str(exc))
        cites = comp.sources is not None
        if not comp.tokens:
            return self.with_style(Capabilities(True, False, 0, model=comp.model,
                                                detail="the endpoint returned no logprobs", sources=cites))
        n = max((len(t.top) for t in comp.tokens), default=0)
        return self.with_style(Capabilities(True, True, n, model=comp.model,
                                            detail=f"logprobs with up to {n} alternatives per token", sources=cites))

    def answer_style(self):
        """How this target's model answers a request to complete a text (a ``style.StyleFinding``).

        Endpoints are asked (``style.detect_style``, a few short requests);
        an in-process system that knows how it is built may say so instead.
        """
        from audit_core.target.style import detect_style

        return detect_style(self)

    def with_style(self, caps: Capabilities) -> Capabilities:
        """``caps`` with the answer style added (a reachable target only)."""
        from dataclasses import replace

        if not caps.reachable:
            return caps
        found = self.answer_style()
        return replace(caps, style=found.style, style_detail=found.detail)
