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


def test_the_collection_note_is_not_printed_again_when_the_sentence_already_says_it(capsys):
    from app.cli import _print_collection

    why = "no controls were given: add documents you never published to test the collection as a whole"
    _print_collection({"method": None, "note": why, "reason": why})
    out = capsys.readouterr()
    assert (out.out + out.err).count(why) == 1
    # a test with a p-value: its note (what the controls would change) is its own line
    bias = "controls rewritten by a local model score lower than unpublished texts: p is optimistic"
    _print_collection({"method": "srag", "p_value": 0.01, "n_documents": 20, "n_controls": 20,
                       "controls_kind": "rewritten", "note": bias})
    assert "about this test: " + bias in capsys.readouterr().err
