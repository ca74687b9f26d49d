"""Typed inputs survive a switch of the radio buttons that hide them.

Streamlit forgets the state of a widget that one run does not draw: pasting
texts, choosing "Upload a CSV" and going back emptied the paste, and so did
the endpoint's URL, model and key on a switch to the demo target and back.
Writing each such value back into the session state at the top of a run keeps
it (Streamlit's own advice for this). The key stays in this browser session's
memory, as before; a file upload cannot be kept this way (Streamlit does not let
an app set one).
"""
from __future__ import annotations

from typing import MutableMapping

#: the text widgets whose values are kept, and the prefixes of the target file's secret widgets
KEPT = ("pasted", "base_url", "model", "api_key", "target_file_text")
KEPT_PREFIXES = ("tf_secret_", "tf_env_")


def keep_typed_inputs(state: MutableMapping) -> None:
    """Re-assigns the kept widgets' values, so that a run which does not draw them keeps them."""
    for key in list(state):
        if key in KEPT or str(key).startswith(KEPT_PREFIXES):
            state[key] = state[key]
