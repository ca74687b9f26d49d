"""Tab "1 Documents": the data owner's texts, pasted or from a CSV, validated
before anything runs (usable / too short / duplicate / empty rows), and
optional declared controls for the collection-level test."""
from __future__ import annotations

import hashlib

import streamlit as st

PASTE = "Paste text"
CSV = "Upload a CSV"
KIT = "A canary kit"
#: session-state slot of the kind of controls the documents come with ("declared", or "canaries" for a kit)
CONTROLS_KIND = "controls_kind"
NO_ID = "(none: number the rows)"


def _show_batch(batch, unit: str) -> None:
    for note in getattr(batch, "notes", None) or []:  # about the file as a whole: its encoding, its quoting
        st.warning(note)
    counts = batch.counts()
    cols = st.columns(5)
    for col, (name, label) in zip(cols, [("usable", "Usable"), ("too_short", "Too short"), ("too_long", "Too long"),
                                         ("duplicate", "Duplicate"), ("empty", "Empty")]):
        col.metric(label, counts[name])
    renamed = batch.renamed()
    if renamed:
        shown = "; ".join(f"{unit} {r.row}: {r.renamed_from!r} -> {r.id!r}" for r in renamed[:5])
        st.warning(f"{len(renamed)} id(s) were used by an earlier {unit.lower()} and were renamed, so that each "
                   f"result names one document ({shown}{'; ...' if len(renamed) > 5 else ''}). Give each row an "
                   "id of its own to keep yours.")
    problems = batch.problems()
    if problems:
        with st.expander(f"{len(problems)} {unit}s will not be audited"):
            st.dataframe([{unit: p.row, "status": p.status.replace("_", " "), "why": p.message} for p in problems],
                         hide_index=True)


def _pasted():
    from audit_core.documents import MIN_WORDS, DocumentInputError, documents_from_text

    text = st.text_area("Your texts", key="pasted", height=220,
                        placeholder="Paste one or more texts. Separate texts with an empty line.",
                        help=f"Each text needs at least {MIN_WORDS} words to be audited.")
    if not text.strip():
        st.info("Paste at least one text, or switch to a CSV upload.")
        return None
    try:
        batch = documents_from_text(text)
    except DocumentInputError as exc:
        st.error(str(exc))
        return None
    _show_batch(batch, "block")
    return batch


def _wrong_column_message(df, text_col: str, batch) -> str | None:
    """Explain a text column that yields no document (most likely the wrong column)."""
    from audit_core.documents import MIN_WORDS, guess_text_column

    if batch.documents or len(df) == 0:
        return None
    mean_words = float(df[text_col].astype(str).str.split().str.len().mean())
    likely = guess_text_column(df)
    hint = (f" The column with the longest cells is '{likely}'." if likely != text_col
            else " Your texts may be too short to audit.")
    return (f"Column '{text_col}' gives no document to audit: its cells have {mean_words:.1f} words on average, "
            f"and each document needs at least {MIN_WORDS}. Is it the column that holds your texts?{hint}")


#: the uploaded documents file and controls file (name, bytes), kept while the Source switch hides their uploaders
_KEPT_UPLOAD = "_csv_upload_kept"
_KEPT_CONTROLS = "_controls_upload_kept"
_TABLE_TYPES = ["csv", "tsv", "txt", "jsonl"]


def _kept_file(label: str, key: str, kept: str, forget: str, help: str) -> tuple[str, bytes] | None:
    """A table uploader whose file survives a switch of the Source (``persist.kept_upload``)."""
    from app.persist import kept_upload

    return kept_upload(label, key, kept, forget, _TABLE_TYPES, help)


def _kept_upload() -> tuple[str, bytes] | None:
    """The documents file (``_kept_file``)."""
    return _kept_file("CSV of your documents", "csv_file", _KEPT_UPLOAD, "csv_forget",
                      "One document per row; any delimiter (comma, semicolon, tab); UTF-8 or Windows encoding. A "
                      "JSONL file (one {\"text\": ...} object per line) works too.")


def _csv():
    """The uploaded CSV's documents, and the rows its ``control`` column marks as controls (or None)."""
    from audit_core.documents import DocumentInputError, as_controls, documents_from_table, guess_id_column, \
        guess_text_column, read_table_bytes, split_control_rows

    upload = _kept_upload()
    if upload is None:
        st.info("Upload a CSV file with one document per row.")
        return None, None
    name, data = upload
    try:
        df, ctl = split_control_rows(read_table_bytes(data, name))
        sample = df if len(df) or ctl is None else ctl  # every row a control: guess the columns from those
        text_guess = guess_text_column(sample)
        id_guess = guess_id_column(sample, text_guess)
    except DocumentInputError as exc:
        st.error(f"This file cannot be used: {exc}")
        return None, None
    columns = [str(c) for c in df.columns]
    # the columns chosen for this file, kept with it: a switch to "Paste text" and back kept the file but
    # dropped the choice, and other texts and ids were audited without a word (a review, session 61)
    chosen = st.session_state.setdefault("_columns_chosen", {})
    file_key = hashlib.sha256(data).hexdigest()
    text_pick, id_pick = chosen.get(file_key, (text_guess, id_guess))
    text_pick = text_pick if text_pick in columns else text_guess
    c1, c2 = st.columns(2)
    text_col = c1.selectbox("Text column", columns, index=columns.index(text_pick), key="text_column")
    id_options = [NO_ID] + [c for c in columns if c != text_col]
    id_pick = id_pick if id_pick in id_options else id_guess
    id_index = id_options.index(id_pick) if id_pick in id_options else 0
    id_col = c2.selectbox("Id column (optional)", id_options, index=id_index, key="id_column")
    chosen[file_key] = (text_col, id_col)
    st.caption(f"First rows of {len(df)}:")
    st.dataframe(df.head(5), hide_index=True)
    id_name = None if id_col == NO_ID else id_col
    try:
        batch = documents_from_table(df, text_col, id_name)
        ctl_batch = documents_from_table(ctl, text_col, id_name) if ctl is not None and len(ctl) else None
        controls = as_controls(ctl_batch.documents) if ctl_batch is not None else None
    except DocumentInputError as exc:
        st.error(str(exc))
        return None, None
    message = _wrong_column_message(df, text_col, batch)
    if message:
        st.error(message)
    _show_batch(batch, "row")
    if controls is not None:
        st.caption(f"{len(controls)} usable row(s) marked in the 'control' column are controls: texts you never "
                   "published, audited only to compare your documents with.")
        if ctl_batch.problems():
            st.warning("Control rows not used: " + " ".join(p.message for p in ctl_batch.problems()[:10])
                       + (" ..." if len(ctl_batch.problems()) > 10 else ""))
    return batch, controls


def _uploaded_controls():
    """Controls from a second CSV: texts of the owner's that were never published anywhere."""
    from audit_core.documents import DocumentInputError, as_controls, documents_from_table, guess_id_column, \
        guess_text_column, read_table_bytes

    up = _kept_file("CSV of texts you never published (optional)", "controls_file", _KEPT_CONTROLS,
                    "controls_forget", "Texts like yours (same kind, same style) that were never posted, sent or "
                                       "shared. The text column is guessed as for your documents.")
    if up is None:
        return None
    name, data = up
    try:
        df = read_table_bytes(data, name)
        text_col = guess_text_column(df)
        batch = documents_from_table(df, text_col, guess_id_column(df, text_col))
    except DocumentInputError as exc:
        st.error(f"This controls file cannot be used: {exc}")
        return None
    _show_batch(batch, "control row")
    if not batch.documents:
        st.error(f"The controls file gives no usable text (column '{text_col}' was read as the texts).")
        return None
    return as_controls(batch.documents)


def _controls_section(in_csv, documents) -> list:
    """Declared controls for the collection test: rows of the CSV marked 'control', and/or a second upload."""
    from audit_core.documents import controls_apart, controls_apart_note

    with st.expander("Controls (optional): texts of yours that were never published", expanded=bool(in_csv)):
        st.markdown("With controls, the audit also answers for your whole collection: *are your documents "
                    "treated differently from texts the target cannot hold?* (one p-value, shown first in the "
                    "results). Add a column named `control` (yes / 1 / x on the control rows) to your CSV, or "
                    "upload them here. Without controls the results give per-document verdicts only.")
        uploaded = _uploaded_controls()
    controls, same, repeated = controls_apart(list(in_csv or []) + list(uploaded or []), documents)
    if same or repeated:
        st.warning(controls_apart_note(same, repeated))
    if controls:
        st.success(f"{len(controls)} control(s) ready: they are probed after your documents.")
    return controls


def _canary_kit() -> tuple[list, list]:
    """A kit made in the Canaries tab: its published canaries are the documents, their never-published siblings
    the controls (the same audit as ``./run cli canaries audit``, whose false-positive rate holds by construction)."""
    from audit_core.evidence.canaries import kits_dir, load_kit

    kits = sorted(p.stem for p in kits_dir().glob("*.json"))
    if not kits:
        st.info("No canary kit on this computer yet: make one in the Canaries tab, publish its canaries, and come "
                "back to audit them.")
        return [], []
    chosen = st.selectbox("Kit", kits, key="docs_kit")
    try:
        kit = load_kit(kits_dir() / f"{chosen}.json")
    except ValueError as exc:
        st.error(str(exc))
        return [], []
    published, siblings = kit.published(), kit.siblings()
    st.caption(f"The kit's {len(published)} published canaries are audited as your documents, against their "
               f"{len(siblings)} never-published siblings as controls. The siblings are regenerated from the kit's "
               "seed on this computer; they are sent to the target only as the audit's controls.")
    return published, siblings


def render_documents_tab() -> None:
    """Draw the tab; the usable documents go to st.session_state["documents"]."""
    st.subheader("Which texts do you want to check?")
    source = st.radio("Source", [PASTE, CSV, KIT], key="docs_source", horizontal=True, label_visibility="collapsed")
    if source == KIT:
        docs, siblings = _canary_kit()
        st.session_state["documents"], st.session_state["controls"] = docs, siblings
        st.session_state[CONTROLS_KIND] = "canaries"
        if docs:
            st.success(f"{len(docs)} canaries ready. Go to tab 2 to run the audit.")
        return
    st.session_state[CONTROLS_KIND] = "declared"
    batch, in_csv = (_pasted(), None) if source == PASTE else _csv()
    st.session_state["documents"] = list(batch.documents) if batch is not None else []
    st.session_state["controls"] = _controls_section(in_csv, st.session_state["documents"])
    if batch is not None and batch.documents:
        st.success(f"{len(batch.documents)} document(s) ready. Go to tab 2 to run the audit.")
