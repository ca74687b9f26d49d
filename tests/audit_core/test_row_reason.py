"""A verdict's row in a table of verdicts (CLI, app, PDF): its own reason, what every row shares said once."""


def test_a_row_where_every_method_abstains_for_the_whole_audit_says_so_briefly():
    from audit_core.row_reason import row_reason
    from audit_core.methods.base import MethodResult
    from audit_core.verdict import decide

    abstain = [MethodResult("srag", "d", None, None, "no signal: AUC 0.64; none of its queries were sent"),
               MethodResult("mba", "d", None, None, "uncalibrated: 3 usable; none of its queries were sent")]
    v = decide("d", abstain)
    silent = {"srag": "no signal: AUC 0.64", "mba": "uncalibrated: 3 usable"}
    assert row_reason(v, silent) == "no method could decide: S-RAG, MBA abstain for the whole audit (why: in the notes)"
    # MBA's reason is this document's own and stays; S-RAG's, leading, is referred to
    assert row_reason(v, {"srag": "no signal: AUC 0.64"}) == \
        "S-RAG (abstains in this audit: why in the notes); also undecided: MBA (uncalibrated: 3 usable)"
    # run anyway (--run-without-signal), a method's reason is the document's own: context_too_long, say
    ran = decide("d", [MethodResult("srag", "d", None, None, "context_too_long: the prompt is too long")])
    assert row_reason(ran, {"srag": "no signal: AUC 0.64"}) == ran.reason
    found = decide("d", [MethodResult("verbatim", "d", 1.0, True, None, {"fpr": 0.05})])
    assert row_reason(found, silent) == found.reason
    alone = decide("d", abstain[:1])  # one method: "abstains"
    assert row_reason(alone, silent) == "no method could decide: S-RAG abstains for the whole audit (why: in the notes)"


def test_a_whole_audit_abstention_that_leads_a_row_is_referred_to_as_well():
    """A document Verbatim continuation could not read (too short, say) is led by the first method in voting
    order, S-RAG, whose whole reason "no logprobs (...)" then stood in the row as before."""
    from audit_core.methods.base import MethodResult
    from audit_core.row_reason import ABSTAINS_SHORT, row_reason
    from audit_core.verdict import decide

    no_logprobs = "no logprobs (the target returns text only; this method reads token probabilities)"
    v = decide("d", [MethodResult("srag", "d", None, None, no_logprobs),
                     MethodResult("verbatim", "d", None, None, "too short: Verbatim needs at least 12 words")])
    assert v.reason.startswith(f"S-RAG: {no_logprobs}")
    line = row_reason(v, {"srag": no_logprobs})
    assert "reads token probabilities" not in line and line.startswith(f"S-RAG {ABSTAINS_SHORT}")
    assert "too short: Verbatim needs at least 12 words" in line  # the document's own reason stays


def test_a_rows_standing_reasons_are_said_once_and_the_row_keeps_what_is_its_own():
    """On a text-only chat target each of the 20 rows was about 900 characters: the two deciding methods'
    reasons for never saying "not found" and the abstaining methods' reasons, the same on every row."""
    from audit_core.row_reason import ABSTAINS_SHORT, NEVER_CLEARS_SHORT, never_clears_notes, row_reason
    from audit_core.evidence.calibration import clearing_withheld
    from audit_core.methods.base import MethodResult
    from audit_core.verdict import decide

    cited, verbatim = clearing_withheld("cited_sources"), clearing_withheld("verbatim")
    results = [MethodResult("srag", "d", None, None, "no signal: AUC 0.64 (interval 0.55-0.73); none of its queries were sent"),
               MethodResult("mba", "d", None, None, "uncalibrated: 3 usable member(s); none of its queries were sent"),
               MethodResult("verbatim", "d", 0.2, None, f"not cleared: {verbatim}", {"fpr": 0.05, "member_p_value": 0.4}),
               MethodResult("cited_sources", "d", 0.1, None, f"not cleared: {cited}",
                            {"fpr": 0.05, "member_p_value": 0.5})]
    v = decide("d", results)
    assert cited in v.reason and verbatim in v.reason and "no signal: AUC 0.64" in v.reason
    silent = {"srag": "no signal: AUC 0.64 (interval 0.55-0.73)", "mba": "uncalibrated: 3 usable member(s)"}
    line = row_reason(v, silent)
    assert cited not in line and verbatim not in line and "AUC 0.64" not in line and "3 usable" not in line
    assert line.count(NEVER_CLEARS_SHORT) == 2 and line.count(ABSTAINS_SHORT) == 2
    assert "Cited sources: not cleared" in line and "Verbatim continuation: not cleared" in line
    assert len(line) < len(v.reason) / 2
    assert never_clears_notes([v]) == [cited, verbatim]
    from audit_core.report import cleared_text

    assert cleared_text({"never_clears": True}, "under the table").endswith("the reason is given under the table)")
    # a method that ran anyway keeps its own reason for the document
    assert "AUC 0.64" in row_reason(v, {"mba": silent["mba"]})
    # a member call names no standing reason, and has no note
    found = decide("d", [MethodResult("verbatim", "d", 1.0, True, None, {"fpr": 0.05})])
    assert row_reason(found, silent) == found.reason and never_clears_notes([found]) == []


def _chat_text_only_audit(n: int = 6) -> dict:
    """A stored audit as a text-only chat target gives it: S-RAG cannot run, MBA has no signal on its shadow,
    and Verbatim continuation, which never says "not found", leaves every document not cleared."""
    from audit_core.evidence.calibration import clearing_withheld
    from audit_core.methods.base import MethodResult
    from audit_core.verdict import decide

    verbatim = clearing_withheld("verbatim")
    no_logprobs = "no logprobs (the target returns text only; this method reads token probabilities)"
    uncalibrated = "uncalibrated: the shadow gave 3 usable member(s) and 1 non-member(s)"
    verdicts = [decide(f"note-{i}", [
        MethodResult("srag", f"note-{i}", None, None, no_logprobs),
        MethodResult("mba", f"note-{i}", None, None, f"{uncalibrated}; none of its queries were sent"),
        MethodResult("verbatim", f"note-{i}", 0.1 * i, None, f"not cleared: {verbatim}",
                     {"fpr": 0.05, "member_p_value": 0.5})]).to_json() for i in range(n)]
    return {"verdicts": verdicts, "not_run": {"srag": no_logprobs}, "no_signal": {"mba": uncalibrated}}


def test_a_stored_audits_rows_read_as_the_cli_reads_its_own():
    """The app and the PDF read the stored JSON, the CLI its Verdict objects: the same row either way."""
    from audit_core.evidence.calibration import clearing_withheld
    from audit_core.row_reason import NEVER_CLEARS_SHORT, never_clears_notes, row_reason, silent_reasons
    from audit_core.verdict import Verdict

    r = _chat_text_only_audit()
    silent = silent_reasons(r)
    assert set(silent) == {"srag", "mba"}
    for v in r["verdicts"]:
        line = row_reason(v, silent)
        assert line == row_reason(Verdict(**v), silent)
        assert NEVER_CLEARS_SHORT in line and clearing_withheld("verbatim") not in line
        assert "usable member" not in line and "reads token probabilities" not in line
    assert never_clears_notes(r["verdicts"]) == [clearing_withheld("verbatim")]


def test_the_pdfs_tables_say_each_standing_reason_once_beside_them():
    """Each of the PDF's two verdict tables had every row carry Verbatim's 250-character reason for never
    saying "not found" and each abstaining method's reason (cut at 300 characters, so that what differed
    between rows, the score, was cut off)."""
    import io

    from pypdf import PdfReader

    from audit_core import report
    from audit_core.evidence.calibration import clearing_withheld
    from audit_core.row_reason import NEVER_CLEARS_SHORT

    r = {**_chat_text_only_audit(), "target": "http://127.0.0.1:8200/v1 · smollm2-135m-instruct",
         "created": "2026-12-01T10:00:00+00:00", "config": {"methods": ["srag", "mba", "verbatim"]},
         "documents": [{"id": f"note-{i}", "text": "A patient note about a knee. " * 8} for i in range(6)]}
    table, _ = report.verdict_table(r)
    assert all(NEVER_CLEARS_SHORT in row[2] and "usable member" not in row[2] for row in table[1:])
    pages = [" ".join(p.extract_text().split()) for p in PdfReader(io.BytesIO(report.pdf_report(r))).pages]
    first = pages[0]
    assert "S-RAG could not run on this target: no logprobs" in first  # what the rows now refer to
    assert first.count(NEVER_CLEARS_SHORT) == 6
    head = " ".join(clearing_withheld("verbatim").split()[:8])
    assert first.count(head) == 1
    # the second table ("Verdicts", with the scores) has its own note under it
    rest = " ".join(pages[1:])
    at = rest.index("Verdicts Document Verdict Reason")
    assert rest.count(NEVER_CLEARS_SHORT, at) == 6 and head in rest[at:]


def test_the_power_tables_never_cleared_cell_points_to_a_reason_under_that_table():
    """The "Cleared" cell said "the reason is given with each document"; with every document a member no
    row or paragraph gave it. It is now said under the method-power table itself (app and PDF)."""
    import io

    from pypdf import PdfReader

    from audit_core import report
    from audit_core.evidence.calibration import clearing_withheld
    from audit_core.methods.base import MethodResult
    from audit_core.verdict import decide

    verdicts = [decide(f"n{i}", [MethodResult("verbatim", f"n{i}", 1.0, True, None, {"fpr": 0.05})]).to_json()
                for i in range(3)]
    r = {"verdicts": verdicts, "target": "http://127.0.0.1:8200/v1 · m", "created": "2026-12-01T10:00:00+00:00",
         "config": {"methods": ["verbatim"], "fpr": 0.05},
         "documents": [{"id": f"n{i}", "text": "A patient note about a knee. " * 8} for i in range(3)],
         "method_power": {"verbatim": {"fpr": 0.05, "power": 0.55, "never_clears": True, "shadow_auc": 0.88,
                                       "decides": True}}}
    assert report.never_clears_lines(r) == [clearing_withheld("verbatim")]
    assert report.method_power_rows(r)[1][3].endswith("the reason is given under this table)")
    text = " ".join(" ".join(p.extract_text() for p in PdfReader(io.BytesIO(report.pdf_report(r))).pages).split())
    cell = text.index("the reason is given under this table")
    assert " ".join(clearing_withheld("verbatim").split()[:8]) in text[cell:]
