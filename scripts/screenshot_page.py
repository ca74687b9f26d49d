"""Screenshot a page in headless Chromium once it shows a given text, over the DevTools protocol.

    python scripts/screenshot_page.py URL OUT.png --browser chromium --wait-for "3 Results"

Chromium's own ``--screenshot`` flag captures after a virtual time budget, which does not
wait for a Streamlit page: the page is drawn from the server's Python run, over a
websocket, in real time. Here the page is polled until its text contains every
``--wait-for`` string (and stops changing), then captured.
"""
from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import tempfile
import time
import urllib.request


def _devtools_page(port: int, deadline: float) -> str:
    """The websocket address of the browser's first page target."""
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=2) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError("Chromium's DevTools endpoint did not come up")


class _Session:
    def __init__(self, ws_url: str):
        import websocket  # websocket-client, pinned in requirements.txt

        # no Origin header: Chromium (111+) refuses DevTools websockets from an origin it was not told to allow
        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.next_id = 0

    def call(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def text(self) -> str:
        res = self.call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''",
                        returnByValue=True)
        return res.get("result", {}).get("value", "") or ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("out")
    ap.add_argument("--browser", default="chromium")
    ap.add_argument("--wait-for", action="append", default=[], help="text the page must show (repeatable)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the page")
    ap.add_argument("--size", default="1400,1000")
    ap.add_argument("--port", type=int, default=9333, help="DevTools port")
    args = ap.parse_args()

    profile = tempfile.mkdtemp(prefix="rpa-shot-")
    proc = subprocess.Popen(
        [args.browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
         "--disable-background-networking", "--disable-component-update", f"--user-data-dir={profile}",
         f"--window-size={args.size}", f"--remote-debugging-port={args.port}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + args.timeout
        s = _Session(_devtools_page(args.port, deadline))
        s.call("Page.enable")
        s.call("Page.navigate", url=args.url)
        last, stable_since = None, time.time()
        while time.time() < deadline:
            text = s.text()
            if text != last:
                last, stable_since = text, time.time()
            # every expected text shown, and nothing redrawn for two seconds
            if all(w in text for w in args.wait_for) and time.time() - stable_since >= 2.0:
                break
            time.sleep(0.5)
        else:
            missing = [w for w in args.wait_for if w not in (last or "")]
            print(f"the page did not show {missing} within {args.timeout:.0f} s", file=sys.stderr)
            return 1
        shot = s.call("Page.captureScreenshot", format="png")
        with open(args.out, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        return 0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        import shutil

        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
