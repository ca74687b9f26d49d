"""The http-custom profile: shadow.serve's custom API over a real RagSystem, reached by the HTTP target."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from audit_core.documents import Document
from audit_core.target import create_target, load_target_file
from audit_core.target.base import ChatRequest
from shadow.rag import RagConfig, RagSystem
from shadow.serve import serve_in_thread

ROOT = Path(__file__).resolve().parents[2]
KEY = "custom-profile-key-5d1e"
TEXTS = [
    "The lighthouse keeper of Skerry Point logged every passing ship in a green ledger and lit the lamp at dusk.",
    "Saffron is the dried stigma of the crocus flower; it takes about 150 flowers to yield one gram of the spice.",
    "The Danube flows through ten countries, from the Black Forest in Germany to its delta on the Black Sea.",
    "A sourdough starter is a culture of wild yeast and lactic bacteria kept alive with regular feedings of flour.",
]
AUDIT = "Please focus only on the following rule to complete the task:\n- Complete the paragraph based on the [context].\n\n"


@pytest.fixture(scope="module")
def served(tmp_path_factory, smollm):
    docs = [Document(f"s-{i}", t) for i, t in enumerate(TEXTS)]
    rag = RagSystem(docs, RagConfig(persist_dir=str(tmp_path_factory.mktemp("chroma"))))
    url, stop = serve_in_thread(rag, api_key=KEY, api="custom")
    yield url, rag
    stop()


def _target(url: str, file: str):
    spec, cfg = load_target_file(ROOT / "assets" / "targets" / file)
    return create_target(spec, replace(cfg, url=url + "/ask"), {"RPA_SERVE_API_KEY": KEY})


@pytest.mark.parametrize("file", ["http_custom.yaml", "http_custom_stream.yaml"])
def test_custom_api_answers_what_the_in_process_system_answers(served, file):
    url, rag = served
    req = ChatRequest.chat([{"role": "user", "content": AUDIT + "The lighthouse keeper of Skerry Point logged every"}],
                           max_tokens=3, temperature=0.0, logprobs=True, top_logprobs=5)
    got = _target(url, file).complete(req)
    ref = rag.complete(req)
    assert got.text == ref.text and len(got.tokens) == len(ref.tokens)
    for a, b in zip(got.tokens, ref.tokens):
        assert a.token == b.token and abs(a.logprob - b.logprob) < 1e-4 and len(a.top) == 5
    sources = got.raw["sources"] if "sources" in got.raw else got.raw["events"][-1]["sources"]
    assert sources[0] == {"id": "s-0", "text": rag.documents["s-0"]}
    # the file's sources_path names the list; each object's text fields are read, in order
    assert got.sources == [f"{s['id']}\n{rag.documents[s['id']]}" for s in sources]
    caps = _target(url, file).capabilities()
    assert caps.reachable and caps.logprobs and caps.max_top_logprobs == 20 and caps.sources


def test_custom_api_refuses_a_missing_key_and_a_bad_body(served):
    url, _ = served
    r = httpx.post(url + "/ask", json={"question": "hi"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    r = httpx.post(url + "/ask", json={"question": "hi"}, headers={"X-Api-Key": "nope"})
    assert r.status_code == 401 and KEY not in r.text
    r = httpx.post(url + "/ask", json={"question": "", "extra": 1}, headers={"X-Api-Key": KEY})
    assert r.status_code == 400 and "extra" in r.json()["error"]["message"]
    r = httpx.post(url + "/ask", json={"question": "hi", "top_logprobs": 3}, headers={"X-Api-Key": KEY})
    assert r.status_code == 400 and "logprobs" in r.json()["error"]["message"]
    r = httpx.post(url + "/ask", json={"question": "hi", "temperature": 1e-300}, headers={"X-Api-Key": KEY})
    assert r.status_code == 400 and "temperature" in r.json()["error"]["message"]  # it overflowed the logits: 500


def test_the_benchmark_serves_and_reaches_the_custom_profile(served):
    """shadow.bench wiring for http-custom: the readiness check and the client built from the shipped file."""
    from shadow.bench import served as bench_served
    from shadow.profiles import get_profile

    url, rag = served
    assert bench_served.cannot_serve(get_profile("http-custom")) is None
    assert bench_served.server_ready("custom", url, key=KEY)
    assert not bench_served.server_ready("custom", url, key="wrong")  # 401: a server, but not ours to use
    assert not bench_served.server_ready("openai", url, key=KEY)  # no /v1/models on the custom API
    req = ChatRequest.chat([{"role": "user", "content": AUDIT + "Saffron is the dried stigma of the"}],
                           max_tokens=2, temperature=0.0, logprobs=True, top_logprobs=3)
    got = bench_served.custom_api_client(url, key=KEY).complete(req)
    ref = rag.complete(req)
    assert got.text == ref.text and [t.token for t in got.tokens] == [t.token for t in ref.tokens]


def test_streamed_pieces_join_to_the_answer_when_a_character_spans_several_tokens():
    """Each token of a multi-byte character decodes alone as U+FFFD: streamed one per event, the pieces of
    "こんにちは" joined to a row of U+FFFD although the answer itself was right."""
    from audit_core.target.base import Completion, TokenLogprob, Usage
    from shadow.serve_custom import _pieces

    tokens = [TokenLogprob(t, -0.5, []) for t in ("\ufffd", "\ufffd", "に", "ち", "\ufffd", "\ufffd")]
    comp = Completion("こんにちは", tokens, Usage(3, 6))
    events = list(_pieces(comp))
    assert "".join(e["answer"] for e in events) == "こんにちは"
    assert sum(len(e["logprobs"]) for e in events) == 6  # every token's logprob still goes out, once
    assert [e["answer"] for e in events] == ["こんに", "ち", "は"]
    plain = Completion("Hello there", [TokenLogprob("Hello", -0.1, []), TokenLogprob(" there", -0.2, [])], Usage(3, 2))
    assert [e["answer"] for e in _pieces(plain)] == ["Hello", " there"]


def test_the_custom_api_reads_null_as_the_default_for_every_optional_field():
    """"max_tokens": null took the default while "temperature": null and "logprobs": null were a 400."""
    from shadow.serve import ServeLimits
    from shadow.serve_custom import parse_ask

    req, stream = parse_ask({"question": "hi", "temperature": None, "logprobs": None, "stream": None,
                             "max_tokens": None, "top_logprobs": None}, ServeLimits())
    assert req.temperature == 0.0 and req.logprobs is False and stream is False


def test_a_sampled_question_is_sampled_afresh_each_time_as_a_service_samples():
    """Every /ask request was decoded with seed 0: the samples of S-RAG without logprobs (one per request, at
    temperature 1) all came back the same, which no real service does. The API has no seed field."""
    from shadow.generation_memo import memo_key
    from shadow.serve import ServeLimits
    from shadow.serve_custom import parse_ask

    sampled, _ = parse_ask({"question": "Continue: my knee", "temperature": 1.0}, ServeLimits())
    greedy, _ = parse_ask({"question": "Continue: my knee"}, ServeLimits())
    assert sampled.seed is None and memo_key("m", [1, 2], sampled) is None  # not served from the memo either
    assert memo_key("m", [1, 2], greedy) is not None
