"""The reference servers' model queue: concurrent requests are answered together, each gets its own answer."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from audit_core.target.base import ChatRequest, Completion, TargetError, Usage
from shadow.serve_batch import ModelQueue


class Recorded:
    """A stand-in for RagSystem that answers each request with its own text and records how it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.last_retrieval = self.last_timings = None
        self.last_retrievals: list = []
        self.release = threading.Event()

    def _answer(self, req: ChatRequest) -> Completion | TargetError:
        text = req.messages[-1][1]
        if text == "bad":
            return TargetError("no retrieval for this one")
        return Completion("answer to " + text, None, Usage(1, 1))

    def complete(self, req: ChatRequest) -> Completion:
        self.release.wait(5)
        self.calls.append(("complete", 1))
        out = self._answer(req)
        if isinstance(out, TargetError):
            raise out
        from shadow.rag import RequestTimings

        self.last_retrieval, self.last_timings = f"record of {req.messages[-1][1]}", RequestTimings()
        return out

    def complete_many(self, reqs):
        self.calls.append(("complete_many", len(reqs)))
        self.last_retrievals = [f"record of {r.messages[-1][1]}" for r in reqs]
        self.last_cached_tokens = [len(r.messages[-1][1]) for r in reqs]  # each request's own count
        return [self._answer(r) for r in reqs]


def _req(text: str) -> ChatRequest:
    return ChatRequest.chat([{"role": "user", "content": text}], max_tokens=4)


def test_requests_that_arrive_together_are_answered_together_each_with_its_own_answer():
    rag = Recorded()
    rag.release.set()
    q = ModelQueue(rag, max_batch=8, window_s=0.2)
    texts = ["a", "bb", "bad", "cccc", "d"]
    with ThreadPoolExecutor(len(texts)) as pool:
        futs = {t: pool.submit(q.submit, _req(t)) for t in texts}
        for t in ("a", "bb", "cccc", "d"):
            comp, rec, timings = futs[t].result(10)
            assert comp.text == f"answer to {t}" and rec == f"record of {t}"
            assert timings["cached_tokens"] == len(t)  # its own count, as the system reported it
        with pytest.raises(TargetError, match="no retrieval"):  # a failure reaches its own caller only
            futs["bad"].result(10)
    assert sum(n for _, n in rag.calls) == len(texts)
    assert any(kind == "complete_many" and n > 1 for kind, n in rag.calls)
    assert timings["batch"] > 1


def test_a_request_alone_takes_the_one_request_path_and_max_batch_1_never_batches():
    rag = Recorded()
    rag.release.set()
    comp, rec, timings = ModelQueue(rag, max_batch=8, window_s=0.0).submit(_req("x"))
    assert comp.text == "answer to x" and rec == "record of x" and timings["batch"] == 1
    one = ModelQueue(rag, max_batch=1, window_s=0.05)
    with ThreadPoolExecutor(4) as pool:
        assert [f.result(10)[0].text for f in [pool.submit(one.submit, _req(t)) for t in "pqrs"]] == \
            [f"answer to {t}" for t in "pqrs"]
    assert all(kind == "complete" for kind, _ in rag.calls)
    with pytest.raises(ValueError):
        ModelQueue(rag, max_batch=0)


def test_a_system_without_batch_records_answers_concurrent_requests_one_at_a_time():
    """A plain Target (a test double of the custom API) has no per-request retrieval records of a batch."""
    class Plain:
        def __init__(self) -> None:
            self.calls = 0

        def complete(self, req: ChatRequest) -> Completion:
            self.calls += 1
            return Completion("answer to " + req.messages[-1][1], None, Usage(1, 1))

    rag = Plain()
    q = ModelQueue(rag, max_batch=8, window_s=0.2)
    with ThreadPoolExecutor(3) as pool:
        futs = [pool.submit(q.submit, _req(t)) for t in "xyz"]
        got = [f.result(10) for f in futs]
    assert [c.text for c, _, _ in got] == ["answer to x", "answer to y", "answer to z"] and rag.calls == 3
    assert all(rec is None and t["prefill_s"] is None for _, rec, t in got)


class Crashing(Recorded):
    """A system whose batch path raises on one request, as RagSystem.complete_many did on a 1e-300 temperature."""

    def complete_many(self, reqs):
        if any(r.messages[-1][1] == "poison" for r in reqs):
            self.calls.append(("complete_many", len(reqs)))
            raise RuntimeError("probability tensor contains either inf, nan")
        return super().complete_many(reqs)

    def _answer(self, req):
        if req.messages[-1][1] == "poison":
            raise RuntimeError("probability tensor contains either inf, nan")
        return super()._answer(req)


def test_a_request_that_crashes_the_batch_fails_alone():
    """Every request answered in the same batch as the bad one got its 500, answers already computed included."""
    rag = Crashing()
    rag.release.set()
    q = ModelQueue(rag, max_batch=8, window_s=0.2)
    texts = ["a", "poison", "bb", "cccc"]
    with ThreadPoolExecutor(len(texts)) as pool:
        futs = {t: pool.submit(q.submit, _req(t)) for t in texts}
        for t in ("a", "bb", "cccc"):
            assert futs[t].result(10)[0].text == f"answer to {t}"
        with pytest.raises(RuntimeError, match="inf, nan"):
            futs["poison"].result(10)
    assert any(kind == "complete_many" and n > 1 for kind, n in rag.calls)  # the batch was tried first
    assert q.submit(_req("later"))[0].text == "answer to later"  # and the queue still serves
