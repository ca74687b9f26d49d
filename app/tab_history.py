"""Tab "History": past audits from the store, reopenable, re-exportable and deletable.

History holds the full texts of the audited documents; the app listens on
localhost only (streamlit_config/config.toml), so only the local user sees it.
Deleting removes an audit's rows and the target answers it received, and
rewrites the file so that the texts are gone from the disk too.
"""
from __future__ import annotations

import threading

import streamlit as st

#: session-state slot: what a delete button asked to delete, awaiting confirmation
_CONFIRM = "history_confirm"
ALL = "__all__"


def running_run_ids() -> set[str]:
    """Runs whose audit thread is alive in this app process (any browser session).

    app/jobs.py names each audit thread ``audit-<first 8 characters of the run id>``.
    """
    return {t.name.removeprefix("audit-") for t in threading.enumerate()
            if t.name.startswith("audit-") and t.is_alive()}


def _is_running(run_id: str, live: set[str]) -> bool:
    return run_id[:8] in live


def _follow_newest(rows: list[dict]) -> None:
    """Select the newest audit when one appeared since the last drawing (a finished audit is shown first)."""
    ids = [r["id"] for r in rows]
    seen = st.session_state.get("history_ids")
    if seen is not None and ids and ids[0] not in seen:
        st.session_state["history_run"] = ids[0]
    elif st.session_state.get("history_run") not in ids:
        st.session_state.pop("history_run", None)
    st.session_state["history_ids"] = ids


def _deleted_message(compacted: bool, what: str) -> str:
    if compacted:
        return f"Deleted {what}, with the target answers received for it; the texts are gone from the history file."
    return (f"Deleted {what}, with the target answers received for it. Another program (an audit running from the "
            "command line?) is reading the history file, so the space the texts took is cleared the next time "
            "something is deleted.")


def _label(row: dict) -> str:
    """How the audit picker names an audit; the delete confirmation names it the same way."""
    return f"{row['created']} · {row['target']} · {row['documents']} document(s)"


def _confirm(store, rows: list[dict], live: set[str], selected: str) -> None:
    """The confirmation step of a delete: say what goes, then delete or keep.

    A confirmation asked for one audit stands only while that audit is the one selected: kept after
    another was picked, "Yes, delete" deleted the audit asked about while a different one was shown.
    """
    from audit_core.history import delete_all_history, delete_audit

    asked = st.session_state.get(_CONFIRM)
    if asked == ALL:
        st.warning(f"Delete all {len(rows)} audit(s) in the history, with their documents, results and every "
                   "stored target answer? This cannot be undone.")
    else:
        row = next((r for r in rows if r["id"] == asked), None)
        if row is None or asked != selected:
            st.session_state.pop(_CONFIRM, None)
            return
        st.warning(f"Delete the audit selected above ({_label(row)}, {row['status']}) with its documents, results "
                   "and the target answers it received? This cannot be undone.")
    c1, c2 = st.columns(2)
    if c1.button("Yes, delete", key="history_confirm_yes", type="primary"):
        st.session_state.pop(_CONFIRM, None)
        try:
            if asked == ALL:
                compacted = delete_all_history(store, running=sorted(live))
                st.session_state.pop("result", None)
                st.session_state.pop("result_run_id", None)
                message = _deleted_message(compacted, "all past audits")
            else:
                running = [asked] if _is_running(asked, live) else []
                compacted = delete_audit(store, asked, running=running)
                if st.session_state.get("result_run_id") == asked:
                    st.session_state.pop("result", None)
                    st.session_state.pop("result_run_id", None)
                message = _deleted_message(compacted, "the audit")
        except (ValueError, KeyError) as exc:
            st.session_state["history_error"] = str(exc).strip("'\"")
        else:
            st.session_state["history_message"] = message
        st.rerun()
    if c2.button("Keep it", key="history_confirm_no"):
        st.session_state.pop(_CONFIRM, None)
        st.rerun()


def render_history_tab() -> None:
    import sqlite3

    from app.resources import StoreUnavailable, get_store, plain_error
    from audit_core.history import history_rows, load_audit

    from app.tab_results import live_audit
    from app.tab_run import running_notice

    running_notice()  # a running audit stays in reach after a page reload
    try:
        store = get_store()
        rows = history_rows(store)
    except (StoreUnavailable, sqlite3.DatabaseError) as exc:  # a damaged file is bad input: said, with what to do
        st.error(plain_error(exc))
        return
    if st.session_state.get("history_message"):
        st.success(st.session_state.pop("history_message"))
    if st.session_state.get("history_error"):
        st.error(st.session_state.pop("history_error"))
    if not rows:
        st.info("No audit has been run yet.")
        return
    st.caption("The history keeps your documents' texts on this computer; the app is reachable from this "
               "computer only.")
    st.dataframe([{k: v for k, v in r.items() if k != "id"} for r in rows], hide_index=True)
    _follow_newest(rows)
    # no status in the label: the browser keeps showing the label it drew when the audit was chosen, so a
    # status in it went stale (a resumed audit read "cancelled" while the table said "running")
    labels = {r["id"]: _label(r) for r in rows}
    run_id = st.selectbox("Audit", list(labels), format_func=labels.get, key="history_run")
    live = running_run_ids()
    running = _is_running(run_id, live)
    c1, c2, c3 = st.columns(3)
    # tab 3 shows a running audit's verdicts so far, and its result when it ends, in place of an opened one
    shown_live = live_audit() is not None
    # a click from a page drawn before the audit started still arrives: it must not open either
    if c1.button("Open in Results", key="history_open", disabled=shown_live) and not shown_live:
        st.session_state["result"] = load_audit(store, run_id)
        st.session_state["result_run_id"] = run_id
        st.session_state["history_message"] = "Opened: see tab 3 Results (exports are there too)."
        st.rerun()  # the Results tab is drawn before this one
    if shown_live:
        c1.caption("Tab 3 Results shows the running audit until it ends; open this one then, or cancel the "
                   "running audit in tab 2 Run.")
    if running:
        c2.caption("This audit is running: cancel it in tab 2 Run before deleting it.")
    elif c2.button("Delete this audit", key="history_delete"):
        st.session_state[_CONFIRM] = run_id
    if not live and c3.button("Delete all history", key="history_delete_all"):
        st.session_state[_CONFIRM] = ALL
    if st.session_state.get(_CONFIRM):
        _confirm(store, rows, live, run_id)
