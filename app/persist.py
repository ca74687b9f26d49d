"""Typed inputs survive a switch of the radio buttons that hide them.

Streamlit forgets the state of a widget that one run does not draw: pasting
texts, choosing "Upload a CSV" and going back emptied the paste, and so did
the endpoint's URL, model and key on a switch to the demo target and back.
Writing each such value back into the session state at the top of a run keeps
it (Streamlit's own advice for this). The key stays in this browser session's
memory, as before; a file upload cannot be kept this way (Streamlit does not let
an app set one): its bytes are kept beside it instead (app.tab_documents, app.target_file).
"""
from __future__ import annotations

from typing import MutableMapping, Sequence

#: the widgets whose values are kept (the texts, and the endpoint's pace and reuse policy, drawn only for an
#: endpoint), and the prefixes of the target file's secret widgets. A kept widget is drawn without a ``value``
#: other than its minimum: Streamlit warns of a widget given a default and a value set in the session state.
KEPT = ("pasted", "base_url", "model", "api_key", "target_file_text", "requests_per_minute", "reuse_answers",
        "reuse_days", "n_members", "n_nonmembers", "n_generative", "context_tokens", "elicitation_demo",
        "elicitation_endpoint")
KEPT_PREFIXES = ("tf_secret_", "tf_env_", "insist_")  # "Run X anyway": hidden while an audit runs


def keep_typed_inputs(state: MutableMapping) -> None:
    """Re-assigns the kept widgets' values, so that a run which does not draw them keeps them."""
    for key in list(state):
        if key in KEPT or str(key).startswith(KEPT_PREFIXES):
            state[key] = state[key]


def _forget_kept(key: str, kept: str) -> None:
    """The uploader's own remove button: the file is gone for good (not kept for a later switch back)."""
    import streamlit as st

    if st.session_state.get(key) is None:
        st.session_state.pop(kept, None)


def kept_upload(label: str, key: str, kept: str, forget: str, types: Sequence[str],
                help: str) -> tuple[str, bytes] | None:
    """The file (name, bytes) of uploader ``key``, or the one uploaded there before a switch hid the uploader.

    Streamlit forgets an upload whose widget is not drawn in a run, so switching the documents' Source to
    "Paste text" and back, or the target to the demo and back, lost the file; it is kept in this session's
    memory under ``kept`` until the user removes it (the uploader's x, or the Remove button ``forget``).
    """
    import streamlit as st

    up = st.file_uploader(label, type=list(types), key=key, on_change=_forget_kept, args=(key, kept), help=help)
    if up is not None:
        st.session_state[kept] = (up.name, up.getvalue())
        return st.session_state[kept]
    file = st.session_state.get(kept)
    if file is None:
        return None
    c1, c2 = st.columns([4, 1])
    c1.caption(f"Using {file[0]}, uploaded earlier in this session.")
    if c2.button("Remove", key=forget):
        st.session_state.pop(kept, None)
        st.rerun()
    return file
