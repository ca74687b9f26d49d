"""The paraphrasing defense with a paraphraser other than the generator (issue 18)."""
from __future__ import annotations

from audit_core.documents import Document
from audit_core.models import load_causal_lm
from shadow.defenses import QueryParaphraser
from shadow.rag import RagConfig, RagSystem

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
    own = RagSystem(docs, RagConfig(**cfg))
    small = RagSystem(docs, RagConfig(**cfg, paraphraser="smollm2-135m-instruct"))
    # the answers differ with the paraphraser, so stored answers must not be shared between the two
    assert small.name != own.name and "smollm2-135m-instruct" in small.name
    assert RagSystem(docs, RagConfig(**cfg, paraphraser="gemma-3-270m")).name == own.name

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
