"""The OpenAI-compatible connector against a scripted local server (loopback only)."""
from __future__ import annotations

import email.utils
import json
import logging
import random
import socket
import threading
import time

import pytest

from audit_core.target.base import (
    AuthenticationFailed,
    BadResponse,
    ChatRequest,
    Completion,
    ContextTooLong,
    NoLogprobs,
    RateLimited,
    ServerError,
    TargetError,
    Unreachable,
    UnknownModel,
)
from audit_core.target.openai_compat import OpenAITarget, RequestRejected, RetryPolicy, parse_retry_after
from tests.fake_openai_server import FakeOpenAIServer, Reply, completion_body

KEY = "sk-test-SECRET-123"
FAST = dict(backoff_base_s=0.01, backoff_cap_s=0.05)


def ask(text: str = "hi", **kw) -> ChatRequest:
    return ChatRequest.chat([{"role": "user", "content": text}], **kw)


@pytest.fixture
def server():
    with FakeOpenAIServer(api_key=KEY, models=["fake-model"], reply_text="Hello there world") as srv:
        yield srv


@pytest.fixture
def target(server):
    return OpenAITarget(server.base_url, "fake-model", KEY, timeout_s=5, max_retries=3, **FAST)


# --------------------------------------------------------------------------- success and parsing


def test_completion_with_top_alternatives_is_parsed(server, target):
    comp = target.complete(ask(logprobs=True, top_logprobs=5))
    assert comp.text == "Hello there world"
    assert [t.token for t in comp.tokens] == ["Hello", " there", " world"]
    assert [t.logprob for t in comp.tokens] == pytest.approx([-0.1, -0.2, -0.3])
    for tok in comp.tokens:
        assert len(tok.top) == 5
        assert tok.top[0] == (tok.token, pytest.approx(tok.logprob))
        assert tok.top[1:] == [(f"<alt{j}>", -(j + 1.0)) for j in range(1, 5)]
    assert comp.finish_reason == "stop" and comp.model == "fake-model"
    assert comp.raw["choices"][0]["message"]["content"] == "Hello there world"
    sent = server.chat_requests()[-1]
    assert sent["logprobs"] is True and sent["top_logprobs"] == 5 and sent["model"] == "fake-model"
    assert sent["max_tokens"] == 16 and sent["temperature"] == 0.0


def test_alternatives_are_sorted_best_first(server, target):
    body = completion_body("Yes", top_logprobs=3)
    body["choices"][0]["logprobs"]["content"][0]["top_logprobs"] = [
        {"token": "No", "logprob": -3.0}, {"token": "Yes", "logprob": -0.1}, {"token": "Maybe", "logprob": -1.5}]
    server.script(Reply.json(200, body))
    comp = target.complete(ask(logprobs=True, top_logprobs=3))
    assert [a[0] for a in comp.tokens[0].top] == ["Yes", "Maybe", "No"]


def test_no_logprobs_requested_gives_tokens_none(server, target):
    comp = target.complete(ask())
    assert comp.tokens is None and comp.text == "Hello there world"
    assert "logprobs" not in server.chat_requests()[-1]


def test_account_counts_queries_and_tokens(server, target):
    target.complete(ask("a" * 40))  # the fake charges len(prompt)//4 prompt tokens
    target.complete(ask("b" * 80))
    acc = target.account
    assert (acc.queries, acc.failures, acc.retries) == (2, 0, 0)
    assert acc.prompt_tokens == 10 + 20 and acc.completion_tokens == 3 + 3


# --------------------------------------------------------------------------- retries


def test_429_then_success_honours_retry_after(server, target):
    server.script(Reply.error(429, "slow down", headers={"Retry-After": "0.4"}))
    t0 = time.monotonic()
    comp = target.complete(ask())
    elapsed = time.monotonic() - t0
    assert comp.text == "Hello there world"
    times = [r["time"] for r in server.requests]
    assert len(times) == 2 and times[1] - times[0] >= 0.4
    assert elapsed >= 0.4
    assert target.account.retries == 1 and target.account.failures == 0 and target.account.queries == 1


def test_503_twice_then_success(server, target):
    server.script(Reply.error(503, "overloaded"), Reply.error(503, "overloaded"))
    assert target.complete(ask()).text == "Hello there world"
    assert target.account.retries == 2 and target.account.queries == 1 and target.account.failures == 0


def test_server_error_retry_after_is_honoured(server, target):
    server.script(Reply.error(503, "maintenance", headers={"Retry-After": "0.3"}))
    target.complete(ask())
    times = [r["time"] for r in server.requests]
    assert len(times) == 2 and times[1] - times[0] >= 0.3


def test_exhausted_rate_limit_raises_rate_limited(server):
    t = OpenAITarget(server.base_url, "fake-model", KEY, max_retries=2, **FAST)
    server.script(*[Reply.error(429, "quota", headers={"Retry-After": "0.01"})] * 3)
    with pytest.raises(RateLimited, match="after 2 retries"):
        t.complete(ask())
    assert len(server.chat_requests()) == 3
    assert t.account.failures == 1 and t.account.retries == 2 and t.account.queries == 1


def test_exhausted_server_errors_raise_server_error(server):
    t = OpenAITarget(server.base_url, "fake-model", KEY, max_retries=1, **FAST)
    server.script(Reply.error(500, "boom"), Reply.error(502, "bad gateway"))
    with pytest.raises(ServerError, match="HTTP 502"):
        t.complete(ask())
    assert len(server.chat_requests()) == 2 and server.pending() == 0


def test_retry_after_beyond_budget_gives_up_without_waiting(server):
    t = OpenAITarget(server.base_url, "fake-model", KEY, max_total_wait_s=1.0, **FAST)
    server.script(Reply.error(429, "come back later", headers={"Retry-After": "30"}))
    t0 = time.monotonic()
    with pytest.raises(RateLimited, match="budget"):
        t.complete(ask())
    assert time.monotonic() - t0 < 2.0 and len(server.chat_requests()) == 1


def test_rate_limit_pauses_other_workers(server, target):
    server.script(Reply.error(429, "slow down", headers={"Retry-After": "0.5"}))
    first = threading.Thread(target=target.complete, args=(ask("first"),))
    first.start()
    deadline = time.monotonic() + 5
    while target._cooldown_until == 0.0 and time.monotonic() < deadline:  # the 429 has been answered
        time.sleep(0.005)
    target.complete(ask("second"))
    first.join()
    limited = server.requests[0]["time"]
    second = next(r["time"] for r in server.requests if r["json"]["messages"][0]["content"] == "second")
    assert second - limited >= 0.45


def test_dropped_connection_is_retried(server, target):
    server.script(Reply.drop())
    assert target.complete(ask()).text == "Hello there world"
    assert target.account.retries == 1


def test_retry_after_parsing():
    assert parse_retry_after({"retry-after": "2.5"}) == 2.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    now = time.time()
    date = email.utils.formatdate(now + 10, usegmt=True)
    assert 8.5 <= parse_retry_after({"retry-after": date}, now=now) <= 10.0
    assert parse_retry_after({"retry-after": email.utils.formatdate(now - 60, usegmt=True)}, now=now) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_backoff_grows_with_jitter_and_is_capped():
    policy = RetryPolicy(backoff_base_s=1.0, backoff_cap_s=8.0)
    rng = random.Random(0)
    for retry, step in [(0, 1.0), (1, 2.0), (2, 4.0), (3, 8.0), (6, 8.0)]:
        waits = [policy.backoff(retry, rng) for _ in range(50)]
        assert all(step / 2 <= w <= step for w in waits)
        assert max(waits) - min(waits) > step / 10  # jittered, not constant
    assert policy.delay(0, 5.0, rng) >= 5.0


# --------------------------------------------------------------------------- typed errors


def test_wrong_key_is_authentication_failed_and_not_retried(server):
    t = OpenAITarget(server.base_url, "fake-model", "sk-wrong-OTHER-456", **FAST)
    with pytest.raises(AuthenticationFailed) as info:
        t.complete(ask())
    msg = str(info.value)
    assert f"the API key was rejected by {server.base_url}" in msg
    assert "sk-wrong-OTHER-456" not in msg and "***" in msg  # the server echoed it; we scrubbed it
    assert len(server.requests) == 1 and t.account.failures == 1


def test_no_key_sends_no_authorization_and_never_reads_the_environment(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # the operator's key is in the environment...
    t = OpenAITarget(server.base_url, "fake-model", **FAST)
    with pytest.raises(AuthenticationFailed, match="asks for an API key .* and none was given"):
        t.complete(ask())
    assert [r["has_auth"] for r in server.requests] == [False]  # ...and was not sent
    assert OpenAITarget(server.base_url, "fake-model", KEY).complete(ask()).text == "Hello there world"


def test_unknown_model(server):
    t = OpenAITarget(server.base_url, "no-such-model", KEY, **FAST)
    with pytest.raises(UnknownModel, match="no-such-model"):
        t.complete(ask())
    server.reset_stats()
    with pytest.raises(UnknownModel, match="fake-model"):  # the message lists what is served
        t.capabilities()
    assert server.chat_requests() == []  # found from /models, before any paid query


def test_unknown_model_without_models_route(server):
    server.models_endpoint = False
    t = OpenAITarget(server.base_url, "no-such-model", KEY, **FAST)
    with pytest.raises(UnknownModel):
        t.capabilities()
    with pytest.raises(RequestRejected, match="usually ends in /v1"):
        t.list_models()


def test_context_too_long_is_not_retried(server, target):
    server.max_context_chars = 50
    with pytest.raises(ContextTooLong, match="longer than"):
        target.complete(ask("x" * 200))
    assert len(server.chat_requests()) == 1


def test_unreachable_port_fails_fast():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}/v1"
    t = OpenAITarget(base, "fake-model", KEY, max_retries=2, **FAST)
    t0 = time.monotonic()
    with pytest.raises(Unreachable) as info:
        t.complete(ask())
    assert time.monotonic() - t0 < 5.0
    assert base in str(info.value)
    assert t.account.retries == 2 and t.account.failures == 1
    caps = t.capabilities()
    assert not caps.reachable and base in caps.detail


def test_slow_response_times_out(server):
    t = OpenAITarget(server.base_url, "fake-model", KEY, timeout_s=0.3, max_retries=1, **FAST)
    server.script(Reply.completion("late").after(3.0), Reply.completion("late").after(3.0))
    t0 = time.monotonic()
    with pytest.raises(Unreachable, match="did not answer within 0.3s"):
        t.complete(ask())
    assert time.monotonic() - t0 < 2.5


def test_malformed_json_is_bad_response_after_bounded_retries(server, target):
    server.script(Reply.malformed(), Reply.malformed(), Reply.malformed())
    with pytest.raises(BadResponse, match="not valid JSON"):
        target.complete(ask())
    assert len(server.chat_requests()) == 3  # first try + bad_response_retries=2


def test_malformed_then_good_succeeds(server, target):
    server.script(Reply.malformed())
    assert target.complete(ask()).text == "Hello there world"
    assert target.account.retries == 1


def test_missing_fields_are_bad_response(server, target):
    server.script(*[Reply.json(200, {"id": "x", "object": "chat.completion"})] * 3)
    with pytest.raises(BadResponse, match="without choices"):
        target.complete(ask())


# --------------------------------------------------------------------------- logprobs capability


def test_missing_logprobs_raise_and_capabilities_say_so():
    with FakeOpenAIServer(api_key=KEY, supports_logprobs=False) as srv:
        t = OpenAITarget(srv.base_url, "fake-model", KEY, **FAST)
        with pytest.raises(NoLogprobs, match="without logprobs") as info:
            t.complete(ask(logprobs=True, top_logprobs=5))
        assert info.value.completion.text == "OK"  # what the endpoint did answer is kept
        assert t.account.failures == 1 and t.account.completion_tokens == 1
        caps = t.capabilities()
        assert caps.reachable and not caps.logprobs and caps.max_top_logprobs == 0
        # the probe's refusal is what it asked to find out, not a failed query ("4 (1 failed)" on every audit)
        assert t.account.queries == 5 and t.account.failures == 1
        sent = srv.chat_requests()
        assert sent[1]["top_logprobs"] == 20  # the capability request asks for the most alternatives
        assert len(sent) == 5 and not any(r.get("logprobs") for r in sent[2:])  # then 3 text-only style probes
        assert caps.style == "chat"  # it answered "OK" to "complete this text"


def test_an_empty_answer_is_returned_as_a_non_answer_not_as_missing_logprobs(server, target):
    empty = {"id": "x", "object": "chat.completion", "model": "fake-model",
             "choices": [{"index": 0, "message": {"role": "assistant", "content": ""},
                          "finish_reason": "stop", "logprobs": None}],
             "usage": {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5}}
    server.script(Reply.json(200, empty))
    comp = target.complete(ask(logprobs=True, top_logprobs=5))
    assert comp.text == "" and not comp.tokens and target.account.failures == 0
    server.script(Reply.json(200, empty))  # the capability request answered with nothing: logprobs unknown, not used
    caps = target.capabilities()
    assert caps.reachable and not caps.logprobs and "unknown" in caps.detail


def test_capabilities_report_logprobs(server, target):
    caps = target.capabilities()
    assert caps.reachable and caps.logprobs and caps.max_top_logprobs == 20 and caps.model == "fake-model"
    assert target.list_models() == ["fake-model"]


# --------------------------------------------------------------------------- the key stays secret


def test_key_never_leaks(server, caplog):
    for name in ("", "openai", "httpx", "httpx2", "httpcore", "audit_core"):
        caplog.set_level(logging.DEBUG, logger=name or None)
    t = OpenAITarget(server.base_url, "fake-model", KEY, max_retries=1, **FAST)
    server.api_key = "sk-the-server-wants-another"  # so the server echoes ours back in a 401
    texts: list[str] = [repr(t), str(t.name), str(vars(t))]
    with pytest.raises(AuthenticationFailed) as info:
        t.complete(ask())
    texts += [str(info.value), repr(info.value)]
    server.api_key = KEY
    leaky = completion_body("fine")
    leaky["system_fingerprint"] = f"served for {KEY}"
    server.script(Reply.error(500, f"upstream said {KEY}"), Reply.json(200, leaky))
    comp = t.complete(ask())
    texts += [json.dumps(comp.raw), json.dumps(comp.to_json())]
    server.script(Reply.error(400, f"bad request from {KEY}"))
    with pytest.raises(RequestRejected) as info2:
        t.complete(ask())
    texts += [str(info2.value), repr(info2.value)]
    texts += [caplog.text] + [str(r.__dict__) for r in caplog.records]
    assert caplog.records  # the loggers did log something
    assert all(KEY not in s for s in texts)
    assert "served for ***" in json.dumps(comp.raw)


# --------------------------------------------------------------------------- batches


def test_complete_many_is_bounded_and_keeps_failures_in_place():
    def slow(body: dict) -> Reply:
        prompt = body["messages"][0]["content"]
        if "bad" in prompt:
            return Reply.error(400, "this one is refused").after(0.15)
        return Reply.completion(prompt.upper(), model=body["model"]).after(0.15)

    with FakeOpenAIServer(api_key=KEY, responder=slow) as srv:
        t = OpenAITarget(srv.base_url, "fake-model", KEY, max_concurrency=2, **FAST)
        prompts = ["one", "two", "bad", "four", "five", "six"]
        ticks: list[int] = []
        out = t.complete_many([ask(p) for p in prompts], progress=ticks.append)
    assert srv.max_in_flight == 2  # concurrent, and never more than allowed
    assert isinstance(out[2], RequestRejected) and isinstance(out[2], TargetError)
    assert [o.text for i, o in enumerate(out) if i != 2] == ["ONE", "TWO", "FOUR", "FIVE", "SIX"]
    assert all(isinstance(o, Completion) for i, o in enumerate(out) if i != 2)
    assert sum(ticks) == 6
    assert t.account.queries == 6 and t.account.failures == 1


def test_concurrency_bound_holds_across_caller_threads():
    with FakeOpenAIServer(api_key=KEY, responder=lambda body: Reply.completion("ok").after(0.1)) as srv:
        t = OpenAITarget(srv.base_url, "fake-model", KEY, max_concurrency=2, **FAST)
        workers = [threading.Thread(target=t.complete, args=(ask(str(i)),)) for i in range(5)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    assert srv.max_in_flight == 2 and t.account.queries == 5


def test_name_and_validation(server):
    t = OpenAITarget(server.base_url + "/", "fake-model", KEY)
    assert t.name == f"{server.base_url} · fake-model"
    with pytest.raises(ValueError):
        OpenAITarget("127.0.0.1:8000/v1", "m", KEY)
    with pytest.raises(ValueError):
        OpenAITarget(server.base_url, "m", KEY, max_concurrency=0)


def test_a_base_url_without_a_host_or_with_credentials_is_refused_and_its_query_never_named(server):
    """A URL is shown and stored: a secret inside it would be too (the key has its own field)."""
    from audit_core.target import target_config

    for bad, why in [("http://", "with a host"), ("http://[::1/v1", "with a host"),
                     ("https://user:hunter2pass@127.0.0.1:9/v1", "user name or password")]:
        with pytest.raises(ValueError, match=why) as err:
            OpenAITarget(bad, "m", KEY)
        assert "hunter2pass" not in str(err.value)
        with pytest.raises(ValueError, match=why):
            target_config({"type": "openai", "base_url": bad, "model": "m"})
    for bad_key in ("sk-abc\u00e9", "sk-a bc", "sk-\x07bc"):
        with pytest.raises(ValueError, match="characters no key has") as err:
            OpenAITarget(server.base_url, "m", bad_key)
        assert "sk-" not in str(err.value)
    assert OpenAITarget(server.base_url, "m", " sk-abc\n")._key.reveal() == "sk-abc"  # surrounding whitespace dropped
    t = OpenAITarget(server.base_url + "?api_key=sk-in-the-query", "fake-model", None)
    assert t.name == f"{server.base_url} · fake-model" and "sk-in-the-query" not in repr(t)


def test_an_endpoint_that_cites_sources_beside_the_message_is_read_where_the_file_says(server):
    """Azure OpenAI "on your data" puts citations in the message's context: sources_path reads them, secrets scrubbed."""
    from audit_core.target import target_config

    body = completion_body("The answer.", logprobs=False)
    body["choices"][0]["message"]["context"] = {"citations": [
        {"content": "Passage one of the knowledge base.", "title": "Doc 1", "url": None},
        {"content": f"A passage that quotes the key {KEY}.", "chunk_id": 0}]}
    _, cfg = target_config({"type": "openai", "base_url": server.base_url, "model": "fake-model",
                            "sources_path": "$.choices[0].message.context.citations"})
    cited = OpenAITarget.from_config(cfg, {"OPENAI_API_KEY": KEY})
    server.script(Reply.json(200, body))
    comp = cited.complete(ask())
    assert comp.sources == ["Passage one of the knowledge base.\nDoc 1", "A passage that quotes the key ***."]
    server.script(Reply.json(200, body))
    assert OpenAITarget(server.base_url, "fake-model", KEY).complete(ask()).sources is None  # not asked: not read
    with pytest.raises(ValueError, match="sources_path"):
        target_config({"type": "openai", "base_url": server.base_url, "model": "m", "sources_path": "$["})


def test_organization_and_project_are_not_read_from_the_environment(server, monkeypatch):
    """The openai client read OPENAI_ORG_ID / OPENAI_PROJECT_ID itself and sent them to any base URL."""
    monkeypatch.setenv("OPENAI_ORG_ID", "org-AcmeCorpInternal")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj_abc123")
    server.reset_stats()
    OpenAITarget(server.base_url, "fake-model", KEY).complete(ask())
    sent = [r for r in server.requests if r["path"].endswith("/chat/completions")][0]["header_names"]
    assert "authorization" in sent and "openai-organization" not in sent and "openai-project" not in sent


def test_a_key_echoed_late_in_an_error_is_scrubbed_before_the_message_is_cut(server):
    """Cut at 300 characters first, a key straddling the cut kept its first half in the message and the store."""
    for at in range(270, 300, 3):
        server.script(Reply.error(400, "x" * at + f" Authorization: Bearer {KEY}"))
        with pytest.raises(TargetError) as info:
            OpenAITarget(server.base_url, "fake-model", KEY, **FAST).complete(ask())
        assert KEY[:4] not in str(info.value), at


def test_a_key_echoed_json_escaped_or_short_in_an_error_is_masked():
    """An error body quoting the key as JSON escapes it ('\\/' for '/', as PHP writes it): the exact match missed
    it. A key under 8 characters was never masked, even in error text, where masking garbles nothing."""
    import json as _json

    slashed = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    for key, echo in ((slashed, _json.dumps({"detail": f"invalid key {slashed}"}).replace("/", "\\/")),
                      (slashed, f"upstream said: {_json.dumps({'key': slashed})}".replace("/", "\\/")),
                      ("k1z9", "invalid api key: k1z9")):
        with FakeOpenAIServer(api_key="the-right-key", models=["fake-model"]) as srv:
            srv.script(Reply(status=401, body=echo, content_type="text/plain"))
            with pytest.raises(AuthenticationFailed) as info:
                OpenAITarget(srv.base_url, "fake-model", key, **FAST).complete(ask())
            said = str(info.value)
            assert "K7MDENG" not in said and "k1z9" not in said, said
            assert said.startswith("the API key was rejected by") and "***" in said, said
            # a short key is masked in errors only: an answer keeps it (a placeholder key "1" for a local server)
            srv.script(Reply.json(200, completion_body("k1z9 stays in the answer", logprobs=False)))
            if key == "k1z9":
                assert OpenAITarget(srv.base_url, "fake-model", key).complete(ask()).text == "k1z9 stays in the answer"


def test_an_openai_target_file_reads_its_key_from_the_process_environment(server, monkeypatch):
    """from_config without an environment mapping (as the CLI calls it) failed with NameError: os."""
    from audit_core.target import create_target, target_config

    monkeypatch.setenv("MY_ENDPOINT_KEY", KEY)
    spec, cfg = target_config({"type": "openai", "base_url": server.base_url, "model": "fake-model",
                               "api_key_env": "MY_ENDPOINT_KEY"})
    assert create_target(spec, cfg).complete(ask()).text == "Hello there world"


def test_answers_read_with_a_sources_path_are_not_those_stored_without_one(server):
    """The identity was base URL and model only: answers stored without sources were reused, citing nothing."""
    plain = OpenAITarget(server.base_url, "fake-model", KEY)
    cited = OpenAITarget(server.base_url, "fake-model", KEY, sources_path="$.choices[0].message.context.citations")
    assert plain.name != cited.name and "sources" in cited.name and KEY not in cited.name


# --------------------------------------------------------------------------- hostile or broken answers


def _chat(target):
    from audit_core.target.base import ChatRequest

    return target.complete(ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4, logprobs=True,
                                       top_logprobs=2))


def test_answers_that_cannot_be_read_are_bad_responses_not_a_crash_of_the_audit(server, target):
    """A crash here ended the audit, and a resume sent the same request and crashed again."""
    deep = b'{"choices": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    huge = completion_body("Hello")
    huge["usage"]["prompt_tokens"] = float("inf")
    for reply in (Reply(body=deep), Reply.json(200, huge)):
        server.script(reply, reply, reply, reply)
        with pytest.raises(BadResponse):
            _chat(target)


def test_a_logprob_of_minus_infinity_for_the_token_produced_is_not_read_as_impossible(server, target):
    """Min-k% read exp(-inf) = 0 from it: a near-verbatim continuation, a member, scored as not found."""
    body = completion_body("Hello there")
    body["choices"][0]["logprobs"]["content"][1]["logprob"] = float("-inf")
    server.script(*[Reply.json(200, body)] * 4)
    with pytest.raises(BadResponse, match="infinite"):
        _chat(target)
    ruled_out = completion_body("Hello there")
    ruled_out["choices"][0]["logprobs"]["content"][0]["top_logprobs"][1]["logprob"] = float("-inf")
    server.script(Reply.json(200, ruled_out))
    comp = _chat(target)
    assert comp.tokens[0].top[-1][1] == -9999.0  # an alternative ruled out sorts last, as OpenAI reports it


@pytest.mark.parametrize("where, value", [("alternative", False), ("token", "-0.5"), ("usage", -1000000)])
def test_a_logprob_that_is_not_a_number_or_a_negative_token_count_is_a_bad_answer(server, target, where, value):
    """float() read a false alternative as logprob 0 (certain, ranked above the token produced) and "-0.5" as a
    number; a negative usage count took the account down (a review, session 61)."""
    body = completion_body("Hello there")
    if where == "alternative":
        body["choices"][0]["logprobs"]["content"][0]["top_logprobs"][1]["logprob"] = value
    elif where == "token":
        body["choices"][0]["logprobs"]["content"][0]["logprob"] = value
    else:
        body["usage"]["prompt_tokens"] = value
    server.script(*[Reply.json(200, body)] * 4)
    with pytest.raises(BadResponse):
        _chat(target)


def test_a_placeholder_key_does_not_garble_the_answers_and_a_cut_emoji_can_be_stored(tmp_path):
    from audit_core.store import Store
    from audit_core.target.caching import CachingTarget

    with FakeOpenAIServer(models=["fake-model"], reply_text="The tax on 1 Exxon share in 2011") as srv:
        placeholder = OpenAITarget(srv.base_url, "fake-model", "1", timeout_s=5, **FAST)
        comp = _chat(placeholder)
        assert comp.text == "The tax on 1 Exxon share in 2011" and "***" not in "".join(t.token for t in comp.tokens)
        srv.script(Reply.json(200, completion_body("Paris \ud83d", logprobs=False)))
        with Store(tmp_path / "s.sqlite") as store:
            cached = CachingTarget(OpenAITarget(srv.base_url, "fake-model", None, timeout_s=5, **FAST), store)
            from audit_core.target.base import ChatRequest

            [answer] = cached.complete_many([ChatRequest(messages=[{"role": "user", "content": "q"}], max_tokens=4)])
            assert answer.text == "Paris \ufffd"


def test_a_key_echoed_a_few_characters_per_token_is_not_kept(server, target):
    """Each token was scrubbed on its own: the key, split over four tokens, reached the store whole."""
    body = completion_body("Your key is X")
    pieces = [KEY[i:i + 5] for i in range(0, len(KEY), 5)]
    entry = body["choices"][0]["logprobs"]["content"][-1]
    body["choices"][0]["logprobs"]["content"][-1:] = [{**entry, "token": p, "top_logprobs": []} for p in pieces]
    body["choices"][0]["message"]["content"] = "Your key is " + KEY
    server.script(*[Reply.json(200, body)] * 4)
    with pytest.raises(BadResponse, match="echoed a secret in pieces"):
        _chat(target)


def test_a_key_sent_over_plain_http_to_another_machine_is_warned_about(caplog):
    with caplog.at_level(logging.WARNING):
        OpenAITarget("http://rag.example.com/v1", "m", KEY)
        OpenAITarget("http://127.0.0.1:9/v1", "m", KEY)  # this machine: nobody on the way
        OpenAITarget("http://rag.example.com/v1", "m", None)  # no key: nothing to read
    said = [r.getMessage() for r in caplog.records if "plain http" in r.getMessage()]
    assert said == ["http://rag.example.com/v1: the API key is sent over plain http; anyone on the way can read it"]
    assert KEY not in caplog.text


def test_an_answer_decompressing_past_the_cap_is_not_read_further(server, target):
    import gzip

    from audit_core.target.http_client import MAX_BODY_BYTES

    bomb = gzip.compress(json.dumps(completion_body("x" * (MAX_BODY_BYTES + 1024))).encode())
    server.script(*[Reply(body=bomb, headers={"Content-Encoding": "gzip"})] * 4)
    with pytest.raises(BadResponse, match="larger than 32 MiB"):
        _chat(target)


def test_an_answer_without_usage_is_counted_as_unreported_not_as_zero_tokens(server, target):
    """The account said "tokens: 0 prompt + 1 completion" for a service that reports no usage at all."""
    from audit_core.report import tokens_text

    target.complete(ask())
    body = completion_body("Hi")
    del body["usage"]
    server.script(Reply(body=body))
    comp = target.complete(ask())
    assert comp.usage.reported is False
    acc = target.account.as_dict()
    assert acc["unreported"] == 1 and acc["queries"] == 2
    assert tokens_text(acc).endswith("(1 of 2 answers did not report theirs)")
    assert Completion.from_json(comp.to_json()).usage.reported is False  # kept in the store
    assert Completion.from_json({"text": "x", "tokens": None, "usage": {"prompt_tokens": 3}}).usage.reported  # old rows
    assert tokens_text({"queries": 3, "failures": 1, "unreported": 2, "prompt_tokens": 0}) == "not reported by the target"
    assert tokens_text({"queries": 2, "prompt_tokens": 9, "completion_tokens": 4}) == "9 prompt + 4 completion"


def test_only_a_recorded_answer_without_logprobs_is_taken_back_from_the_failures():
    """The probe's refusal is taken back; a refusal made before sending (a target file without logprobs_path)
    was never recorded, so taking it back would hide another query's real failure."""
    from audit_core.target.base import QueryAccount

    acc = QueryAccount()
    acc.record(failed=True)
    acc.answered_after_all(NoLogprobs("refused before sending"))
    assert acc.failures == 1
    answered = NoLogprobs("answered without logprobs")
    answered.completion = object()
    acc.answered_after_all(answered)
    assert acc.failures == 0 and acc.queries == 1
