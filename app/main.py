"""Streamlit entry point: streamlit run app/main.py (./run app).

The app is thin: it collects inputs, calls the library (audit_core, shadow)
and shows what comes back. Layout: the sidebar holds the target and the
settings; the main area has the tabs "1 Documents", "2 Run", "3 Results" and
"History". While an audit runs, the Run tab's progress is a fragment that
redraws itself, and the banner above the tabs, every ``POLL_S`` seconds and
reruns the page as each document is decided, so the Results tab fills in as
the audit goes; a reloaded page finds the running audit again (app/jobs.py,
app/tab_run.py).
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from app.guard import section  # noqa: E402
from app.persist import keep_typed_inputs  # noqa: E402
from app.resources import no_full_gc_after_each_run, show_warmup  # noqa: E402
from app.server_settings import enforce as enforce_server_settings  # noqa: E402
from app.sidebar import render_sidebar  # noqa: E402
from app.tab_canaries import render_canaries_tab  # noqa: E402
from app.tab_documents import render_documents_tab  # noqa: E402
from app.tab_history import render_history_tab  # noqa: E402
from app.tab_results import render_results_tab  # noqa: E402
from app.tab_run import PageReruns, render_run_tab, running_settings_note  # noqa: E402

no_full_gc_after_each_run()  # else each progress redraw stalls the running audit (see its docstring)
PageReruns.page_starts(st.session_state)  # what a whole page run costs paces the running audit's reruns
st.set_page_config(page_title="RAG Provenance Auditor", page_icon="🔎", layout="wide")
_blocked = enforce_server_settings()  # before anything is shown or loaded: started from another folder?
if _blocked:
    st.error(_blocked)
    st.stop()
st.title("RAG Provenance Auditor")
st.write(
    "Find out whether your own texts were put into the knowledge base of someone else's "
    "retrieval-augmented generation (RAG) system, using only that system's public API."
)
show_warmup()  # the default audit's models load in the background while documents are picked

keep_typed_inputs(st.session_state)  # before any widget is drawn
settings = None
with st.sidebar, section("sidebar"):
    running_note = st.container()  # filled once the settings are read: they are compared with a running audit's
    settings = render_sidebar()
with running_note, section("sidebar"):
    running_settings_note(settings)
# The running job's banner is drawn in this container, which is always there: Streamlit resets the selected
# tab when anything is inserted above st.tabs, so a banner that appeared on Start sent the user from tab 2 Run
# back to tab 1. The Run tab's progress fragment fills it (app.tab_run._live).
banner = st.container()
tab_docs, tab_run, tab_results, tab_history, tab_canaries = st.tabs(
    ["1 Documents", "2 Run", "3 Results", "History", "Canaries"])
with tab_canaries, section("Canaries tab"):
    render_canaries_tab()
with tab_docs, section("Documents tab"):
    render_documents_tab()
with tab_results, section("Results tab"):
    render_results_tab()
with tab_history, section("History tab"):
    render_history_tab()
with tab_run, section("Run tab"):
    render_run_tab(settings, banner)
