"""The generic HTTP target against loopback servers: the http-custom API over a stub system, and a scripted one.

No model is loaded: the custom API (shadow.serve_custom) serves a stub that
answers from a fixed script and records what it was asked.
"""
from __future__ import annotations

import argparse
import logging
import time
from dataclasses import replace
from pathlib import Path

import pytest

from audit_core.target import TargetFileError, create_target, load_target_file, parse_target_file
from audit_core.target.base import (AuthenticationFailed, BadResponse, ChatRequest, Completion, NoLogprobs,
                                    RateLimited, ServerError, Target, TokenLogprob, Unreachable,
                                    Usage)
from audit_core.target.http_api import HttpTarget, HttpTargetConfig, RedirectRefused
from shadow.serve import serve_in_thread
from tests.fake_openai_server import FakeOpenAIServer, Reply

ROOT = Path(__file__).resolve().parents[2]
KEY = "k3y-for-the-loopback-7f3a9c"
ENV = {"RPA_SERVE_API_KEY": KEY}


class _Record:
    def __init__(self, doc_ids):
        self.doc_ids = doc_ids


class StubRag(Target):
    """Answers "The lighthouse keeper" token by token, with logprobs when asked; records requests."""

    TOKENS = ["The", " light", "house", " keeper", f" {KEY}"]  # a server that echoes the key
    #: the passages the custom API cites as sources (one echoes the key too)
    documents = {"doc-7": f"The lighthouse keeper logged every ship. {KEY}", "doc-2": "Ships pass the point at dawn."}

    def __init__(self):
        super().__init__()
        self.requests: list[ChatRequest] = []
        self.last_retrieval = None

    def complete(self, request: ChatRequest) -> Completion:
        self.requests.append(request)
        self.last_retrieval = _Record(["doc-7", "doc-2"])
        toks = self.TOKENS[:request.max_tokens]
        tokens = None
        if request.logprobs:
            tokens = [TokenLogprob(t, -0.1 * (i + 1), [(t, -0.1 * (i + 1)), ("x", -3.0)][:max(1, request.top_logprobs)])
                      for i, t in enumerate(toks)]
        return Completion("".join(toks), tokens, Usage(10, len(toks)))


@pytest.fixture(scope="module")
def custom():
    rag = StubRag()
    url, stop = serve_in_thread(rag, api_key=KEY, api="custom")
    yield url, rag
    stop()


def _target(url: str, file: str = "http_custom.yaml", env=ENV, **changes) -> HttpTarget:
    spec, cfg = load_target_file(ROOT / "assets" / "targets" / file)
    cfg = replace(cfg, url=url + "/ask", **changes)
    return create_target(spec, cfg, env)


def _chat(system: str | None = None, **kw) -> ChatRequest:
    msgs = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": 'Complete: "The lighthouse'}]
    return ChatRequest.chat(msgs, **kw)


def test_body_template_is_filled_and_answer_and_logprobs_are_read(custom):
    url, rag = custom
    t = _target(url)
    comp = t.complete(_chat("Answer from the context.", max_tokens=4, logprobs=True, top_logprobs=2))
    assert comp.usage.reported is False and t.account.as_dict()["unreported"] == 1  # the API says no usage
    sent = rag.requests[-1]
    # the prompt with its quote went through JSON intact; system, max_tokens, logprobs as typed values
    assert sent.messages == (("system", "Answer from the context."), ("user", 'Complete: "The lighthouse'))
    assert sent.max_tokens == 4 and sent.logprobs and sent.top_logprobs == 2 and sent.temperature == 0.0
    assert comp.text == "The lighthouse keeper"
    assert [tk.token for tk in comp.tokens] == ["The", " light", "house", " keeper"]
    assert comp.tokens[1].logprob == pytest.approx(-0.2) and comp.tokens[1].top[1] == ("x", -3.0)
    assert [src["id"] for src in comp.raw["sources"]] == ["doc-7", "doc-2"]
    # sources_path names the list; each object's text fields are read, the key scrubbed from them
    assert comp.sources == ["doc-7\nThe lighthouse keeper logged every ship. ***", "doc-2\nShips pass the point at dawn."]
    assert t.account.queries == 1 and t.account.failures == 0


def test_system_text_goes_before_the_prompt_when_the_template_has_no_system_placeholder(custom):
    url, rag = custom
    spec, cfg = load_target_file(ROOT / "assets" / "targets" / "http_custom.yaml")
    body = {k: v for k, v in cfg.body.items() if k != "system"}
    t = create_target(spec, replace(cfg, url=url + "/ask", body=body), ENV)
    t.complete(_chat("Be brief.", max_tokens=2))
    assert rag.requests[-1].messages == (("user", 'Be brief.\n\nComplete: "The lighthouse'),)


def test_env_secret_is_sent_and_never_shown(custom, caplog):
    url, _ = custom
    caplog.set_level(logging.DEBUG)
    t = _target(url)
    comp = t.complete(_chat(max_tokens=5, logprobs=True, top_logprobs=1))
    # the server echoed the key in the answer and in a token: scrubbed everywhere we keep it
    assert comp.text.endswith("***") and comp.tokens[-1].token == " ***"
    shown = [repr(t), str(t), t.name, str(vars(t)), str(comp.raw), str(comp.to_json()), caplog.text]
    assert not any(KEY in s for s in shown)
    assert "$RPA_SERVE_API_KEY" in open(ROOT / "assets" / "targets" / "http_custom.yaml").read()
    # stored answers are keyed by a slow salted hash of the secrets: per tenant, never the key itself
    cred = t.credential_id(b"salt")
    assert cred and KEY not in cred and cred != _target(url, env={"RPA_SERVE_API_KEY": "other"}).credential_id(b"salt")
    import hashlib
    import hmac

    # not a fast hash that the salt beside it would let anyone test password guesses against
    assert cred != hmac.new(b"salt", KEY.encode(), hashlib.sha256).hexdigest()[:32]
    import json

    named = json.dumps([["x-api-key", KEY]])  # each header read from the environment, by name (session 61)
    assert cred == hashlib.scrypt(named.encode(), salt=b"salt", n=2 ** 14, r=8, p=1, dklen=16).hex()
    assert t.credential_id(b"salt") == cred and t.credential_id(b"other salt") != cred  # per store
    # a wrong key: the typed error, without either key in it
    bad = _target(url, env={"RPA_SERVE_API_KEY": "wrong-key-123456"})
    with pytest.raises(AuthenticationFailed) as exc:
        bad.complete(_chat(max_tokens=1))
    assert "HTTP 401" in str(exc.value) and "wrong-key-123456" not in str(exc.value) and KEY not in str(exc.value)
    # an unset variable is named, before anything is sent
    with pytest.raises(AuthenticationFailed, match=r"\$RPA_SERVE_API_KEY.*not set"):
        _target(url, env={})


def test_sse_mode_concatenates_events_and_their_logprobs(custom):
    url, rag = custom
    t = _target(url, "http_custom_stream.yaml")
    comp = t.complete(_chat(max_tokens=4, logprobs=True, top_logprobs=1))
    assert comp.text == "The lighthouse keeper"
    assert [tk.token for tk in comp.tokens] == ["The", " light", "house", " keeper"]
    assert len(comp.raw["events"]) == 5 and [s["id"] for s in comp.raw["events"][-1]["sources"]] == ["doc-7", "doc-2"]
    assert comp.sources == ["doc-7\nThe lighthouse keeper logged every ship. ***", "doc-2\nShips pass the point at dawn."]
    text_only = t.complete(_chat(max_tokens=3))
    assert text_only.text == "The lighthouse" and text_only.tokens is None


def test_sources_are_read_only_where_the_file_says_and_a_missing_field_is_not_an_empty_list(custom):
    from audit_core.target.jsonpaths import source_text

    url, _ = custom
    assert _target(url, sources_path=None).complete(_chat(max_tokens=1)).sources is None
    assert _target(url, sources_path="$.citations").complete(_chat(max_tokens=1)).sources is None  # no such field
    assert _target(url, sources_path="$.sources[*].id").complete(_chat(max_tokens=1)).sources == ["doc-7", "doc-2"]
    assert source_text({"title": "A post", "page": 3, "meta": {"url": "https://x.example/p/1", "score": 0.9}}) == \
        "A post\nhttps://x.example/p/1"
    assert not _target(url, sources_path=None).capabilities().sources
    with pytest.raises(ValueError, match="sources_path"):
        _target(url, sources_path="$[")


def test_capability_probe_reports_logprobs_only_when_a_path_is_configured(custom):
    url, _ = custom
    caps = _target(url).capabilities()
    assert caps.reachable and caps.logprobs and caps.max_top_logprobs == 2 and caps.sources
    text_only = _target(url, logprobs_path=None)
    caps = text_only.capabilities()
    assert caps.reachable and not caps.logprobs and "logprobs_path" in caps.detail
    sent = text_only.account.queries
    with pytest.raises(NoLogprobs):  # refused before sending: it could not be read
        text_only.complete(_chat(max_tokens=1, logprobs=True))
    assert text_only.account.queries == sent
    # a path the answers lack: the probe's answer came without logprobs, which is what it asked to find out
    unread = _target(url, logprobs_path="$.no_such_field")
    caps = unread.capabilities()
    assert caps.reachable and not caps.logprobs and "without logprobs" in caps.detail
    assert unread.account.queries >= 1 and unread.account.failures == 0


def _scripted(srv: FakeOpenAIServer, **changes) -> HttpTarget:
    cfg = HttpTargetConfig(url=f"http://127.0.0.1:{srv.port}/ask", body={"q": "{{prompt}}"},
                           answer_path="$.data.answer", headers={"X-Api-Key": "$RPA_SERVE_API_KEY"},
                           timeout_s=5, **changes)
    return HttpTarget(cfg, ENV, backoff_base_s=0.01)


def test_429_is_retried_after_the_servers_retry_after():
    with FakeOpenAIServer() as srv:
        srv.script(Reply.error(429, "slow down", headers={"Retry-After": "0.6"}),
                   Reply.json(200, {"data": {"answer": "fine"}}), path="/ask")
        t = _scripted(srv)
        t0 = time.monotonic()
        comp = t.complete(_chat())
        assert comp.text == "fine" and time.monotonic() - t0 >= 0.6
        assert t.account.retries == 1 and len(srv.requests) == 2
        # a status not in retry_on is not sent again
        srv.script(Reply.error(429, "slow down"), path="/ask")
        with pytest.raises(RateLimited):
            _scripted(srv, retry_on=(503,)).complete(_chat())
        assert len(srv.requests) == 3


def test_a_redirect_to_another_port_does_not_carry_the_secret():
    with FakeOpenAIServer() as other, FakeOpenAIServer() as srv:
        elsewhere = f"http://127.0.0.1:{other.port}/ask"
        srv.script(Reply.json(307, {}, headers={"Location": elsewhere}), path="/ask")
        with pytest.raises(RedirectRefused, match=f"127.0.0.1:{other.port}/ask.*not followed"):
            _scripted(srv).complete(_chat())
        assert other.requests == []
        assert "x-api-key" in srv.requests[0]["header_names"]
        # the same origin is followed, with the key
        srv.script(Reply.json(308, {}, headers={"Location": "/v2/ask"}), path="/ask")
        srv.script(Reply.json(200, {"data": {"answer": "moved"}}), path="/v2/ask")
        assert _scripted(srv).complete(_chat()).text == "moved"
        assert "x-api-key" in srv.requests[-1]["header_names"] and srv.requests[-1]["path"] == "/v2/ask"


def test_bad_answers_are_bad_responses_with_a_clear_message():
    with FakeOpenAIServer() as srv:
        srv.script(*[Reply.json(200, {"result": "hi"})] * 3, path="/ask")
        with pytest.raises(BadResponse, match=r"answer_path \$\.data\.answer matched nothing.*top level: result"):
            _scripted(srv).complete(_chat())
        srv.script(*[Reply.malformed()] * 3, path="/ask")
        with pytest.raises(BadResponse, match="not valid JSON"):
            _scripted(srv).complete(_chat())


@pytest.mark.parametrize("text, message", [
    ("type: http\nurl: http://h/ask\nbody: {q: '{{prompt}}'}\nanswer_path: '$.[['", "not a valid JSONPath"),
    ("type: http\nurl: http://h/ask\nbody: {q: hi}\nanswer_path: $.a", "{{prompt}}"),
    ("type: http\nurl: http://h/ask\nbody: {q: '{{question}}'}\nanswer_path: $.a", "unknown placeholder"),
    ("type: http\nurl: http://h/ask?k=$KEY\nbody: {q: '{{prompt}}'}\nanswer_path: $.a", "put the key in a header"),
    ("type: http\nurl: http://h/ask\nbody: {q: '{{prompt}}'}\nanswer_path: $.a\ntimeout: 3", "did you mean 'timeout_s'"),
    ("type: http\nurl: http://h/ask\nbody: {q: '{{prompt}}'}\nanswer_path: $.a\nretry_on: 429", "must be a list"),
    ("type: http\nurl: http://h/ask\nbody: {q: '{{prompt}}'}", "answer_path is required"),
    ("type: grpc\nurl: x", "unknown target type 'grpc'"),
    ("url: [unclosed", "not valid YAML or JSON"),
    ("type: http\n? [a, b]\n: 1\n", "uses a list or mapping as a key"),
    ("[" * 3000, "nested too deeply"),
    ("type: http\nurl: http://h:+443/ask\nbody: {q: '{{prompt}}'}\nanswer_path: $.a", "plain digits"),
    ("type: http\nurl: http://h/ask\nurl: http://other/ask\nbody: {q: '{{prompt}}'}\nanswer_path: $.a",
     "the key 'url' is given twice"),
    ("type: http\nurl: http://h/ask\nbody: {q: '{{prompt}}', k: $MY_KEY}\nanswer_path: $.a", "would be sent as written"),
    ("type: http\nurl: http://h/ask\nbody: {q: '{{prompt}}', '{{system}}': x}\nanswer_path: $.a", "not in field names"),
    ("type: openai\nbase_url: http://h/v1\nmodel: ''", "model must name"),
    ("type: openai\nbase_url: http://h/v1\nmodel: m\ntimeout_s: -1", "timeout_s must be a positive"),
    ("type: openai\nbase_url: http://h/v1\nmodel: m\ntimeout_s: 1.0e+300", "at most 3600"),
    ("type: openai\nbase_url: http://h/v1\nmodel: m\ntimeout_s: 1e3", "write 1000 or 1.0e+3"),
    ("type: http\nurl: http://h/ask\nbody: {q: '{{prompt}}'}\nanswer_path: $.a\nheaders:\n  Authorization: |\n"
     "    Bearer sk-live-abcdef1234567890\n", "holds a line break"),
    ("type: http\nurl: http://h/ask\nbody: {q: '{{prompt}}'}\nanswer_path: $.a\nheaders:\n"
     "  Authorization: Bearer sk-live-abcdef1234567890\n", "holds its credential in the file"),
    ("type: http\nurl: http://h/ask\nbody: {q: '{{prompt}}'}\nanswer_path: $.a\nheaders:\n"
     "  X-Api-Key: sk-live-abcdef1234567890\n", "write it as $NAME"),
    ("type: http\nurl: http://h/ask\nbody: {q: '{{prompt}}'}\nanswer_path: $.a\nheaders: {'X Key:': v}",
     "not a valid HTTP header name"),
    ("type: http\nurl: http://h/ask\nbody: {q: '{{prompt}}'}\nanswer_path: $.a\nheaders: {X-Name: 'Zo\u00eb'}",
     "non-ASCII"),
    ("type: http\nurl: http://h/ask\nbody: {q: '{{prompt}}', since: 2024-01-01}\nanswer_path: $.a",
     "cannot be sent as JSON"),
    ("type: http\nurl: http://h/ask\nbody: {q: '{{prompt}}', since: 2024-02-30}\nanswer_path: $.a",
     "quote it to send it as text"),
    ("type: http\nurl: http://h/ask\nbody: {q: '{{prompt}}'}\nanswer_path: $.a\ntimeout_s: 1" + "0" * 400,
     "far too large"),
    ("type: http\nname: !!float abc\nurl: http://h/ask\nbody: {q: '{{prompt}}'}\nanswer_path: $.a",
     "quote it to send it as text"),
    ("type: openai\nbase_url: http://h/v1\nmodel: m\ntimeout_s: .nan", "timeout_s must be a positive"),
    ("type: http\nurl: http://h/ask\nbody: {q: '{{prompt}}'}\nanswer_path: $.a\ntimeout_s: .inf",
     "timeout_s must be a positive"),

    # a type error names the kind of value only: the value may be a key (headers written as one line)
    ("type: http\nurl: http://h/ask\nbody: {q: '{{prompt}}'}\nanswer_path: $.a\n"
     "headers: 'Authorization: Bearer sk-live-abcdef1234567890'", "'headers' must be a mapping, got text"),
    ("type: openai\nbase_url: http://h/v1\nmodel: [sk-live-abcdef1234567890]", "'model' must be text, got a list"),
    ("type: openai\nbase_url: http://h/v1\nmodel: m\napi_key_env: {k: sk-live-abcdef1234567890}",
     "got a mapping"),
])
def test_bad_target_files_get_clear_messages(text, message):
    with pytest.raises(TargetFileError) as exc:
        parse_target_file(text)
    assert message in str(exc.value)
    assert "abcdef1234567890" not in str(exc.value)  # a key written in the file is never repeated


def test_a_target_file_keeps_harmless_literal_headers_and_refuses_aliases_and_other_encodings():
    """Literal values that are no credential stay (an API version, a short tenant); YAML aliases, which let a
    400-byte file grow into 10^8 values decoded again on every rerun, are refused; a file in another encoding
    is refused, not decoded with replacement characters that every request would then send."""
    from audit_core.target import target_file_text

    ok = ("type: http\nurl: http://h/ask\nbody: {q: '{{prompt}}'}\nanswer_path: $.a\nheaders:\n"
          "  X-Api-Key-Version: '2024-06-01'\n  X-Tenant: acme\n  Authorization: Bearer $MY_KEY\n  X-Name: Zoe\n")
    assert parse_target_file(ok)[1].headers["X-Api-Key-Version"] == "2024-06-01"
    bomb = ("type: http\nurl: http://h/ask\nanswer_path: $.a\nbody:\n  q: '{{prompt}}'\n  a0: &a0 [x, x]\n"
            "  a1: &a1 [*a0, *a0]\n")
    with pytest.raises(TargetFileError, match="aliases"):
        parse_target_file(bomb)
    french = "type: http\nurl: http://h/ask\nbody: {q: 'Réponds en français: {{prompt}}'}\nanswer_path: $.a\n"
    with pytest.raises(TargetFileError, match="not UTF-8 text"):
        target_file_text(french.encode("cp1252"), "t.yaml")
    for data in (french.encode("utf-8"), b"\xef\xbb\xbf" + french.encode("utf-8"), french.encode("utf-16")):
        assert "Réponds en français" in parse_target_file(target_file_text(data))[1].body["q"]


def test_cli_audits_through_a_target_file(custom, tmp_path, monkeypatch, capsys):
    """--target-file reaches the target (estimate-only stops before any query; a bad file is a clear error)."""
    from app.cli import main

    docs = tmp_path / "docs.csv"
    docs.write_text("id,text\na," + " ".join(f"word{i}" for i in range(120)) + "\n")
    bad = tmp_path / "t.yaml"
    bad.write_text("type: http\nurl: http://127.0.0.1:1/ask\nbody: {q: hi}\nanswer_path: $.a\n")
    rc = main(["audit", "--target-file", str(bad), "--docs", str(docs), "--method", "mba",
               "--store", str(tmp_path / "s.sqlite")])
    assert rc == 2 and "{{prompt}}" in capsys.readouterr().err
    shipped = str(ROOT / "assets/targets/http_custom.yaml")
    rc = main(["audit", "--target-file", shipped, "--docs", str(docs), "--method", "mba", "--estimate-only"])
    assert rc == 0 and "estimated cost" in capsys.readouterr().err
    # the target the CLI builds from the file, with the key from the environment
    from app.cli import _target

    monkeypatch.setenv("RPA_SERVE_API_KEY", KEY)
    t = _target(argparse.Namespace(target_file=shipped, target=None, allow_env=["RPA_SERVE_API_KEY"]))
    assert isinstance(t, HttpTarget) and t.url == "http://127.0.0.1:8100/ask" and KEY not in t.name
    assert t._headers.reveal()["X-Api-Key"] == KEY
    with pytest.raises(ValueError, match=r"\$RPA_SERVE_API_KEY .*--allow-env RPA_SERVE_API_KEY"):
        _target(argparse.Namespace(target_file=shipped, target=None, allow_env=None))


def test_custom_api_takes_one_key_per_client():
    url, stop = serve_in_thread(StubRag(), api_key=["first-client-key-1", KEY], api="custom")
    try:
        assert _target(url).complete(_chat(max_tokens=1)).text == "The"
        assert _target(url, env={"RPA_SERVE_API_KEY": "first-client-key-1"}).complete(_chat(max_tokens=1)).text == "The"
        with pytest.raises(AuthenticationFailed):
            _target(url, env={"RPA_SERVE_API_KEY": "third-key"}).complete(_chat(max_tokens=1))
    finally:
        stop()


@pytest.mark.parametrize("cites", [True, False])
def test_the_cli_offers_cited_sources_only_for_a_target_that_lists_its_sources(cites, custom, tmp_path,
                                                                                monkeypatch, capsys):
    """After the capability probe, the CLI hints at --method cited_sources where the answers carry sources."""
    import audit_core.audit
    from app.cli import main

    url, _ = custom
    text = (ROOT / "assets/targets/http_custom.yaml").read_text().replace("http://127.0.0.1:8100/ask", url + "/ask")
    if not cites:
        text = "\n".join(line for line in text.splitlines() if not line.startswith("sources_path"))
    file = tmp_path / "t.yaml"
    file.write_text(text)
    docs = tmp_path / "docs.csv"
    docs.write_text("id,text\na," + " ".join(f"word{i}" for i in range(60)) + "\n")

    def stop(*a, **kw):
        raise ValueError("stopped before the audit")

    monkeypatch.setattr(audit_core.audit, "run_audit", stop)
    monkeypatch.setenv("RPA_SERVE_API_KEY", KEY)
    rc = main(["audit", "--target-file", str(file), "--allow-env", "RPA_SERVE_API_KEY", "--docs", str(docs),
               "--method", "verbatim", "--store", str(tmp_path / "s.sqlite")])
    err = capsys.readouterr().err
    assert rc == 3 and "stopped before the audit" in err
    assert ("add --method cited_sources" in err) is cites


def test_a_secret_that_cannot_go_into_a_header_is_refused_by_name_without_its_value():
    """A key pasted with a line break or a typographic quote: httpx quoted it in its error, which was stored."""
    for bad in ("sk-live-ABCDEF123456\r\nX: y", "sk-live-ABC\u201dDEF123456", "sk live ABCDEF123456"):
        cfg = HttpTargetConfig(url="http://127.0.0.1:9/ask", body={"q": "{{prompt}}"}, answer_path="$.a",
                               headers={"Authorization": "Bearer $RAG_KEY"})
        with pytest.raises(AuthenticationFailed) as exc:
            HttpTarget(cfg, {"RAG_KEY": bad})
        assert "$RAG_KEY" in str(exc.value) and "ABCDEF" not in str(exc.value) and "DEF123456" not in str(exc.value)
    # a trailing line break (echo "$KEY" > file) is stripped, not refused
    ok = HttpTarget(cfg, {"RAG_KEY": "sk-live-ABCDEF123456\n"})
    assert ok._headers.reveal()["Authorization"] == "Bearer sk-live-ABCDEF123456"


@pytest.mark.parametrize("value, hint", [("Bearer $RAG-KEY", "${RAG}-KEY"), ("$my-api-key", "my_api_key")])
def test_a_variable_name_with_a_hyphen_is_refused_instead_of_sending_its_tail_after_another_variable(value, hint):
    """"$RAG-KEY" reads $RAG and sends "-KEY" after it: with RAG set for something else, that value went out as
    the key. The file is refused before anything is read from the environment, saying both ways out."""
    with pytest.raises(ValueError) as exc:
        HttpTargetConfig(url="http://127.0.0.1:9/ask", body={"q": "{{prompt}}"}, answer_path="$.a",
                         headers={"Authorization": value})
    assert hint in str(exc.value) and "letters, digits and _ only" in str(exc.value)
    for fine in ("Bearer ${RAG}-KEY", "Bearer $RAG_KEY", "$$RAG-KEY", "Bearer $RAG - x"):
        HttpTargetConfig(url="http://127.0.0.1:9/ask", body={"q": "{{prompt}}"}, answer_path="$.a",
                         headers={"Authorization": fine})


def test_a_key_the_server_echoes_is_scrubbed_before_its_message_is_cut():
    """Cut first, the key's first half no longer matched and stayed in the error (and the store)."""
    long_key = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
    env = {"RPA_SERVE_API_KEY": long_key}
    with FakeOpenAIServer() as srv:
        for at in range(280, 300, 4):
            echo = "x" * at + f"Authorization: Bearer {long_key}"
            srv.script(Reply(status=500, body=echo, content_type="text/plain"), path="/ask")
            cfg = HttpTargetConfig(url=f"http://127.0.0.1:{srv.port}/ask", body={"q": "{{prompt}}"},
                                   answer_path="$.a", headers={"X-Api-Key": "$RPA_SERVE_API_KEY"}, timeout_s=5,
                                   retry_on=())
            with pytest.raises(ServerError) as exc:
                HttpTarget(cfg, env).complete(_chat())
            assert "sk-proj-AbCd" not in str(exc.value), at
            srv.script(Reply(status=200, body="y" * 100 + long_key, content_type="text/plain"), path="/ask")
            with pytest.raises(BadResponse) as exc:
                HttpTarget(cfg, env, bad_response_retries=0).complete(_chat())
            assert "sk-proj" not in str(exc.value)


def test_an_answer_path_that_finds_an_object_or_a_number_is_not_read_as_text():
    """An object read as its JSON text made a chat model look like one that continues text."""
    with FakeOpenAIServer() as srv:
        for found, said in (({"role": "assistant", "content": "Sure!"}, "an object"), (42, "a number"),
                            ([], "a list")):
            srv.script(*[Reply.json(200, {"data": {"answer": found}})] * 3, path="/ask")
            with pytest.raises(BadResponse, match=f"found {said}.*not text"):
                _scripted(srv).complete(_chat())
        srv.script(Reply.json(200, {"data": {"answer": None}}), path="/ask")
        assert _scripted(srv).complete(_chat()).text == ""  # null: an empty answer, a non-answer downstream


def test_short_header_values_are_not_scrubbed_out_of_answers():
    """A tenant "a" masked every a in every answer; values of key length still are."""
    with FakeOpenAIServer() as srv:
        srv.script(Reply.json(200, {"data": {"answer": f"a patient was admitted. {KEY}"}}), path="/ask")
        cfg = HttpTargetConfig(url=f"http://127.0.0.1:{srv.port}/ask", body={"q": "{{prompt}}"},
                               answer_path="$.data.answer", timeout_s=5,
                               headers={"X-Tenant": "$TENANT", "X-Api-Key": "$RPA_SERVE_API_KEY"})
        text = HttpTarget(cfg, {"TENANT": "a", **ENV}).complete(_chat()).text
    assert text == "a patient was admitted. ***"


def _sse(*events: str) -> Reply:
    return Reply(status=200, body="".join(events), content_type="text/event-stream")


def test_a_stream_that_breaks_off_with_an_error_event_is_no_answer():
    """vLLM-style: some text, then an error event, then [DONE]. It was read as a whole answer."""
    with FakeOpenAIServer() as srv:
        cfg = HttpTargetConfig(url=f"http://127.0.0.1:{srv.port}/ask", body={"q": "{{prompt}}"},
                               answer_path="$.delta", stream=True, timeout_s=5, max_retries=0)
        ok = 'data: {"delta": "The patient"}\n\ndata: {"delta": " was"}\n\ndata: [DONE]\n\n'
        for broken in ('data: {"delta": "The patient was"}\n\ndata: {"error": {"message": "engine overloaded"}}\n\n'
                       'data: [DONE]\n\n',
                       'data: {"delta": "The patient was"}\n\nevent: error\ndata: {"message": "overloaded"}\n\n'):
            srv.script(_sse(broken), path="/ask")
            with pytest.raises(ServerError, match="error event.*overloaded"):
                HttpTarget(cfg, {}).complete(_chat())
        srv.script(_sse("\ufeff" + ok), path="/ask")  # a byte-order mark lost the first event
        assert HttpTarget(cfg, {}).complete(_chat()).text == "The patient was"
        srv.script(Reply(status=200, body=ok, content_type="Text/Event-Stream"), path="/ask")
        assert HttpTarget(cfg, {}).complete(_chat()).text == "The patient was"


def test_timeout_bounds_the_whole_answer_not_each_read():
    """A stream of keep-alive comments held the audit for as long as the server liked."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def serve():
        conn, _ = srv.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        try:
            for _ in range(40):
                conn.sendall(b"9\r\n: ping\n\n\n\r\n")
                time.sleep(0.25)
        except OSError:
            pass
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    cfg = HttpTargetConfig(url=f"http://127.0.0.1:{port}/ask", body={"q": "{{prompt}}"}, answer_path="$.delta",
                           stream=True, timeout_s=1, max_retries=0)
    t0 = time.monotonic()
    with pytest.raises(Unreachable, match="did not finish its answer within 1s"):
        HttpTarget(cfg, {}).complete(_chat())
    assert time.monotonic() - t0 < 4
    srv.close()


def test_a_broken_compressed_body_is_a_bad_answer_not_a_connection_failure():
    with FakeOpenAIServer() as srv:
        srv.script(*[Reply(status=200, body=b"\x1f\x8b\x08not-really-gzip", headers={"Content-Encoding": "gzip"})] * 3,
                   path="/ask")
        with pytest.raises(BadResponse, match="could not be decompressed"):
            _scripted(srv).complete(_chat())
        assert len(srv.requests) == 3  # a bad answer is asked again twice, not five times as a network failure


def test_an_answer_decompressing_past_the_cap_is_not_read_further():
    """A 40 KiB gzip body decoded to hundreds of MiB, all held in memory and written to the store."""
    import gzip

    from audit_core.target.http_client import MAX_BODY_BYTES

    bomb = gzip.compress(b'{"answer": "' + b" " * (MAX_BODY_BYTES + 1024) + b'"}')
    assert len(bomb) < MAX_BODY_BYTES // 100
    with FakeOpenAIServer() as srv:
        srv.script(*[Reply(status=200, body=bomb, headers={"Content-Encoding": "gzip"})] * 3, path="/ask")
        with pytest.raises(BadResponse, match="larger than 32 MiB"):
            _scripted(srv).complete(_chat())


def test_an_event_streams_lines_end_where_the_format_says_and_are_utf8_whatever_the_label():
    """U+2028 inside a JSON string split the event (a bad answer, three times paid); a latin-1 label on
    UTF-8 bytes turned "Zürich" into "ZÃ¼rich"."""
    with FakeOpenAIServer() as srv:
        cfg = HttpTargetConfig(url=f"http://127.0.0.1:{srv.port}/ask", body={"q": "{{prompt}}"},
                               answer_path="$.delta", stream=True, timeout_s=5, max_retries=0)
        events = ('data: {"delta": "The policy\u2028clause 4\u0085in Z\u00fcrich"}\r\n\r\n'
                  'data: {"delta": " holds"}\r\rdata: [DONE]\n\n')
        srv.script(Reply(status=200, body=events.encode("utf-8"), content_type="text/event-stream; charset=latin-1"),
                   path="/ask")
        assert HttpTarget(cfg, {}).complete(_chat()).text == "The policy\u2028clause 4\u0085in Z\u00fcrich holds"


def test_a_key_echoed_across_streamed_events_is_not_kept():
    with FakeOpenAIServer() as srv:
        cfg = HttpTargetConfig(url=f"http://127.0.0.1:{srv.port}/ask", body={"q": "{{prompt}}"},
                               answer_path="$.delta", stream=True, timeout_s=5, max_retries=0,
                               headers={"X-Api-Key": "$RPA_SERVE_API_KEY"})
        events = "".join(f'data: {{"delta": "{KEY[i:i + 4]}"}}\n\n' for i in range(0, len(KEY), 4))
        srv.script(*[_sse(events)] * 3, path="/ask")
        with pytest.raises(BadResponse, match="echoed a secret in pieces"):
            HttpTarget(cfg, ENV).complete(_chat())


def test_an_error_body_is_read_only_as_far_as_it_is_quoted():
    """An error body was read whole: a gzip bomb there filled memory as one in an answer did."""
    import tracemalloc
    import zlib

    from audit_core.target.http_client import MAX_BODY_BYTES

    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip; 512 MiB of x compress to about 0.5 MiB
    bomb = packer.compress(b"engine overloaded ") + b"".join(packer.compress(b"x" * 2 ** 20) for _ in range(512))
    bomb += packer.flush()
    with FakeOpenAIServer() as srv:
        srv.script(*[Reply(status=503, body=bomb, headers={"Content-Encoding": "gzip"})] * 6, path="/ask")
        target = _scripted(srv)
        tracemalloc.start()
        try:
            with pytest.raises(ServerError, match="HTTP 503: engine overloaded x"):
                target.complete(_chat())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        # one network chunk may decode to tens of MiB; the whole body would be 512 MiB
        assert peak < 8 * MAX_BODY_BYTES


def test_ctrl_c_in_a_cli_audit_keeps_what_was_found_for_the_junit_report_and_the_gate(custom, tmp_path, monkeypatch,
                                                                                      capsys):
    """A Ctrl-C ended the audit with exit 3 and no JUnit file, though a member had been found: now the first
    Ctrl-C stops after the document in progress, and the findings so far still fail the gate."""
    import os
    import signal

    import audit_core.audit
    from app.cli import GATE_FAILED, main
    from audit_core.methods.base import MethodResult
    from audit_core.verdict import VerdictConfig, decide

    url, _ = custom
    file = tmp_path / "t.yaml"
    file.write_text((ROOT / "assets/targets/http_custom.yaml").read_text().replace("http://127.0.0.1:8100/ask",
                                                                                   url + "/ask"))
    docs = tmp_path / "docs.csv"
    docs.write_text("id,text\n" + "".join(f"d{j}," + " ".join(f"word{i}x{j}" for i in range(60)) + "\n" for j in (1, 2)))
    seen = []

    def interrupted(docs, target, cfg, prepare, *, cancel, **kw):
        os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C during the first document
        seen.append(cancel.is_set())
        found = MethodResult("verbatim", docs[0].id, 9.0, True, None, {"fpr": 0.05})
        return audit_core.audit.AuditResult(
            target=target.name, created="2026-11-29T00:00:00+00:00", config=audit_core.audit.config_dict(cfg),
            capabilities={}, verdicts=[decide(docs[0].id, [found], VerdictConfig())],
            results={docs[0].id: {"verbatim": found}}, observations={docs[0].id: {}}, calibrations={}, not_run={},
            account={"queries": 1, "failures": 0, "prompt_tokens": 0, "completion_tokens": 0},
            documents=list(docs), cancelled=True)

    monkeypatch.setattr(audit_core.audit, "run_audit", interrupted)
    monkeypatch.setenv("RPA_SERVE_API_KEY", KEY)
    junit = tmp_path / "audit.xml"
    common = ["audit", "--target-file", str(file), "--allow-env", "RPA_SERVE_API_KEY", "--docs", str(docs),
              "--method", "verbatim"]
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (nohup ignores it)
    try:
        rc = main([*common, "--store", str(tmp_path / "s.sqlite"), "--junit", str(junit), "--fail-on", "member"])
        after = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, before)
    err = capsys.readouterr().err
    assert seen == [True] and rc == GATE_FAILED, err
    assert "stopping after the document in progress" in err and "interrupted after 1 of 2 document(s)" in err
    assert "cancelled" in junit.read_text()
    assert after is signal.default_int_handler  # the handler is put back
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert main([*common, "--store", str(tmp_path / "s2.sqlite")]) == 3  # no gate: an unfinished audit exits 3
    finally:
        signal.signal(signal.SIGINT, before)


# --------------------------------------------------------------------------- secrets: consent and echoes


def _cli_file(tmp_path, port: int, headers: str) -> Path:
    file = tmp_path / "someone_elses.yaml"
    file.write_text(f"type: http\nurl: http://127.0.0.1:{port}/ask\nheaders:\n{headers}"
                    "body:\n  q: \"{{prompt}}\"\nanswer_path: $.data.answer\n")
    return file


def test_the_cli_sends_a_target_files_environment_variables_only_when_allowed(tmp_path, monkeypatch, capsys):
    """A target file from someone else named $AWS_SECRET_ACCESS_KEY in a header and the CLI sent it: the CLI read
    the whole environment. Now each variable needs --allow-env NAME; one not allowed is refused, naming it and the
    host, before anything is sent and without its value."""
    import audit_core.audit
    from app.cli import main

    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    monkeypatch.setenv("RPA_TEST_AWS_SECRET", secret)
    monkeypatch.setenv("RPA_SERVE_API_KEY", KEY)

    def stop(*a, **kw):
        raise ValueError("stopped before the audit")

    monkeypatch.setattr(audit_core.audit, "run_audit", stop)
    docs = tmp_path / "docs.csv"
    docs.write_text("id,text\na," + " ".join(f"word{i}" for i in range(60)) + "\n")
    with FakeOpenAIServer() as srv:
        srv.script(*[Reply.json(200, {"data": {"answer": "fine"}})] * 20, path="/ask")
        file = _cli_file(tmp_path, srv.port, "  X-Api-Key: $RPA_SERVE_API_KEY\n  X-Trace-Id: $RPA_TEST_AWS_SECRET\n")
        common = ["audit", "--target-file", str(file), "--docs", str(docs), "--method", "verbatim",
                  "--store", str(tmp_path / "s.sqlite")]
        for allowed in ([], ["--allow-env", "RPA_SERVE_API_KEY"]):
            assert main([*common, *allowed]) == 2
            err = capsys.readouterr().err
            assert "$RPA_TEST_AWS_SECRET" in err and f"127.0.0.1:{srv.port}" in err
            assert "--allow-env RPA_TEST_AWS_SECRET" in err and "estimated cost" not in err
            assert secret not in err and KEY not in err and "Traceback" not in err
        assert srv.requests == []  # nothing was sent
        # --estimate-only sends nothing either: the estimate stands, with the refusal as a note
        assert main([*common, "--estimate-only"]) == 0
        err = capsys.readouterr().err
        assert "note: the target file" in err and "--allow-env RPA_SERVE_API_KEY --allow-env RPA_TEST_AWS_SECRET" in err
        # both allowed: both are sent, to that host only
        assert main([*common, "--allow-env", "RPA_SERVE_API_KEY", "--allow-env", "RPA_TEST_AWS_SECRET"]) == 3
        err = capsys.readouterr().err
        assert "stopped before the audit" in err and "$RPA_TEST_AWS_SECRET from the environment" in err
        assert srv.requests and all({"x-api-key", "x-trace-id"} <= set(r["header_names"]) for r in srv.requests)
        assert secret not in err
    # --allow-env belongs to a target file: with --target it is refused, not silently ignored
    assert main(["audit", "--target", "demo", "--allow-env", "RPA_SERVE_API_KEY", "--docs", str(docs),
                 "--estimate-only"]) == 2
    assert "--allow-env is for a target file" in capsys.readouterr().err


def test_an_openai_target_file_sends_its_key_variable_only_when_allowed(tmp_path, monkeypatch, capsys):
    """A file of type openai names its key's variable (api_key_env): the same consent as a header's $NAME."""
    from app.cli import main

    monkeypatch.setenv("RPA_TEST_OPENAI_KEY", KEY)
    docs = tmp_path / "docs.csv"
    docs.write_text("id,text\na," + " ".join(f"word{i}" for i in range(60)) + "\n")
    file = tmp_path / "openai.yaml"
    file.write_text("type: openai\nbase_url: https://api.example.com/v1\nmodel: m\napi_key_env: RPA_TEST_OPENAI_KEY\n")
    assert main(["audit", "--target-file", str(file), "--docs", str(docs), "--method", "verbatim",
                 "--store", str(tmp_path / "s.sqlite")]) == 2
    err = capsys.readouterr().err
    assert "$RPA_TEST_OPENAI_KEY" in err and "api.example.com" in err and "--allow-env RPA_TEST_OPENAI_KEY" in err
    assert KEY not in err


def test_a_key_echoed_json_escaped_or_short_in_an_error_is_masked():
    """A 401 body quoting the key as JSON escapes it (PHP writes '/' as '\\/'): the exact match missed it, and the
    raw body went into the error, the store and the history. A key under 8 characters was never masked; in a
    server's error text it is, while answers keep short values (they would be garbled)."""
    import json as _json

    slashed = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    quoted = 'abc"def\\ghi-123456'
    short = "t3n4"
    with FakeOpenAIServer() as srv:
        for key in (slashed, quoted):
            for body in (_json.dumps({"error": f"invalid key {key}"}),  # '/' as is, '"' and backslash escaped
                         _json.dumps({"error": f"invalid key {key}"}).replace("/", "\\/"),  # PHP's json_encode
                         f"invalid key {key.replace('/', '%2F')}"):  # quoted from a URL
                srv.script(Reply(status=401, body=body, content_type="application/json"), path="/ask")
                cfg = HttpTargetConfig(url=f"http://127.0.0.1:{srv.port}/ask", body={"q": "{{prompt}}"},
                                       answer_path="$.a", headers={"X-Api-Key": "$K"}, timeout_s=5)
                with pytest.raises(AuthenticationFailed) as exc:
                    HttpTarget(cfg, {"K": key}).complete(_chat())
                said = str(exc.value)
                assert "invalid key ***" in said, said
                assert "K7MDENG" not in said and "def" not in said and "123456" not in said, said
        cfg = HttpTargetConfig(url=f"http://127.0.0.1:{srv.port}/ask", body={"q": "{{prompt}}"},
                               answer_path="$.data.answer", timeout_s=5, retry_on=(),
                               headers={"X-Tenant": "$T", "X-Api-Key": "$K"})
        target = HttpTarget(cfg, {"T": short, "K": KEY})
        srv.script(Reply(status=403, body=f'{{"detail": "tenant {short} is not yours"}}'), path="/ask")
        with pytest.raises(AuthenticationFailed) as exc:
            target.complete(_chat())
        assert short not in str(exc.value) and "tenant *** is not yours" in str(exc.value)
        assert "the key was rejected by" in str(exc.value)  # our own words are left whole
        srv.script(Reply(status=500, body=f"upstream t3n4 failed for tenant {short}"), path="/ask")
        with pytest.raises(ServerError) as exc:
            target.complete(_chat())
        assert short not in str(exc.value)
        srv.script(Reply.json(200, {"data": {"answer": f"{short} is a word here"}}), path="/ask")
        assert target.complete(_chat()).text == f"{short} is a word here"  # answers keep short values


def test_a_short_secret_is_masked_in_error_text_only_where_it_stands_as_a_token():
    """Masking a placeholder key "x" or "1" inside words garbled every error: "does not e***ist", a model list
    "llama-3.***-8b". A short secret is masked as a token of its own; a long one wherever it is."""
    from audit_core.target.http_client import SecretScrubber

    s = SecretScrubber(["x", "1", "t3n4", "wJalrXUtnFEMIK7MDENG"])
    said = s.error('model x does not exist; try llama-3.1-8b or qwen2.5-1.5b; "key": "x", tenant t3n4, '
                   "version 1; sk=wJalrXUtnFEMIK7MDENGbPx")
    assert said == ('model *** does not exist; try llama-3.1-8b or qwen2.5-1.5b; "key": "***", tenant ***, '
                    "version ***; sk=***bPx")
    assert SecretScrubber([]).error("nothing to mask") == "nothing to mask"
    # a key of 4 to 7 characters is masked wherever no letter or digit touches it: the end of a sentence, a path
    # and a suffix had kept it (a review, session 61)
    s = SecretScrubber(["Ab3xK9q"])
    assert (s.error("Incorrect API key provided: Ab3xK9q. See /keys/Ab3xK9q or token=Ab3xK9q-old")
            == "Incorrect API key provided: ***. See /keys/*** or token=***-old")
    assert s.error("xAb3xK9qy") == "xAb3xK9qy"  # inside a longer word it is another word


def _plain(srv: FakeOpenAIServer, **changes) -> HttpTarget:
    cfg = HttpTargetConfig(url=f"http://127.0.0.1:{srv.port}/ask", body={"q": "{{prompt}}"}, response_json=False,
                           headers={"X-Api-Key": "$RPA_SERVE_API_KEY"}, timeout_s=5, **changes)
    return HttpTarget(cfg, ENV, backoff_base_s=0.01)


def test_a_service_that_answers_in_plain_text_is_read_whole_or_event_by_event():
    """garak's response_json: false. The body is the answer; streamed, each event's data is a piece of it; a key
    the service echoes is scrubbed in both, and no JSON is asked of the answer."""
    with FakeOpenAIServer() as srv:
        srv.script(Reply(body=f'The lighthouse keeper {{"not": "json"}} {KEY}', content_type="text/plain"),
                   path="/ask")
        comp = _plain(srv).complete(_chat())
        assert comp.text.startswith('The lighthouse keeper {"not": "json"}') and KEY not in comp.text
        assert comp.tokens is None and comp.sources is None
        stream = ("data: The light\n\ndata: house\n\nevent: metadata\ndata: {\"sources\": 2}\n\nevent: message\n"
                  "data:  keeper\n\ndata: [DONE]\n\n")  # a named event of its own is not part of the answer
        srv.script(Reply(body=stream, content_type="text/event-stream"), path="/ask")
        assert _plain(srv, stream=True).complete(_chat()).text == "The lighthouse keeper"
        srv.script(Reply(body="data: The light\n\nevent: error\ndata: overloaded\n\n",
                         content_type="text/event-stream"), path="/ask")
        with pytest.raises(ServerError, match="error event: overloaded"):
            _plain(srv, stream=True, max_retries=0).complete(_chat())
        # the capability probe: text only, and a request for logprobs is refused before it is sent
        srv.script(Reply(body="OK", content_type="text/plain"), path="/ask")
        caps = _plain(srv).capabilities()
        assert caps.reachable and not caps.logprobs
        sent = len(srv.requests)
        with pytest.raises(NoLogprobs):
            _plain(srv).complete(_chat(logprobs=True, top_logprobs=2))
        assert len(srv.requests) == sent


@pytest.mark.parametrize("text, message", [
    ("type: http\nurl: https://a.example.com/ask\nbody: {q: '{{prompt}}'}\n", "answer_path is required"),
    ("type: http\nurl: https://a.example.com/ask\nbody: {q: '{{prompt}}'}\nresponse_json: false\n"
     "answer_path: $.a\n", "answer_path cannot be read"),
    ("type: http\nurl: https://a.example.com/ask\nbody: {q: '{{prompt}}'}\nresponse_json: false\n"
     "sources_path: $.s\n", "sources_path cannot be read"),
    ("type: http\nurl: https://a.example.com/ask\nbody: {q: '{{prompt}}'}\nresponse_json: 'no'\n",
     "'response_json' must be true or false"),
])
def test_a_plain_text_target_file_names_no_paths(text, message):
    with pytest.raises(TargetFileError, match=message):
        parse_target_file(text, "t.yaml")
    _, cfg = parse_target_file("type: http\nurl: https://a.example.com/ask\nbody: {q: '{{prompt}}'}\n"
                               "response_json: false\n", "t.yaml")
    as_json = replace(cfg, response_json=True, answer_path="$.a")
    assert cfg.fingerprint() != as_json.fingerprint()  # stored answers never mix the two readings


def test_a_plain_text_answer_is_read_in_its_declared_charset():
    with FakeOpenAIServer() as srv:
        srv.script(Reply(body="café crème".encode("iso-8859-1"), content_type="text/plain; charset=iso-8859-1"),
                   Reply(body="café crème".encode(), content_type="text/plain"),
                   Reply(body="café".encode(), content_type="text/plain; charset=no-such-codec"), path="/ask")
        assert [_plain(srv).complete(_chat()).text for _ in range(3)] == ["café crème", "café crème", "café"]


def test_a_get_target_keeps_its_urls_own_query_beside_the_bodys_fields():
    """httpx's params= replaced the URL's query: ?api-version=... was dropped from every request."""
    with FakeOpenAIServer() as srv:
        srv.script(Reply.json(200, {"data": {"answer": "fine"}}), path="/ask")
        t = _scripted(srv, method="GET")
        t = HttpTarget(replace(t.config, url=t.config.url + "?api-version=2024-05"), ENV, backoff_base_s=0.01)
        assert t.complete(_chat()).text == "fine"
        query = dict(p.split("=", 1) for p in srv.requests[-1]["query"].split("&"))
        assert query["api-version"] == "2024-05" and "q" in query


@pytest.mark.parametrize("where", ["url: https://a.example.com/c/{{session_id}}/ask\\n",
                                   "url: https://a.example.com/ask?s={{session_id}}\\n",
                                   "url: https://a.example.com/ask\\nheaders: {X-Session: '{{session_id}}'}\\n"])
def test_placeholders_outside_the_body_are_refused_not_sent_as_written(where):
    """{{session_id}} in a URL or a header went out as written, the same on every request: one conversation."""
    with pytest.raises(TargetFileError, match="filled in the body only"):
        parse_target_file("type: http\n" + where.encode().decode("unicode_escape")
                          + "body: {q: '{{prompt}}'}\nanswer_path: $.a\n", "t.yaml")


def test_answers_are_cached_per_value_of_every_header_read_from_the_environment_however_short():
    """Only secrets of key length named whose answers these were: two tenants with ids of 4 and 6 letters in
    $TENANT shared one cache, and a second audit got the first tenant's answers (a review, session 61)."""
    cfg = HttpTargetConfig(url="http://127.0.0.1:9/ask", body={"q": "{{prompt}}"}, answer_path="$.a",
                           headers={"X-Tenant": "$TENANT"})
    ids = {t: HttpTarget(cfg, environ={"TENANT": t}).credential_id(b"salt") for t in ("acme", "globex")}
    assert ids["acme"] and ids["globex"] and ids["acme"] != ids["globex"]
    # which header holds a value counts too, and a file reading nothing from the environment has no credential
    two = replace(cfg, headers={"X-A": "$A", "X-B": "$B"})
    assert (HttpTarget(two, environ={"A": "k1", "B": "k2"}).credential_id(b"salt")
            != HttpTarget(two, environ={"A": "k2", "B": "k1"}).credential_id(b"salt"))
    assert HttpTarget(replace(cfg, headers={"X-Tenant": "acme"}), environ={}).credential_id(b"salt") == ""


def test_an_event_stream_is_searched_for_line_ends_once_however_long_a_line_grows(monkeypatch):
    """Every chunk copied the unfinished line and searched it again from its start: quadratic, 17 s of CPU
    for one 16 MiB line that never ended (a review, session 61). Lines still end at CR LF split across chunks."""
    import audit_core.target.http_api as http_api

    scanned = []
    real = http_api._LINE_END

    class Counting:
        def finditer(self, buf, pos=0):
            scanned.append(len(buf) - pos)
            return real.finditer(buf, pos)

    monkeypatch.setattr(http_api, "_LINE_END", Counting())

    class Stream:
        headers: dict = {}

        def __init__(self, chunks):
            self.chunks = chunks

        def iter_bytes(self):
            yield from self.chunks

    target = HttpTarget(HttpTargetConfig(url="http://127.0.0.1:9/ask", body={"q": "{{prompt}}"}, answer_path="$.a",
                                         stream=True), environ={})
    chunks = [b"data: "] + [b"a" * 1000] * 200 + [b"a\r", b"\ndata: two\r", b"\n\r\n"]
    lines = list(target._lines(Stream(chunks), float("inf")))
    assert lines == ["data: " + "a" * 200_001, "data: two", ""]
    assert sum(scanned) <= 2 * sum(map(len, chunks))  # each byte searched about once, not once per chunk
