"""Streamlit entry point: streamlit run app/main.py (./run app)."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

st.set_page_config(page_title="RAG Provenance Auditor", page_icon="🔎", layout="wide")
st.title("RAG Provenance Auditor")
st.write(
    "Find out whether your own texts were put into the knowledge base of someone else's "
    "retrieval-augmented generation (RAG) system, using only that system's public API."
)
