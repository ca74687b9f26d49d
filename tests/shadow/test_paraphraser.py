"""The paraphrasing defense with a paraphraser other than the generator (issue 18)."""
from __future__ import annotations

from dataclasses import replace

from audit_core.documents import Document
from audit_core.models import load_causal_lm
from shadow.defenses import QueryParaphraser
from shadow.rag import RagConfig, RagSystem, default_paraphraser

KB = [
    "Hand, foot and mouth disease is a viral illness of young children with fever, mouth sores and a rash on "
    "the hands and feet; it spreads through saliva and stool and usually clears within ten days.",
    "Plantar fasciitis causes stabbing heel pain with the first steps in the morning; stretching, supportive "
    "shoes and rest help most people within months.",
    "Iron deficiency anaemia makes people tired and pale; it is treated with iron tablets and by finding the "
    "cause of the blood loss or poor absorption.",
]


def test_a_named_paraphraser_rewrites_the_queries_and_names_the_system(tmp_path):
    docs = [Document(f"kb-{i}", t) for i, t in enumerate(KB)]
    cfg = dict(generator="gemma-3-270m", persist_dir=str(tmp_path), defense="paraphrase", paraphrase_max_tokens=24)
    own = RagSystem(docs, RagConfig(**cfg, paraphraser="gemma-3-270m"))
    small = RagSystem(docs, RagConfig(**cfg, paraphraser="smollm2-135m-instruct"))
    # the answers differ with the paraphraser, so stored answers must not be shared between the two
    assert small.name != own.name and "smollm2-135m-instruct" in small.name
    # the generator paraphrasing itself with every rewrite kept: the name stored answers had before session 42
    unchecked = RagSystem(docs, RagConfig(**cfg, paraphraser="gemma-3-270m", paraphrase_min_similarity=0.0))
    assert "(" not in unchecked.name and own.name != unchecked.name
    # a base-model generator cannot follow the rewriting instruction: by default the instruct model rewrites
    assert RagSystem(docs, RagConfig(**cfg)).name == small.name

    query = "Please complete this paragraph: Plantar fasciitis causes stabbing heel pain with the first"
    rec = small.retrieve_records([query])[0]
    expected = QueryParaphraser(load_causal_lm("smollm2-135m-instruct"), 24).paraphrase(query)
    assert rec.defense_acted and rec.retrieval_query == expected.paraphrase != query
    assert small._paraphraser_obj().lm.name == "smollm2-135m-instruct"
    assert small._lm is None  # retrieval alone never loads the (larger) generator


def test_paraphrasing_a_batch_gives_each_query_its_own_rewrite():
    """Rewrites decoded together equal rewrites decoded alone, duplicates included, in the order asked."""
    lm = load_causal_lm("smollm2-135m-instruct")
    queries = ["Please complete this paragraph: Plantar fasciitis causes stabbing heel pain with the first",
               "What helps iron deficiency anaemia?",
               "Please complete this paragraph: Plantar fasciitis causes stabbing heel pain with the first",
               "Hand, foot and mouth disease in a toddler: how long does the rash last?"]
    alone = [QueryParaphraser(lm, 24).paraphrase(q) for q in queries]
    together = QueryParaphraser(lm, 24).paraphrase_many(queries)
    assert [r.query for r in together] == queries
    assert [r.paraphrase for r in together] == [r.paraphrase for r in alone]
    assert len({r.paraphrase for r in together}) == 3  # each distinct query got its own rewrite


def test_the_default_paraphraser_is_the_generator_only_when_it_follows_instructions():
    assert default_paraphraser("smollm2-135m-instruct") == "smollm2-135m-instruct"
    assert default_paraphraser("gemma-3-270m") == "smollm2-135m-instruct"
    assert default_paraphraser("some-org/unknown-model") == "some-org/unknown-model"  # not in the registry: itself
    assert RagConfig(generator="gemma-3-270m").effective_paraphraser == "smollm2-135m-instruct"
    assert RagConfig(generator="gemma-3-270m", paraphraser="gemma-3-270m").effective_paraphraser == "gemma-3-270m"


def test_the_benchmark_keeps_answers_apart_by_who_paraphrased():
    """A completion target's paraphrase rows are stored under the default (instruct) paraphraser's name, so
    answers stored by earlier runs, where Gemma paraphrased itself, are never read as this defense's; naming
    Gemma finds those again, and the chat profile (an instruct generator) keeps the identity it had."""
    from shadow.bench.runner import BenchConfig, target_identity
    from shadow.profiles import get_profile

    comp, chat = get_profile("completion"), get_profile("chat")
    default = BenchConfig(target_generator="gemma-3-270m")
    gemma = BenchConfig(target_generator="gemma-3-270m", paraphraser="gemma-3-270m")
    checked = "rewrites under 0.5 similar dropped"  # the rewrite check of session 42 (RagConfig default)
    assert target_identity(default, "completion", comp, "paraphrase").endswith(
        f"· paraphrase (smollm2-135m-instruct, {checked})")
    assert target_identity(gemma, "completion", comp, "paraphrase").endswith(f"· paraphrase ({checked})")
    assert target_identity(default, "completion", comp, "none") == target_identity(gemma, "completion", comp, "none")
    assert target_identity(default, "chat", chat, "paraphrase").endswith(f"· paraphrase ({checked})")
    # the defense as simulated before the check keeps the identity its stored answers have
    old_chat = replace(chat, rag=replace(chat.rag, paraphrase_min_similarity=0.0))
    assert target_identity(default, "chat", old_chat, "paraphrase").endswith("· paraphrase")


def test_a_query_too_long_to_paraphrase_is_retrieved_as_sent_without_decoding_it(monkeypatch):
    """A 1 MB query was rewritten with a full prefill of ~190k tokens, holding the server's one model for minutes
    before the generator's context refused it; now it is recognised by its length and never decoded."""
    import audit_core.scoring as scoring
    from shadow import defenses

    para = QueryParaphraser(load_causal_lm("smollm2-135m-instruct"), 8)
    decoded: list[int] = []
    real = scoring.generate_greedy_many

    def counting(lm, prompts, *args, **kwargs):
        decoded.extend(len(p) for p in prompts)
        return real(lm, prompts, *args, **kwargs)

    monkeypatch.setattr(scoring, "generate_greedy_many", counting)
    long = "heel pain in the morning " * (defenses.MAX_PARAPHRASE_QUERY_TOKENS // 3)
    short = "What helps heel pain in the morning?"
    out = para.paraphrase_many([long, short])
    assert out[0].query == long and not out[0].acted and "longer than" in out[0].note
    assert out[1].query == short and out[1].note is None
    assert len(decoded) == 1 and decoded[0] < defenses.MAX_PARAPHRASE_QUERY_TOKENS  # only the short one
