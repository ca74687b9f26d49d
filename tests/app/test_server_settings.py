"""What the app holds to whatever folder it is started from (app/server_settings.py)."""
from __future__ import annotations

import pytest
from streamlit import config
from streamlit.config_option import ConfigOption

from app import server_settings


@pytest.fixture
def defined(monkeypatch):
    """Say where each option is defined: the default unless named."""
    chosen: dict[str, str] = {}
    monkeypatch.setattr(config, "get_where_defined", lambda key: chosen.get(key, ConfigOption.DEFAULT_DEFINITION))
    return chosen


@pytest.mark.parametrize("address,chosen_by,open_", [
    ("", None, True),  # Streamlit's default: every interface
    ("0.0.0.0", "command-line argument or environment variable", False),  # the user's choice (README 'Security')
    ("127.0.0.1", None, False), ("localhost", None, False), ("::1", None, False),
])
def test_only_an_address_nobody_chose_beyond_this_computer_stops_the_app(monkeypatch, defined, address, chosen_by,
                                                                       open_):
    monkeypatch.setattr(config, "get_option", lambda key: address if key == "server.address" else None)
    if chosen_by:
        defined["server.address"] = chosen_by
    assert (server_settings.unchosen_open_address() is not None) is open_


def test_the_options_set_while_running_keep_a_users_own_choice(monkeypatch, defined):
    set_to = {}
    monkeypatch.setattr(config, "get_option", lambda key: True)
    monkeypatch.setattr(config, "set_option", lambda key, value: set_to.__setitem__(key, value))
    defined["browser.gatherUsageStats"] = "/home/someone/.streamlit/config.toml"
    server_settings.apply_runtime_options()
    assert set_to == {"client.showErrorDetails": False}


def test_streamlits_apptest_from_another_folder_runs_the_app_and_signals_nothing(monkeypatch, tmp_path):
    """AppTest puts a stand-in Runtime in place, which passes ``isinstance``: taken for a server, the app
    was blocked there and SIGTERM was scheduled for the test process itself."""
    import os

    from streamlit.testing.v1 import AppTest

    from tests.app.test_app import APP

    monkeypatch.chdir(tmp_path)  # no .streamlit/config.toml here: every option is Streamlit's default
    monkeypatch.setenv("RPA_AUDIT_DB", str(tmp_path / "audits.sqlite"))
    monkeypatch.setattr(os, "kill", lambda *a: pytest.fail("the app signalled its own process"))
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception and not at.error
    assert [t.label for t in at.tabs][:2] == ["1 Documents", "2 Run"]
