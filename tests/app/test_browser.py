"""The sidebar's key field in a real browser (issue 20 point 7): typed, then left with Tab.

AppTest sets a widget's value directly and has no focus events, so it cannot show
what a person sees: a password field whose value reaches the app only when the
field loses focus. Here headless Chromium drives the real app over its websocket
with the keyboard, against tests/fake_openai_server.py, which accepts one key only.

Skipped without Chromium (``apt-get install -y chromium``) or without the
``playwright`` package (pinned in requirements.txt; it drives the system's
Chromium, nothing is downloaded).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.fake_openai_server import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-browser-tab-3f9c1e7a52d84b06"  # matches no scrubber pattern; only the app's handling moves it
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _chromium() -> str:
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    pytest.skip("no Chromium on this machine (apt-get install -y chromium)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _served(script: Path, tmp_path: Path):
    """``streamlit run script`` (as ./run app starts app/main.py) on a free loopback port: its address."""
    port = _free_port()
    env = {**os.environ, "RPA_CACHE_DIR": str(tmp_path / "cache"), "RPA_WARMUP": "0"}
    env.pop("OPENAI_API_KEY", None)
    log = open(tmp_path / "app.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(script), "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.time() < deadline, (tmp_path / "app.log").read_text()[-2000:]
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture
def app_url(tmp_path):
    """The real app on a free loopback port."""
    with _served(ROOT / "app" / "main.py", tmp_path) as url:
        yield url
    # the key is in no file the app wrote, nor in its log
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert KEY.encode() not in f.read_bytes(), f


def _field(page, label: str):
    return page.get_by_label(label, exact=True)


def _type_and_tab(page, label: str, text: str) -> None:
    """Click the field, type as a person does, leave with Tab (no Enter)."""
    field = _field(page, label)
    field.click()
    field.press("ControlOrMeta+a")
    page.keyboard.type(text, delay=5)
    page.keyboard.press("Tab")


def _sidebar_text(page) -> str:
    return page.get_by_test_id("stSidebar").inner_text()


def _wait_for(page, predicate, what: str, timeout_s: float = 90) -> str:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        text = _sidebar_text(page)
        if predicate(text):
            return text
        page.wait_for_timeout(250)
    raise AssertionError(f"the sidebar never showed {what}; it shows:\n{_sidebar_text(page)}")


def test_a_key_typed_and_left_with_tab_is_registered_and_sent(app_url):
    chromium = _chromium()
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    closed_port = _free_port()  # nothing listens there

    with FakeOpenAIServer(api_key=KEY, models=["m"]) as srv, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            page.goto(app_url)
            page.get_by_role("button", name="Check connection").wait_for(timeout=60_000)
            page.get_by_test_id("stSidebar").get_by_text("OpenAI-compatible endpoint").click()
            _field(page, "API key").wait_for(timeout=30_000)

            # an unreachable URL with no key is reported as unreachable, not as a rejected key
            _type_and_tab(page, "Base URL", f"http://127.0.0.1:{closed_port}/v1")
            _type_and_tab(page, "Model", "m")
            _wait_for(page, lambda t: f"127.0.0.1:{closed_port}" in t or "No key" in t, "the no-key caption")
            page.get_by_role("button", name="Check connection").click()
            alert = page.get_by_test_id("stSidebar").get_by_test_id("stAlert")
            alert.first.wait_for(timeout=30_000)
            message = alert.first.inner_text()
            assert f"cannot connect to http://127.0.0.1:{closed_port}/v1" in message, message
            assert "authentic" not in message.lower() and "key" not in message.lower(), message

            # the real server: the key is typed and the field is left with Tab, never Enter
            _type_and_tab(page, "Base URL", srv.base_url)
            _type_and_tab(page, "API key", KEY)
            text = _wait_for(page, lambda t: "The key you entered will be sent to" in t, "the key being registered")
            assert f"127.0.0.1:{srv.port}" in text and "No key" not in text
            # dots, never the key, on the page
            assert _field(page, "API key").get_attribute("type") == "password"
            assert KEY not in page.inner_text("body")

            page.get_by_role("button", name="Check connection").click()
            text = _wait_for(page, lambda t: "Connected" in t or "failed" in t.lower() or "rejected" in t.lower(),
                             "the connection result")
            assert "Connected" in text, text
            sent = [r for r in srv.requests if r["has_auth"]]
            assert sent, srv.requests  # the typed key went with the check

            # another key, again left with Tab: the earlier "Connected" no longer stands
            _type_and_tab(page, "API key", KEY + "x")
            _wait_for(page, lambda t: "Connected" not in t, "the old connection message gone")
        finally:
            browser.close()


def test_a_page_opened_while_an_audit_runs_shows_the_suggested_methods(tmp_path):
    """A page opened (or reloaded) while an audit ran showed no method chosen at all: the sidebar gave the
    widget its default only while its key was not in the session state, and the page's first run, which ends
    in a rerun to follow the audit's decided documents, left the key there without its value. Seen in
    Chromium on every page after the first; AppTest keeps the value and cannot show it."""
    chromium = _chromium()
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with _served(Path(__file__).with_name("running_audit_page.py"), tmp_path) as url, \
            sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            for visit in range(3):
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(url)
                page.get_by_test_id("stSidebar").get_by_text("Audit size").wait_for(timeout=60_000)
                page.get_by_text("An audit is running").first.wait_for(timeout=30_000)
                page.wait_for_timeout(3_000)  # the rerun that follows the running audit has come and gone
                methods = _sidebar_text(page).split("Methods", 1)[1].split("Auxiliary corpus", 1)[0]
                assert "S-RAG" in methods and "MBA" in methods, (visit, methods)
                page.close()
        finally:
            browser.close()
