"""The reference servers' model queue: requests that arrive together are answered together.

The auditor's client sends up to four requests at once (a method's probes of
one document). Answered one by one, each greedy generation pays a full
decoding step per token for a single sequence, which on a CPU costs about as
much as a step for several (``audit_core.scoring.generate_greedy_many``).
Answered together through ``RagSystem.complete_many``, the same requests
gave the same texts 2.4x faster for Verbatim continuation's three probes and
1.6x for MBA's ten (``scripts/bench_batched_serving.py``, BENCHMARKS.md,
session 26); the paraphrasing defense's rewrites are batched too. A request
that arrives alone takes ``RagSystem.complete``, exactly as before.

One worker thread owns the model, so requests still pass through it one
batch at a time; a request waits at most ``window_s`` for companions.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future
from typing import Any

from audit_core.target.base import ChatRequest, Completion, TargetError

log = logging.getLogger(__name__)


class ModelQueue:
    """Answers ``submit``-ted requests through one worker thread, in batches of up to ``max_batch``."""

    def __init__(self, rag, max_batch: int = 8, window_s: float = 0.01) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.rag = rag
        self.max_batch = max_batch
        self.window_s = window_s
        self._queue: queue.Queue[tuple[ChatRequest, Future]] = queue.Queue()
        self._worker: threading.Thread | None = None  # started by the first request
        self._start = threading.Lock()

    def submit(self, request: ChatRequest) -> tuple[Completion, Any, dict]:
        """(completion, retrieval record or None, timings) of ``request``; raises its TargetError."""
        with self._start:
            if self._worker is None:
                self._worker = threading.Thread(target=self._loop, name="rpa-model-queue", daemon=True)
                self._worker.start()
        fut: Future = Future()
        self._queue.put((request, fut))
        return fut.result()

    def _take(self) -> list[tuple[ChatRequest, Future]]:
        batch = [self._queue.get()]
        deadline = time.monotonic() + self.window_s
        while len(batch) < self.max_batch:
            try:
                batch.append(self._queue.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
        return batch

    def _loop(self) -> None:
        while True:
            batch = self._take()
            try:
                # a system without per-request retrieval records of a batch (a test double, a plain Target)
                # answers one request at a time
                if len(batch) == 1 or not hasattr(self.rag, "last_retrievals"):
                    for req, fut in batch:
                        self._one(req, fut)
                else:
                    try:
                        self._many(batch)
                    except Exception:  # noqa: BLE001 -- the batch's shared work failed on one request
                        # answered one by one, only the request that fails fails: a batch-wide error had made
                        # every caller of the batch get a 500, answers already computed included
                        log.warning("a batch of %d failed; its requests are answered one by one", len(batch))
                        for req, fut in batch:
                            if not fut.done():
                                self._one(req, fut)
            except BaseException as exc:  # noqa: BLE001 -- never leave a caller waiting
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)

    def _one(self, request: ChatRequest, fut: Future) -> None:
        try:
            comp = self.rag.complete(request)
        except Exception as exc:  # noqa: BLE001 -- this caller's error, not the next request's
            fut.set_exception(exc)
            return
        t = getattr(self.rag, "last_timings", None)
        fut.set_result((comp, getattr(self.rag, "last_retrieval", None), {
            "retrieval_s": getattr(t, "retrieval_s", None), "prefill_s": getattr(t, "prefill_s", None),
            "generation_s": getattr(t, "generation_s", None), "cached_tokens": getattr(t, "cached_tokens", 0),
            "batch": 1}))

    def _many(self, batch: list[tuple[ChatRequest, Future]]) -> None:
        t0 = time.perf_counter()
        outs = self.rag.complete_many([r for r, _ in batch])
        t = getattr(self.rag, "last_batch_timings", None)
        # the batch's retrieval, prefills and decoding as a whole; the cached tokens are each request's own
        timings = {"retrieval_s": getattr(t, "retrieval_s", None), "prefill_s": getattr(t, "prefill_s", None),
                   "generation_s": getattr(t, "generation_s", None), "batch": len(batch),
                   "batch_s": time.perf_counter() - t0}
        # one count per request whatever the system kept (a short list must not leave a caller unanswered)
        cached = (list(getattr(self.rag, "last_cached_tokens", None) or []) + [0] * len(batch))[: len(batch)]
        if t is not None:
            log.info("batch of %d: retrieval %.2fs, prefill %.2fs (%d prompt tokens from the cache), decoding %.2fs",
                     len(batch), t.retrieval_s, t.prefill_s, t.cached_tokens, t.generation_s)
        for (_, fut), out, rec, n in zip(batch, outs, self.rag.last_retrievals, cached):
            if isinstance(out, TargetError):
                fut.set_exception(out)
            else:
                fut.set_result((out, rec, dict(timings, cached_tokens=n)))
