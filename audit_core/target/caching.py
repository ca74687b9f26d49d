"""A Target wrapper that answers from the store first and stores every new answer.

Every query to a real target is paid by the user, so an audit must be
resumable: an answer is written to the store (and committed) the moment it
arrives, before the caller sees it. An audit killed midway loses at most the
requests in flight; the re-run sends only what was never answered.

Writing one by one in ``complete_many``: when the inner target uses the base
class's ``complete_many`` (HTTP connectors: concurrent ``complete`` calls),
the wrapper runs that concurrency itself, with the inner target's
``max_concurrency``, around a per-request function that calls
``inner.complete`` and writes the answer before taking the next request. When
the inner target overrides ``complete_many`` (an in-process system that shares
one forward pass across the batch), its answers only exist when the whole
batch returns, so they are written right after it returns; such targets cost
no money, so a kill there loses compute only.

Failures are never cached (see ``audit_core.store``); they are logged in the
store's ``failures`` table and returned / raised as usual, so a re-run retries.

Freshness: a target's knowledge base changes (a takedown request is the point
of an audit), so an old answer must not pass as a fresh one. Answers are
stored under the run that received them and the credential they were sent
with; by default an audit reuses only its own answers (``run_id``: resuming
an interrupted audit sends only what was never answered). ``reuse_days=N``
also reuses another audit's answers received in the last N days, copied into
this run with their original time. ``freshness()`` says how many answers were
reused and from when; it goes into the audit's JSON and PDF.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable, Sequence

from audit_core.store import Store, target_identity
from audit_core.target.base import Capabilities, ChatRequest, Completion, Target, TargetError


@dataclass
class CacheStats:
    """Counters shared by a CachingTarget and its per-method views."""

    cache_hits: int = 0
    sent: int = 0
    failures: int = 0
    #: stored answers used instead of sending (an answer reused for duplicates counts once)
    reused: int = 0
    oldest_reused: str | None = None
    newest_reused: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, hits: int = 0, sent: int = 0, failures: int = 0) -> None:
        with self._lock:
            self.cache_hits += hits
            self.sent += sent
            self.failures += failures

    def note_reused(self, received: str) -> None:
        with self._lock:
            self.reused += 1
            self.oldest_reused = received if self.oldest_reused is None else min(self.oldest_reused, received)
            self.newest_reused = received if self.newest_reused is None else max(self.newest_reused, received)


class CachingTarget(Target):
    """Wrap ``inner`` so that answered requests are served from ``store``.

    Answers are keyed by (target identity, credential id, method, method
    version, request key, run id); ``for_method`` gives a view with another
    method scope over the same inner target, store, run and counters. The
    identity is the inner target's ``name`` (base URL + model) with URL
    credentials stripped; the credential id is the inner target's
    ``credential_id(salt)`` (a slow salted hash of its key, "" without one), so the key
    itself is never read here nor stored.

    ``run_id`` is the resume scope: the audit whose answers are reused.
    Library callers that pass none share the anonymous scope ""; the app and
    the CLI always pass their run's id. ``reuse_days`` (None: never) also
    reuses answers other runs received within that many days.

    ``account`` is the inner target's account: it counts what was really sent
    and paid, whereas ``cache_hits`` / ``sent`` count this wrapper's traffic.
    """

    def __init__(
        self,
        inner: Target,
        store: Store,
        method: str = "",
        method_version: str = "",
        stats: CacheStats | None = None,
        identity: str | None = None,
        *,
        run_id: str = "",
        reuse_days: int | None = None,
        cred_id: str | None = None,
    ) -> None:
        if reuse_days is not None and reuse_days < 0:
            raise ValueError("reuse_days must be 0 or more (None: reuse only this audit's own answers)")
        self.inner = inner
        self.store = store
        self.run_id = run_id
        self.reuse_days = reuse_days
        if cred_id is None:
            credential_id = getattr(inner, "credential_id", None)
            cred_id = credential_id(store.credential_salt()) if callable(credential_id) else ""
        self.cred_id = cred_id
        #: what answers are stored under; default: the inner target's name. A
        #: target whose address changes between runs for the same system (the
        #: benchmark's reference server takes a free port) passes a stable one.
        self.identity = identity
        self.method = method
        self.method_version = method_version
        self.stats = stats if stats is not None else CacheStats()
        self.account = inner.account

    # the wrapper is transparent: same identity and concurrency as the inner target
    @property
    def name(self) -> str:  # type: ignore[override]
        return self.inner.name

    @property
    def max_concurrency(self) -> int:  # type: ignore[override]
        return self.inner.max_concurrency

    @property
    def target_id(self) -> str:
        return target_identity(self.identity or self.inner.name)

    @property
    def cache_hits(self) -> int:
        return self.stats.cache_hits

    @property
    def sent(self) -> int:
        return self.stats.sent

    def for_method(self, method: str, version: str = "", stats: CacheStats | None = None) -> "CachingTarget":
        """A view that stores answers under another method scope, sharing counters (or counting in ``stats``)."""
        return CachingTarget(self.inner, self.store, method, version, self.stats if stats is None else stats,
                             self.identity,
                             run_id=self.run_id, reuse_days=self.reuse_days, cred_id=self.cred_id)

    def freshness(self) -> dict:
        """How many stored answers this audit used and when they were received (AuditResult.freshness)."""
        s = self.stats
        return {"policy_days": self.reuse_days, "reused": s.reused, "sent": s.sent,
                "oldest_reused": s.oldest_reused, "newest_reused": s.newest_reused}

    # ------------------------------------------------------------------ store access

    def _lookup(self, request: ChatRequest) -> Completion | None:
        key = request.key()
        found = self.store.find_response(self.target_id, key, self.method, self.method_version,
                                         cred_id=self.cred_id, run_id=self.run_id)
        if found is None and self.reuse_days is not None:
            since = (datetime.now(timezone.utc) - timedelta(days=self.reuse_days)).isoformat(timespec="microseconds")
            found = self.store.find_response(self.target_id, key, self.method, self.method_version,
                                             cred_id=self.cred_id, run_id=None, since=since)
            if found is not None:  # this run's own copy, with the time it was first received
                self.store.put_response(self.target_id, key, found.completion, self.method, self.method_version,
                                        request, cred_id=self.cred_id, run_id=self.run_id, created=found.created)
        if found is None:
            return None
        self.stats.note_reused(found.created)
        return found.completion

    def _record(self, request: ChatRequest, outcome: Completion | TargetError) -> None:
        if isinstance(outcome, TargetError):
            self.store.record_failure(self.target_id, request.key(), outcome, self.method, self.method_version,
                                      run_id=self.run_id)
            self.stats.add(failures=1)
        else:
            self.store.put_response(self.target_id, request.key(), outcome, self.method, self.method_version,
                                    request, cred_id=self.cred_id, run_id=self.run_id)

    def _send_one(self, request: ChatRequest) -> Completion | TargetError:
        """Send one request to the inner target and store its outcome before returning."""
        self.stats.add(sent=1)
        try:
            outcome: Completion | TargetError = self.inner.complete(request)
        except TargetError as exc:
            outcome = exc
        self._record(request, outcome)
        return outcome

    # ------------------------------------------------------------------ Target interface

    def complete(self, request: ChatRequest) -> Completion:
        hit = self._lookup(request)
        if hit is not None:
            self.stats.add(hits=1)
            return hit
        outcome = self._send_one(request)
        if isinstance(outcome, TargetError):
            raise outcome
        return outcome

    def complete_many(
        self, requests: Sequence[ChatRequest], progress: Callable[[int], None] | None = None
    ) -> list[Completion | TargetError]:
        """Answer a batch: cached answers first, the rest sent once each (duplicates share one call)."""
        requests = list(requests)
        results: list[Completion | TargetError | None] = [None] * len(requests)
        pending: dict[str, list[int]] = {}  # request key -> positions waiting for it
        for i, req in enumerate(requests):
            k = req.key()
            if k in pending:
                pending[k].append(i)
                continue
            hit = self._lookup(req)
            if hit is None:
                pending[k] = [i]
            else:
                results[i] = hit
                self.stats.add(hits=1)
                if progress is not None:
                    progress(1)
        duplicates = sum(len(v) - 1 for v in pending.values())
        if duplicates:
            self.stats.add(hits=duplicates)

        to_send = [requests[pos[0]] for pos in pending.values()]

        def deliver(req: ChatRequest, outcome: Completion | TargetError) -> None:
            for i in pending[req.key()]:
                results[i] = outcome
                if progress is not None:
                    progress(1)

        if to_send:
            if type(self.inner).complete_many is Target.complete_many:
                # per-request path: each answer is committed as it arrives
                def one(req: ChatRequest) -> None:
                    deliver(req, self._send_one(req))

                if self.max_concurrency <= 1 or len(to_send) <= 1:
                    for req in to_send:
                        one(req)
                else:
                    with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
                        list(pool.map(one, to_send))
            else:
                # batched in-process target: answers exist only when the batch returns
                self.stats.add(sent=len(to_send))
                outcomes = self.inner.complete_many(to_send)
                if len(outcomes) != len(to_send):
                    raise RuntimeError(f"{self.name} returned {len(outcomes)} answers for {len(to_send)} requests")
                for req, out in zip(to_send, outcomes):
                    self._record(req, out)
                    deliver(req, out)
        assert all(r is not None for r in results)
        return results  # type: ignore[return-value]

    def capabilities(self) -> Capabilities:
        """Always asked of the live target: a capability probe must reflect it now."""
        return self.inner.capabilities()
