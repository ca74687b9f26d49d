"""The generation memo: a repeated prompt is answered from the first computation, anything else is computed."""
from __future__ import annotations

import pytest

import shadow.rag as rag_mod
from audit_core.documents import Document
from audit_core.scoring import Generation, TokenScore
from audit_core.target.base import ChatRequest
from shadow.generation_memo import GenerationMemo, memo_key
from shadow.rag import RagConfig, RagSystem

DOCS = [
    "Patient: I have had a dry cough for three weeks and a mild fever in the evenings. Doctor: A chest X-ray "
    "and a sputum test will rule out tuberculosis.",
    "Patient: My ankle swelled after I twisted it playing basketball. Doctor: Rest it, ice it and keep it raised.",
    "A classic tomato sauce starts with olive oil and sliced garlic, then crushed tomatoes simmered until thick.",
    "Jupiter is the largest planet of the solar system, a gas giant with a storm larger than Earth.",
    "Git stores the history of a project as a graph of commits; a branch is a movable pointer to a commit.",
]


def ask(text: str, **kw) -> ChatRequest:
    return ChatRequest.chat([{"role": "user", "content": "Complete the paragraph: " + text}], **kw)


def test_a_generation_comes_back_exactly(tmp_path):
    gen = Generation("Rest it", [TokenScore(101, "Rest", 0, 4, -0.123456789012345, [("Rest", -0.123456789012345),
                                                                                   ("Ice", -2.5)]),
                                 TokenScore(7, " it", 4, 7, None, [])], 42, "length")
    memo = GenerationMemo(tmp_path / "m.sqlite")
    key = memo_key("m", [1, 2, 3], ask("x", max_tokens=2))
    assert memo.get(key) is None
    memo.put(key, gen)
    assert GenerationMemo(tmp_path / "m.sqlite").get(key) == gen  # another process's view of the same file
    assert memo.counts() == (1, 1)


def test_the_key_changes_with_everything_that_changes_an_answer():
    base = memo_key("m", [1, 2, 3], ask("x", max_tokens=4))
    others = [memo_key("other", [1, 2, 3], ask("x", max_tokens=4)), memo_key("m", [1, 2, 4], ask("x", max_tokens=4)),
              memo_key("m", [1, 2, 3], ask("x", max_tokens=5)),
              memo_key("m", [1, 2, 3], ask("x", max_tokens=4, logprobs=True)),
              memo_key("m", [1, 2, 3], ask("x", max_tokens=4, logprobs=True, top_logprobs=3)),
              memo_key("m", [1, 2, 3], ask("x", max_tokens=4, temperature=0.7, seed=1))]
    assert len({base, *others}) == len(others) + 1
    # the request's text is not part of the key: only the prompt the generator sees is
    assert memo_key("m", [1, 2, 3], ask("y", max_tokens=4)) == base
    # greedy answers do not depend on a seed; unseeded sampling is not repeatable, so it is never kept
    assert memo_key("m", [1, 2, 3], ask("x", max_tokens=4, seed=9)) == base
    assert memo_key("m", [1, 2, 3], ask("x", max_tokens=4, temperature=0.7, seed=None)) is None


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    return [Document(f"kb-{i}", t) for i, t in enumerate(DOCS)], str(tmp_path_factory.mktemp("chroma"))


def test_a_second_server_answers_a_repeated_prompt_without_the_model(kb, tmp_path, smollm, monkeypatch):
    docs, chroma = kb
    reqs = [ask(DOCS[0][:60], max_tokens=6), ask(DOCS[1][:50], max_tokens=1, logprobs=True, top_logprobs=3),
            ask(DOCS[3][:40], max_tokens=5, logprobs=True)]
    first = RagSystem(docs, RagConfig(generator="smollm2-135m-instruct", persist_dir=chroma))
    first.generation_memo = GenerationMemo(tmp_path / "g.sqlite")
    fresh = first.complete_many(reqs)
    assert first.generation_memo.counts() == (3, 0)

    second = RagSystem(docs, RagConfig(generator="smollm2-135m-instruct", persist_dir=chroma))
    second.generation_memo = GenerationMemo(tmp_path / "g.sqlite")

    def no_model(*a, **k):
        raise AssertionError("the model ran for a prompt the memo holds")

    for name in ("generate_ids", "generate_greedy_many", "next_token_distributions"):
        monkeypatch.setattr(rag_mod, name, no_model)
    again = second.complete_many(reqs)
    single = second.complete(reqs[0])
    for a, b in zip(fresh + [fresh[0]], again + [single]):
        assert (a.text, a.tokens, a.usage, a.finish_reason) == (b.text, b.tokens, b.usage, b.finish_reason)
    assert second.generation_memo.counts() == (3, 4)

    # a defense that changes the prompt (another system prompt) is computed, not reused
    modified = RagSystem(docs, RagConfig(generator="smollm2-135m-instruct", persist_dir=chroma,
                                         defense="prompt_modification"))
    modified.generation_memo = GenerationMemo(tmp_path / "g.sqlite")
    with pytest.raises(AssertionError, match="the model ran"):
        modified.complete(reqs[0])
