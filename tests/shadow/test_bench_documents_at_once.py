"""Several documents of one method probed at the same time in the benchmark (``probe_leg``)."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import shadow.bench.served as served
from audit_core.documents import Document
from audit_core.methods.base import MembershipMethod, MethodResult, Observation, send_all
from audit_core.store import Store
from audit_core.target.base import ChatRequest, Completion, Target, Usage
from audit_core.target.caching import CacheStats, CachingTarget
from shadow.bench.runner import BenchConfig, documents_at_once, probe_leg


class Overlap:
    """Counts how many threads are inside a block at once (``most``), each staying ``pause_s``."""

    def __init__(self, pause_s: float) -> None:
        self.pause_s, self.inside, self.most = pause_s, 0, 0
        self._lock = threading.Lock()

    def visit(self) -> None:
        with self._lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        time.sleep(self.pause_s)
        with self._lock:
            self.inside -= 1


class SlowEcho(Target):
    """Echoes the request after a pause; records how many requests were in flight at once."""

    name = "http://fake.local/v1 slow echo"
    max_concurrency = 4

    def __init__(self) -> None:
        super().__init__()
        self.requests = Overlap(0.05)

    def complete(self, request: ChatRequest) -> Completion:
        self.requests.visit()
        self.account.record(Usage(5, 1))
        return Completion(request.messages[-1][1].upper(), None, Usage(5, 1))


class TwoProbes(MembershipMethod):
    """Two requests per document; the score is 1 when the answers echo the document."""

    name = "two_probes"

    def __init__(self) -> None:
        self.scoring = Overlap(0.01)

    def probe(self, doc: Document, target: Target) -> Observation:
        obs = Observation(self.name, doc.id)
        reqs = [ChatRequest.chat([{"role": "user", "content": f"{doc.text} #{i}"}], max_tokens=4) for i in (1, 2)]
        send_all(target, reqs, obs)
        return obs

    def score(self, obs: Observation, calibration) -> MethodResult:
        self.scoring.visit()
        echoed = all(r and r["text"].startswith(obs.doc_id.upper()) for r in obs.responses)
        return MethodResult(self.name, obs.doc_id, 1.0 if echoed else 0.0, echoed)


class Bar:
    def __init__(self) -> None:
        self.n = 0

    def update(self, k: int) -> None:
        self.n += k


def _leg(tmp_path, at_once: int, store: Store, target: SlowEcho,
         docs: list[Document]) -> tuple[list[dict], TwoProbes]:
    scores = tmp_path / f"scores-{at_once}.jsonl"
    bar = Bar()
    method = TwoProbes()
    caching = CachingTarget(target, store, identity="echo")  # as the runner: one view per document, own counts
    probe_leg(method, docs, lambda: caching.for_method(method.probe_scope, method.version, CacheStats()),
              None, 0, at_once, bar, scores,
              {"profile": "completion", "defense": "none", "labels": {d.id: 1 for d in docs}, "shadow_defense": None})
    assert bar.n == len(docs)
    return [json.loads(x) for x in scores.read_text().splitlines()], method


def test_documents_side_by_side_give_each_document_its_own_row_and_count(tmp_path):
    docs = [Document(f"doc{i}", f"doc{i} says something") for i in range(8)]
    target = SlowEcho()
    store = Store(tmp_path / "answers.sqlite")
    rows, method = _leg(tmp_path, 4, store, target, docs)
    # several documents' requests were in flight together (one document sends at most its two),
    # but their scores were computed one at a time (a fitted classifier, the embedder)
    assert target.requests.most > 2
    assert method.scoring.most == 1
    assert sorted(r["doc_id"] for r in rows) == sorted(d.id for d in docs)
    assert all(r["score"] == 1.0 and r["queries"] == 2 for r in rows)
    # each row counts its own document's requests, although the documents ran side by side
    assert [r["sent_queries"] for r in rows] == [2] * len(docs)
    assert target.account.queries == 2 * len(docs)

    # one at a time, on the same store: every answer is found there, nothing is sent again
    again, _ = _leg(tmp_path, 1, store, SlowEcho(), docs)
    assert [r["sent_queries"] for r in again] == [0] * len(docs)
    assert {r["doc_id"]: r["score"] for r in again} == {r["doc_id"]: r["score"] for r in rows}


def test_one_document_at_a_time_never_overlaps(tmp_path):
    docs = [Document(f"doc{i}", f"doc{i} says something") for i in range(4)]
    target = SlowEcho()
    _leg(tmp_path, 1, Store(tmp_path / "answers.sqlite"), target, docs)
    assert target.requests.most <= 2


def test_a_failure_in_one_document_stops_the_leg(tmp_path):
    class Broken(TwoProbes):
        def score(self, obs, calibration):
            if obs.doc_id == "doc2":
                raise RuntimeError("scoring failed")
            return super().score(obs, calibration)

    docs = [Document(f"doc{i}", f"doc{i} text") for i in range(4)]
    store, target = Store(tmp_path / "a.sqlite"), SlowEcho()
    with pytest.raises(RuntimeError, match="scoring failed"):
        caching = CachingTarget(target, store, identity="echo")
        probe_leg(Broken(), docs, lambda: caching.for_method("b", "1", CacheStats()),
                  None, 0, 3, Bar(), tmp_path / "s.jsonl",
                  {"profile": "p", "defense": "none", "labels": {d.id: 0 for d in docs}, "shadow_defense": None})


def test_documents_at_once_sets_the_server_batch_and_yields_to_one_at_a_time():
    assert documents_at_once(BenchConfig(documents_at_once=4)) == 4
    assert documents_at_once(BenchConfig(documents_at_once=4, one_at_a_time=True)) == 1
    with pytest.raises(ValueError):
        documents_at_once(BenchConfig(documents_at_once=0))
    try:
        served.set_batching(False, 4)
        # four documents' requests in flight (4 each) fit one server batch, up to the reference RAG's decode batch
        assert served.SERVER_MAX_BATCH == served.MAX_SERVER_BATCH == 16
        served.set_batching(False, 1)
        assert (served.CLIENT_CONCURRENCY, served.SERVER_MAX_BATCH) == served.BATCHED
        served.set_batching(True, 4)
        assert (served.CLIENT_CONCURRENCY, served.SERVER_MAX_BATCH) == (1, 1)
    finally:
        served.set_batching(False)


class _FakeServer:
    """Stands in for a started ``shadow.serve`` process: the client is built, nothing is sent."""

    def __init__(self, kb_file, generator, defense, log_file, profile=None, paraphraser=None, api="openai",
                 memo=None):
        self.api, self.model = api, generator
        self.base_url = "http://127.0.0.1:9/v1" if api == "openai" else "http://127.0.0.1:9"

    def stop(self):
        pass


@pytest.mark.parametrize("api", ["openai", "custom"])
def test_the_connector_lets_every_document_at_once_have_its_requests_in_flight(tmp_path, monkeypatch, api):
    """Four documents at once with four requests each: the HTTP connector must not hold them to 4 in flight
    (it did until session 38, so the server never saw more than 4 requests together)."""
    monkeypatch.setattr(served, "ServedTarget", _FakeServer)
    try:
        for at_once, one_by_one, want in ((4, False, 16), (1, False, served.BATCHED[0]), (4, True, 1)):
            served.set_batching(one_by_one, at_once)
            lazy = served.LazyServedTarget(tmp_path / "kb.jsonl", "m", None, tmp_path / "log", api=api)
            assert lazy._client().max_concurrency == want
            # each document's own requests still go out CLIENT_CONCURRENCY at a time
            assert lazy.max_concurrency == (1 if one_by_one else served.BATCHED[0])
    finally:
        served.set_batching(False)


def _projection_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "bench_projection.py"
    spec = importlib.util.spec_from_file_location("bench_projection", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_slice_projects_each_leg_per_document_and_pays_the_server_start_once():
    proj = _projection_script()
    results = {"timings": {
        "per_leg": {"completion/none/srag": {"wall_s": 40.0, "documents": 4, "server_start_s": 20.0},
                    "completion/none/mba": {"wall_s": 8.0, "documents": 4, "server_start_s": 0.0},
                    "completion/mirabel/srag": {"wall_s": 30.0, "documents": 4, "server_start_s": 10.0}},
        "per_defense_s": {"none": 60.0, "mirabel": 100.0}, "shadow_preparation_s": 30.0, "documents_at_once": 4}}
    p = proj.projection(results, 100)
    legs = {(r["defense"], r["method"]): r for r in p["legs"]}
    # the 20 s the first leg spent starting the server are not multiplied by 25
    assert legs["none", "srag"]["projected_s"] == 500.0 and legs["none", "mba"]["projected_s"] == 200.0
    # once per defense: the server's start, and what ran outside the legs (Mirabel's honest questions: 70 s)
    assert p["defenses"]["none"]["fixed_s"] == 32.0
    assert p["defenses"]["mirabel"]["fixed_s"] == 80.0 and p["defenses"]["mirabel"]["projected_s"] == 580.0
    assert p["projected_total_s"] == 30.0 + 732.0 + 580.0
    assert "| none | srag | 5.0 | 8.3 |" in proj.markdown(p)
    # a second slice with other methods, run apart: its legs add up, its server start is not paid twice
    other = {"timings": {"per_leg": {"completion/none/mink": {"wall_s": 24.0, "documents": 4, "server_start_s": 20.0}},
                         "per_defense_s": {"none": 24.0}, "shadow_preparation_s": 5.0}}
    both = proj.projection([results, other], 100)
    assert both["defenses"]["none"]["projected_legs_s"] == 700.0 + 100.0
    assert both["defenses"]["none"]["fixed_s"] == 32.0
    assert both["projected_total_s"] == p["projected_total_s"] + 100.0 + 5.0
    with pytest.raises(ValueError, match="per-leg"):
        proj.projection({"timings": {"wall_s": 5.0}}, 100)


def test_a_method_with_few_queries_per_document_probes_more_documents_at_once():
    """requests_at_once // the requests one document has in flight (its query_cost, at most the client's 4),
    never below documents_at_once nor above the leg's documents; one at a time, --documents-at-once 1 or
    requests_at_once 0 keep the old way."""
    from audit_core.methods import create_method
    from shadow.bench.runner import leg_documents_at_once
    from shadow.bench.served import BATCHED

    docs = [Document(f"d{i}", "word " * 60) for i in range(40)]
    cfg = BenchConfig(server_lanes=1)
    assert cfg.requests_at_once == 2 * 16 and BATCHED[0] == 4  # a full server batch waits while one is answered
    one_query, three = create_method("s2mia_t"), create_method("verbatim")
    many = create_method("mba", elicitation="continue")  # the completion profile's: one request per mask
    assert [one_query.query_cost(60).queries, three.query_cost(60).queries] == [1, 3]
    assert many.query_cost(60).queries >= 5
    assert leg_documents_at_once(cfg, one_query, docs) == 32
    assert leg_documents_at_once(cfg, three, docs) == 10
    # the client sends four of a document's queries at a time: 8 documents keep 32 requests in flight
    assert leg_documents_at_once(cfg, many, docs) == 8
    assert leg_documents_at_once(cfg, one_query, docs[:6]) == 6
    short = [Document("s", "too short")]  # no cost estimate: one query assumed
    assert leg_documents_at_once(cfg, three, short * 3) == 3
    # each server lane gets as many (the default: two lanes)
    assert BenchConfig().server_lanes == 2
    assert [leg_documents_at_once(BenchConfig(), m, docs) for m in (one_query, three, many)] == [40, 20, 16]
    sixteen = BenchConfig(requests_at_once=16, server_lanes=1)
    assert [leg_documents_at_once(sixteen, m, docs) for m in (one_query, three, many)] == [16, 5, 4]  # 4: the floor
    assert leg_documents_at_once(BenchConfig(one_at_a_time=True), one_query, docs) == 1
    assert leg_documents_at_once(BenchConfig(documents_at_once=1), one_query, docs) == 1
    assert leg_documents_at_once(BenchConfig(requests_at_once=0), one_query, docs) == 4


def test_a_lane_starts_its_server_after_the_first_lane_and_each_gets_a_share_of_the_cores(tmp_path, monkeypatch):
    """Two lanes: the second server is started only once the first is up (two servers indexing the same
    knowledge base into the cache at once would race), and each server runs with its share of the cores."""
    started: list[tuple[str, int | None]] = []

    class Recording(_FakeServer):
        def __init__(self, kb_file, generator, defense, log_file, *a, **k):
            super().__init__(kb_file, generator, defense, log_file, *a, **k)
            started.append((Path(log_file).name, served.SERVER_THREADS))

    monkeypatch.setattr(served, "ServedTarget", Recording)
    monkeypatch.setattr(served.os, "cpu_count", lambda: 2)
    try:
        served.set_lanes(2)
        first = served.LazyServedTarget(tmp_path / "kb.jsonl", "m", None, tmp_path / "server-none.log")
        second = served.LazyServedTarget(tmp_path / "kb.jsonl", "m", None, tmp_path / "server-none-lane2.log")
        second.after = first
        second._client()
        assert started == [("server-none.log", 1), ("server-none-lane2.log", 1)]
        first._client()  # already up: not started twice
        assert len(started) == 2
        served.set_lanes(1)
        assert served.SERVER_THREADS is None  # one lane: torch's default, every core
        with pytest.raises(ValueError):
            served.set_lanes(0)
    finally:
        served.set_lanes(1)


def test_a_server_of_a_lane_is_started_with_its_threads(tmp_path, monkeypatch):
    """The thread count reaches the server process as OMP_NUM_THREADS (torch reads it when it starts)."""
    seen: list[dict] = []

    class NoProcess:
        returncode = None

        def __init__(self, cmd, cwd=None, env=None, stdout=None, stderr=None):
            seen.append(env)

        def poll(self):
            return None

    monkeypatch.setattr(served.subprocess, "Popen", NoProcess)
    monkeypatch.setattr(served, "server_ready", lambda api, url, key=served.BENCH_KEY: True)
    monkeypatch.setattr(served.os, "cpu_count", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    try:
        served.set_lanes(2)
        served.ServedTarget(tmp_path / "kb.jsonl", "m", None, tmp_path / "a.log").log.close()
        served.set_lanes(1)
        served.ServedTarget(tmp_path / "kb.jsonl", "m", None, tmp_path / "b.log").log.close()
    finally:
        served.set_lanes(1)
    assert seen[0]["OMP_NUM_THREADS"] == "4" and seen[0]["MKL_NUM_THREADS"] == "4"
    assert "OMP_NUM_THREADS" not in seen[1]
