"""Walk the README's first audit in headless Chromium, as a new user would, and keep what they would see.

    python scripts/browser_walk.py http://127.0.0.1:8501 out/walk [--csv assets/sample_documents.csv]

The app must be running (``./run app``). The script uploads the CSV, keeps the sidebar's
defaults (demo target, S-RAG + MBA, quick), presses Start audit and waits for the verdicts;
an audit already running is followed instead (a new page finds it). Then it takes a
screenshot of each tab and downloads the PDF report (redacted, as offered, and with the
texts), the JSON and the CSV, under their offered names. Render the PDF to look at it:
``pdftoppm -png -r 80 out/walk/audit-*.pdf out/walk/page``.

``--endpoint URL --model NAME`` walks an OpenAI-compatible endpoint instead of the demo target
(e.g. ``./run serve --profile chat-nologprobs --corpus assets/demo_kb.jsonl --hide-retrieval``):
it checks the connection, takes whichever method suggestion the check offers, and starts.

Needs Chromium (``apt-get install -y chromium``) and the ``playwright`` package, which
drives that Chromium (``--browser``); no browser is downloaded.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
RUNNING = "An audit is running"


def log(*parts) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("out")
    ap.add_argument("--csv", default=str(Path(__file__).resolve().parents[1] / "assets" / "sample_documents.csv"))
    ap.add_argument("--browser", default="/usr/bin/chromium")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds the audit may take")
    ap.add_argument("--endpoint", help="an OpenAI-compatible base URL to audit instead of the demo target")
    ap.add_argument("--model", default="", help="the model name the endpoint serves (with --endpoint)")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.browser, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1600}, accept_downloads=True)
        page.goto(args.url)
        page.get_by_role("button", name="Check connection").wait_for(timeout=180_000)
        page.wait_for_timeout(2000)
        main_text = lambda: page.get_by_test_id("stMain").inner_text()  # noqa: E731
        if RUNNING not in main_text():
            page.get_by_text("Upload a CSV").click()
            uploader = page.get_by_test_id("stFileUploader").filter(has_text="CSV of your documents")
            uploader.locator("input[type=file]").set_input_files(args.csv)
            page.wait_for_timeout(4000)
            page.screenshot(path=str(out / "1_documents.png"))
            if args.endpoint:
                choose_endpoint(page, args.endpoint, args.model, out)
            page.get_by_role("tab", name="2 Run").click()
            page.wait_for_timeout(2000)
            page.get_by_role("button", name="Start audit").click()
            log("audit started")
        else:
            log("an audit is running: following it")
        page.get_by_role("tab", name="2 Run").click()
        deadline, shot = time.time() + args.timeout, 0.0
        while time.time() < deadline:
            page.wait_for_timeout(30_000)
            text = main_text()
            progress = [line for line in text.splitlines() if line.startswith("documents:")]
            log(progress[:1] or "waiting")
            if time.time() - shot > 300:
                page.screenshot(path=str(out / "2_run_progress.png"))
                shot = time.time()
            if RUNNING not in text and "Audit in progress" not in text:
                break
        else:
            log("the audit did not end in time")
            return 1
        page.wait_for_timeout(3000)
        page.screenshot(path=str(out / "2_run_done.png"))
        page.get_by_role("tab", name="3 Results").click()
        page.wait_for_timeout(6000)
        page.set_viewport_size({"width": 1400, "height": 7000})
        page.wait_for_timeout(3000)
        page.screenshot(path=str(out / "3_results.png"))
        (out / "3_results.txt").write_text(main_text())
        page.set_viewport_size({"width": 1400, "height": 1600})
        for label in ("PDF audit report", "Results (JSON)", "Verdicts (CSV)"):
            with page.expect_download(timeout=300_000) as got:
                page.get_by_role("button", name=label).click()
            got.value.save_as(out / got.value.suggested_filename)
            log("downloaded", got.value.suggested_filename)
        page.get_by_text("Redact document texts").click()  # off: the PDF with the texts
        page.wait_for_timeout(8000)
        with page.expect_download(timeout=300_000) as got:
            page.get_by_role("button", name="PDF audit report").click()
        got.value.save_as(out / f"with-texts-{got.value.suggested_filename}")
        page.get_by_text("Redact document texts").click()
        for tab in ("History", "Canaries"):
            page.get_by_role("tab", name=tab).click()
            page.wait_for_timeout(4000)
            page.screenshot(path=str(out / f"4_{tab.lower()}.png"))
        browser.close()
    return 0


def choose_endpoint(page, url: str, model: str, out: Path) -> None:
    """Point the sidebar at an OpenAI-compatible endpoint, check it, and take the method suggestion it offers."""
    sidebar = page.get_by_test_id("stSidebar")
    sidebar.get_by_text("OpenAI-compatible endpoint").click()
    page.wait_for_timeout(1500)
    sidebar.get_by_role("textbox", name="Base URL", exact=True).fill(url)
    sidebar.get_by_role("textbox", name="Base URL", exact=True).press("Enter")
    page.wait_for_timeout(1000)
    sidebar.get_by_role("textbox", name="Model", exact=True).fill(model)
    sidebar.get_by_role("textbox", name="Model", exact=True).press("Enter")
    page.wait_for_timeout(1500)
    sidebar.get_by_role("button", name="Check connection").click()
    page.wait_for_timeout(3000)
    for _ in range(60):  # the check asks the target a few questions: wait for its answer
        if "Asking the target" not in sidebar.inner_text():
            break
        page.wait_for_timeout(5000)
    page.screenshot(path=str(out / "1_connection.png"), full_page=True)
    (out / "1_sidebar.txt").write_text(sidebar.inner_text())
    for lead in ("Use the methods for text-only", "This target answers like a chat model"):
        button = sidebar.get_by_role("button", name=lead)
        if button.count():
            button.first.click()
            log("took the suggestion:", lead)
            page.wait_for_timeout(3000)
            break
    (out / "1_sidebar_after.txt").write_text(sidebar.inner_text())


if __name__ == "__main__":
    sys.exit(main())
