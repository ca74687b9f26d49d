"""Every request to a target stands alone (no cookie carried, a new session id each try), at the pace it allows.

A chat service that keeps its conversation under a session cookie, or under an
id in the body, would otherwise read all of an audit's probes as one
conversation, and a later probe could quote text that an earlier one sent
(``audit_core.target.http_client``). Loopback servers only; no model is loaded.
"""
from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from audit_core.target import TargetFileError, parse_target_file
from audit_core.target.base import ChatRequest
from audit_core.target.http_api import HttpTarget, HttpTargetConfig
from audit_core.target.http_client import Pacer
from audit_core.target.openai_compat import OpenAITarget, OpenAITargetConfig
from tests.fake_openai_server import FakeOpenAIServer, Reply

SESSION_COOKIE = {"Set-Cookie": "conversation=c-41; Path=/"}


def _ask(text: str = "hi") -> ChatRequest:
    return ChatRequest.chat([{"role": "user", "content": text}], max_tokens=4)


def _http(srv: FakeOpenAIServer, **changes) -> HttpTarget:
    cfg = HttpTargetConfig(url=f"http://127.0.0.1:{srv.port}/ask", body={"q": "{{prompt}}"},
                           answer_path="$.answer", timeout_s=5, **changes)
    return HttpTarget(cfg, {}, backoff_base_s=0.01)


def _cookies_sent(srv: FakeOpenAIServer, path: str) -> list[bool]:
    return ["cookie" in r["header_names"] for r in srv.requests if r["path"] == path]


def test_an_http_target_never_sends_back_a_cookie_the_service_set():
    with FakeOpenAIServer() as srv:
        srv.script(*[Reply.json(200, {"answer": "fine"}, headers=SESSION_COOKIE) for _ in range(3)], path="/ask")
        t = _http(srv)
        for i in range(3):
            assert t.complete(_ask(f"probe {i}")).text == "fine"
        assert _cookies_sent(srv, "/ask") == [False, False, False]


def test_an_openai_target_never_sends_back_a_cookie_the_service_set():
    def answer(body: dict) -> Reply:
        reply = Reply.completion("fine", model=str(body.get("model")))
        reply.headers.update(SESSION_COOKIE)
        return reply

    with FakeOpenAIServer(responder=answer) as srv:
        t = OpenAITarget(srv.base_url, "fake-model", None, timeout_s=5)
        for i in range(3):
            assert t.complete(_ask(f"probe {i}")).text == "fine"
        assert _cookies_sent(srv, "/v1/chat/completions") == [False, False, False]


def test_session_id_is_new_for_every_request_and_every_try():
    with FakeOpenAIServer() as srv:
        srv.script(Reply.error(503, "busy"), Reply.json(200, {"answer": "a"}), Reply.json(200, {"answer": "b"}),
                   path="/ask")
        t = _http(srv)
        t = HttpTarget(replace(t.config, body={"q": "{{prompt}}", "conversation": "{{session_id}}",
                                               "meta": {"thread": "t-{{session_id}}"}}), {}, backoff_base_s=0.01)
        assert [t.complete(_ask()).text, t.complete(_ask()).text] == ["a", "b"]
        bodies = [r["json"] for r in srv.requests if r["path"] == "/ask"]
        ids = [b["conversation"] for b in bodies]
        assert len(ids) == 3 and len(set(ids)) == 3  # the retried try got its own id too
        assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
        assert all(b["meta"]["thread"] == f"t-{b['conversation']}" for b in bodies)


def test_a_pacer_spaces_requests_by_its_interval_and_lets_the_first_go_at_once():
    now = [100.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)

    pacer = Pacer(20, clock=lambda: now[0], sleep=sleep)  # one every 3 s
    assert [pacer.wait() for _ in range(3)] == [0.0, 3.0, 6.0]
    assert slept == [3.0, 6.0]
    now[0] = 200.0  # long after the last reserved start: no wait
    assert pacer.wait() == 0.0


def _arrivals_from_threads(srv: FakeOpenAIServer, target: HttpTarget, n: int) -> list[float]:
    """When ``n`` requests sent at once from ``n`` threads arrived at ``srv``'s /ask, in order."""
    threads = [threading.Thread(target=target.complete, args=(_ask(),)) for _ in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sorted(r["time"] for r in srv.requests if r["path"] == "/ask")


def test_a_paced_target_spaces_its_requests_even_from_several_threads():
    with FakeOpenAIServer() as srv:
        srv.script(*[Reply.json(200, {"answer": "ok"}) for _ in range(4)], path="/ask")
        times = _arrivals_from_threads(srv, _http(srv, requests_per_minute=150.0, max_concurrency=4), 4)  # 0.4 s
        assert len(times) == 4
        # the pace holds when each request leaves; its arrival may lag by the connection's set-up
        assert all(b - a >= 0.3 for a, b in zip(times, times[1:])), times


def test_an_openai_target_is_paced_too():
    with FakeOpenAIServer() as srv:
        t = OpenAITarget(srv.base_url, "fake-model", None, timeout_s=5, requests_per_minute=150.0)
        for _ in range(3):
            t.complete(_ask())
        times = [r["time"] for r in srv.requests if r["path"] == "/v1/chat/completions"]
        assert len(times) == 3 and all(b - a >= 0.3 for a, b in zip(times, times[1:])), times


@pytest.mark.parametrize("kind", ["http", "openai"])
@pytest.mark.parametrize("value", ["0", "-5", "fast", "true", ".inf"])
def test_a_target_file_with_an_impossible_pace_is_refused_in_words(kind, value):
    head = ("type: http\nurl: https://rag.example.com/ask\nbody: {q: '{{prompt}}'}\nanswer_path: $.a\n"
            if kind == "http" else "type: openai\nbase_url: https://api.example.com/v1\nmodel: m\n")
    with pytest.raises(TargetFileError, match="requests_per_minute"):
        parse_target_file(head + f"requests_per_minute: {value}\n", "t.yaml")


def test_a_target_file_reads_its_pace():
    _, cfg = parse_target_file("type: openai\nbase_url: https://api.example.com/v1\nmodel: m\n"
                               "requests_per_minute: 12\n", "t.yaml")
    assert isinstance(cfg, OpenAITargetConfig) and cfg.requests_per_minute == 12.0
    target = OpenAITarget.from_config(cfg, {"OPENAI_API_KEY": "sk-test-0123456789abcdef"})
    assert target._pacer is not None and target._pacer.interval_s == pytest.approx(5.0)


def test_the_cli_paces_an_endpoint_or_a_target_file_and_refuses_a_pace_for_the_demo(tmp_path, monkeypatch, capsys):
    import argparse

    from app.cli import _target, main

    docs = tmp_path / "docs.csv"
    docs.write_text("id,text\na," + " ".join(f"word{i}" for i in range(120)) + "\n")
    rc = main(["audit", "--target", "demo", "--docs", str(docs), "--requests-per-minute", "10", "--estimate-only"])
    assert rc == 2 and "the demo answers on this computer" in capsys.readouterr().err
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    rc = main(["audit", "--target", "https://api.example.com/v1", "--model", "m", "--docs", str(docs),
               "--method", "mba", "--requests-per-minute", "2", "--estimate-only"])
    err = capsys.readouterr().err
    queries = int(err.split("estimated cost: ")[1].split()[0])
    assert rc == 0 and f"At 2 requests a minute (the target's pace), these {queries} queries" in err
    for pace in ("0", "1e-300"):  # the second waited past what the clock holds: an ended audit
        with pytest.raises(SystemExit):  # argparse refuses it before anything runs
            main(["audit", "--target", "demo", "--docs", str(docs), "--requests-per-minute", pace])
        assert "--requests-per-minute: it must be a number from 0.01" in capsys.readouterr().err
    # the pace reaches the connector: an endpoint's, and a target file's, which the flag replaces
    endpoint = _target(argparse.Namespace(target_file=None, target="https://api.example.com/v1", model="m",
                                          api_key_env="OPENAI_API_KEY", requests_per_minute=30.0))
    assert endpoint._pacer.interval_s == pytest.approx(2.0)
    file = tmp_path / "t.yaml"
    file.write_text("type: http\nurl: https://rag.example.com/ask\nbody: {q: '{{prompt}}'}\nanswer_path: $.a\n"
                    "requests_per_minute: 6\n")
    own = _target(argparse.Namespace(target_file=str(file), target=None, allow_env=None, requests_per_minute=None))
    assert own._pacer.interval_s == pytest.approx(10.0)
    replaced = _target(argparse.Namespace(target_file=str(file), target=None, allow_env=None,
                                          requests_per_minute=60.0))
    assert replaced._pacer.interval_s == pytest.approx(1.0)


def test_a_paced_request_waiting_for_its_turn_waits_out_a_429_pause_too():
    """Threads queued in the pacer when another was told 429 woke and sent inside the pause (review, session
    55): each now waits the pause out, then takes a new turn, so the pace holds after it too."""
    with FakeOpenAIServer() as srv:
        srv.script(Reply.json(429, {"error": "slow down"}, headers={"Retry-After": "1.5"}),
                   *[Reply.json(200, {"answer": "ok"}) for _ in range(3)], path="/ask")
        times = _arrivals_from_threads(srv, _http(srv, requests_per_minute=600.0, max_concurrency=3), 3)  # 0.1 s
    assert len(times) == 4
    first = times[0]
    assert all(x - first >= 1.4 for x in times[1:]), [round(x - first, 2) for x in times]  # none in the pause
    assert all(b - a >= 0.05 for a, b in zip(times[1:], times[2:]))  # and paced after it


def test_the_cli_refuses_a_pace_for_a_target_type_that_has_none(tmp_path, monkeypatch, capsys):
    """A registered type need not have requests_per_minute: the flag crashed with a TypeError traceback."""
    from app.cli import main
    from tests.target_fixtures import minimal_target_file, registered

    spec = registered(monkeypatch)
    file = tmp_path / "t.json"
    file.write_text(minimal_target_file(spec))
    docs = tmp_path / "docs.csv"
    docs.write_text("id,text\na," + " ".join(f"word{i}" for i in range(120)) + "\n")
    rc = main(["audit", "--target-file", str(file), "--docs", str(docs), "--method", "mba",
               "--requests-per-minute", "10", "--estimate-only"])
    assert rc == 2 and "has no pace to set" in capsys.readouterr().err
