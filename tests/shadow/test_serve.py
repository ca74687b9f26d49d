"""The reference server over loopback, spoken to with the official `openai` client only."""
from __future__ import annotations

import json

import httpx
import openai
import pytest

from audit_core.documents import Document
from audit_core.target.base import ChatRequest
from shadow.rag import RagConfig, RagSystem
from shadow.serve import ServeLimits, serve_in_thread

KEY = "sk-test-loopback-0123456789"
OTHER_KEY = "sk-test-another-client-987"
MODEL = "smollm2-135m-instruct"

TEXTS = [
    "The lighthouse keeper of Skerry Point logged every passing ship in a green ledger and lit the lamp at dusk.",
    "Patient: My knee clicks when I climb stairs. Doctor: Clicking without pain is usually harmless; strengthen the thigh muscles.",
    "Saffron is the dried stigma of the crocus flower; it takes about 150 flowers to yield one gram of the spice.",
    "The Danube flows through ten countries, from the Black Forest in Germany to its delta on the Black Sea.",
    "A sourdough starter is a culture of wild yeast and lactic bacteria kept alive with regular feedings of flour and water.",
    "Comets are icy bodies that grow a glowing coma and a tail when their orbit brings them close to the Sun.",
    "To repot an orchid, remove the old bark, trim dead roots and set the plant in fresh bark in a pot with drainage holes.",
    "The abacus, a frame of beads on rods, was used for arithmetic in China, Rome and Mesopotamia long before paper.",
]
AUDIT = "Please focus only on the following rule to complete the task:\n- Complete the paragraph based on the [context].\n\n"


@pytest.fixture(scope="module")
def rag(tmp_path_factory, smollm) -> RagSystem:
    docs = [Document(f"s-{i}", t) for i, t in enumerate(TEXTS)]
    return RagSystem(docs, RagConfig(persist_dir=str(tmp_path_factory.mktemp("chroma"))))


@pytest.fixture(scope="module")
def server(rag):
    url, stop = serve_in_thread(rag, api_key=[KEY, OTHER_KEY], model_name=MODEL, limits=ServeLimits(max_body_bytes=20_000),
                                debug_retrieval=True)
    yield url
    stop()


def test_openai_client_gets_logprobs_identical_to_the_in_process_system(server, rag):
    client = openai.OpenAI(base_url=server, api_key=KEY, max_retries=0)
    messages = [{"role": "user", "content": AUDIT + "The lighthouse keeper of Skerry Point logged every"}]
    resp = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=3, temperature=0,
                                          logprobs=True, top_logprobs=5)
    choice = resp.choices[0]
    content = choice.logprobs.content
    assert resp.model == MODEL and resp.object == "chat.completion" and resp.id.startswith("chatcmpl-")
    assert 1 <= len(content) <= 3 and choice.message.content == "".join(t.token for t in content)
    assert resp.usage.completion_tokens == len(content)
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    for t in content:
        assert len(t.top_logprobs) == 5 and t.bytes == list(t.token.encode())
        assert t.top_logprobs[0].token == t.token and t.top_logprobs[0].logprob == pytest.approx(t.logprob)
        assert [a.logprob for a in t.top_logprobs] == sorted((a.logprob for a in t.top_logprobs), reverse=True)
    ref = rag.complete(ChatRequest.chat(messages, max_tokens=3, temperature=0, logprobs=True, top_logprobs=5))
    assert ref.text == choice.message.content and ref.usage.prompt_tokens == resp.usage.prompt_tokens
    assert all(abs(a.logprob - b.logprob) < 1e-4 for a, b in zip(ref.tokens, content))
    # the benchmark's extension endpoint knows what was retrieved
    last = httpx.get(server + "/rpa/last_retrieval", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert last["retrieval"]["doc_ids"][0] == "s-0" and last["request_id"] == resp.id
    assert last["timings"]["prefill_s"] > 0
    assert resp.model_extra["rpa_retrieval"]["doc_ids"] == last["retrieval"]["doc_ids"]
    assert [m.id for m in client.models.list().data] == [MODEL]
    # another client (another key) never sees what this one asked
    other = httpx.get(server + "/rpa/last_retrieval", headers={"Authorization": f"Bearer {OTHER_KEY}"}).json()
    assert other["retrieval"] is None and other["request_id"] is None


def test_concurrent_requests_get_the_answers_the_system_gives_one_by_one(server, rag):
    """The server answers requests that arrive together in one batch (shadow.serve_batch): same texts."""
    from audit_core.target.openai_compat import OpenAITarget

    reqs = [ChatRequest.chat([{"role": "user", "content": AUDIT + t[:40]}], max_tokens=12, temperature=0)
            for t in TEXTS[:4]]
    target = OpenAITarget(server, MODEL, api_key=KEY, max_concurrency=4)
    served = target.complete_many(reqs)
    assert [c.text for c in served] == [rag.complete(r).text for r in reqs]


def test_the_retrieval_route_is_off_unless_asked_for_and_keys_come_from_the_environment(rag, monkeypatch):
    url, stop = serve_in_thread(rag, api_key=KEY, model_name=MODEL)
    try:
        r = httpx.get(url + "/rpa/last_retrieval", headers={"Authorization": f"Bearer {KEY}"})
        assert r.status_code == 404 and "--debug-retrieval" in r.json()["error"]["message"]
    finally:
        stop()
    from shadow import serve

    with pytest.raises(SystemExit):  # no --api-key option: a key on the command line is visible in ps
        serve.main(["--corpus", "x.jsonl", "--api-key", KEY])
    monkeypatch.setenv("RPA_SERVE_API_KEY", "cl\u00e9-secr\u00e8te-1")  # no client can send it in a header
    with pytest.raises(SystemExit):
        serve.main(["--corpus", "x.jsonl"])


def test_wrong_or_missing_key_is_401_in_openai_shape(server):
    bad = openai.OpenAI(base_url=server, api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as exc:
        bad.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=1)
    assert exc.value.status_code == 401
    r = httpx.post(server + "/chat/completions", json={"model": MODEL, "messages": []})
    err = r.json()["error"]
    assert r.status_code == 401 and set(err) == {"message", "type", "param", "code"}
    assert err["code"] == "invalid_api_key" and KEY not in r.text


@pytest.mark.parametrize("change, status, code", [
    ({"model": "gpt-4o"}, 404, "model_not_found"),
    ({"top_logprobs": 21}, 400, None),
    ({"top_logprobs": 3, "logprobs": False}, 400, None),
    ({"max_tokens": 100_000}, 400, None),
    ({"messages": [{"role": "user", "content": "x"}] * 65}, 400, None),
    ({"messages": [{"role": "wizard", "content": "x"}]}, 400, None),
    ({"stream": True}, 400, "unsupported_parameter"),
    ({"messages": [{"role": "user", "content": "x" * 30_000}]}, 413, "request_too_large"),
    # each was a 500 that took its whole batch down: a seed past int64, a temperature that overflows the logits
    ({"seed": 2 ** 64, "temperature": 1}, 400, None),
    ({"temperature": 1e-300}, 400, None),
])
def test_invalid_requests_get_openai_errors(server, change, status, code):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, **change}
    r = httpx.post(server + "/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if code:
        assert err["code"] == code


def test_malformed_json_and_unknown_route(server):
    h = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    r = httpx.post(server + "/chat/completions", content=b"{not json", headers=h)
    assert r.status_code == 400 and "error" in r.json()
    # nested 3,000 deep, and a lone surrogate (half an emoji): both were 500s with a traceback in the log
    for body in (b"[" * 3000, b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}'):
        r = httpx.post(server + "/chat/completions", content=body, headers=h)
        assert r.status_code == 400 and r.json()["error"]["message"], r.text
    r = httpx.post(server + "/chat/completions", headers={"Authorization": f"bearer {KEY}"},  # any case (RFC 7235)
                   json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                         "stop": [], "tools": []})  # empty lists ask for nothing: the defaults, not a 400
    assert r.status_code == 200, r.text
    r = httpx.get(server + "/nothing-here", headers=h)
    assert r.status_code == 404 and json.loads(r.text)["error"]["code"] == "not_found"


def test_prefix_caching_reuses_tokens_without_changing_answers(tmp_path, smollm):
    docs = [Document(f"s-{i}", t) for i, t in enumerate(TEXTS)]
    answers, cached = {}, {}
    for entries in (8, 0):
        rag = RagSystem(docs, RagConfig(persist_dir=str(tmp_path), prefix_cache_entries=entries))
        url, stop = serve_in_thread(rag, model_name=MODEL)
        try:
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
            words = TEXTS[4].split()
            got, reused, prompt = [], [], []
            for n in (8, 11, 14, 14):  # S-RAG style: one document, growing prefixes (the last repeated)
                r = client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": AUDIT + " ".join(words[:n])}],
                    max_tokens=2, temperature=0, logprobs=True, top_logprobs=4)
                got.append([(t.token, t.logprob, [(a.token, a.logprob) for a in t.top_logprobs])
                            for t in r.choices[0].logprobs.content])
                reused.append(r.usage.prompt_tokens_details.cached_tokens)
                prompt.append(r.usage.prompt_tokens)
            answers[entries], cached[entries] = got, reused
        finally:
            stop()
    assert cached[0] == [0, 0, 0, 0]
    # the shared system prompt is reused at least; a repeated prompt is all reused but its last token
    assert cached[8][0] == 0 and cached[8][1] > 0 and cached[8][2] > 0
    assert cached[8][3] == prompt[3] - 1
    for a, b in zip(answers[8], answers[0]):
        assert [t for t, _, _ in a] == [t for t, _, _ in b]
        for (_, la, ta), (_, lb, tb) in zip(a, b):
            assert abs(la - lb) < 1e-4 and [x for x, _ in ta] == [x for x, _ in tb]


def test_a_batch_reports_each_requests_cached_tokens_and_where_its_time_went(tmp_path, smollm):
    """complete_many (the server's batches) says per request how much of its prompt came from the prefix
    cache, as a lone complete does; until session 38 every batched answer said 0."""
    docs = [Document(f"s-{i}", t) for i, t in enumerate(TEXTS)]
    rag = RagSystem(docs, RagConfig(persist_dir=str(tmp_path), prefix_cache_entries=8))
    words = TEXTS[4].split()
    ask = lambda n, m: ChatRequest.chat([{"role": "user", "content": AUDIT + " ".join(words[:n])}],  # noqa: E731
                                        max_tokens=m, logprobs=m == 1, top_logprobs=3 if m == 1 else 0)
    rag.complete_many([ask(8, 2)])
    assert rag.last_cached_tokens == [0]
    outs = rag.complete_many([ask(8, 2), ask(12, 2), ask(12, 1)])
    n_prompt = outs[0].usage.prompt_tokens
    got = rag.last_cached_tokens
    assert got[0] == n_prompt - 1  # the same prompt again: all of it but the token that is run
    # the one-token request runs first (teacher-forced groups before decoding): only the shared start of the
    # first prompt is cached for it; the two-token request with the same prompt then finds all of it
    assert 0 < got[2] < outs[2].usage.prompt_tokens - 1
    assert got[1] == outs[1].usage.prompt_tokens - 1
    t = rag.last_batch_timings
    assert t.prefill_s > 0 and t.generation_s > 0 and t.cached_tokens == sum(got)


def test_a_server_started_with_exit_with_parent_stops_when_its_parent_is_killed(tmp_path):
    """A benchmark killed with SIGKILL runs no cleanup; the reference server it started must not live on."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    child = ("import os, time; from shadow.serve import exit_with_parent; "
             "exit_with_parent(os.getppid(), poll_s=0.1); print('watching', flush=True); time.sleep(120)")
    parent = ("import subprocess, sys, time; "
              f"c = subprocess.Popen([sys.executable, '-c', {child!r}], stdout=sys.stdout); "
              "print(c.pid, flush=True); time.sleep(120)")
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = subprocess.Popen([sys.executable, "-c", parent], cwd=root, env=env, stdout=subprocess.PIPE, text=True)
    try:
        child_pid = int(proc.stdout.readline())
        assert proc.stdout.readline().strip() == "watching"
        os.kill(child_pid, 0)  # alive while its parent is
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                os.kill(child_pid, 0)
            except ProcessLookupError:
                break
            # a re-parented child that exited stays a zombie until its new parent reaps it
            if Path(f"/proc/{child_pid}/stat").exists() and \
                    Path(f"/proc/{child_pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                break
            time.sleep(0.2)
        else:
            os.kill(child_pid, signal.SIGKILL)
            pytest.fail("the child outlived its killed parent by 20 s")
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_debug_route_gives_what_was_retrieved_not_what_was_asked(server):
    """Without keys every local user is one client (by address): the route gave another user's question."""
    h = {"Authorization": f"Bearer {KEY}"}
    r = httpx.post(server + "/chat/completions", headers=h, json={
        "model": MODEL, "messages": [{"role": "user", "content": "Patient Jane Roe asks about saffron"}],
        "max_tokens": 1, "temperature": 0})
    assert r.status_code == 200
    last = httpx.get(server + "/rpa/last_retrieval", headers=h).json()
    assert last["retrieval"]["doc_ids"] and "Jane Roe" not in json.dumps(last)


@pytest.mark.parametrize("args, said", [
    (["--profile", "chat", "--api", "custom"], "serves the openai API"),
    (["--profile", "http-custom", "--api", "openai"], "serves the custom API"),
    (["--hide-retrieval", "--debug-retrieval"], "contradict each other"),
])
def test_the_reference_server_refuses_options_that_contradict_each_other_before_loading_anything(
        args, said, capsys, monkeypatch):
    """`--profile chat --api custom` served the OpenAI API without a word, and `--hide-retrieval` beside
    `--debug-retrieval` still served every client's retrieval at /v1/rpa/last_retrieval."""
    import shadow.rag
    from shadow.serve import main

    monkeypatch.setattr(shadow.rag.RagSystem, "__init__", lambda *a, **k: pytest.fail("loaded a model"))
    with pytest.raises(SystemExit) as exc:
        main(["--corpus", "assets/demo_kb.jsonl", *args])
    assert exc.value.code == 2 and said in capsys.readouterr().err


def test_a_server_with_several_keys_does_not_tell_one_client_what_another_asked(tmp_path, smollm):
    """One prefix cache serves every client: a second key's `cached_tokens` of 573 of 574 told it that someone
    had just asked the same question. With several keys the count reads 0; with one it is reported as before."""
    docs = [Document(f"s-{i}", t) for i, t in enumerate(TEXTS)]
    question = [{"role": "user", "content": AUDIT + " ".join(TEXTS[4].split()[:9])}]
    seen = {}
    for keys in (["key-a", "key-b"], ["key-a"]):
        rag = RagSystem(docs, RagConfig(persist_dir=str(tmp_path), prefix_cache_entries=8))
        url, stop = serve_in_thread(rag, api_key=keys, model_name=MODEL)
        try:
            for who in ("key-a", keys[-1]):
                r = openai.OpenAI(base_url=url, api_key=who, max_retries=0).chat.completions.create(
                    model=MODEL, messages=question, max_tokens=1, temperature=0)
                seen[(len(keys), who)] = r.usage.prompt_tokens_details.cached_tokens
        finally:
            stop()
    assert seen[(2, "key-b")] == 0
    assert seen[(1, "key-a")] > 0  # a single client sees its own repeated prompt reused


def test_the_openai_api_takes_the_defaults_spelled_out_and_refuses_a_bool_for_a_number():
    """A client that writes its defaults out ("response_format": {"type": "text"}, "tool_choice": "none",
    "stop": "") got a 400, while "n": true passed as 1."""
    from shadow.serve import ApiError, parse_chat_request

    base = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for extra in ({"response_format": {"type": "text"}}, {"tool_choice": "none"}, {"stop": ""}, {"n": 1},
                  {"stream": False}, {"top_p": 1.0}):
        parse_chat_request({**base, **extra}, ServeLimits())
    for extra in ({"n": True}, {"n": 2}, {"response_format": {"type": "json_object"}}, {"stop": "\n"},
                  {"stream": True}, {"tool_choice": "auto"}):
        with pytest.raises(ApiError):
            parse_chat_request({**base, **extra}, ServeLimits())
