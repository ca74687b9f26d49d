"""Target profiles (the target zoo): chunking, every defense on every profile, the
text-only endpoint, and S-RAG probing shadow and target with identical parameters."""
from __future__ import annotations

import math

import pytest

from audit_core.audit import AuditConfig, probe_document, select_methods
from audit_core.documents import Document
from audit_core.methods.srag import SragConfig, SragMethod
from audit_core.target.base import Capabilities, ChatRequest, Completion, Target, TokenLogprob, Usage
from shadow.defenses import DEFENSES
from shadow.prepare import ShadowConfig, _probe, mirror_note
from shadow.profiles import PROFILES, chunk_document, get_profile, source_id

DOC = (
    "I have had a dull ache in my lower back for three weeks, mostly after long drives. "
    "My doctor suggested ibuprofen and gentle stretching, but the pain now spreads into my "
    "left thigh and I sometimes feel tingling in my toes. Should I ask for an MRI scan or "
    "see a physiotherapist first, and is it safe to keep driving to work every day?"
)


def test_chunks_overlap_cover_the_document_and_map_back_to_it():
    doc = Document("d1", " ".join(f"w{i}" for i in range(130)))
    chunks = chunk_document(doc, 60, 15)
    words = [c.text.split() for c in chunks]
    assert [c.id for c in chunks] == ["d1#chunk0", "d1#chunk1", "d1#chunk2"]
    assert all(source_id(c.id) == "d1" for c in chunks) and source_id("plain-id") == "plain-id"
    assert words[0][-15:] == words[1][:15] and words[1][-15:] == words[2][:15]  # overlap
    assert words[0][0] == "w0" and words[-1][-1] == "w129"
    # a short document is one chunk; a tail no longer than the overlap joins the chunk before it
    assert [c.text for c in chunk_document(Document("s", "a b c"), 60, 15)] == ["a b c"]
    assert len(chunk_document(Document("t", " ".join(["x"] * 70)), 60, 15)) == 1
    with pytest.raises(ValueError):
        chunk_document(doc, 10, 10)


def test_the_chunked_profile_stores_chunks_and_every_defense_applies_to_every_profile():
    prof = get_profile("chunked")
    kb = prof.knowledge_base([Document("d1", " ".join(["w"] * 130)), Document("d2", "short one")])
    assert [source_id(c.id) for c in kb] == ["d1", "d1", "d1", "d2"]
    assert prof.rag.top_k == 8 and prof.rag.system_template != get_profile("chat").rag.system_template
    for p in PROFILES.values():
        for d in [None] + list(DEFENSES):
            rc = p.rag_config(d)
            assert rc.defense == d and rc.generator == p.rag.generator and rc.prompt_style == p.rag.prompt_style
    assert get_profile("chat-nologprobs").logprobs is False and get_profile("http-custom").api == "custom"
    cc = get_profile("chunked-custom")  # the chunked service as a citing custom API
    assert (cc.api, cc.chunk_words, cc.rag) == ("custom", prof.chunk_words, prof.rag)
    with pytest.raises(ValueError, match="unknown target profile"):
        get_profile("nope")


def test_srag_cannot_run_without_logprobs_and_says_why():
    cfg = AuditConfig(methods=["srag", "mba"])
    runnable, not_run = select_methods(cfg, Capabilities(True, False, 0))
    assert [m.name for m in runnable] == ["mba"]
    assert not_run["srag"].startswith("no logprobs")


class _Recorder(Target):
    """Records every request; answers with one fixed token and its alternatives."""

    def __init__(self):
        super().__init__()
        self.name = "recorder"
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest) -> Completion:
        self.requests.append(request)
        k = request.top_logprobs
        top = [(f" t{i}", math.log(0.5 / (i + 1))) for i in range(k)] if request.logprobs else []
        toks = [TokenLogprob(" t0", math.log(0.5), top)] if request.logprobs else None
        return Completion(" t0", toks, Usage(5, 1))


def _params(reqs: list[ChatRequest]) -> set[tuple]:
    return {(r.max_tokens, r.temperature, r.logprobs, r.top_logprobs, tuple(role for role, _ in r.messages))
            for r in reqs}


@pytest.mark.parametrize("style", ["completion", "chat"])
def test_shadow_and_target_receive_identical_request_parameters(style, smollm):
    """The shadow is probed by the same code with the target's parameters, its top_logprobs cap included."""
    caps = Capabilities(True, True, 5)  # a target that returns at most 5 alternatives
    (method,), _ = select_methods(AuditConfig(methods=["srag"], method_params={"srag": {"style": style}}), caps)
    assert method.config.top_logprobs == 5
    doc = Document("d1", DOC)
    shadow, target = _Recorder(), _Recorder()
    _probe(method, [doc], shadow, ShadowConfig(top_logprobs=20, prompt_style=style), lambda n=1: None)
    probe_document(method, doc, target, caps.max_top_logprobs)
    probes = target.requests
    if style == "completion":  # an audited document gets the continuation check last; the shadow is not checked
        probes, check = target.requests[:-1], target.requests[-1]
        assert check.max_tokens == method.config.continuation_check_tokens and not check.logprobs
        assert check.messages == probes[-1].messages
    assert shadow.requests and len(shadow.requests) == len(probes)
    assert [(r.max_tokens, r.top_logprobs, r.messages) for r in shadow.requests] == \
        [(r.max_tokens, r.top_logprobs, r.messages) for r in probes]
    assert {r.top_logprobs for r in probes} == {5}
    assert _params(shadow.requests) == _params(probes)
    if style == "chat":  # enough tokens to reach the word after restating the prefix
        assert all(r.max_tokens > 1 for r in target.requests)
    else:
        assert {r.max_tokens for r in probes} == {1}


def test_the_preparation_key_includes_the_cap_and_a_style_mismatch_is_noted():
    from shadow.prepare import preparation_key

    a, b = SragMethod(SragConfig(top_logprobs=20)), SragMethod(SragConfig(top_logprobs=5))
    assert preparation_key(a, ShadowConfig(), "h") != preparation_key(b, ShadowConfig(), "h")
    chat = SragMethod(SragConfig(style="chat"))
    assert preparation_key(chat, ShadowConfig(), "h") != preparation_key(a, ShadowConfig(), "h")
    note = mirror_note(chat, ShadowConfig(prompt_style="completion"))
    assert note["mirrors"] is False and "chat" in note["note"]
    assert mirror_note(chat, ShadowConfig(prompt_style="chat"))["mirrors"] is True


def _served_capabilities(name: str, folder) -> Capabilities:
    """A profile served over loopback with four small documents, probed by the real client."""
    from audit_core.target.openai_compat import OpenAITarget
    from shadow.rag import RagSystem
    from shadow.serve import serve_in_thread

    prof = get_profile(name)
    docs = [Document(f"d{i}", f"{DOC} Note number {i}.") for i in range(4)]
    rag = RagSystem(prof.knowledge_base(docs), prof.rag_config(persist_dir=str(folder)))
    url, stop = serve_in_thread(rag, api_key="secret-key", model_name="m", logprobs=prof.logprobs)
    try:
        return OpenAITarget(base_url=url, model="m", api_key="secret-key").capabilities()
    finally:
        stop()


def test_a_text_only_endpoint_is_found_by_the_capability_probe(tmp_path, smollm):
    """chat-nologprobs served over loopback: the real client finds no logprobs, S-RAG cannot run."""
    caps = _served_capabilities("chat-nologprobs", tmp_path)
    assert caps.reachable and not caps.logprobs
    _, not_run = select_methods(AuditConfig(methods=["srag", "mba"]), caps)
    assert set(not_run) == {"srag"} and "no logprobs" in not_run["srag"]
    # the style probe needs no logprobs: SmolLM2-Instruct restates the text it is asked to complete
    assert caps.style == "chat", caps.style_detail


@pytest.mark.slow
@pytest.mark.parametrize("name, style", [("completion", "completion"), ("chunked", "chat")])
def test_the_capability_probe_finds_each_profiles_style_through_the_client(tmp_path, name, style):
    """Served over loopback, the real models: Gemma 3 270M base continues, the chat service restates."""
    caps = _served_capabilities(name, tmp_path)
    assert caps.style == style and "3 of 3" in caps.style_detail, caps.style_detail


@pytest.mark.slow
def test_srag_separates_members_from_non_members_on_the_chat_profile(tmp_path, shared_data):
    """S-RAG against the served chat profile (30 + 30), its shadow answering in chat style too."""
    from shadow.bench import BenchConfig, run_bench

    cfg = BenchConfig(target_corpus=str(shared_data / "genmedgpt5k.jsonl"), kb_size=300, n_members=30,
                      n_nonmembers=30, methods=["srag"], defenses=["none"], profiles=["chat"], mode="zoo",
                      shadow=ShadowConfig(n_members=60, n_nonmembers=60), out_dir=str(tmp_path))
    results = run_bench(cfg, log=lambda s: None)
    s = results["zoo"]["chat"]["none"]["srag"]
    assert s["n_members"] + s["n_nonmembers"] >= 40  # most documents got a reading, not "not aligned"
    assert s["auc"] > 0.8
    assert results["shadow"]["chat:srag"]["mirror"]["mirrors"] is True


def test_the_benchmark_reads_each_profile_in_its_style_with_every_method_that_has_one():
    """On a chat profile the benchmark sets the style of every such method, as an audit does (with_target_style)."""
    from audit_core.audit import AuditConfig, with_target_style
    from audit_core.methods import reads_target_style
    from audit_core.target.base import Capabilities
    from shadow.bench.runner import BenchConfig, profile_method_params

    names = ["srag", "srag_sampled", "verbatim", "mba", "rag_mia"]
    assert [n for n in names if reads_target_style(n)] == ["srag", "srag_sampled", "verbatim"]
    cfg = BenchConfig(methods=names)
    for prof in ("completion", "chat"):
        style = PROFILES[prof].style
        bench = profile_method_params(cfg, PROFILES[prof])
        audit = with_target_style(AuditConfig(methods=names), Capabilities(True, True, 20, style=style))
        for n in ("srag", "srag_sampled", "verbatim"):
            assert bench[n]["style"] == audit.method_params[n]["style"] == style
        assert "style" not in bench.get("mba", {}) and "style" not in bench.get("rag_mia", {})
