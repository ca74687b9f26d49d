"""One part of the page that fails says so in plain words; the rest of the page is still drawn.

Streamlit's own handling of an uncaught exception replaces everything below it
with a generic box (or a stack trace, where error details are on): the other
tabs, the user's documents and the running audit's progress disappear with it.
Each tab and the sidebar are drawn inside ``section``; the failure's details go
to the terminal for a bug report, scrubbed of anything that looks like a key
(an exception's message may quote a header or a URL).
"""
from __future__ import annotations

import logging
import traceback
from contextlib import contextmanager
from typing import Iterator

import streamlit as st

log = logging.getLogger(__name__)


@contextmanager
def section(name: str) -> Iterator[None]:
    """Draws a part of the page; an unexpected failure in it becomes a message in its place.

    Streamlit's rerun and stop are BaseExceptions and pass through untouched.
    """
    try:
        yield
    except Exception as exc:  # noqa: BLE001 -- the page must stay usable whatever failed inside one part
        from audit_core.report import scrub_text

        log.error("the %s failed:\n%s", name, scrub_text(traceback.format_exc()))
        # Streamlit forgets the value of a widget a run does not draw: those after the failure are reset
        st.error(f"Something went wrong in the {name} ({type(exc).__name__}); this is a bug in the auditor. "
                 f"The rest of the page works, but settings of the {name} that are not shown now go back to "
                 "their defaults: check them once it is drawn again. The details are in the terminal that runs "
                 "the app: please report them with what you did.")
