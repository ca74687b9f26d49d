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

from typing import MutableMapping

#: the widgets whose values are kept (the texts, and the endpoint's pace and reuse policy, drawn only for an
#: endpoint), and the prefixes of the target file's secret widgets. A kept widget is drawn without a ``value``
#: other than its minimum: Streamlit warns of a widget given a default and a value set in the session state.
KEPT = ("pasted", "base_url", "model", "api_key", "target_file_text", "requests_per_minute", "reuse_answers",
        "reuse_days")
KEPT_PREFIXES = ("tf_secret_", "tf_env_")


def keep_typed_inputs(state: MutableMapping) -> None:
    """Re-assigns the kept widgets' values, so that a run which does not draw them keeps them."""
    for key in list(state):
        if key in KEPT or str(key).startswith(KEPT_PREFIXES):
            state[key] = state[key]
