"""The CLI says reasons in words: a stored audit's machine codes (``document_too_short``, ``no_questions:``)
never reach the table line or the notes (``verdict.plain_reason``)."""
from __future__ import annotations

from app.cli import _print_failures, row_reason
from audit_core.verdict import Verdict


def test_a_stored_verdicts_coded_reason_is_printed_in_words():
    v = Verdict("d1", "inconclusive", "no_questions: only 2 question(s) could be made from this document", None,
                {"interrogation": {"reason": "no_questions: only 2 question(s)"}}, "R1")
    line = row_reason(v, {})
    assert "no_questions" not in line and line.startswith("only 2 question(s)")
    bare = Verdict("d2", "inconclusive", "document_too_short", None, {"srag": {"reason": "document_too_short"}}, "R1")
    assert row_reason(bare, {}) == "the document is too short for this method"


def test_target_errors_are_named_in_words_with_their_counts(capsys):
    _print_failures({"target_errors": {"rate_limited": 3, "server_error": 1}, "retries": 2})
    err = capsys.readouterr().err
    assert "rate_limited" not in err and "server_error" not in err
    assert "the target limited the rate of requests and the calls failed (3 calls)" in err
    assert "the target's server failed (1 call)" in err
