"""Reasons as the reports show them (``audit_core.report``): a method's machine code never reaches the reader.

Text-only methods set reasons such as ``no_questions: only 2 question(s) ...`` and failed calls bare codes such as
``rate_limited``; the app, the CLI and the PDF show them through ``reason_note``, ``result_line``, ``cell_reason``
and ``explain_verdict``, which put them in words (``verdict.plain_reason``).
"""
from __future__ import annotations

import re

from audit_core import report

NO_QUESTIONS = "no_questions: only 2 question(s) could be made from this document (at least 3 needed)"
#: a code as methods write it: lowercase words joined by underscores
CODE = re.compile(r"\b[a-z]+(?:_[a-z]+)+\b")


def test_reason_note_and_result_line_drop_a_code_prefix():
    info = {"score": None, "decision": None, "reason": NO_QUESTIONS}
    assert report.reason_note("interrogation", info) == (
        "Interrogation (IA) gave no answer: only 2 question(s) could be made from this document (at least 3 needed)")
    assert report.result_line(info) == (
        "no answer (only 2 question(s) could be made from this document (at least 3 needed))")
    scored = {"score": 0.4, "decision": None, "reason": "no_own_words: every 4-word run is shared"}
    assert report.reason_note("cited_sources", scored).endswith("decides nothing: every 4-word run is shared")


def test_a_bare_code_is_said_in_words():
    assert report.result_line({"score": None, "reason": "document_too_short"}) == (
        "no answer (the document is too short for this method)")
    assert report.result_line({"score": None, "reason": "rate_limited"}) == (
        "no answer (the target limited the rate of requests and the calls failed)")


def test_a_stored_verdict_with_codes_is_shown_without_them():
    """A verdict stored before its reason was put in words (history) reads the same as a new one, in the table
    cell and in the explanation, and the explanation's hints still read it (no logprobs, a failed call)."""
    verdict = {"doc_id": "d", "verdict": "inconclusive", "rule": "R1",
               "reason": f"Interrogation (IA): {NO_QUESTIONS}; MBA: no_logprobs; RAG-MIA: target_error",
               "methods": {"interrogation": {"score": None, "decision": None, "reason": NO_QUESTIONS},
                           "mba": {"score": None, "decision": None, "reason": "no_logprobs"},
                           "rag_mia": {"score": None, "decision": None, "reason": "target_error"}}}
    cell = report.cell_reason(verdict["reason"])
    text = report.explain_verdict(verdict)
    for shown in (cell, text):
        assert not CODE.search(shown), shown
        assert "only 2 question(s) could be made" in shown
    assert "logprobs" in text and "The target does not return the token probabilities" in text
    assert "Some target calls failed" in text


def test_the_pdf_shows_no_code(tmp_path):
    """The PDF's verdict tables and evidence, from an audit whose methods gave coded reasons."""
    from pypdf import PdfReader
    import io

    reasons = {"interrogation": NO_QUESTIONS, "rag_mia": "document_too_short"}
    result = {
        "target": "demo", "created": "2024-01-01T00:00:00",
        "config": {"methods": list(reasons)},
        "documents": [{"id": "d", "text": "A short text."}],
        "results": {"d": {m: {"method": m, "doc_id": "d", "score": None, "decision": None, "reason": r,
                              "evidence": {}} for m, r in reasons.items()}},
        "verdicts": [{"doc_id": "d", "verdict": "inconclusive", "score": None, "rule": "R1",
                      "reason": "; ".join(f"{m}: {r}" for m, r in reasons.items()),
                      "methods": {m: {"score": None, "decision": None, "reason": r} for m, r in reasons.items()}}],
    }
    pdf = report.pdf_report(result)
    text = " ".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf)).pages)
    text = " ".join(text.split())
    assert "no_questions" not in text and "document_too_short" not in text
    assert "the document is too short for this method" in text
