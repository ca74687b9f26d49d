"""The app's server settings hold wherever it is started from.

Why: Streamlit reads ``.streamlit/config.toml`` from the folder it is started in. The repository's (a
link to ``streamlit_config/``) makes the app listen on this computer only, show errors as messages and
send no usage statistics; ``streamlit run /path/to/app/main.py`` from any other folder got Streamlit's
defaults instead: every network interface (History holds the documents' texts, the sidebar the key
fields), tracebacks on screen, statistics sent. ``./run app`` starts from the repository, but the README
also names the plain ``streamlit run`` command.

What can be set while the app runs is set here on every page run (error details, usage statistics).
Where it listens cannot: a server that listens on every interface because nobody chose an address is
stopped before it serves the page, with what to do instead. An address the user chose (``--server.address``,
``STREAMLIT_SERVER_ADDRESS``, a config file of theirs) is theirs to choose, as README "Security" says.
"""
from __future__ import annotations

import ipaddress
import os
import signal
import sys
import threading

#: options Streamlit applies while it runs, and the values the app needs of them
RUNTIME_OPTIONS = {"client.showErrorDetails": False, "browser.gatherUsageStats": False}


def _is_default(option: str) -> bool:
    from streamlit import config
    from streamlit.config_option import ConfigOption

    return config.get_where_defined(option) == ConfigOption.DEFAULT_DEFINITION


def apply_runtime_options() -> None:
    """Set ``RUNTIME_OPTIONS`` that nobody chose (a user's own choice stands)."""
    from streamlit import config

    for option, value in RUNTIME_OPTIONS.items():
        if _is_default(option) and config.get_option(option) != value:
            config.set_option(option, value)


def unchosen_open_address() -> str | None:
    """Why the server must not serve this page, or None: it listens beyond this computer although no
    one chose its address (Streamlit's default, every interface)."""
    from streamlit import config

    address = config.get_option("server.address")
    if not _is_default("server.address"):
        return None
    try:
        if address and ipaddress.ip_address(address).is_loopback:
            return None
    except ValueError:
        if address == "localhost":
            return None
    return ("The app was started without its settings (Streamlit reads them from the folder it is started "
            "in), so it listens on every network interface: anyone who can reach this port could open its "
            "History, with your documents, and its key fields. It has stopped. Start it with ./run app, or "
            "with 'streamlit run app/main.py' in the repository folder; to serve it on a network on purpose, "
            "pass --server.address (README 'Security').")


def _serving() -> bool:
    """Whether a Streamlit server runs this app: its Runtime exists and is the real one, not the stand-in
    Streamlit's AppTest puts in its place (a mock that passes ``isinstance``; stopping "the server" there
    sent SIGTERM to the test process)."""
    from streamlit import runtime

    return runtime.exists() and type(runtime.get_instance()) is runtime.Runtime


def enforce() -> str | None:
    """Apply the runtime options and, where a server listens on an address nobody chose beyond this computer,
    stop it (after this page, which shows the returned reason instead of the app). None when the app may go
    on, and always where no server runs (Streamlit's AppTest, a script run bare)."""
    apply_runtime_options()
    problem = unchosen_open_address() if _serving() else None
    if problem is None:
        return None
    print(f"error: {problem}", file=sys.stderr)
    # Streamlit's own SIGTERM handler stops the server and its sessions (stopping the runtime alone left the
    # port open); a second later, so that this page can still say why
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
    return problem
