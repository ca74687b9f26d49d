"""Shared pieces of the reliability tests: a fake target that knows which answers
it delivered, a responder that answers the baselines' prompts meaningfully, a
seeded cache directory, and a way to run the real CLI.

Why a seeded cache: ``run_audit`` always prepares the shadow first. For the
two cheap methods used here (RAG-MIA and Min-k%, 4 + 4 shadow documents) that
is about 5 minutes of local generation on a 2-core laptop, mostly building
the shadow's knowledge base. ``shadow_seed/`` holds the output of that
preparation, made by the real code (``python -m tests.reliability.make_shadow_seed``),
under the preparation keys of the configuration below; each test copies it
into its own temporary ``RPA_CACHE_DIR``. When the code changes a key (new
method version, a new ShadowConfig field), the committed seed is stale: the
session fixture then runs the real preparation once for the whole session
(minutes, with a warning) and seeds every test from that instead. Slower,
never wrong.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from tests.fake_openai_server import CHAT_PATH, FakeOpenAIServer, Reply, _make_handler

ROOT = Path(__file__).resolve().parents[2]
SEED = Path(__file__).resolve().parent / "shadow_seed"

#: the cheap methods and the tiny shadow every reliability audit uses
METHODS = ["rag_mia", "mink"]
SHADOW_SIZE = 4
MODEL = "rel-model"
#: records whose documents the fake RAG "holds" (answers Yes / continues confidently)
MEMBERS_DEFAULT = frozenset({1, 4, 7, 10, 13})

#: prompt openings of the two methods (audit_core.methods.rag_mia / mink PROMPT)
RAG_MIA_OPENING = "Does this: "
MINK_OPENING = "Continue the following text."
CAPABILITY_PROBE = "Say OK."


# --------------------------------------------------------------------------- documents


_TOPICS = [
    "insulin pump settings after a long night shift", "a stubborn cough that returns every winter",
    "knee pain when climbing the stairs at work", "dizziness after standing up too quickly",
    "a rash that appeared after a new detergent", "trouble sleeping since the clocks changed",
    "sharp pain behind the left eye in the evening", "a child with a fever that comes and goes",
    "swollen ankles after a long flight home", "ringing in the ears after a loud concert",
    "heartburn that wakes me up at three", "a tingling thumb when typing for hours",
    "blood pressure readings that jump in the clinic", "an itchy scalp that no shampoo helps",
    "cramps in the calf during evening runs", "a sore jaw every morning after waking",
    "lower back pain after gardening on weekends", "a dry mouth since starting new tablets",
    "a mole that changed colour over the summer", "nose bleeds in the heated office",
]


def make_documents(n: int) -> list[tuple[str, str]]:
    """``n`` distinct, realistic patient questions of 30-40 words, as (id, text).

    Each opens with a unique record number so a responder can tell which
    document a prompt is about from the first half alone (Min-k% sends only that).
    """
    docs = []
    for i in range(n):
        topic = _TOPICS[i % len(_TOPICS)]
        text = (f"Record {i:03d}: I am writing about {topic}. It started about {2 + i % 9} weeks ago and "
                f"gets worse in the evening. My doctor suggested rest and fluids, but nothing changed so far. "
                f"Should I ask for a scan or wait another week before going back?")
        docs.append((f"q{i:03d}", text))
    return docs


def write_csv(path: Path, rows: list[tuple[str, str]], delimiter: str = ",", encoding: str = "utf-8",
              header: tuple[str, str] = ("id", "text")) -> Path:
    """A CSV of (id, text) rows, every text field quoted."""
    lines = [delimiter.join(header)]
    for doc_id, text in rows:
        lines.append(f'{doc_id}{delimiter}"' + text.replace('"', '""') + '"')
    path.write_bytes(("\n".join(lines) + "\n").encode(encoding))
    return path


RECORD_RE = re.compile(r"Record (\d{3})")


def record_of(body: dict) -> int | None:
    """The record number of the document a chat request is about (None: not a document probe)."""
    content = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
    m = RECORD_RE.search(content)
    return int(m.group(1)) if m else None


def method_of(body: dict) -> str:
    content = str(body.get("messages", [{}])[0].get("content", ""))
    if content.startswith(RAG_MIA_OPENING):
        return "rag_mia"
    if content.startswith(MINK_OPENING):
        return "mink"
    if content == CAPABILITY_PROBE:
        return "capabilities"
    return "other"


def request_id(body: dict) -> str:
    """What identifies a request: what the client chose to send, the same from an HTTP body
    (where logprobs / top_logprobs are left out when off) and from the store's ChatRequest JSON."""
    keep = {
        "messages": [{"role": m.get("role"), "content": m.get("content")} for m in body.get("messages", [])],
        "max_tokens": body.get("max_tokens"),
        "temperature": body.get("temperature"),
        "logprobs": bool(body.get("logprobs")),
        "top_logprobs": int(body.get("top_logprobs") or 0),
    }
    return json.dumps(keep, sort_keys=True, ensure_ascii=False)


# --------------------------------------------------------------------------- a meaningful fake RAG


def answer(body: dict, members: set[int]) -> Reply:
    """A well-behaved target's answer to the baselines' prompts.

    RAG-MIA: "Yes" for documents in ``members``, else "No". Min-k%: a
    continuation of a few words. The capability probe: "OK". Logprobs follow
    ``completion_body``'s deterministic values, so the real scoring code runs
    on them.
    """
    want_lp = bool(body.get("logprobs"))
    top = int(body.get("top_logprobs") or 0)
    method = method_of(body)
    if method == "rag_mia":
        text = "Yes" if record_of(body) in members else "No"
    elif method == "mink":
        text = "and it hurts more after meals" if record_of(body) in members else "Thank you for asking"
    else:
        text = "OK"
    return Reply.completion(text, logprobs=want_lp, top_logprobs=top, model=str(body.get("model")))


# --------------------------------------------------------------------------- a fake server that knows what it delivered


class RecordingServer(FakeOpenAIServer):
    """FakeOpenAIServer that also logs every answer it finished writing.

    ``answered`` holds (request body, HTTP status, monotonic time) for each
    reply whose bytes were fully written and flushed to the socket: an answer
    the client could have stored. A reply cut short (client killed, timeout)
    is not in it. ``Reply`` bodies may also be truncated on purpose: a reply
    with header ``X-Truncate-To: n`` announces the full Content-Length but
    sends only ``n`` bytes and closes the connection (a truncated stream).
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.answered: list[tuple[dict, int, float]] = []
        self._current = threading.local()

    def _handle(self, method: str, path: str, headers: dict[str, str], raw_body: bytes) -> Reply:
        try:
            self._current.body = json.loads(raw_body) if raw_body else {}
        except json.JSONDecodeError:
            self._current.body = {}
        self._current.path = path
        return super()._handle(method, path, headers, raw_body)

    def start(self) -> "RecordingServer":
        from http.server import ThreadingHTTPServer

        base = _make_handler(self)
        server = self

        class Handler(base):  # type: ignore[misc, valid-type]
            def _write(self, reply: Reply) -> None:
                cut = reply.headers.get("X-Truncate-To")
                if cut is not None:
                    data = json.dumps(reply.body).encode() if isinstance(reply.body, (dict, list)) else bytes(reply.body or b"")
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[: int(cut)])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                super()._write(reply)
                if getattr(server._current, "path", None) == CHAT_PATH:
                    with server._lock:
                        server.answered.append((server._current.body, reply.status, time.monotonic()))

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="rel-fake-openai", daemon=True)
        self._thread.start()
        return self

    def answered_ok(self) -> list[dict]:
        with self._lock:
            return [b for b, status, _ in self.answered if status == 200]


def truncated(reply: Reply, keep_bytes: int = 40) -> Reply:
    """``reply`` announced in full but cut after ``keep_bytes`` bytes (see RecordingServer)."""
    return Reply(status=reply.status, body=reply.body, headers={**reply.headers, "X-Truncate-To": str(keep_bytes)})


# --------------------------------------------------------------------------- cache and CLI


def shadow_config():
    """The ShadowConfig the CLI builds from ``--shadow-size SHADOW_SIZE --shadow-size-generative SHADOW_SIZE``."""
    from shadow.prepare import ShadowConfig

    return ShadowConfig(n_members=SHADOW_SIZE, n_nonmembers=SHADOW_SIZE, n_per_class_generative=SHADOW_SIZE)


#: the styles an audit of a reliability target is read in: the fake server's answers show no style,
#: so an endpoint is read as chat (``style.resolve_style``); library tests that hand the audit
#: capabilities of a completion model read it in completion style
SEED_STYLES = ("completion", "chat")


def _seed_preparations() -> list[tuple[str, list, object]]:
    """(style, methods, ShadowConfig) as ``run_audit`` builds them for METHODS on a target of that style."""
    from audit_core.audit import AuditConfig, select_methods, with_target_style
    from audit_core.target.base import Capabilities

    out = []
    for style in SEED_STYLES:
        caps = Capabilities(True, True, 20, style=style)
        cfg = with_target_style(AuditConfig(methods=list(METHODS), shadow=shadow_config()), caps)
        methods, _ = select_methods(cfg, caps)
        out.append((style, methods, cfg.shadow))
    return out


def current_keys() -> dict[str, str]:
    """The preparation keys the code computes now, ``"<method>@<style>"`` -> key, as an audit computes them.

    Computed through ``with_target_style`` and ``select_methods``, so a key that
    an audit would use and the seed lacks makes the seed stale instead of making
    every CLI test prepare a shadow of its own, silently.
    """
    from shadow.corpus import corpus_hash
    from shadow.prepare import preparation_key

    chash = corpus_hash(shadow_config().corpus_docs())
    return {f"{m.name}@{style}": preparation_key(m, cfg, chash)
            for style, methods, cfg in _seed_preparations() for m in methods}


def prepare_seed(folder: Path) -> dict[str, str]:
    """Run the real shadow preparation for METHODS in every SEED_STYLES into ``folder`` (its ``<key>/`` subfolders)."""
    from shadow.prepare import prepare_shadow

    keys: dict[str, str] = {}
    for style, methods, cfg in _seed_preparations():
        keys |= {f"{name}@{style}": key for name, key in prepare_shadow(methods, cfg, root=folder).keys.items()}
    return keys


def seed_cache(cache: Path, seed: Path = SEED) -> Path:
    """A fresh RPA_CACHE_DIR holding a shadow preparation copied from ``seed`` (see the module docstring)."""
    cache.mkdir(parents=True, exist_ok=True)
    if seed.is_dir():
        shutil.copytree(seed, cache / "shadow", dirs_exist_ok=True)
    return cache


def cli_env(cache: Path, api_key: str | None = "none") -> dict[str, str]:
    """The environment of a CLI run: its own cache dir, no inherited store or key."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "RPA_AUDIT_DB")}
    env.update(RPA_CACHE_DIR=str(cache), HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    if api_key is not None:
        env["OPENAI_API_KEY"] = api_key
    return env


def audit_args(base_url: str, docs: Path, store: Path, *extra: str) -> list[str]:
    return ["audit", "--target", base_url, "--model", MODEL, "--docs", str(docs), "--store", str(store),
            "--method", ",".join(METHODS), "--shadow-size", str(SHADOW_SIZE),
            "--shadow-size-generative", str(SHADOW_SIZE),
            # the tiny seed shadow shows RAG-MIA no signal; these tests are about faults, not calibration
            "--run-without-signal", ",".join(METHODS), *extra]


def cli_command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "app.cli", *args]


def run_cli(args: list[str], env: dict[str, str], timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cli_command(args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)


def wait_until(cond: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.02) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def record_figure(name: str, value: object) -> None:
    """Append a measured figure to $RPA_RELIABILITY_FIGURES (JSON lines) when set: RELIABILITY.md quotes them."""
    path = os.environ.get("RPA_RELIABILITY_FIGURES")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"figure": name, "value": value}, default=str) + "\n")
