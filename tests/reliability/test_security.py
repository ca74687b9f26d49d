"""Issue 15: what an attacker on the network, or one who can write to the cache
directory, could get from the app. Each test failed on the code before the fix.

Servers here are local captures on 127.0.0.1: they record every request and
its headers, so "the key was not sent" is read from what arrived, not assumed.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from audit_core.target.base import ChatRequest
from audit_core.target.openai_compat import OpenAITarget, RequestRejected
from tests.fake_openai_server import FakeOpenAIServer, Reply

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_KEY = "rpaOperatorKey.only-for-the-named-host.7f3a"


def ask(text: str = "hi") -> ChatRequest:
    return ChatRequest.chat([{"role": "user", "content": text}], max_tokens=1)


# --------------------------------------------------------------------------- 1. listen on loopback only


def test_streamlit_listens_on_loopback_only():
    """Streamlit's own config loader, run where ``./run app`` runs it, reads 127.0.0.1."""
    code = ("from streamlit import config; config.get_config_options(force_reparse=True); "
            "print(config.get_option('server.address'))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "127.0.0.1"


def _listening_addresses(port: int) -> set[str]:
    """Local addresses with a socket listening on ``port`` (Linux /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, hex_port = local.rsplit(":", 1)
            if int(hex_port, 16) == port and state == "0A":  # 0A: LISTEN
                found.add(addr)
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_the_app_answers(proc: subprocess.Popen, port: int, limit_s: float = 90) -> None:
    """Until the Streamlit server started as ``proc`` answers its health check (it fails if it stops first)."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "the app did not start"
        time.sleep(0.5)


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads listening sockets from /proc (Linux)")
def test_the_app_started_as_run_app_starts_it_listens_on_loopback_only(tmp_path):
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    env.update(RPA_AUDIT_DB=str(tmp_path / "audits.sqlite"), RPA_CACHE_DIR=str(tmp_path / "cache"))
    # what ./run app runs, with only the port chosen so that the test does not collide with anything
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app/main.py", "--server.port", str(port)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_until_the_app_answers(proc, port)
        listening = _listening_addresses(port)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert listening == {"0100007F"}  # 127.0.0.1 only: no 0.0.0.0, no IPv6 wildcard


def test_the_app_started_from_another_folder_stops_before_serving_its_page(tmp_path):
    """Streamlit reads its settings from the folder it is started in: ``streamlit run /path/app/main.py`` from
    elsewhere listened on every interface (a review's finding). The first page says why and the server stops;
    nothing of the app (History, the key fields) is drawn."""
    import asyncio

    import websockets
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    env.update(RPA_AUDIT_DB=str(tmp_path / "audits.sqlite"), RPA_CACHE_DIR=str(tmp_path / "cache"), RPA_WARMUP="0",
               HOME=str(tmp_path))  # no user config of Streamlit's either
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "main.py"), "--server.port",
                             str(port)], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)

    async def first_page() -> str:
        async with websockets.connect(f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit"]) as ws:
            rerun = BackMsg()
            rerun.rerun_script.query_string = ""
            await ws.send(rerun.SerializeToString())
            shown = []
            try:
                while True:
                    msg = ForwardMsg()
                    msg.ParseFromString(await asyncio.wait_for(ws.recv(), 30))
                    if msg.HasField("delta"):
                        shown.append(str(msg.delta))
            except (websockets.ConnectionClosed, TimeoutError):
                return "\n".join(shown)

    try:
        _wait_until_the_app_answers(proc, port)
        page = asyncio.run(first_page())
        proc.wait(timeout=30)  # it stops by itself
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "listens on every network interface" in page and "History" not in page.replace("its History", "")
    assert "It has stopped" in proc.stderr.read()


# --------------------------------------------------------------------------- 2. the key goes to the named host only


def test_an_empty_key_field_sends_no_authorization_even_with_the_env_key_set(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", OPERATOR_KEY)
    with FakeOpenAIServer(models=["m"]) as capture:
        target = OpenAITarget(capture.base_url, "m", None, timeout_s=5, max_retries=0)
        caps = target.capabilities()
        target.complete(ask())
    assert caps.reachable
    assert capture.requests and not any(r["has_auth"] for r in capture.requests)


def test_a_redirect_to_another_host_is_not_followed(monkeypatch):
    """A (307) redirect to a second loopback server: it receives nothing, key or documents."""
    with FakeOpenAIServer(models=["m"]) as second, FakeOpenAIServer(models=["m"]) as first:
        first.script(Reply.json(307, {}, headers={"Location": f"{second.base_url}/chat/completions"}))
        target = OpenAITarget(first.base_url, "m", OPERATOR_KEY, timeout_s=5, max_retries=0)
        with pytest.raises(RequestRejected, match="redirects requests .*not followed") as info:
            target.complete(ask("my private document"))
        assert f"127.0.0.1:{second.port}" in str(info.value)
        assert [r["has_auth"] for r in first.requests] == [True]  # the named host got it
        assert second.requests == []  # the other one got nothing at all


def test_an_unreachable_url_without_a_key_is_reported_unreachable():
    """Issue 20 point 7: with no key the error was "authentication failed"."""
    caps = OpenAITarget("http://127.0.0.1:9/v1", "m", None, timeout_s=2, max_retries=0).capabilities()
    assert not caps.reachable and "cannot connect" in caps.detail


# --------------------------------------------------------------------------- 2 (app). the env key only when ticked

APP = str(ROOT / "app" / "main.py")


@pytest.fixture
def app(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("RPA_AUDIT_DB", str(tmp_path / "audits.sqlite"))
    monkeypatch.setenv("OPENAI_API_KEY", OPERATOR_KEY)  # the operator's key is there, the visitor types none
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.radio(key="target_kind").set_value("OpenAI-compatible endpoint").run()
    return at


def _captions(at) -> str:
    return " ".join(str(c.value) for c in at.caption)


def test_app_sends_the_env_key_only_when_its_box_is_ticked_and_names_the_host(app):
    with FakeOpenAIServer(models=["m"]) as capture:
        app.text_input(key="base_url").input(capture.base_url)
        app.text_input(key="model").input("m").run()
        assert not app.checkbox(key="use_env_key").value
        assert "Use the key in the OPENAI_API_KEY environment variable" == app.checkbox(key="use_env_key").label
        app.button(key="check_connection").click().run(timeout=60)
        assert not app.exception, app.exception
        assert capture.requests and not any(r["has_auth"] for r in capture.requests)
        assert app.success  # the server needs no key: connected

        capture.reset_stats()
        app.checkbox(key="use_env_key").check().run()
        assert f"will be sent to **127.0.0.1:{capture.port}** only" in _captions(app)
        assert not app.success  # the settings changed: the old message is gone
        app.button(key="check_connection").click().run(timeout=60)
        assert capture.requests and all(r["has_auth"] for r in capture.requests)


def test_a_typed_key_is_used_and_a_connection_message_goes_when_url_model_or_key_change(app):
    with FakeOpenAIServer(models=["m"], api_key="typed-key-123") as capture:
        app.text_input(key="base_url").input(capture.base_url)
        app.text_input(key="model").input("m")
        app.text_input(key="api_key").input("typed-key-123").run()
        assert f"The key you entered will be sent to **127.0.0.1:{capture.port}** only" in _captions(app)
        app.button(key="check_connection").click().run(timeout=60)
        assert app.success and not app.error
        app.text_input(key="api_key").input("another-key").run()
        assert not app.success and not app.error  # a message about the old key is not shown
        app.button(key="check_connection").click().run(timeout=60)
        assert "rejected" in " ".join(e.value for e in app.error)
        app.text_input(key="model").input("m2").run()
        assert not app.error


# --------------------------------------------------------------------------- 3. history deletion leaves no text on disk

from audit_core.documents import Document  # noqa: E402
from audit_core.methods.base import MethodResult  # noqa: E402
from audit_core.store import SCHEMA_VERSION, Store  # noqa: E402
from audit_core.target.base import Completion, Target, Usage  # noqa: E402
from audit_core.target.caching import CachingTarget  # noqa: E402


class KeyedEcho(Target):
    """An endpoint that echoes the prompt; ``credential_id`` as the HTTP connector computes it."""

    name = "http://tenant.example/v1 · shared-model"
    max_concurrency = 1

    def __init__(self, key: str = "tenant-a-key") -> None:
        super().__init__()
        self._inner = OpenAITarget("http://tenant.example/v1", "shared-model", key)
        self.sent: list[str] = []

    def credential_id(self, salt: bytes) -> str:
        return self._inner.credential_id(salt)

    def complete(self, request):
        text = request.message_dicts()[-1]["content"]
        self.sent.append(text)
        self.account.record(Usage(1, 1))
        return Completion(text=text.upper(), tokens=None, usage=Usage(1, 1))


def _db_bytes(path: Path) -> bytes:
    """The database as it is on disk: the main file, its WAL and its shared-memory index."""
    return b"".join(p.read_bytes() for p in path.parent.iterdir() if p.name.startswith(path.name))


SECRET_TEXT = "Zelda-Quixotic-Heliotrope diagnosis of the neighbour"
OTHER_TEXT = "Bramblewick-Orchard letter to the council"


def _audit_into(store: Store, text: str) -> str:
    docs = [Document("d1", text)]
    run_id = store.create_run("http://tenant.example/v1 · shared-model", ["echo"], {}, docs)
    target = CachingTarget(KeyedEcho(), store, "echo", "1", run_id=run_id)
    target.complete(ask(text))
    store.save_result(run_id, MethodResult("echo", "d1", 0.5, True, evidence={"text": text}))
    return run_id


def test_deleting_an_audit_removes_its_texts_from_the_file_and_wal(tmp_path):
    path = tmp_path / "audits.sqlite"
    with Store(path) as store:
        gone = _audit_into(store, SECRET_TEXT)
        kept = _audit_into(store, OTHER_TEXT)
        assert SECRET_TEXT.encode() in _db_bytes(path) and SECRET_TEXT.upper().encode() in _db_bytes(path)
        assert store.delete_run(gone) is True
        blob = _db_bytes(path)
        assert SECRET_TEXT.encode() not in blob and SECRET_TEXT.upper().encode() not in blob
        assert OTHER_TEXT.encode() in blob  # the other audit is untouched
        assert store.load_run(kept).documents[0].text == OTHER_TEXT
        assert store.count_responses() == 1
        assert store.delete_all() is True
        blob = _db_bytes(path)
        assert OTHER_TEXT.encode() not in blob and OTHER_TEXT.upper().encode() not in blob
        assert store.list_runs() == [] and store.count_responses() == 0
    assert SECRET_TEXT.encode() not in path.read_bytes()


def test_history_refuses_to_delete_a_running_audit(tmp_path):
    from audit_core.history import delete_all_history, delete_audit

    with Store(tmp_path / "a.sqlite") as store:
        run_id = _audit_into(store, SECRET_TEXT)
        with pytest.raises(ValueError, match="still running"):
            delete_audit(store, run_id, running=[run_id])
        with pytest.raises(ValueError, match="still running"):
            delete_all_history(store, running=[run_id])
        assert [r.id for r in store.list_runs()] == [run_id]


# --------------------------------------------------------------------------- 5. no stale answer passes as fresh


def test_a_new_audit_asks_again_by_default_and_a_resumed_one_reuses(tmp_path):
    with Store(tmp_path / "a.sqlite") as store:
        first = KeyedEcho()
        CachingTarget(first, store, "echo", "1", run_id="run-1").complete_many([ask("one"), ask("two")])
        # a second audit, default policy: everything is sent again, nothing reused
        second = KeyedEcho()
        t2 = CachingTarget(second, store, "echo", "1", run_id="run-2")
        t2.complete_many([ask("one"), ask("two")])
        assert second.sent == ["one", "two"]
        assert t2.freshness() == {"policy_days": None, "reused": 0, "sent": 2, "oldest_reused": None,
                                  "newest_reused": None}
        # the same run resumed: its own answers are reused
        again = KeyedEcho()
        t3 = CachingTarget(again, store, "echo", "1", run_id="run-2")
        t3.complete_many([ask("one"), ask("two"), ask("three")])
        assert again.sent == ["three"]
        f = t3.freshness()
        assert (f["reused"], f["sent"]) == (2, 1) and f["oldest_reused"] <= f["newest_reused"]
        # cross-audit reuse only when asked for, and only answers inside the window
        store._execute("UPDATE responses SET created='2020-01-01T00:00:00+00:00' WHERE run_id='run-1'")
        store._execute("DELETE FROM responses WHERE run_id IN ('run-2')")
        late = KeyedEcho()
        t4 = CachingTarget(late, store, "echo", "1", run_id="run-4", reuse_days=30)
        t4.complete_many([ask("one")])
        assert late.sent == ["one"]  # the 2020 answer is older than 30 days
        t5 = CachingTarget(KeyedEcho(), store, "echo", "1", run_id="run-5", reuse_days=100_000)
        t5.complete_many([ask("two")])
        f5 = t5.freshness()
        assert (f5["reused"], f5["sent"], f5["policy_days"]) == (1, 0, 100_000)
        assert f5["oldest_reused"].startswith("2020-01-01")
        # the reused answer was copied into run-5 with its original time: run-5 resumes from it
        assert store.find_response(t5.target_id, ask("two").key(), "echo", "1", cred_id=t5.cred_id,
                                   run_id="run-5").created.startswith("2020-01-01")


def test_tenants_behind_one_url_never_share_answers(tmp_path):
    with Store(tmp_path / "a.sqlite") as store:
        a = CachingTarget(KeyedEcho("tenant-a-key"), store, "echo", "1", run_id="r", reuse_days=365)
        a.complete(ask("the same question"))
        b_inner = KeyedEcho("tenant-b-key")
        b = CachingTarget(b_inner, store, "echo", "1", run_id="r", reuse_days=365)
        b.complete(ask("the same question"))
        assert b_inner.sent == ["the same question"] and b.freshness()["reused"] == 0
        assert a.cred_id and b.cred_id and a.cred_id != b.cred_id
        blob = _db_bytes(tmp_path / "a.sqlite")
        assert b"tenant-a-key" not in blob and b"tenant-b-key" not in blob


def test_a_version_1_store_is_migrated_and_its_answers_are_not_replayed(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    c = sqlite3.connect(path)
    c.executescript("""
        CREATE TABLE responses (target_id TEXT NOT NULL, method TEXT NOT NULL, method_version TEXT NOT NULL,
            request_key TEXT NOT NULL, request_json TEXT, completion TEXT NOT NULL, created TEXT NOT NULL,
            PRIMARY KEY (target_id, method, method_version, request_key));
        CREATE TABLE failures (id INTEGER PRIMARY KEY AUTOINCREMENT, target_id TEXT NOT NULL, method TEXT NOT NULL,
            method_version TEXT NOT NULL, request_key TEXT NOT NULL, reason TEXT NOT NULL, message TEXT NOT NULL,
            created TEXT NOT NULL);
        CREATE TABLE runs (id TEXT PRIMARY KEY, created TEXT NOT NULL, target_id TEXT NOT NULL, methods TEXT NOT NULL,
            params TEXT NOT NULL, status TEXT NOT NULL, summary TEXT, finished TEXT, error TEXT);
        CREATE TABLE run_documents (run_id TEXT NOT NULL, position INTEGER NOT NULL, doc_id TEXT NOT NULL,
            text_hash TEXT NOT NULL, text TEXT NOT NULL, PRIMARY KEY (run_id, doc_id));
        CREATE TABLE results (run_id TEXT NOT NULL, doc_id TEXT NOT NULL, method TEXT NOT NULL, result TEXT NOT NULL,
            observation TEXT, created TEXT NOT NULL, PRIMARY KEY (run_id, doc_id, method));
        PRAGMA user_version=1;
    """)
    old = Completion(text="OLD ANSWER", tokens=None, usage=Usage(1, 1))
    import json

    c.execute("INSERT INTO responses VALUES (?,?,?,?,?,?,?)", (KeyedEcho.name, "echo", "1", ask("q").key(), None,
                                                               json.dumps(old.to_json()), "2024-01-01T00:00:00"))
    c.execute("INSERT INTO responses VALUES (?,?,?,?,?,?,?)", ("another target", "echo", "1", ask("q").key(), None,
                                                               json.dumps(old.to_json()), "2024-01-01T00:00:00"))
    c.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?)", ("old-run", "2024-01-01T00:00:00", KeyedEcho.name, "[]",
                                                              "{}", "done", None, None, None))
    c.commit()
    c.close()
    with Store(path) as store:
        assert store._execute("PRAGMA user_version")[0][0] == SCHEMA_VERSION
        assert store.count_responses() == 2  # kept...
        store._migrate(1)  # a second process that read version 1 before the first migrated: nothing to do
        assert store._execute("PRAGMA user_version")[0][0] == SCHEMA_VERSION and store.count_responses() == 2
        inner = KeyedEcho()
        t = CachingTarget(inner, store, "echo", "1", run_id="new", reuse_days=100_000)
        assert t.complete(ask("q")).text == "Q" and inner.sent == ["q"]  # ...but never replayed as fresh
        store.record_failure(KeyedEcho.name, "k", "boom", run_id="new")
        # deleting the audit of that time deletes the unattributed answers of its target, which hold its texts
        store.delete_run("old-run")
        assert b"OLD ANSWER" in _db_bytes(path)  # only the other target's is left
        assert store.count_responses(KeyedEcho.name) == 1 and store.count_responses("another target") == 1
        assert store.delete_all()


# --------------------------------------------------------------------------- 4. nothing is unpickled from the cache


class _Planted:
    """What an attacker with write access to the cache puts there: unpickling it creates a file."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _srag_observations(n: int, member: bool, seed: int):
    """Shadow observations as S-RAG records them: members see their next word with high probability."""
    import random

    from audit_core.methods.base import Observation
    from audit_core.target.base import TokenLogprob

    rnd = random.Random(seed)
    out = []
    for i in range(n):
        obs = Observation("srag", f"{'m' if member else 'n'}{i}")
        words = [f"word{j}" for j in range(6)]
        obs.data["probes"] = [{"word": w, "word_index": j, "prefix": "x", "proxy_prob": 0.1}
                              for j, w in enumerate(words)]
        for w in words:
            p = rnd.uniform(0.5, 0.99) if member else rnd.uniform(0.0, 0.4)
            import math

            lp = math.log(max(p, 1e-6))
            tok = TokenLogprob(w, lp, [(w, lp), ("other", math.log(max(1e-6, 1 - p)))])
            obs.requests.append({})
            obs.responses.append(Completion(w, [tok], Usage(10, 1)).to_json())
            obs.errors.append(None)
        out.append(obs)
    return out


def test_a_planted_predictor_pickle_in_the_cache_is_never_loaded(tmp_path):
    import json
    import pickle

    from audit_core.methods.srag import SragConfig, SragMethod
    from shadow.corpus import corpus_hash
    from shadow.prepare import ShadowConfig, preparation_key, prepare_shadow

    cfg = ShadowConfig(n_members=12, n_nonmembers=12)
    method = SragMethod(SragConfig(time_limit_s=30))
    folder = tmp_path / "shadow" / preparation_key(method, cfg, corpus_hash(cfg.corpus_docs()))
    folder.mkdir(parents=True)
    mem, non = _srag_observations(12, True, 1), _srag_observations(12, False, 2)
    (folder / "observations.json").write_text(json.dumps(
        {"members": [o.to_json() for o in mem], "nonmembers": [o.to_json() for o in non]}))
    # a previous preparation's calibration and a predictor replaced by an attacker
    (folder / "calibration.json").write_text(json.dumps({"method": "srag", "threshold": 0.5, "member_scores": [],
                                                         "nonmember_scores": [], "shadow_auc": 0.99, "params": {}}))
    marker = tmp_path / "code-ran"
    (folder / "predictor").mkdir()
    for name in ("predictor.pkl", "learner.pkl"):
        (folder / "predictor" / name).write_bytes(pickle.dumps(_Planted(marker)))

    prep = prepare_shadow([method], cfg, root=tmp_path / "shadow")

    assert not marker.exists(), "a pickle from the cache directory was loaded"
    cal = prep.calibrations["srag"]
    assert prep.from_cache["srag"] and cal.model is not None  # re-trained from the cached observations
    assert cal.shadow_auc is not None and cal.shadow_auc > 0.9
    assert not (folder / "predictor").exists()  # removed unread; nothing written in its place
    assert sorted(p.name for p in folder.iterdir()) == ["calibration.json", "observations.json"]
    saved = json.loads((folder / "calibration.json").read_text())
    assert saved["shadow_auc"] == cal.shadow_auc and "model" not in saved


def test_no_unsafe_loader_anywhere_in_the_project():
    """pickle / joblib / torch.load without weights_only=True: none in the project's code."""
    import re

    pattern = re.compile(r"\bpickle\.loads?\(|\bjoblib\.load\(|TabularPredictor\.load\(|np\.load\([^)]*allow_pickle=True"
                         r"|torch\.load\((?![^)]*weights_only=True)")
    hits = []
    for folder in ("app", "audit_core", "shadow", "scripts"):
        for p in (ROOT / folder).rglob("*.py"):
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
                if pattern.search(line):
                    hits.append(f"{p.relative_to(ROOT)}:{n}: {line.strip()}")
    assert hits == []


def test_cli_second_audit_asks_again_and_the_json_and_pdf_say_what_was_reused(rel_cache, tmp_path):
    import io
    import json

    from pypdf import PdfReader

    from audit_core.report import pdf_report
    from tests.reliability.support import (
        MEMBERS_DEFAULT, MODEL, RecordingServer, answer, audit_args, cli_env, make_documents, record_of, run_cli,
        write_csv,
    )

    csv = write_csv(tmp_path / "docs.csv", make_documents(3))
    store = tmp_path / "audits.sqlite"
    outs = [tmp_path / f"run{i}.json" for i in range(3)]
    with RecordingServer(models=[MODEL], responder=lambda b: answer(b, MEMBERS_DEFAULT)) as srv:
        sent = []
        for out, extra in zip(outs, ([], [], ["--reuse-days", "7"])):
            srv.reset_stats()
            run = run_cli(audit_args(srv.base_url, csv, store, "--out", str(out), *extra), cli_env(rel_cache))
            assert run.returncode == 0, run.stderr[-3000:]
            sent.append(len([b for b in srv.chat_requests() if record_of(b) is not None]))
    first, second, third = (json.loads(p.read_text()) for p in outs)
    assert sent[0] == sent[1] == 6  # the second audit asked every question again
    probe = second["freshness"].pop("probe")
    assert second["freshness"] == {"policy_days": None, "reused": 0, "sent": 6, "oldest_reused": None,
                                   "newest_reused": None}
    # the capability probe is counted where the account counts it: the report's total is the account's
    assert probe >= 1 and second["account"]["queries"] == 6 + probe
    second["freshness"]["probe"] = probe
    assert sent[2] == 0  # within 7 days: reused, and said so
    f = third["freshness"]
    assert (f["policy_days"], f["reused"], f["sent"]) == (7, 6, 0) and f["oldest_reused"] <= f["newest_reused"]
    assert "Answers reused from earlier requests: 6, received" in run.stderr
    text = " ".join("\n".join(p.extract_text() for p in PdfReader(io.BytesIO(pdf_report(second))).pages).split())
    assert "Answers reused from earlier requests: 0" in text
    assert f"requests sent during this audit: {6 + probe} ({probe} of them the capability probe" in text


# --------------------------------------------------------------------------- 3 (app). History: confirm, never a running audit


def _finished_run(db: Path, text: str) -> str:
    with Store(db) as store:
        run_id = store.create_run("http://tenant.example/v1 · shared-model", ["echo"], {}, [Document("d1", text)])
        store.finish_run(run_id, summary={"verdicts": [{"doc_id": "d1", "verdict": "member"}]})
    return run_id


@pytest.fixture
def history_app(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    db = tmp_path / "audits.sqlite"
    monkeypatch.setenv("RPA_AUDIT_DB", str(db))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return db, AppTest.from_file(APP, default_timeout=120)


def _button_keys(at) -> set[str]:
    return {b.key for b in at.button}


def test_history_delete_asks_first_then_removes_the_texts(history_app):
    db, at = history_app
    run_id = _finished_run(db, SECRET_TEXT)
    at.run()
    at.button(key="history_delete").click().run()
    assert "cannot be undone" in " ".join(w.value for w in at.warning)
    with Store(db) as store:
        assert [r.id for r in store.list_runs()] == [run_id]  # one click deleted nothing
    at.button(key="history_confirm_no").click().run()
    assert not at.warning and "history_confirm_yes" not in _button_keys(at)
    at.button(key="history_delete").click().run()
    at.button(key="history_confirm_yes").click().run()
    assert not at.exception, at.exception
    assert "Deleted the audit" in " ".join(s.value for s in at.success)
    with Store(db) as store:
        assert store.list_runs() == []
    assert SECRET_TEXT.encode() not in _db_bytes(db)


def test_history_offers_no_delete_for_a_running_audit(history_app):
    import threading

    db, at = history_app
    run_id = _finished_run(db, OTHER_TEXT)
    with Store(db) as store:
        store.set_status(run_id, "running")
    release = threading.Event()
    worker = threading.Thread(target=release.wait, name=f"audit-{run_id[:8]}", daemon=True)  # as app/jobs.py names it
    worker.start()
    try:
        at.run()
        keys = _button_keys(at)
        assert "history_delete" not in keys and "history_delete_all" not in keys
        assert "cancel it in tab 2 Run" in " ".join(str(c.value) for c in at.caption)
    finally:
        release.set()
        worker.join()
    at.run()
    assert {"history_delete", "history_delete_all"} <= _button_keys(at)


def test_history_selects_the_new_audit_when_one_finishes(history_app):
    import time

    db, at = history_app
    old = _finished_run(db, OTHER_TEXT)
    at.run()
    assert at.selectbox(key="history_run").value == old
    time.sleep(0.01)  # a later creation time
    new = _finished_run(db, SECRET_TEXT)
    at.run()
    assert at.selectbox(key="history_run").value == new
