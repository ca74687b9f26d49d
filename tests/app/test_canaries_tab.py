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
