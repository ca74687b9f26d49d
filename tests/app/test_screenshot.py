"""The screenshot script: the app as a person sees it, in headless Chromium (skipped without one)."""
from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_screenshot_shows_the_rendered_app(tmp_path):
    if not any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")):
        pytest.skip("no Chromium on this machine (apt-get install -y chromium)")
    out = tmp_path / "app.png"
    res = subprocess.run(["bash", str(ROOT / "scripts" / "screenshot_app.sh"), str(out)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width == 1400 and height > 600  # the viewport of the 1400 x 1000 window
    # the script returns only once the page showed its tabs; a blank page compresses to a few kB
    assert len(data) > 30_000
