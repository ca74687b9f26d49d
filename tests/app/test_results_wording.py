"""What the Results and Run tabs say, in words a data owner reads (found in a browser walk of text-only methods
on the demo target)."""
from __future__ import annotations

from audit_core.evidence.calibration import NOT_CLEARED, clearing_withheld
from tests.app.test_app import _results_part, _texts

#: the reason of a document that S-RAG (text only) left "not cleared": its withheld clearing names logprobs
SAMPLED_REASON = f"S-RAG (text only): {NOT_CLEARED}: {clearing_withheld('srag_sampled')}"


def _verdict(reason: str, methods: dict | None = None) -> dict:
    return {"doc_id": "a", "verdict": "inconclusive", "reason": reason, "rule": "R1", "methods": methods or {}}


def test_the_explanation_does_not_say_the_target_lacks_logprobs_when_its_probe_found_them():
    """The Results tab said "The target does not return the token probabilities some methods need" under a
    document of the demo target, whose probe (and the PDF) said logprobs were returned."""
    from app.tab_results import verdict_explanation
    from audit_core.report import NO_LOGPROBS_HINT

    v = _verdict(SAMPLED_REASON)
    with_logprobs = {"capabilities": {"reachable": True, "logprobs": True}, "verdicts": [v]}
    text = verdict_explanation(with_logprobs, v)
    assert "could not decide" in text and "S-RAG without logprobs" in text  # the reason itself stays
    assert NO_LOGPROBS_HINT not in text and "does not return the token probabilities" not in text
    # a target whose probe found none: the sentence is true and stays
    without = {"capabilities": {"reachable": True, "logprobs": False}, "verdicts": [v]}
    assert NO_LOGPROBS_HINT in verdict_explanation(without, v)


def test_the_evidence_view_explains_the_verdict_as_the_stored_probe_found_the_target():
    v = _verdict(SAMPLED_REASON)
    result = {"documents": [{"id": "a", "text": "t"}], "config": {"methods": ["srag_sampled"]},
              "capabilities": {"reachable": True, "logprobs": True}, "verdicts": [v], "results": {}}
    at = _results_part("_detail", result, "k")
    assert not at.exception
    assert "does not return the token probabilities" not in _texts(at, inputs=False).replace("\\", "")


def test_a_skipped_methods_code_is_put_in_words_in_the_table_the_verdict_and_the_evidence():
    """The Results tab showed "no_questions: only 2 question(s) ..." (the method's code for programs)."""
    from app.tab_results import _verdict_rows

    why = "no_questions: only 2 question(s) could be made from this document (at least 3 needed)"
    v = _verdict(f"Interrogation (IA): {why}; Robustness (Tang et al.): document_too_short",
                 {"interrogation": {"score": None, "decision": None, "reason": why}})
    result = {"documents": [{"id": "a", "text": "t"}], "config": {"methods": ["interrogation", "robustness"]},
              "verdicts": [v],
              "results": {"a": {"interrogation": {"method": "interrogation", "doc_id": "a", "score": None,
                                                  "decision": None, "reason": why, "evidence": {}}}}}
    row = _verdict_rows(result)[0]
    assert "no_questions" not in row["reason"] and "only 2 question(s) could be made" in row["reason"]
    assert "document_too_short" not in row["reason"] and "too short" in row["reason"]
    at = _results_part("_detail", result, "k")
    assert not at.exception
    shown = _texts(at, inputs=False).replace("\\", "")
    assert "only 2 question(s) could be made" in shown
    assert "no_questions" not in shown and "document_too_short" not in shown


def test_the_generic_evidence_view_rounds_its_numbers_for_reading():
    """It showed 0.8000000000000002."""
    from app.tab_results import evidence_fields

    res = {"evidence": {"share": 0.8000000000000002, "tiny": 0.000123456, "n": 7, "flag": True,
                        "big": 1234.56789, "nothing": None, "text": "yes"}}
    assert {r["field"]: r["value"] for r in evidence_fields(res)} == {
        "share": "0.8", "tiny": "0.000123", "n": "7", "flag": "True", "big": "1234.568", "nothing": "None",
        "text": "yes"}


def _run_tab_captions(methods: list[str]) -> str:
    from streamlit.testing.v1 import AppTest

    def page():
        import streamlit as st

        from app.sidebar import DEMO, Settings
        from app.tab_run import _shadow_caption
        from shadow.prepare import ShadowConfig

        shadow = ShadowConfig(n_members=60, n_nonmembers=60, n_per_class_generative=30, top_k_docs=4)
        st.caption(_shadow_caption(Settings(DEMO, "", "", st.session_state["methods_chosen"], shadow)))

    at = AppTest.from_function(page, default_timeout=60)
    at.session_state["methods_chosen"] = methods
    at.run()
    assert not at.exception
    return " ".join(c.value for c in at.caption)


def test_the_shadow_size_for_generative_methods_is_said_only_for_the_methods_chosen():
    """The Run tab said "30 per class for MBA / S2MIA" with neither chosen, and left out that the text-only
    methods are prepared on that size too."""
    srag_only = _run_tab_captions(["srag", "rag_mia"])
    assert srag_only == "Shadow RAG: 60 members + 60 non-members, k = 4 retrieved documents."
    assert "MBA" not in srag_only and "S2MIA" not in srag_only and "per class" not in srag_only
    text_only = _run_tab_captions(["verbatim", "interrogation"])
    assert text_only == "Shadow RAG: 30 members + 30 non-members, k = 4 retrieved documents."
    both = _run_tab_captions(["srag", "mba", "verbatim"])
    assert "60 members + 60 non-members for S-RAG; 30 members + 30 non-members for MBA, Verbatim continuation" \
        in both


def test_the_collection_note_is_said_once_under_a_sentence_that_already_gives_it():
    """Without a p-value the collection sentence is its note; the caption under it said it again."""
    from tests.app.test_app import _results_part

    why = "no controls were given: add documents you never published to test the collection as a whole"
    result = {"documents": [{"id": "a", "text": "t"}], "verdicts": [], "config": {},
              "collection": {"method": None, "note": why}}
    at = _results_part("_header", result)
    assert not at.exception
    assert _texts(at, inputs=False).count(why) == 1


def test_the_tables_rows_refer_to_a_standing_reason_given_once_under_it():
    """A browser walk of a text-only chat endpoint: every row of the Results table began with S-RAG's
    "no logprobs (...)" and MBA's "uncalibrated: ...", which the notes above the table already said."""
    from app.tab_results import _verdict_rows
    from audit_core.row_reason import NEVER_CLEARS_SHORT
    from tests.audit_core.test_row_reason import _chat_text_only_audit

    result = {**_chat_text_only_audit(3), "documents": [{"id": f"note-{i}", "text": "t"} for i in range(3)],
              "config": {"methods": ["srag", "mba", "verbatim"]}, "results": {}}
    rows = _verdict_rows(result)
    assert all(NEVER_CLEARS_SHORT in row["reason"] and "reads token probabilities" not in row["reason"]
               and "usable member" not in row["reason"] for row in rows)
    at = _results_part("render_result", result, True)  # live: the table and its notes, no exports
    assert not at.exception
    notes = [c.value for c in at.caption if clearing_withheld("verbatim")[:40] in c.value]
    assert len(notes) == 1


def test_an_audit_where_nothing_could_decide_on_a_chat_target_adds_the_chat_methods_in_one_click():
    """A browser walk: Start pressed on a text-only chat endpoint with the default S-RAG + MBA, before the
    connection check had answered. Every document was inconclusive in 5 s and the page said to add Verbatim
    continuation in the sidebar's list; one click now does it."""
    from streamlit.testing.v1 import AppTest

    result = {"documents": [{"id": "a", "text": "t"}], "verdicts": [], "results": {},
              "config": {"methods": ["srag", "mba"], "target_style": "chat"},
              "not_run": {"srag": "no logprobs"}, "no_signal": {"mba": "uncalibrated"}}

    def page():
        import streamlit as st

        import app.tab_results as tab

        tab._header(st.session_state["shown"])

    def offers(at):
        return [b for b in at.button if b.label.startswith(("Add ", "Use "))]

    at = AppTest.from_function(page)
    at.session_state["shown"], at.session_state["methods"] = result, ["srag", "mba"]
    at.run()
    assert not at.exception and [b.label for b in offers(at)] == ["Add Verbatim continuation to the Methods"]
    offers(at)[0].click().run()
    assert at.session_state["methods"] == ["srag", "mba", "verbatim"]
    assert not offers(at)  # nothing left to add
    # a target found to give no logprobs: the text-only chat set replaces them (MBA would only abstain again)
    at.session_state["shown"] = {**result, "capabilities": {"reachable": True, "logprobs": False}}
    at.session_state["methods"] = ["srag", "mba"]
    at.run()
    assert [b.label for b in offers(at)] == [
        "Use Verbatim continuation (the methods for text-only chat targets)"]
    offers(at)[0].click().run()
    assert at.session_state["methods"] == ["verbatim"] and not offers(at)
    # where some method could decide there is nothing to offer
    at.session_state["shown"] = {**result, "no_signal": {}}
    at.session_state["methods"] = ["srag", "mba"]
    at.run()
    assert not offers(at)


def test_the_power_panel_gives_the_never_cleared_reason_its_cell_points_to():
    result = {"documents": [{"id": "a", "text": "t"}], "verdicts": [], "results": {},
              "config": {"methods": ["verbatim"], "fpr": 0.05},
              "method_power": {"verbatim": {"fpr": 0.05, "power": 0.55, "never_clears": True, "shadow_auc": 0.88,
                                            "decides": True}}}
    at = _results_part("_header", result)
    assert not at.exception
    assert [c for c in at.caption if c.value.startswith(clearing_withheld("verbatim")[:30])]
