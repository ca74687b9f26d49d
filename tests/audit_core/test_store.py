"""The SQLite store and the resumable CachingTarget."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from audit_core.documents import Document
from audit_core.methods.base import MethodResult, Observation
from audit_core.store import Store, target_identity
from audit_core.target.base import ChatRequest, Completion, ServerError, Target, TokenLogprob, Usage
from audit_core.target.caching import CachingTarget

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-test-7f3c9a1e55d04b2b8e6f0c4d2a9b1e77"


def req(text: str, **kw) -> ChatRequest:
    return ChatRequest.chat([{"role": "user", "content": text}], logprobs=True, top_logprobs=2, **kw)


class EchoTarget(Target):
    """A fake paid endpoint: counts calls, fails on prompts starting with 'fail'."""

    def __init__(self, concurrency: int = 1, delay: float = 0.0) -> None:
        super().__init__()
        self.name = "http://fake.local/v1 echo-model"
        self.max_concurrency = concurrency
        self.api_key = SECRET  # what a real connector holds; must never reach the store
        self.delay = delay
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def complete(self, request: ChatRequest) -> Completion:
        content = request.messages[-1][1]
        with self._lock:
            self.calls.append(content)
        if self.delay:
            time.sleep(self.delay)
        if content.startswith("fail"):
            raise ServerError("HTTP 503 from the endpoint")
        toks = [TokenLogprob(w, -0.5, [(w, -0.5), ("x", -2.0)]) for w in content.split()]
        return Completion(text=content.upper(), tokens=toks, usage=Usage(5, len(toks)), model="echo-model")


class BatchTarget(EchoTarget):
    """An in-process target that answers a whole batch at once."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def complete_many(self, requests, progress=None):
        self.batches.append(len(requests))
        out = []
        for r in requests:
            try:
                out.append(self.complete(r))
            except ServerError as exc:
                out.append(exc)
        return out


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "audits.sqlite")
    yield s
    s.close()


# --------------------------------------------------------------------------- responses


def test_response_round_trip_and_keys(store):
    comp = EchoTarget().complete(req("alpha beta"))
    r = req("alpha beta")
    assert store.get_response("t", r.key()) is None
    store.put_response("t", r.key(), comp, "srag", "1", r)
    assert store.get_response("t", r.key(), "srag", "1").to_json() == comp.to_json()
    # method scope and version are part of the key
    assert store.get_response("t", r.key(), "srag", "2") is None
    assert store.get_response("t", r.key(), "mba", "1") is None
    assert store.get_response("other", r.key(), "srag", "1") is None
    assert store.response_keys("t", "srag", "1") == {r.key()}


def test_target_identity_strips_url_credentials():
    assert target_identity("https://user:sk-abc@api.example.com/v1 gpt") == "https://api.example.com/v1 gpt"
    assert target_identity("http://h:8000/v1?api_key=sk-abc m") == "http://h:8000/v1 m"
    assert target_identity("http://h:8000/v1 m") == "http://h:8000/v1 m"
    # a "?" outside a URL is the name's own: targets reading different sources stay apart (a review, session 61)
    doc, web = ("http://h/v1 · m · sources $.citations[?(@.kind=='doc')].text",
                "http://h/v1 · m · sources $.citations[?(@.kind=='web')].text")
    assert target_identity(doc) == doc and target_identity(doc) != target_identity(web)
    assert target_identity("http://h/v1?key=sk-abc · which-model?v2") == "http://h/v1 · which-model?v2"


def test_default_path_is_in_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path / "cache"))
    with Store() as s:
        assert s.path == tmp_path / "cache" / "audits.sqlite"
        assert s.path.exists()


# --------------------------------------------------------------------------- caching target


def test_second_wrapper_answers_from_store_without_calls(tmp_path):
    path = tmp_path / "a.sqlite"
    requests = [req(f"passage number {i}") for i in range(6)]
    inner1 = EchoTarget(concurrency=3)
    with Store(path) as s1:
        t1 = CachingTarget(inner1, s1, "srag", "1")
        first = t1.complete_many(requests)
        assert t1.sent == 6 and t1.cache_hits == 0 and len(inner1.calls) == 6
        assert t1.name == inner1.name
    inner2 = EchoTarget(concurrency=3)
    with Store(path) as s2:
        t2 = CachingTarget(inner2, s2, "srag", "1")
        ticks = []
        second = t2.complete_many(requests, progress=ticks.append)
        assert inner2.calls == [] and t2.sent == 0 and t2.cache_hits == 6
        assert sum(ticks) == 6
        assert [c.to_json() for c in second] == [c.to_json() for c in first]
        assert t2.complete(requests[0]).text == "PASSAGE NUMBER 0" and inner2.calls == []
        # another method scope does not share answers
        t2.for_method("mba", "1").complete(requests[0])
        assert len(inner2.calls) == 1 and t2.sent == 1  # counters are shared with the view


def test_failures_are_logged_not_cached(store):
    inner = EchoTarget()
    t = CachingTarget(inner, store, "srag", "1")
    out = t.complete_many([req("fail please"), req("fine text")])
    assert isinstance(out[0], ServerError) and isinstance(out[1], Completion)
    with pytest.raises(ServerError):
        t.complete(req("fail please"))
    assert inner.calls == ["fail please", "fine text", "fail please"]  # retried, not served
    fails = store.failures(inner.name)
    assert [f["reason"] for f in fails] == ["server_error", "server_error"]
    assert store.count_responses() == 1 and t.stats.failures == 2


def test_duplicates_in_a_batch_are_sent_once(store):
    inner = EchoTarget(concurrency=4)
    t = CachingTarget(inner, store)
    ticks = []
    out = t.complete_many([req("same"), req("other"), req("same")], progress=ticks.append)
    assert sorted(inner.calls) == ["other", "same"] and sum(ticks) == 3
    assert out[0].text == out[2].text == "SAME"


def test_each_answer_is_stored_before_the_next_request_is_sent(store):
    """Sequential per-request path: when request i is sent, answers 0..i-1 are committed."""
    seen: list[int] = []

    class Watching(EchoTarget):
        def complete(self, request):
            seen.append(store.count_responses())
            return super().complete(request)

    t = CachingTarget(Watching(concurrency=1), store)
    t.complete_many([req(f"item {i}") for i in range(5)])
    assert seen == [0, 1, 2, 3, 4]


def test_batched_inner_target_is_stored_after_its_batch(store):
    inner = BatchTarget()
    t = CachingTarget(inner, store)
    reqs = [req("one two"), req("fail here"), req("three")]
    out = t.complete_many(reqs)
    assert inner.batches == [3] and isinstance(out[1], ServerError)
    assert store.count_responses() == 2
    out2 = CachingTarget(inner, store).complete_many(reqs)
    assert inner.batches == [3, 1]  # only the failed request is sent again
    assert out2[0].to_json() == out[0].to_json()


def _database_bytes(folder: Path, name: str) -> bytes:
    """Every file of a database (main, -wal, -shm): while it is open, rows may sit in the WAL only."""
    files = [p for p in folder.iterdir() if p.name.startswith(name)]
    assert any(p.name.endswith("-wal") for p in files)
    return b"".join(p.read_bytes() for p in files)


class SecretNamedTarget(EchoTarget):
    """A connector whose name carries a key pasted into its URL, as user:password and as a query string."""

    def __init__(self) -> None:
        super().__init__(concurrency=2)
        self.name = f"http://user:{SECRET}@fake.local/v1?api_key={SECRET} echo-model"


def test_a_key_in_the_targets_url_never_reaches_the_file(tmp_path):
    """Answers, failures and the run are stored under the target's identity without its credentials,
    both through the CachingTarget and where a caller hands the store the raw name (history.start_run)."""
    with Store(tmp_path / "secret.sqlite") as s:
        t = CachingTarget(SecretNamedTarget(), s, "srag", "1")
        assert SECRET in t.name and SECRET not in t.target_id  # the wrapper keys by the cleaned identity
        assert t.target_id == "http://fake.local/v1 echo-model"
        t.for_method("mba", "1").complete_many([req("some text"), req("fail now"), req("more text")])
        rid = s.create_run(t.name, ["srag"], {"k": 4})  # the raw name, as audit_core.history passes it
        # a caller that stores under the raw name directly: each write cleans it itself
        s.put_response(t.name, "k1", Completion("ok", None, Usage(1, 1)), "srag", "1", req("x"), run_id=rid)
        s.record_failure(t.name, "k2", ServerError("HTTP 503"), "srag", "1", run_id=rid)
        s.finish_run(rid, summary={"sent": t.sent})
        assert s.count_responses() == 3 and len(s.failures()) == 2
        blob = _database_bytes(tmp_path, "secret.sqlite")
        assert b"fake.local" in blob and b"SOME TEXT" in blob  # the rows are there...
        assert SECRET.encode() not in blob  # ...the key is not
    assert SECRET.encode() not in (tmp_path / "secret.sqlite").read_bytes()


def test_a_key_the_endpoint_echoes_in_an_error_never_reaches_the_file(tmp_path):
    """A provider that quotes the key in its 401 message ("Incorrect API key provided: sk-..."): the
    connector's failure message is what the store logs, and it must not carry the key."""
    from audit_core.target.base import AuthenticationFailed
    from audit_core.target.openai_compat import OpenAITarget
    from tests.fake_openai_server import FakeOpenAIServer, Reply

    with FakeOpenAIServer(api_key=SECRET, models=["m"], reply_text="fine") as srv, \
            Store(tmp_path / "echo.sqlite") as s:
        srv.script(Reply.error(401, f"Incorrect API key provided: {SECRET}. Find your key at ..."))
        t = CachingTarget(OpenAITarget(base_url=srv.base_url, model="m", api_key=SECRET, max_retries=0), s, "srag", "1")
        with pytest.raises(AuthenticationFailed):
            t.complete(req("first"))
        assert t.complete(req("second")).text  # answered: stored under the key's salted hash only
        assert [f["reason"] for f in s.failures()] == ["authentication_failed"]
        assert "Incorrect API key" in s.failures()[0]["message"]  # the server's words are logged...
        blob = _database_bytes(tmp_path, "echo.sqlite")
        assert SECRET.encode() not in blob  # ...without the key


CHILD = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {root!r})
    from audit_core.store import Store
    from audit_core.target.base import ChatRequest, Completion, Target, Usage
    from audit_core.target.caching import CachingTarget

    store_path, log_path, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    class Slow(Target):
        name = "http://slow.local/v1 slow"
        max_concurrency = 4

        def complete(self, request):
            os.write(log, (request.key() + "\\n").encode())  # logged when sent
            time.sleep(delay)
            return Completion(text="ok " + request.messages[0][1], tokens=None, usage=Usage(3, 2))

    reqs = [ChatRequest.chat([{{"role": "user", "content": f"doc {{i}}"}}]) for i in range(20)]
    t = CachingTarget(Slow(), Store(store_path), "slow", "1")
    out = t.complete_many(reqs)
    assert [o.text for o in out] == [f"ok doc {{i}}" for i in range(20)]
    print(t.cache_hits, t.sent)
""")


def test_killed_audit_resumes_without_resending(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(root=str(ROOT)))
    db = tmp_path / "kill.sqlite"
    all_keys = {ChatRequest.chat([{"role": "user", "content": f"doc {i}"}]).key() for i in range(20)}
    target_id = "http://slow.local/v1 slow"

    child = subprocess.Popen([sys.executable, str(script), str(db), str(tmp_path / "log1"), "0.4"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            if db.exists():
                with Store(db) as s:
                    if s.count_responses() >= 8:
                        break
            assert child.poll() is None, child.stderr.read().decode()
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL

    with Store(db) as s:
        stored = s.response_keys(target_id, "slow", "1")
    started = (tmp_path / "log1").read_text().split()
    assert 8 <= len(stored) < 20, "the child was not killed midway"
    assert stored <= set(started)
    assert len(set(started) - stored) <= 4  # only in-flight requests lost (max_concurrency)

    rerun = subprocess.run([sys.executable, str(script), str(db), str(tmp_path / "log2"), "0.01"],
                           capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    sent_again = (tmp_path / "log2").read_text().split()
    assert len(sent_again) == len(set(sent_again))
    assert set(sent_again) == all_keys - stored  # nothing answered is sent twice
    hits, sent = map(int, rerun.stdout.split())
    assert (hits, sent) == (len(stored), 20 - len(stored))
    with Store(db) as s:
        assert s.response_keys(target_id, "slow", "1") == all_keys


def test_concurrent_writes_from_threads(store):
    rid = store.create_run("t", ["m"], documents=[Document(f"d{i}", f"text {i}") for i in range(40)])
    comp = EchoTarget().complete(req("x y"))
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        try:
            for i in range(25):
                r = req(f"w{w} r{i}")
                store.put_response("t", r.key(), comp, "m", "1", r)
                assert store.get_response("t", r.key(), "m", "1") is not None
                if i < 5:
                    d = f"d{w * 5 + i}"
                    store.save_result(rid, MethodResult("m", d, 0.5, True), Observation("m", d))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert store.count_responses("t") == 200
    assert len(store.done(rid)) == 40


# --------------------------------------------------------------------------- runs


def test_runs_create_list_load_finish_delete(tmp_path):
    path = tmp_path / "runs.sqlite"
    docs = [Document("b", "second text here"), Document("a", "first text")]
    with Store(path) as s:
        r1 = s.create_run("https://u:pw@h/v1 m", ["srag", "mba"], {"k": 4, "gamma": 0.5}, docs)
        r2 = s.create_run("http://h/v1 m", ["mink"], {})
        obs = Observation("srag", "b", requests=[req("q").to_json()], responses=[None],
                          errors=["server_error: 503"], data={"words": ["x"]})
        res = MethodResult("srag", "b", None, None, reason="target errors", evidence={"hist": [0.1, 0.9]})
        s.save_result(r1, res, obs)
        s.save_result(r1, MethodResult("mba", "a", 0.8, True), None)
        s.finish_run(r1, summary={"members": 1})
        s.add_documents(r2, [Document("z", "zed")])
        with pytest.raises(ValueError):
            s.create_run("t", ["m"], documents=[Document("x", "1"), Document("x", "2")])
        with pytest.raises(KeyError):
            s.save_result("missing", res, None)

    with Store(path) as s:  # everything survives a reopen
        runs = s.list_runs()
        assert [r.id for r in runs] == [r2, r1]  # newest first
        info = runs[1]
        assert info.status == "finished" and info.finished is not None
        assert info.methods == ["srag", "mba"] and info.params == {"k": 4, "gamma": 0.5}
        assert info.summary == {"members": 1} and info.target_id == "https://h/v1 m"
        assert (info.n_documents, info.n_results) == (2, 2)
        rec = s.load_run(r1)
        assert rec.documents == docs  # original order kept
        got = rec.result_for("b", "srag")
        assert got.result == res and got.observation == obs
        assert rec.result_for("a", "mba").observation is None
        assert s.done(r1) == {("b", "srag"), ("a", "mba")}
        with pytest.raises(ValueError):
            s.finish_run(r2, status="running")
        s.finish_run(r2, status="cancelled", error="stopped by the user")
        assert s.get_run(r2).status == "cancelled" and s.get_run(r2).error == "stopped by the user"
        s.set_status(r2, "running")  # resumed
        assert s.get_run(r2).finished is None
        s.delete_run(r1)
        assert [r.id for r in s.list_runs()] == [r2]
        with pytest.raises(KeyError):
            s.load_run(r1)
        assert s.done(r1) == set()


def test_a_stable_identity_finds_answers_given_at_another_address(store):
    """The benchmark's reference server takes a new port every run: answers are stored under
    the system's identity, so a re-run at the new address sends nothing again."""
    first, second = EchoTarget(), EchoTarget()
    first.name, second.name = "http://127.0.0.1:41001/v1 · gemma", "http://127.0.0.1:52002/v1 · gemma"
    CachingTarget(first, store, "srag", "1", identity="reference RAG · none").complete(req("a probe"))
    # by address, the second server is another target
    CachingTarget(second, store, "srag", "1").complete(req("a probe"))
    assert len(second.calls) == 1
    again = CachingTarget(EchoTarget(), store, "mba", "1", identity="reference RAG · none").for_method("srag", "1")
    assert again.complete(req("a probe")).text == "A PROBE" and again.sent == 0 and again.cache_hits == 1
    other = CachingTarget(EchoTarget(), store, "srag", "1", identity="reference RAG · mirabel")
    other.complete(req("a probe"))
    assert other.sent == 1


def test_the_store_and_the_cache_are_readable_by_their_owner_only(tmp_path, monkeypatch):
    """Under a umask of 022 the store (texts, prompts, answers) and its -wal file were 0644."""
    import os
    import stat

    from audit_core.io import write_private_atomic
    from audit_core.models import cache_dir
    from audit_core.store import Store

    old = os.umask(0o022)
    try:
        monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path / "fresh-cache"))
        root = cache_dir()
        Store(root / "audits.sqlite").close()
        mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
        assert mode(root) == 0o700 and mode(root / "audits.sqlite") == 0o600
        assert all(mode(p) & 0o077 == 0 for p in root.glob("audits.sqlite*"))
        f = write_private_atomic(root / "questions" / "q.json", "{}")
        assert mode(f) == 0o600 and not list(f.parent.glob("*.tmp"))
    finally:
        os.umask(old)
