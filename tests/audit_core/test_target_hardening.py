"""The connectors against what a server, an environment or a typed address can throw at them (loopback only).

Each test is a defect that was reproduced: a key sent to a host nobody named for it, a key
left in a field or at the cut of an error body, one odd answer ending the whole audit, an
address that passed validation and failed later as "unexpected".
"""
from __future__ import annotations

import json

import pytest

from audit_core.target import TargetFileError, parse_target_file
from audit_core.target.base import AuthenticationFailed, BadResponse, ChatRequest, ServerError, check_service_url
from audit_core.target.http_api import HttpTarget, HttpTargetConfig
from audit_core.target.http_client import ERROR_BODY_BYTES, MAX_BODY_BYTES, SecretScrubber
from audit_core.target.openai_compat import OpenAITarget
from tests.fake_openai_server import FakeOpenAIServer, Reply, completion_body

KEY = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
ENV = {"SERVICE_KEY": KEY}
FAST = dict(backoff_base_s=0.01, backoff_cap_s=0.05)
#: a number Python's JSON parser refuses with a plain ValueError (more than 4300 digits)
HUGE_NUMBER = "1" + "0" * 5000


def ask(text: str = "hi") -> ChatRequest:
    return ChatRequest.chat([{"role": "user", "content": text}])


@pytest.fixture
def server():
    with FakeOpenAIServer(api_key=KEY, models=["fake-model"], reply_text="Hello there") as srv:
        yield srv


def _http(srv: FakeOpenAIServer, **changes) -> HttpTarget:
    cfg = HttpTargetConfig(url=f"http://127.0.0.1:{srv.port}/ask", body={"q": "{{prompt}}"},
                           answer_path="$.answer", headers={"X-Api-Key": "$SERVICE_KEY"}, timeout_s=5,
                           **changes)
    return HttpTarget(cfg, ENV, backoff_base_s=0.01, bad_response_retries=0)


# --------------------------------------------------------------------------- what the openai client reads itself

#: every header an OpenAI-compatible request may carry: HTTP's own, the key, and the client's streaming mark
SENT_HEADERS = {"host", "accept", "accept-encoding", "connection", "content-type", "content-length", "user-agent",
                "authorization", "x-stainless-raw-response"}


def _set_operator_environment(monkeypatch) -> None:
    """What an operator's shell may hold for their own OpenAI account or gateway."""
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "Authorization: Bearer sk-operator-OTHER-999999\n"
                                                "X-Corp-Token: CORPSECRET123456")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-AcmeCorpInternal")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj_abc123")
    monkeypatch.setenv("OPENAI_ADMIN_KEY", "sk-admin-OTHER-888888")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-OTHER-777777")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")


def test_the_openai_clients_environment_headers_never_reach_the_target(server, monkeypatch):
    """OPENAI_CUSTOM_HEADERS went to any base URL, and its Authorization line replaced the user's key."""
    _set_operator_environment(monkeypatch)
    target = OpenAITarget(server.base_url, "fake-model", KEY, **FAST)
    assert target.list_models() == ["fake-model"]
    assert target.complete(ask()).text == "Hello there"  # the server takes only KEY: the user's key was sent
    assert [r["path"] for r in server.requests] == ["/v1/models", "/v1/chat/completions"]  # to the URL given
    for request in server.requests:
        assert "x-corp-token" not in request["header_names"]
        assert set(request["header_names"]) <= SENT_HEADERS, request["path"]


def test_without_a_key_no_authorization_comes_from_the_environment(server, monkeypatch):
    _set_operator_environment(monkeypatch)
    with pytest.raises(AuthenticationFailed, match="none was given"):
        OpenAITarget(server.base_url, "fake-model", None, max_retries=0, **FAST).complete(ask())
    assert [r["has_auth"] for r in server.requests] == [False]
    assert set(server.requests[0]["header_names"]) <= SENT_HEADERS


# --------------------------------------------------------------------------- every field of an answer scrubbed


def test_a_key_echoed_in_the_model_or_finish_reason_is_scrubbed(server):
    """text and raw were scrubbed, model and finish_reason were not: the model reaches reports and history."""
    target = OpenAITarget(server.base_url, "fake-model", KEY, **FAST)
    server.script(Reply.completion("OK", model=f"m-for-{KEY}", finish_reason=f"stop:{KEY}"))
    comp = target.complete(ask())
    assert KEY not in comp.model and KEY not in comp.finish_reason
    assert comp.model == "m-for-***" and comp.finish_reason == "stop:***"
    server.script(Reply.json(200, {"data": [{"id": f"x-{KEY}"}]}), path="/v1/models")
    assert target.list_models() == ["x-***"]


# --------------------------------------------------------------------------- an error body cut in a key


@pytest.mark.parametrize("split", [1, 4, 12, len(KEY) - 1])
def test_a_key_split_by_the_cut_of_an_error_body_is_masked(split):
    """The error body is read to 64 KiB: a key across that cut kept its first half, which no longer matched."""
    body = " " * (ERROR_BODY_BYTES - split) + KEY + " rejected"
    with FakeOpenAIServer() as srv:
        srv.script(Reply(status=401, body=body, content_type="text/plain"), path="/ask")
        with pytest.raises(AuthenticationFailed) as info:
            _http(srv).complete(ask())
    assert str(info.value).endswith("(HTTP 401): ***")


def test_the_cut_masks_only_an_end_that_begins_a_secret():
    scrub = SecretScrubber([KEY, "x"])
    assert scrub.cut_end(b"said: " + KEY[:7].encode()) == b"said: ***"
    assert scrub.cut_end(b"said: " + KEY.encode()) == b"said: ***"
    assert scrub.cut_end(b'"key": "' + KEY[:20].replace("/", "\\/").encode()) == b'"key": "***'
    assert scrub.cut_end(b"nothing to see") == b"nothing to see"
    assert SecretScrubber([]).cut_end(b"sk-") == b"sk-"


# --------------------------------------------------------------------------- one odd answer fails one request


def test_a_number_too_long_to_parse_is_a_bad_answer_not_a_crash(server):
    """json.loads raises a plain ValueError past 4300 digits; it escaped complete() and ended the audit."""
    with FakeOpenAIServer() as srv:
        srv.script(*[Reply(body='{"answer": "hi", "n": %s}' % HUGE_NUMBER)] * 2, path="/ask")
        target = _http(srv)
        with pytest.raises(BadResponse, match="number longer than the 4300 digits"):
            target.complete(ask())
        assert isinstance(target.complete_many([ask()])[0], BadResponse)
    body = '{"choices": [{"message": {"content": "OK"}, "finish_reason": "stop"}], "n": %s}' % HUGE_NUMBER
    server.script(Reply(body=body))
    with pytest.raises(BadResponse, match="number longer"):
        OpenAITarget(server.base_url, "fake-model", KEY, bad_response_retries=0, **FAST).complete(ask())


def test_a_sources_path_that_cannot_be_applied_is_a_bad_answer_naming_it(server):
    """A sort over values of mixed types raised TypeError out of complete(); answer_path's errors did not."""
    mixed = [{"score": "high", "text": "a"}, {"score": 1, "text": "b"}]
    with FakeOpenAIServer() as srv:
        srv.script(Reply.json(200, {"answer": "hi", "sources": mixed}), path="/ask")
        with pytest.raises(BadResponse, match=r"sources_path could not be applied .*\(TypeError\)"):
            _http(srv, sources_path="$.sources[/score]").complete(ask())
    body = completion_body("OK", logprobs=False)
    body["sources"] = mixed
    server.script(Reply.json(200, body))
    target = OpenAITarget(server.base_url, "fake-model", KEY, sources_path="$.sources[/score]",
                          bad_response_retries=0, **FAST)
    with pytest.raises(BadResponse, match="sources_path"):
        target.complete(ask())


# --------------------------------------------------------------------------- addresses that could only fail later


@pytest.mark.parametrize("url, message", [
    ("http://127.0.0.1:8000/ask\r", "'\\r'"),  # read with its line end from a CRLF file
    ("http://127.0.0.1:8000/ask?token=sk-live-abcdef1234567890\n", "'\\n'"),
    ("http://127.0.0.1:8000/o\tk", "'\\t'"),
    ("http://127.0.0.1:8000/ok\x00", "'\\x00'"),
    ("https://ex\u200bample.com/v1", "zero width space"),
    ("https://" + "a" * 70 + ".example.com/v1", "not a valid host name"),
    ("https://api..example.com/v1", "not a valid host name"),
    ("https://\u2615.example.com/v1", "not a valid host name"),
])
def test_an_address_that_no_request_can_use_is_refused_in_words(url, message):
    with pytest.raises(ValueError, match="holds a character|not a valid host name") as info:
        check_service_url(url, "url")
    assert message in str(info.value) and "abcdef1234567890" not in str(info.value)
    with pytest.raises(ValueError, match="base_url"):
        OpenAITarget(url, "m", KEY)
    with pytest.raises(TargetFileError, match="url"):
        parse_target_file(json.dumps({"type": "http", "url": url, "body": {"q": "{{prompt}}"}, "answer_path": "$.a"}))
    for fine in ("https://m\u00fcnchen.example/v1", "http://[::1]:8000/v1", "http://localhost:1/",
                 "https://api.example.com./v1", "https://a_b.example.com/v1"):  # what works is not refused
        check_service_url(fine, "url")


# --------------------------------------------------------------------------- an error body the openai client reads


def test_an_openai_error_body_is_read_only_as_far_as_it_is_quoted(server):
    """The openai client read a 500's body whole: a gzip body of 0.25 MiB took gigabytes of memory to read."""
    import tracemalloc
    import zlib

    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip; 256 MiB of x compress to about 0.25 MiB
    bomb = packer.compress(b"engine overloaded ") + b"".join(packer.compress(b"x" * 2 ** 20) for _ in range(256))
    bomb += packer.flush()
    server.script(Reply(status=500, body=bomb, headers={"Content-Encoding": "gzip"}, content_type="text/plain"))
    target = OpenAITarget(server.base_url, "fake-model", KEY, max_retries=0, **FAST)
    tracemalloc.start()
    try:
        with pytest.raises(ServerError, match="HTTP 500: engine overloaded x"):
            target.complete(ask())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_BODY_BYTES  # one network chunk may decode to tens of MiB; the body is 256 MiB
    # cut there, a key the cut splits is masked as in the generic connector's error bodies
    server.script(Reply(status=401, body=" " * (ERROR_BODY_BYTES - 9) + KEY, content_type="text/plain"))
    with pytest.raises(AuthenticationFailed) as info:
        target.complete(ask())
    assert KEY[:9] not in str(info.value) and str(info.value).endswith("***")


@pytest.mark.parametrize("status", [200, 500])
def test_a_body_compressed_twice_is_not_decoded(status):
    """httpx decodes every layer a server names, a network chunk whole before the size cap counts it: two gzip
    layers took an 822-byte body to 400 MiB (a review, session 61). One layer is read; two are refused."""
    import gzip
    import tracemalloc

    inner = gzip.compress(b'{"answer": "' + b"x" * 64 * 2 ** 20 + b'"}', 9)  # 64 MiB as about 64 KiB
    twice = gzip.compress(inner, 9)  # and that as a few hundred bytes
    with FakeOpenAIServer() as srv:
        srv.script(Reply(status=status, body=twice, headers={"Content-Encoding": "gzip, gzip"}), path="/ask")
        tracemalloc.start()
        try:
            with pytest.raises((BadResponse, ServerError)) as exc:
                _http(srv, max_retries=0).complete(ask())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < MAX_BODY_BYTES and "xxxx" not in str(exc.value)
        if status == 200:
            assert "compressed its answer as 'gzip, gzip'" in str(exc.value)
        srv.script(Reply(body=gzip.compress(b'{"answer": "one layer"}'), headers={"Content-Encoding": "gzip"}),
                   path="/ask")
        assert _http(srv).complete(ask()).text == "one layer"


def test_only_a_loopback_address_or_localhost_is_this_machine():
    """"127.attacker.example" passed as this machine: a key sent to it over plain http drew no warning."""
    from audit_core.target.http_client import is_loopback

    for url in ("http://127.0.0.1:8000/v1", "http://127.8.9.10/ask", "http://localhost:1/x", "http://[::1]:80/v1"):
        assert is_loopback(url), url
    for url in ("http://127.attacker.example/v1", "http://127.0.0.1.nip.io/v1", "http://10.0.0.1/v1", "not a url"):
        assert not is_loopback(url), url
