"""Tab "History": past audits from the store, reopenable and re-exportable."""
from __future__ import annotations

import streamlit as st


def render_history_tab() -> None:
    from app.resources import get_store
    from audit_core.history import history_rows, load_audit

    from app.tab_run import running_notice

    running_notice()  # a running audit stays in reach after a page reload
    store = get_store()
    rows = history_rows(store)
    if not rows:
        st.info("No audit has been run yet.")
        return
    if st.session_state.get("history_message"):
        st.success(st.session_state.pop("history_message"))
    st.dataframe([{k: v for k, v in r.items() if k != "id"} for r in rows], hide_index=True)
    labels = {r["id"]: f"{r['created']} · {r['target']} · {r['status']} · {r['documents']} document(s)" for r in rows}
    run_id = st.selectbox("Audit", list(labels), format_func=labels.get, key="history_run")
    c1, c2 = st.columns(2)
    if c1.button("Open in Results", key="history_open"):
        st.session_state["result"] = load_audit(store, run_id)
        st.session_state["result_run_id"] = run_id
        st.session_state["history_message"] = "Opened: see tab 3 Results (exports are there too)."
        st.rerun()  # the Results tab is drawn before this one
    if c2.button("Delete this audit", key="history_delete"):
        store.delete_run(run_id)
        if st.session_state.get("result_run_id") == run_id:
            st.session_state.pop("result", None)
        st.rerun()
