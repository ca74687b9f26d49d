"""The method registry is the one place methods are declared: everything else follows it."""
from __future__ import annotations

import pytest

from audit_core.documents import Document
from audit_core.estimate import estimate_audit
from audit_core.methods import LABELS, METHODS, create_method
from audit_core.methods.base import MembershipMethod


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_builds_and_matches_its_spec(name):
    spec = METHODS[name]
    m = create_method(name)
    assert isinstance(m, MembershipMethod)
    assert m.name == name
    assert m.requires_logprobs == spec.requires_logprobs
    assert m.requires_sources == spec.requires_sources
    assert LABELS[name] == spec.label


def test_every_method_appears_in_the_estimate():
    # the second document holds personal data, so that Extraction (one query per item) has something to ask
    docs = [Document("a", " ".join(f"word{i}" for i in range(150))),
            Document("b", " ".join(f"word{i}" for i in range(40)) + " write to me at jo.doe@mail.example today")]
    est = estimate_audit(docs, list(METHODS))
    assert set(est.methods) == set(METHODS)
    # methods that send the same probes (one probe scope) are charged once, to the first of them
    scopes: dict[str, list[str]] = {}
    for m in METHODS:
        scopes.setdefault(create_method(m).probe_scope, []).append(m)
    for first, *same in scopes.values():
        assert est.methods[first].queries > 0
        assert all(est.methods[m].queries == 0 and "same requests as" in est.methods[m].note for m in same)


def test_every_method_is_a_cli_choice(capsys):
    from app.cli import main

    with pytest.raises(SystemExit):
        main(["audit", "--help"])
    out = capsys.readouterr().out
    assert all(m in out for m in METHODS)


def test_every_method_has_a_report_and_plot_label():
    from audit_core.plots import method_label

    for name in METHODS:
        assert method_label(name) == LABELS[name] != name
        assert len(METHODS[name].description) > 30  # the report's "how it works" column


def _one_method_audit(name: str) -> dict:
    """An audit dict in which ``name`` alone ran, on one document, and called it a member with score 0.73."""
    res = {"method": name, "doc_id": "d", "score": 0.73, "decision": True, "reason": None,
           "evidence": {"reading": 0.73}}
    return {"documents": [{"id": "d", "text": "the document's text"}], "config": {"methods": [name]},
            "verdicts": [{"doc_id": "d", "verdict": "member", "reason": "r",
                          "methods": {name: {"score": 0.73, "decision": True, "reason": None}}}],
            "results": {"d": {name: res}}}


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_has_a_column_in_the_pdfs_and_the_apps_verdict_table(name):
    from app.tab_results import _verdict_rows
    from audit_core.report import PDF_SCORE_COLUMNS, score_column, verdict_table

    audit = _one_method_audit(name)
    table, left_out = verdict_table(audit, PDF_SCORE_COLUMNS)
    assert table[0][3:] == [score_column(name)] and table[1][3:] == ["0.73"] and not left_out
    assert _verdict_rows(audit)[0][score_column(name)] == "0.73"


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_has_evidence_per_document_in_the_app(name):
    """A method without a view of its own gets the generic one: its label, its score and call."""
    from streamlit.testing.v1 import AppTest

    def page():
        import streamlit as st

        from app.tab_results import _detail

        _detail(st.session_state["audit"], "k")

    at = AppTest.from_function(page)
    at.session_state["audit"] = _one_method_audit(name)
    at.run()
    assert not at.exception
    after_the_verdict = [e.value for e in at.markdown][3:]  # heading, verdict, its explanation, then the evidence
    assert LABELS[name] in " ".join(after_the_verdict).replace("\\", "")
