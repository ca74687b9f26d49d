"""The canaries tab (AppTest): the kit just made is the kit shown."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _page(tmp_path: Path) -> Path:
    page = tmp_path / "canaries_page.py"
    page.write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                    "from app.tab_canaries import render_canaries_tab\nrender_canaries_tab()\n")
    return page


def test_a_new_kit_is_the_one_shown_and_downloaded(tmp_path, monkeypatch):
    """After a second "Make", the page said the new kit's id but showed the first kit's canaries."""
    from streamlit.testing.v1 import AppTest

    from audit_core.evidence.canaries import kits_dir, load_kit

    monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path / "cache"))
    at = AppTest.from_file(str(_page(tmp_path)), default_timeout=60)
    at.run()
    for _ in range(2):
        at.button(key="canary_make").click().run()
        made = at.success[-1].value.split()[1]
        assert at.selectbox(key="canary_choice").value == made
        kit = load_kit(kits_dir() / f"{made}.json")
        assert at.text_area[0].value == "\n\n".join(d.text for d in kit.published())
    assert not at.exception


def test_a_kit_is_audited_in_the_app_its_siblings_as_canary_controls(tmp_path, monkeypatch):
    """The app made kits but audited them only from the command line: tab 1 now takes a kit, its published
    canaries as the documents and their siblings as controls of the kind "canaries" (R0's rate by construction)."""
    from streamlit.testing.v1 import AppTest

    import audit_core.history as history
    from audit_core.evidence.canaries import kits_dir, new_kit, save_kit

    monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RPA_AUDIT_DB", str(tmp_path / "audits.sqlite"))
    monkeypatch.setenv("RPA_WARMUP", "0")
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=120)
    at.run()
    at.radio(key="docs_source").set_value("A canary kit").run()
    assert "No canary kit on this computer yet" in " ".join(i.value for i in at.info)
    kit = new_kit(20)
    save_kit(kit, kits_dir() / f"{kit.kit_id}.json")
    at.run()
    assert not at.exception
    assert [d.id for d in at.session_state["documents"]] == [d.id for d in kit.published()]
    assert [d.text for d in at.session_state["controls"]] == [d.text for d in kit.siblings()]
    assert at.session_state["controls_kind"] == "canaries"
    started = []

    def stop(store, docs, target, config):  # the run's identity, then no audit
        started.append(config)
        raise RuntimeError("stopped before the audit")

    monkeypatch.setattr(history, "resume_or_start_run", stop)
    at.button(key="start_audit").click().run()
    assert started and started[0]["controls_kind"] == "canaries"
    assert len(started[0]["controls"]) == len(kit.siblings())
    at.radio(key="docs_source").set_value("Paste text").run()
    assert at.session_state["controls_kind"] == "declared" and not at.session_state["controls"]
