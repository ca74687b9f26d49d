"""The cost estimate shown before an audit starts."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from audit_core.documents import Document
from audit_core.estimate import EstimateConfig, estimate_audit, srag_probe_count
from audit_core.methods.base import MembershipMethod, QueryCost
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
    check = SragConfig().continuation_check_tokens
    assert est.methods["srag"].queries == 7 + 5 + 2  # and one continuation check per probed document
    assert est.methods["srag"].skipped_documents == 1
    assert est.methods["srag"].completion_tokens == 12 + 2 * check  # one token per probe
    assert est.methods["mba"].queries == 2  # the 5-word document yields fewer than 5 masks
    assert est.methods["rag_mia"].queries == 3
    assert est.methods["mink"].queries == 3
    assert est.queries == 14 + 2 + 3 + 3
    assert est.rows()[-1]["queries"] == est.queries
    # the 5-word document is still probed by MBA, RAG-MIA and Min-k%: no document is skipped by all
    assert est.skipped_by_every_method == 0 and est.rows()[-1]["documents skipped"] == 0
    only_srag = estimate_audit(docs, ["srag"])
    assert only_srag.rows()[-1]["documents skipped"] == 1 == only_srag.skipped_by_every_method


def test_parameters_change_the_estimate():
    docs = [_doc(400)]
    assert estimate_audit(docs, ["srag"], {"srag": {"segment_factor": 40}}).queries == 5 + 1  # + the check
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


def test_extraction_is_counted_only_for_the_documents_that_hold_personal_data():
    """It was charged 3 queries for every document of 3 words or more; it sends none without personal data."""
    plain = Document("a", "The patient had a cough for three weeks and was given rest and fluids. " * 3)
    contact = Document("b", "Please write to me at maria.lopez@clinic.example or call 555-201-7788 about the rash.")
    est = estimate_audit([plain, contact], ["extraction"]).methods["extraction"]
    assert (est.queries, est.skipped_documents) == (2, 1)


def test_methods_that_cannot_run_on_the_checked_target_are_named_and_not_counted():
    from audit_core.estimate import will_not_run
    from audit_core.target.base import Capabilities

    text_only = Capabilities(True, False, 0)
    assert set(will_not_run(["srag", "mink", "mba", "cited_sources"], text_only)) == {"srag", "mink", "cited_sources"}
    assert will_not_run(["srag"], None) == {}  # not checked yet: everything is counted
    assert will_not_run(["srag", "cited_sources"], Capabilities(True, True, 20, sources=True)) == {}


def test_an_estimate_for_a_text_only_target_leaves_s_rags_queries_out_of_the_total():
    """The Run tab dropped them itself, in a line no test ran; the estimate now does, from the checked capabilities."""
    from audit_core.target.base import Capabilities

    docs = [_doc(150, 0), _doc(60, 1)]
    everything = estimate_audit(docs, ["srag", "mba"])
    srag_queries = 7 + 5 + 2  # probes and one continuation check per document
    assert everything.methods["srag"].queries == srag_queries and not everything.not_run  # not checked: all counted
    est = estimate_audit(docs, ["srag", "mba"], caps=Capabilities(True, False, 0))
    assert list(est.methods) == ["mba"] and est.queries == estimate_audit(docs, ["mba"]).queries
    assert est.rows()[-1]["queries"] == everything.queries - srag_queries
    assert "no logprobs" in est.not_run["srag"]


@dataclass
class _PairConfig:
    """The config of two methods registered only in the test below."""


class _PairMethod(MembershipMethod):
    """One of two methods that send the same probes (a shared probe scope, as S2MIA-T and S2MIA-M do)."""

    shared_probe_scope = "pair"

    def __init__(self, config: _PairConfig | None = None) -> None:
        self.config = config

    def query_cost(self, n_words: int) -> QueryCost:
        return QueryCost(2, n_words, 4)


class _PairA(_PairMethod):
    name = "pair_a"


class _PairB(_PairMethod):
    name = "pair_b"


def test_methods_that_share_a_probe_scope_are_charged_once(monkeypatch):
    """The shared requests were a rule for S2MIA's two names only; a new pair of methods was charged twice."""
    from audit_core.methods import METHODS, MethodSpec, method_label

    for cls in (_PairA, _PairB):
        monkeypatch.setitem(METHODS, cls.name, MethodSpec(cls.name, cls.name.upper(), __name__, cls.__name__,
                                                           "_PairConfig", False, "baseline", "2 requests"))
    est = estimate_audit([_doc(100)], ["pair_b", "pair_a", "rag_mia"])
    assert est.methods["pair_b"].queries == 2 and est.methods["pair_a"].queries == 0  # the first chosen pays
    assert est.methods["pair_a"].note == f"same requests as {method_label('pair_b')}, answered from the cache"
    assert est.queries == 2 + 1


def test_controls_cost_the_dearest_single_method_and_the_assumptions_are_said():
    from audit_core.estimate import assumptions, capability_probe, controls_queries

    controls = [Document(f"c{i}", "The patient had a cough for three weeks and was given rest and fluids. " * 4)
                for i in range(3)]
    alone = {m: estimate_audit(controls, [m]).queries for m in ("rag_mia", "verbatim")}
    assert controls_queries(controls, ["rag_mia", "verbatim"]) == max(alone.values()) < sum(alone.values())
    said = assumptions(EstimateConfig(tokens_per_word=1.4))
    n, _ = capability_probe()
    assert "1.4 per word" in said and f"capability probe ({n} short queries" in said and "5 times" in said


def test_a_target_file_says_whether_its_answers_are_capped():
    from audit_core.target.http_api import HttpTargetConfig

    free = HttpTargetConfig(url="http://127.0.0.1:9/ask", body={"q": "{{prompt}}"}, answer_path="$.a")
    capped = HttpTargetConfig(url="http://127.0.0.1:9/ask", body={"q": "{{prompt}}", "n": "{{ max_tokens }}"},
                              answer_path="$.a")
    assert not free.caps_answers() and capped.caps_answers()
