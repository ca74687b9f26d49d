"""The cost estimate shown before an audit starts."""
from __future__ import annotations

import pytest

from audit_core.documents import Document
from audit_core.estimate import EstimateConfig, estimate_audit, srag_probe_count
from audit_core.methods.srag import SragConfig


def _doc(n: int, i: int = 0) -> Document:
    return Document(f"d{i}-{n}", " ".join(f"word{j}" for j in range(n)))


@pytest.mark.parametrize("n_words,expected", [(10, 0), (12, 5), (60, 5), (150, 7), (400, 10)])
def test_srag_probe_count_follows_the_segment_rule(n_words, expected):
    assert srag_probe_count(n_words, SragConfig()) == expected


def test_srag_probe_count_matches_segmentation(smollm):
    from audit_core.methods.srag import segment

    text = ("The patient reported a persistent dry cough for three weeks after a long flight, "
            "with mild fever at night. A chest radiograph showed no consolidation, and the "
            "physician suggested inhaled steroids, rest, fluids and a follow-up visit in ten days "
            "if the wheezing did not improve or the fever returned with chills and fatigue.")
    cfg = SragConfig()
    assert srag_probe_count(len(text.split()), cfg) == len(segment(text, cfg, lm=smollm))


def test_queries_per_method_and_totals():
    docs = [_doc(150, 0), _doc(60, 1), _doc(5, 2)]
    est = estimate_audit(docs, ["srag", "mba", "rag_mia", "mink"])
    assert est.methods["srag"].queries == 7 + 5
    assert est.methods["srag"].skipped_documents == 1
    assert est.methods["srag"].completion_tokens == 12  # one token per probe
    assert est.methods["mba"].queries == 2  # the 5-word document yields fewer than 5 masks
    assert est.methods["rag_mia"].queries == 3
    assert est.methods["mink"].queries == 3
    assert est.queries == 12 + 2 + 3 + 3
    assert est.rows()[-1]["queries"] == est.queries
    # the 5-word document is still probed by MBA, RAG-MIA and Min-k%: no document is skipped by all
    assert est.skipped_by_every_method == 0 and est.rows()[-1]["documents skipped"] == 0
    only_srag = estimate_audit(docs, ["srag"])
    assert only_srag.rows()[-1]["documents skipped"] == 1 == only_srag.skipped_by_every_method


def test_parameters_change_the_estimate():
    docs = [_doc(400)]
    assert estimate_audit(docs, ["srag"], {"srag": {"segment_factor": 40}}).queries == 5
    small = estimate_audit(docs, ["mba"], {"mba": {"n_masks": 5}}).completion_tokens
    large = estimate_audit(docs, ["mba"], {"mba": {"n_masks": 20}}).completion_tokens
    assert large > small
    with pytest.raises(ValueError):
        estimate_audit(docs, ["srag"], {"srag": {"bins": 30}})
    with pytest.raises(ValueError):
        estimate_audit(docs, ["nonsense"])


def test_tokens_grow_with_length_and_retrieved_context():
    short = estimate_audit([_doc(60)], ["rag_mia"]).prompt_tokens
    long = estimate_audit([_doc(600)], ["rag_mia"]).prompt_tokens
    assert long > short + 500
    with_ctx = estimate_audit([_doc(60)], ["rag_mia"], cfg=EstimateConfig(context_tokens_per_query=800)).prompt_tokens
    assert with_ctx == short + 800


def test_s2mia_variants_share_their_requests():
    est = estimate_audit([_doc(100)], ["s2mia_t", "s2mia_m"])
    assert est.methods["s2mia_t"].queries == 1
    assert est.methods["s2mia_m"].queries == 0
    assert estimate_audit([_doc(100)], ["s2mia_m"]).queries == 1


def test_mba_continue_elicitation_costs_one_request_per_mask():
    docs = [_doc(150), _doc(5, 1)]
    fill = estimate_audit(docs, ["mba"])
    cont = estimate_audit(docs, ["mba"], {"mba": {"elicitation": "continue", "n_masks": 8}})
    assert fill.methods["mba"].queries == 1 and cont.methods["mba"].queries == 8
    assert cont.methods["mba"].skipped_documents == 1
    assert cont.methods["mba"].completion_tokens == 8 * 6
