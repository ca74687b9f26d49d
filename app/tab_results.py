"""Tab "3 Results": verdicts, per-document evidence, shadow plots, exports.

Everything shown is read from the audit dict (``AuditResult.to_json()``), the
same dict the history stores and the PDF report renders; the plots, the
explanations and the export files come from audit_core.plots / report.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import re

import streamlit as st

# machine codes in reasons (no_questions:, rate_limited) as the data owner reads them; stored results keep them
from audit_core.verdict import plain_reason

log = logging.getLogger(__name__)

WHAT_IT_PROVES = (
    "**What a verdict means.** *member*: the target answered about your text the way RAG systems answer "
    "about documents in their knowledge base. *not found*: it did not; this is not proof that your text is "
    "absent. *inconclusive*: the audit could not decide, for the reason given."
)


def result_key(result: dict) -> str:
    """A stable fingerprint of an audit dict (exports are cached per result).

    A resumed run keeps its first start as ``created`` and may end with the same verdicts: when it ended, what
    it sent and how many controls it scored tell it from the run before (the exports of an audit cancelled
    during its controls, resumed and cancelled again had been the first run's)."""
    coll = result.get("collection") if isinstance(result.get("collection"), dict) else {}
    blob = json.dumps([result.get("target"), result.get("created"), [v.get("doc_id") for v in result.get("verdicts", [])
                                                                     if isinstance(v, dict)],
                       result.get("cancelled"), result.get("finished"), (result.get("account") or {}).get("queries"),
                       len(coll.get("control_scores") or {})], default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _fmt(x, nd: int = 2) -> str | None:
    return None if x is None else f"{float(x):.{nd}f}"


def verdict_explanation(result: dict, verdict: dict) -> str:
    """``report.explain_verdict`` for the Results tab: reasons in words, and the capability probe stored with the
    audit, so that the paragraph never says the target returns no token probabilities where it found them."""
    from audit_core.report import explain_verdict  # it puts the reasons' codes in words itself

    caps = result.get("capabilities")
    return explain_verdict(verdict, caps.get("logprobs") if isinstance(caps, dict) else None)


def _verdict_rows(result: dict) -> list[dict]:
    """One row per document: its verdict, its own reason (``row_reason``: what every row shares is said once,
    in the notes), and a column for each method that ran (the PDF's cells)."""
    from audit_core.report import score_cell, score_column, scored_methods
    from audit_core.row_reason import row_reason, silent_reasons

    ran = scored_methods(result)
    silent = silent_reasons(result)
    rows = []
    against = (result.get("collection") or {}).get("document_p_values") or {}
    for v in result.get("verdicts", []):
        row = {"document": v["doc_id"], "verdict": v["verdict"], "reason": row_reason(v, silent)}
        for m in ran:
            row[score_column(m)] = score_cell(result, v, m)
        if against:  # the document's conformal p-value against the owner's own controls
            row["p against your controls"] = _fmt(against.get(v["doc_id"]), 3)
        rows.append(row)
    return rows


def _chat_methods_offer(result: dict, add: list[str]) -> None:
    """Where nothing could decide on a chat-style target: one click sets the sidebar's Methods for such a
    target, instead of a search of its list. A target found to give no logprobs gets the text-only chat set
    (``suggested_methods``: MBA abstains there too, so keeping it would prepare its shadow for nothing);
    one with logprobs keeps its methods and gains ``add``."""
    from app.sidebar import set_methods
    from audit_core.methods import LABELS, suggested_methods

    current = list(st.session_state.get("methods") or [])
    caps = result.get("capabilities") if isinstance(result.get("capabilities"), dict) else {}
    if caps.get("logprobs") is False:
        offer = suggested_methods(False, bool(caps.get("sources")), "chat")
        label = "Use " + ", ".join(LABELS.get(m, m) for m in offer) + " (the methods for text-only chat targets)"
    else:
        missing = [m for m in add if m not in current]
        offer = current + missing
        label = "Add " + ", ".join(LABELS.get(m, m) for m in missing) + " to the Methods"
    if offer and sorted(offer) != sorted(current):  # the audit sent nothing for the methods it replaces
        st.button(label, key=f"chat-methods-{result_key(result)}", on_click=set_methods, args=(offer,),
                  help="Sets the sidebar's Methods; then start the audit again in tab 2.")


def _header(result: dict) -> None:
    from audit_core.methods import LABELS
    from audit_core.report import auc_reading

    docs = result.get("documents", [])
    st.subheader(f"Audit of {len(docs)} document(s)")
    from audit_core.report import target_label

    st.caption(f"Target: {target_label(result)} · run at {result.get('created')} · methods: "
               + ", ".join(LABELS.get(m, m) for m in (result.get("config") or {}).get("methods", [])))
    from audit_core.evidence.statement import collection_note, collection_sentence

    line = collection_sentence(result.get("collection"))
    if line:  # first: what the collection as a whole shows (issue 17 point 3)
        c = result["collection"]
        strong = c.get("p_value") is not None and c["p_value"] <= c.get("alpha", 0.05)
        # rewritten controls carry a measured bias (the note): their p-value is not shown as settled
        (st.success if strong and c.get("controls_kind") != "generated" else st.info)(line)
        note = collection_note(c)
        if note:
            st.caption(f"About this test: {note}")
    if result.get("damaged"):
        st.warning(f"Part of this audit's record is damaged: {_md(str(result['damaged']))}. The results below were "
                   "rebuilt from the rows saved as each document was answered; the shadow calibration (plots, "
                   "validation AUC) is not among them.")
    if result.get("rebuilt_from_rows") and not result.get("damaged"):
        st.warning("This audit stopped before it finished. The results below were saved as they arrived; "
                   "the shadow calibration (plots, validation AUC) was not saved.")
    elif result.get("cancelled"):
        st.warning("This audit was cancelled. Only the documents answered before the cancel are shown; "
                   "running it again re-uses every answer already received.")
    elif (result.get("failures") or {}).get("stopped"):
        st.error(f"This audit stopped before it finished: {result['failures']['stopped']}. Only the documents "
                 "answered before the stop are shown; fix the cause and run it again (answers already received "
                 "are reused).")
    for m, why in (result.get("not_run") or {}).items():
        st.info(f"{LABELS.get(m, m)} did not run: {plain_reason(why)}.")
    from audit_core.report import mirror_sentences

    for line in mirror_sentences(result):
        (st.caption if ": the shadow mirrors" in line else st.warning)(line)
    insisted = (result.get("config") or {}).get("run_without_signal") or []
    for m, why in (result.get("no_signal") or {}).items():
        sent = ("its queries were sent because you asked to run it anyway" if m in insisted
                else "none of its queries were sent")
        st.warning(f"{LABELS.get(m, m)}: {why}; {sent}. Its result is not counted as agreeing or disagreeing "
                   "with the other methods.")
    from audit_core.report import nothing_could_decide

    add = nothing_could_decide(result)
    if add is not None:
        st.warning("None of the chosen methods could decide anything on this target (see why above), so every "
                   "document is inconclusive: this is no finding either way."
                   + (" The target answers like a chat model: add " + ", ".join(LABELS.get(m, m) for m in add)
                      + " to the sidebar's Methods and run the audit again." if add else ""))
        _chat_methods_offer(result, add)
    counts = {"member": 0, "not found": 0, "inconclusive": 0}
    for v in result.get("verdicts", []):
        counts[v["verdict"]] = counts.get(v["verdict"], 0) + 1
    cols = st.columns(3 + len(result.get("calibrations") or {}))
    for col, (name, n) in zip(cols, counts.items()):
        col.metric(name.capitalize(), n)
    from audit_core.report import retrieval_line

    withheld = sum(v.get("rule") == "R5" for v in result.get("verdicts", []))
    st.caption(f"Retrieval: {retrieval_line(result)}"
               + (f" ({withheld} document(s) not cleared for this reason)." if withheld else "."))
    for col, (m, cal) in zip(cols[3:], (result.get("calibrations") or {}).items()):
        auc = cal.get("shadow_auc")
        col.metric(f"{LABELS.get(m, m)} shadow AUC", "n/a" if auc is None else f"{auc:.2f}",
                   help="Trust indicator: how well the method told the shadow RAG's members from non-members on "
                        f"held-out shadow documents (0.5 = chance, 1 = perfect). Reading: {auc_reading(auc)}.")
    from audit_core.report import method_power_rows

    power = method_power_rows(result)
    if power:
        with st.expander("What each method's calls are worth: power, and what it may call \"not found\""):
            st.caption("A method calls a document a member where at most the chosen share of its shadow's "
                       "non-members score as high; it says \"not found\" only where at most 5% of its shadow's "
                       "members, counted with the document itself, score as low. In between it is inconclusive (\"not cleared\").")
            st.dataframe([dict(zip(power[0], [LABELS.get(row[0], row[0]), *row[1:]])) for row in power[1:]],
                         hide_index=True)
            from audit_core.report import never_clears_lines

            for line in never_clears_lines(result):
                st.caption(_md(line))


def _account(result: dict) -> None:
    acc = result.get("account") or {}
    if acc:
        from audit_core.report import tokens_text

        st.caption(f"Target queries sent: {acc.get('queries', 0)} ({acc.get('failures', 0)} failed, "
                   f"{acc.get('retries', 0)} retries); tokens: {tokens_text(acc)}.")
    from audit_core.report import freshness_sentence

    if freshness_sentence(result):
        st.caption(freshness_sentence(result))


def _srag_detail(result: dict, doc_id: str, key: str) -> None:
    from audit_core import plots
    from audit_core.report import reason_note

    res = (result.get("results") or {}).get(doc_id, {}).get("srag")
    if res is None:
        return
    st.markdown("**S-RAG: probed words and the probability the target gave each**")
    words = (res.get("evidence") or {}).get("words") or []
    left, right = st.columns([2, 3])
    words = [w for w in words if isinstance(w, dict)] if isinstance(words, list) else []  # as the PDF reads them
    if words:
        left.dataframe([{"word": w.get("word"),
                         "probability": _fmt(w.get("prob"), 3) if w.get("prob") is not None else None,
                         "note": plain_reason(w.get("error"))} for w in words], hide_index=True)
    note = reason_note("srag", res)  # "decides nothing" for a score that decides nothing, as MBA's and the PDF
    if note:
        left.caption(note)
    if (result.get("calibrations") or {}).get("srag"):
        right.plotly_chart(plots.srag_histogram_figure_plotly(result, doc_id), key=f"{key}-srag-hist")


_MASK_LABEL = re.compile(r"\[Mask_(\d+)\]")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+\-.!|~$])")


def _md(text: str) -> str:
    """Text shown literally in markdown (a document may contain *, _, # ...)."""
    return _MD_SPECIAL.sub(r"\\\1", text)


def expected(row: dict) -> str:
    e = row.get("expected")
    return " / ".join(map(str, e)) if isinstance(e, (list, tuple)) else str(e)


def marked_masked_text(masked_text: str, rows: list[dict]) -> str:
    """The masked text as markdown, each mask followed by the expected word and the target's answer."""
    by_label = {r.get("mask"): r for r in rows}
    out, pos = [], 0
    for m in _MASK_LABEL.finditer(masked_text):
        out.append(_md(masked_text[pos:m.start()]))
        row = by_label.get(m.group(0))
        if row is None:
            out.append(f"**{_md(m.group(0))}**")
        else:
            mark = "✓" if row.get("correct") is True else "✗" if row.get("correct") is False else "?"
            answer = row.get("predicted") or "no answer"
            out.append(f"**{_md(m.group(0))}** (expected *{_md(expected(row))}*, "
                       f"answered *{_md(str(answer))}* {mark})")
        pos = m.end()
    out.append(_md(masked_text[pos:]))
    return "> " + "".join(out).replace("\n", "\n> ")


def _mba_detail(result: dict, doc_id: str, key: str = "") -> None:
    from audit_core.report import mba_accuracy, mba_unanswered, reason_note

    res = (result.get("results") or {}).get(doc_id, {}).get("mba")
    if res is None:
        return
    st.markdown("**MBA: masked words, expected and predicted**")
    ev = res.get("evidence") or {}
    rows = [x for x in ev.get("rows") or [] if isinstance(x, dict)]
    if ev.get("masked_text"):
        st.markdown(marked_masked_text(ev["masked_text"], rows))
    if rows:
        st.dataframe([{"mask": x.get("mask"), "expected": expected(x), "target's answer": x.get("predicted") or "",
                       "right": "✓" if x.get("correct") is True else "✗" if x.get("correct") is False else "n/a"}
                      for x in rows], hide_index=True)
        acc = mba_accuracy(result, doc_id)
        if acc:
            st.caption(f"{acc[0]} of {acc[1]} answered masked words filled in correctly"
                       f"{mba_unanswered(result, doc_id)}.")
    note = reason_note("mba", res)
    if note:
        st.caption(note)


def _detail(result: dict, key: str) -> None:
    verdicts = {v["doc_id"]: v for v in result.get("verdicts", [])}
    if not verdicts:
        return
    st.markdown("### Evidence per document")
    doc_id = st.selectbox("Document", list(verdicts), key=f"{key}-doc")
    v = verdicts[doc_id]
    st.markdown(f"**Verdict: {v['verdict']}** — {_md(plain_reason(v['reason']))}")
    st.markdown(_md(verdict_explanation(result, v)))  # ids and reasons quote the owner's text: shown as written
    texts = {d["id"]: d["text"] for d in result.get("documents", [])}
    with st.expander("Document text"):
        st.text(texts.get(doc_id, ""))
    for m in (result.get("results") or {}).get(doc_id) or {}:
        view = _DETAIL_VIEWS.get(m)
        if view is None:
            _generic_detail(result, doc_id, m)
        else:
            view(result, doc_id, key)


def _verbatim_detail(result: dict, doc_id: str, key: str = "") -> None:
    from audit_core.plots import method_result
    from audit_core.report import COPIED_NOTE, SIMILARITY_NOTE, verbatim_reproduction

    res = method_result(result, doc_id, "verbatim")
    if res is None:
        return
    st.markdown("**Verbatim continuation: what the target quoted from the part of the document it was not shown**")
    got = verbatim_reproduction(result, doc_id)
    if got is not None and got["longest"]:
        st.markdown(f"> {_md(got['longest'])}")
        st.caption("The longest run reproduced. Your own words are evidence; a stock phrase that any document "
                   "of this kind contains is not.")
        if got.get("ngrams"):
            st.caption(COPIED_NOTE.format(got["ngrams"]))
    elif res.get("score") is None:
        # refusals, empty answers: said, never "reproduced nothing"
        st.caption(f"No reading: {_md(plain_reason(res.get('reason')) or 'no reason recorded')}")
    else:
        st.caption("The target reproduced no run of four words or more from the unseen part.")
    if got is None:
        return
    if got.get("similarity") is not None:
        st.caption(SIMILARITY_NOTE.format(got["similarity"]))
    st.dataframe(got["probes"], hide_index=True)


def shown_value(value) -> str:
    """An evidence field's value as a person reads it: a float rounded to three decimals ("0.8", not
    "0.8000000000000002"), a tiny one in three significant digits; anything else as written. The unrounded
    values stay in the JSON export and, for the scores, in the CSV behind each plot."""
    if isinstance(value, float) and not isinstance(value, bool) and math.isfinite(value):
        if value != 0 and abs(value) < 0.0005:
            return f"{value:.3g}"
        return repr(round(value, 3))
    return str(value)


def evidence_fields(res: dict) -> list[dict]:
    """``report.evidence_scalars`` as table rows, their numbers rounded for reading (``shown_value``)."""
    from audit_core.report import evidence_scalars

    return [{"field": k, "value": shown_value(v)} for k, v in evidence_scalars(res)]


def _generic_detail(result: dict, doc_id: str, method: str) -> None:
    """The evidence of a method without a view of its own: its score and call, or why it has none, its reason,
    and its evidence's scalar fields. Every method in the registry gets at least this."""
    from audit_core.methods import method_label
    from audit_core.plots import method_result
    from audit_core.report import reason_note, result_line

    res = method_result(result, doc_id, method)
    if res is None:
        return
    st.markdown(f"**{_md(method_label(method))}:** {_md(plain_reason(result_line(res)))}")
    note = reason_note(method, res) if res.get("score") is not None else None
    if note:  # a score that decides nothing, or a call with a reason; a missing score's reason is in the line
        st.caption(_md(note))
    rows = evidence_fields(res)
    if rows:
        st.dataframe(rows, hide_index=True)


#: the methods whose evidence has a view of its own, each drawn as ``view(result, doc_id, key)``; every other
#: method gets ``_generic_detail``
_DETAIL_VIEWS = {"srag": _srag_detail, "mba": _mba_detail, "verbatim": _verbatim_detail}


def _kde(result: dict, key: str) -> None:
    from audit_core import plots
    from audit_core.methods import LABELS
    from audit_core.report import plotted_methods

    shown = plotted_methods(result)  # the PDF's: a method that sent nothing for want of signal has no plot
    if not shown:
        return
    st.markdown("### Your documents against the shadow's members and non-members")
    st.caption("Each curve is the score distribution of the shadow RAG's members or non-members; "
               "the marks are your documents.")
    for m in shown:
        st.plotly_chart(plots.kde_figure_plotly(result, m), key=f"{key}-kde-{m}")
        st.download_button(f"{LABELS.get(m, m)} scores behind the plot (CSV)", plots.raw_scores_csv(result, m),
                           file_name=f"{m}_scores.csv", mime="text/csv", key=f"{key}-raw-{m}")


class PdfProgress:
    """A progress bar while the PDF is made: ``pdf_report`` reports each document's evidence laid out (the
    figures of a large audit take minutes, and a spinner said nothing of how far it had got)."""

    def __init__(self, total: int) -> None:
        from audit_core.progress import ProgressClock

        self.total, self.n = total, 0
        self.clock = ProgressClock()
        self.clock.update("pdf", 0, total)
        self.bar = st.progress(0.0, text=self.text())

    def text(self) -> str:
        """ "Preparing the PDF report, documents laid out: 120 / 1000 · about 45 s left" (done / total, time left)."""
        return f"Preparing the PDF report, documents laid out: {self.clock.describe('pdf')}"

    def step(self, n: int = 1) -> None:
        self.n += n
        self.clock.update("pdf", self.n, self.total)
        self.bar.progress(min(1.0, self.n / self.total) if self.total else 1.0, text=self.text())

    def done(self) -> None:
        """The bar goes once the report is made (or could not be)."""
        self.bar.empty()


#: the most documents whose PDF is made as soon as the result is shown; a larger audit's waits for its button
#: (about 50 s for 1,000 documents, 100 s for 4,000, during which the page would not answer: session 55)
PDF_AT_ONCE = 100


def _exports(result: dict, key: str) -> None:
    """PDF, JSON, CSV and scores CSV downloads; built once per result (and redaction choice) and kept in the
    session. The PDF points to the scores CSV for the numbers behind its plots, so it is offered here too.
    Beyond ``PDF_AT_ONCE`` documents the PDF is made when asked for."""
    from audit_core import report
    from audit_core.plots import document_ids

    st.markdown("### Export")
    redact = st.checkbox("Redact document texts (for sharing: each text replaced by its SHA-256 and first words)",
                         value=True, key="redact_exports",
                         help="On by default: a report you hand on should not carry your texts. The hashes "
                              "still let anyone holding the original texts check that they were the ones audited.")
    exports = st.session_state.get("exports")
    if not exports or exports.get("key") != key or exports.get("redact") != redact:
        view = report.export_view(result, redact) if redact else None  # one walk of the result for all four
        exports = {"key": key, "redact": redact, "json": report.results_json(result, redact=redact, view=view),
                   "csv": report.results_csv(result, redact=redact, view=view),
                   "scores": report.scores_csv(result, redact=redact, view=view), "view": view}
        st.session_state["exports"] = exports
    n_docs = len(document_ids(result))
    wanted = n_docs <= PDF_AT_ONCE or st.session_state.get("pdf_wanted") == (key, redact)
    if wanted and "pdf" not in exports and "pdf_error" not in exports:
        bar = PdfProgress(n_docs)
        try:  # the PDF is the most fragile of the exports: its failure must not take the others with it
            exports["pdf"] = report.pdf_report(result, progress=bar.step, redact=redact, view=exports.get("view"))
        except Exception as exc:  # noqa: BLE001 -- said in place of its button; the details go to the log
            log.exception("the PDF report could not be made")
            exports["pdf_error"] = type(exc).__name__
        finally:
            bar.done()
    c1, c2, c3, c4 = st.columns(4)
    if "pdf" in exports:
        c1.download_button("PDF audit report", exports["pdf"], file_name=report.export_name(result, "pdf"),
                           mime="application/pdf", key=f"{key}-pdf")
    elif "pdf_error" not in exports:
        c1.button("Make the PDF audit report", key=f"{key}-make-pdf",
                  on_click=lambda: st.session_state.update(pdf_wanted=(key, redact)),
                  help=f"{n_docs} documents: the report takes a minute or more to lay out, so it is made when "
                       "you ask (its evidence pages go to the members first, the inconclusive next).")
    else:
        c1.error(f"The PDF could not be made ({exports.get('pdf_error')}); this is a bug in the auditor. The JSON "
                 "and CSV hold the same results.")
    c2.download_button("Results (JSON)", exports["json"], file_name=report.export_name(result, "json"),
                       mime="application/json", key=f"{key}-json")
    c3.download_button("Verdicts (CSV)", exports["csv"], file_name=report.export_name(result, "csv"),
                       mime="text/csv", key=f"{key}-csv")
    c4.download_button("Scores behind the plots (CSV)", exports["scores"],
                       file_name=report.export_name(result, report.SCORES_EXT), mime="text/csv", key=f"{key}-scores")


def render_result(result: dict, live: bool = False) -> None:
    """The whole result view for one audit dict (``live``: an audit still running, no exports yet)."""
    from audit_core.report import LIMITATIONS

    key = "live" if live else result_key(result)
    _header(result)
    rows = _verdict_rows(result)
    if rows:
        from audit_core.row_reason import never_clears_notes

        st.dataframe(rows, hide_index=True)
        for note in never_clears_notes(result.get("verdicts", [])):
            st.caption(_md(note))
    else:
        st.info("No document has a verdict yet." if live else "No document was audited, so there is no verdict.")
    st.markdown(WHAT_IT_PROVES)
    with st.expander("What this audit does and does not prove"):
        if result.get("what_this_shows"):  # this audit's own statement (rate, controls), as the PDF gives it
            st.markdown(result["what_this_shows"].replace("$", "\\$"))
        for line in LIMITATIONS:
            st.markdown(f"- {line}")
    _account(result)
    _detail(result, key)
    _kde(result, key)
    if not live:
        _exports(result, key)


def live_audit():
    """The running audit whose verdicts so far this tab shows instead of any opened result, or None.
    History asks too: while there is one, an audit opened there would not be shown."""
    from app.tab_run import CHECK_PREFIX, attached_job

    job = attached_job()
    if job is None or not job.running or job.run_id.startswith(CHECK_PREFIX):
        return None
    return job


def _live() -> bool:
    """While an audit runs, its verdicts so far (the page reruns as each document is decided)."""
    job = live_audit()
    if job is None:
        return False
    partial = job.partial
    if not partial:
        st.info("Audit in progress: the first verdict appears here as soon as the first document is done.")
        return True
    st.info(f"Audit in progress: {len(partial.get('verdicts') or [])} of {job.n_documents} document(s) decided "
            "so far; this page fills in as documents are done (after each one at first, less often once a large "
            "result takes time to show). Exports come when the audit ends.")
    render_result(partial, live=True)
    return True


def render_results_tab() -> None:
    if _live():
        return
    result = st.session_state.get("result")
    if result is None:
        st.info("No results yet: run an audit (tab 2) or open a past one (History).")
        return
    render_result(result)
