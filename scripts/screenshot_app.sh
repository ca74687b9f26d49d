#!/usr/bin/env bash
# Start the app, take a screenshot of it with headless Chromium, stop the app,
# so the UI can be looked at as a person sees it (CI artefact, reviews).
#
#   scripts/screenshot_app.sh [out.png]        (default: out/app.png)
#
# Needs Chromium, which this script does not install:
#   apt-get install -y chromium        (Debian / Ubuntu; the binary may be chromium-browser)
# Environment: PORT (default: a free port), WAIT_S (default 120: how long the
# app may take to answer), CHROMIUM (the browser binary, default: found on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${1:-out/app.png}"
mkdir -p "$(dirname "$OUT")"
WAIT_S="${WAIT_S:-120}"
PY="${RPA_VENV:-.venv}/bin/python"
[ -x "$PY" ] || PY=python3

BROWSER="${CHROMIUM:-}"
if [ -z "$BROWSER" ]; then
  for b in chromium chromium-browser google-chrome; do
    if command -v "$b" >/dev/null 2>&1; then BROWSER="$b"; break; fi
  done
fi
if [ -z "$BROWSER" ]; then
  echo "Chromium not found: install it with 'apt-get install -y chromium' (or set CHROMIUM=/path/to/browser)" >&2
  exit 2
fi

PORT="${PORT:-$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
LOG="$(mktemp)"
PROFILE="$(mktemp -d)"

./run app --server.port "$PORT" --server.address 127.0.0.1 --server.headless true >"$LOG" 2>&1 &
APP_PID=$!
cleanup() {
  kill "$APP_PID" 2>/dev/null || true
  wait "$APP_PID" 2>/dev/null || true
  rm -rf "$PROFILE"
}
trap cleanup EXIT

# Streamlit answers /_stcore/health with "ok" once the server is up.
for _ in $(seq "$WAIT_S"); do
  if "$PY" -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:$PORT/_stcore/health', timeout=2).read() == b'ok' else 1)" 2>/dev/null; then
    READY=1; break
  fi
  if ! kill -0 "$APP_PID" 2>/dev/null; then
    echo "the app exited before answering; its log:" >&2; cat "$LOG" >&2; exit 1
  fi
  sleep 1
done
if [ -z "${READY:-}" ]; then
  echo "the app did not answer on port $PORT within ${WAIT_S}s; its log:" >&2; cat "$LOG" >&2; exit 1
fi

# The page is drawn by the app's Python run over a websocket, in real time: the capture waits
# (over Chromium's DevTools protocol) until the page shows its tabs and the sidebar's last
# section, and has stopped changing.
DEVTOOLS_PORT="$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$PY" scripts/screenshot_page.py "http://127.0.0.1:$PORT" "$OUT" --browser "$BROWSER" --port "$DEVTOOLS_PORT" \
  --wait-for "3 Results" --wait-for "Check connection" --timeout "$WAIT_S"
[ -s "$OUT" ] || { echo "no screenshot was written" >&2; exit 1; }
echo "screenshot: $OUT"
