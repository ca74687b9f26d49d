"""A secret, or the permission to send one, belongs to the origin it was given for.

A key typed or an environment variable allowed in the sidebar was given for the
host shown beside it. When the URL then changes to another origin (another
target file pasted, another base URL typed), the secret must not follow it
there: the widgets that hold it are reset before they are drawn, and the page
says so. The first origin a secret meets binds it, so typing the key before the
URL is no loss.
"""
from __future__ import annotations

from typing import MutableMapping, Sequence

from audit_core.target.base import url_origin as origin


def bind_to_origin(state: MutableMapping, slot: str, url: str, cleared: dict[str, object]) -> str | None:
    """Resets the entries of ``cleared`` (key -> reset value) when ``url``'s origin is not the one they were given for.

    ``state`` is Streamlit's session state (a dict in tests); ``slot`` names the
    group. Returns the origin the secrets were given for when any of them held
    a value and was reset now, else None. Call it before the widgets are drawn.
    """
    now, key = origin(url), f"_consent_origin_{slot}"
    before = state.get(key)
    dropped = None
    if now and before and now != before:
        if any(state.get(k) for k in cleared):
            dropped = before
        for k, value in cleared.items():
            state[k] = value
    if now:
        state[key] = now
    return dropped


def dropped_message(before: str, url: str, what: Sequence[str]) -> str:
    """The page's note for secrets reset by ``bind_to_origin``."""
    return (f"The target moved from {before} to {origin(url)}: {', '.join(what)} given for the old one "
            "will not be sent to the new one. Give it again if you trust the new host with it.")
