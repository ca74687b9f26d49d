"""How a verdict's reason is worded and ordered (``audit_core.verdict``): what decides comes first, codes out.

The rule table itself (what each row decides) is tested row by row in test_evidence.py; these tests check only
the words a data owner reads.
"""
from __future__ import annotations

import pytest

from audit_core.methods.base import MethodResult
from audit_core.verdict import (
    BRIEF_CHARS,
    INCONCLUSIVE,
    VerdictConfig,
    brief_reason,
    decide,
    decide_with_controls,
    plain_reason,
)

NO_SIGNAL = ("no signal: on the shadow RAG this method's out-of-fold AUC is 0.55 (95% interval 0.43-0.67); it "
             "decides only when the lower end is above 0.50")
NOT_CLEARED = ("not cleared: below the member threshold, but 12 of the shadow's 50 members (24%) score this low "
               "or lower; \"not found\" needs at most 5%")


def _abstains(method: str, reason: str, score: float | None = None) -> MethodResult:
    """A method that decided nothing for a reason that does not depend on the document's score."""
    return MethodResult(method, "d", score, None, reason, {"fpr": 0.05})


def _uncleared(method: str, share: float = 0.24) -> MethodResult:
    """A method that scored the document below its member threshold without clearing it."""
    return MethodResult(method, "d", 0.3, None, NOT_CLEARED, {"fpr": 0.05, "member_p_value": share})


def test_an_undecided_verdict_leads_with_the_method_that_scored_the_document_not_the_first_listed():
    """The browser walk's case: Verbatim (no signal) listed first, S-RAG's "not cleared" buried at character 200
    of 630, past what a table cell shows. The method that keeps the document undecided leads, whole."""
    from audit_core.report import CELL_REASON_CHARS

    results = [_abstains("verbatim", NO_SIGNAL, 0.4),
               _abstains("interrogation", "no_questions: only 2 question(s) could be made from this document "
                                          "(at least 3 needed)"),
               _uncleared("srag"),
               _abstains("mba", "cannot run: no logprobs"),
               _abstains("rag_mia", NO_SIGNAL + "; none of its queries were sent")]
    v = decide("d", results)
    assert (v.verdict, v.rule) == (INCONCLUSIVE, "R1")
    assert v.reason.startswith("S-RAG: " + NOT_CLEARED), v.reason
    assert len(v.reason) < 400, v.reason  # 631 characters before
    # every other method is named, in brief, those with the same reason together
    assert "also undecided: MBA (cannot run: no logprobs)" in v.reason
    assert ("Verbatim continuation, RAG-MIA (no signal: on the shadow RAG this method's out-of-fold AUC is 0.55)"
            in v.reason)
    assert "only 2 question(s) could be made from this document)" in v.reason
    assert "no_questions" not in v.reason and "95% interval" not in v.reason
    # what decided fits in a table cell (``report.cell_reason``)
    assert len("S-RAG: " + NOT_CLEARED) < CELL_REASON_CHARS
    # the methods' whole reasons stay in the verdict
    assert v.methods["verbatim"]["reason"] == NO_SIGNAL


def test_two_methods_below_their_threshold_both_lead_in_voting_order():
    results = [_abstains("verbatim", NO_SIGNAL, 0.4), _uncleared("mba", 0.4), _uncleared("srag", 0.2)]
    v = decide("d", results)
    assert v.rule == "R1"
    assert v.reason.startswith(f"S-RAG: {NOT_CLEARED}; MBA: {NOT_CLEARED}; also undecided: Verbatim continuation")


def test_where_no_method_scored_the_document_the_first_in_voting_order_leads():
    """Every method abstained: the one that would have voted first leads (S-RAG, the primary), not the first in
    the audit's list."""
    results = [_abstains("verbatim", NO_SIGNAL, 0.4), _abstains("rag_mia", "document_too_short"),
               _abstains("srag", "too short: S-RAG needs at least 40 words (this document has 12)")]
    v = decide("d", results)
    assert v.reason == ("S-RAG: too short: S-RAG needs at least 40 words (this document has 12); also undecided: "
                        "Verbatim continuation (no signal: on the shadow RAG this method's out-of-fold AUC is 0.55); "
                        "RAG-MIA (the document is too short for this method)"), v.reason


def test_a_single_method_keeps_its_whole_reason():
    v = decide("d", [_abstains("rag_mia", NO_SIGNAL + "; none of its queries were sent")])
    assert v.reason == "RAG-MIA: " + NO_SIGNAL + "; none of its queries were sent"
    assert decide("d", []).reason == "no method was run"


def test_a_call_against_the_controls_above_the_rate_leads_an_undecided_verdict():
    """R0's re-decided call (p above the rate against the owner's controls) depends on the score: it leads."""
    results = [_abstains("verbatim", NO_SIGNAL, 0.4), MethodResult("srag", "d", 0.4, None, NOT_CLEARED,
                                                                   {"fpr": 0.05, "member_p_value": 0.3})]
    collection = {"method": "srag", "controls_kind": "declared", "fpr": 0.05, "called_members": 1,
                  "document_p_values": {"d": 0.5}, "control_scores": {f"c{i}": 0.1 for i in range(20)}}
    v = decide_with_controls("d", results, collection)
    assert v.rule == "R1"
    assert v.reason.startswith("S-RAG: p = 0.5 against your 20 controls (above 5%)"), v.reason


def test_the_wording_changes_no_decision():
    """The reason's order is words only: the same results in any order give the same verdict and rule."""
    results = [_abstains("verbatim", NO_SIGNAL, 0.4), _uncleared("srag"), _abstains("mba", "cannot run: no logprobs")]
    for cfg in (VerdictConfig(), VerdictConfig(retrieval_as_sent=True)):
        a, b = decide("d", results, cfg), decide("d", results[::-1], cfg)
        assert (a.verdict, a.rule, a.score, a.reason) == (b.verdict, b.rule, b.score, b.reason)


@pytest.mark.parametrize("raw, shown", [
    # ``code: text`` prefixes set by the methods (textonly_base, perturbation, extraction, cited_sources, srag)
    ("no_questions: only 2 question(s) could be made from this document (at least 3 needed)",
     "only 2 question(s) could be made from this document (at least 3 needed)"),
    ("no_perturbation: the document has no adjective or adverb with a known antonym",
     "the document has no adjective or adverb with a known antonym"),
    ("no_personal_data: no e-mail address, phone number or name found in the document",
     "no e-mail address, phone number or name found in the document"),
    ("no_sources: the target's answers carried no sources", "the target's answers carried no sources"),
    ("target_error: every query failed", "every query failed"),
    ("3 of 10 probes failed (no_logprobs: the target returned no logprobs)",
     "3 of 10 probes failed (the target returned no logprobs)"),
    # bare codes (skip codes, a failed call's ``Outcome.reason``)
    ("document_too_short", "the document is too short for this method"),
    ("rate_limited", "the target limited the rate of requests and the calls failed"),
    ("not_probed", "the document was not probed"),
    ("some_new_code", "some new code"),
    ("MBA: no_logprobs; S-RAG: too short",
     "MBA: the target returned no logprobs (token probabilities); S-RAG: too short"),
    # plain reasons are left as they are
    (NO_SIGNAL, NO_SIGNAL),
    ("non-answer (refusal): the target did not answer", "non-answer (refusal): the target did not answer"),
    ("too short: S-RAG needs at least 40 words", "too short: S-RAG needs at least 40 words"),
    (None, ""),
])
def test_plain_reason_drops_machine_codes(raw, shown):
    assert plain_reason(raw) == shown


def test_every_code_prefix_the_methods_set_is_dropped():
    """Whatever ``code: text`` a method's source writes as a reason or skip, no code reaches the reader."""
    import re
    from pathlib import Path

    import audit_core.methods as methods

    codes = set()
    for path in Path(methods.__file__).parent.glob("*.py"):
        codes |= set(re.findall(r"[\"(]([a-z]+(?:_[a-z]+)+): ", path.read_text(encoding="utf-8")))
    assert {"no_questions", "no_perturbation", "no_personal_data", "target_error"} <= codes
    for code in codes:
        assert plain_reason(f"{code}: the words after it") == "the words after it", code


def test_brief_reason_keeps_the_lead_and_cuts_the_rest():
    assert brief_reason(NO_SIGNAL) == "no signal: on the shadow RAG this method's out-of-fold AUC is 0.55"
    assert brief_reason("cannot run: no logprobs") == "cannot run: no logprobs"
    assert brief_reason("non-answer (refusal): the target did not answer") == (
        "non-answer (refusal): the target did not answer")
    long = "too many non-answers: " + "the target refused " * 20
    assert len(brief_reason(long)) <= BRIEF_CHARS + 1 and brief_reason(long).endswith("\u2026")
