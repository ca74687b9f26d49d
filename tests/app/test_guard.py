"""A part of the page that fails becomes a plain message; the rest of the page is still drawn (app/guard.py)."""
from __future__ import annotations

import logging

import pytest

from tests.app.test_app import APP, LONG_1, SECRET


@pytest.mark.parametrize("part, module, function", [
    ("History tab", "app.tab_history", "render_history_tab"),
    ("sidebar", "app.sidebar", "render_sidebar"),
])
def test_a_failing_part_says_so_and_the_others_still_work(part, module, function, tmp_path, monkeypatch, caplog):
    import importlib

    from streamlit.testing.v1 import AppTest

    def broken(*_a, **_k):
        raise RuntimeError(f"could not reach https://h/v1 with Authorization: Bearer {SECRET}")

    monkeypatch.setattr(importlib.import_module(module), function, broken)
    monkeypatch.setenv("RPA_AUDIT_DB", str(tmp_path / "audits.sqlite"))
    at = AppTest.from_file(APP, default_timeout=120)
    with caplog.at_level(logging.ERROR, logger="app.guard"):
        at.run()
    assert not at.exception, at.exception
    errors = " ".join(str(e.value) for e in at.error)
    assert f"Something went wrong in the {part} (RuntimeError)" in errors and SECRET not in errors
    assert "settings are kept" not in errors and "go back to their defaults" in errors  # what Streamlit does
    assert "RuntimeError" in caplog.text and SECRET not in caplog.text  # the details, scrubbed, for a bug report
    at.text_area(key="pasted").input(LONG_1).run()  # the Documents tab still takes documents
    assert not at.exception
    assert any("1 document(s) ready" in str(e.value) for e in [*at.success, *at.info, *at.markdown, *at.caption])
    if part == "sidebar":
        assert "cannot start until the sidebar" in errors
