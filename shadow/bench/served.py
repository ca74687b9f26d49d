"""Profile wiring: each target profile served by ``python -m shadow.serve`` in a child
process on a loopback port, probed through the real client (OpenAITarget over HTTP)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from audit_core.target.base import ChatRequest, Completion, Target
from shadow.profiles import TargetProfile

ROOT = Path(__file__).resolve().parents[2]
BENCH_KEY = "bench-local-key"  # loopback-only key of the reference server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_ready(api: str, root_url: str, key: str = BENCH_KEY) -> bool:
    """Whether the reference server at ``root_url`` answers: its model list (OpenAI API), or for the
    custom API (which has none) an empty POST /ask, refused as a bad body without running the model."""
    import httpx

    headers = {"Authorization": f"Bearer {key}", "X-Api-Key": key}
    try:
        if api == "custom":
            return httpx.post(f"{root_url}/ask", headers=headers, timeout=2).status_code in (400, 422)
        return httpx.get(f"{root_url}/v1/models", headers=headers, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


#: (requests the benchmark's client sends at once, as the app's client does; the most the reference
#: server answers together, ``shadow.serve_batch``). Batched answers can differ from one-at-a-time
#: answers by float rounding (BENCHMARKS.md, session 26); ``BenchConfig.one_at_a_time`` gives (1, 1),
#: how the benchmark ran before session 26
BATCHED = (4, 8)
CLIENT_CONCURRENCY, SERVER_MAX_BATCH = BATCHED
#: requests the client lets be in flight at once, all documents together (its HTTP connector's bound):
#: ``CLIENT_CONCURRENCY`` per document probed at once. Until session 38 the connector kept its own bound
#: of ``CLIENT_CONCURRENCY``, so four documents at once still reached the server 4 requests at a time
CLIENT_IN_FLIGHT = CLIENT_CONCURRENCY
#: the most requests the server answers together when several documents are probed at once
#: (``BenchConfig.documents_at_once``): the reference RAG's ``decode_batch_size``
MAX_SERVER_BATCH = 16


#: torch threads of each reference server (its ``OMP_NUM_THREADS``); None: torch's default (every core).
#: ``set_lanes`` sets it when a run serves each defense from several servers at once
SERVER_THREADS: int | None = None


def set_lanes(lanes: int) -> None:
    """Serve each defense from ``lanes`` servers side by side, the cores shared out among them.

    Why: on two cores a decoding step with two torch threads takes 0.6-0.9 of
    the time it takes with one (SmolLM2 at a batch of 4: 76 ms against 85), and
    two one-thread processes side by side each keep their one-thread speed, so
    two servers get through more than one with both threads: a 20 + 20 slice of
    S-RAG and MBA under paraphrasing took 270 s against 371 s (BENCHMARKS.md,
    session 40). One lane: torch's default.
    """
    global SERVER_THREADS
    if lanes < 1:
        raise ValueError("lanes must be at least 1")
    SERVER_THREADS = None if lanes == 1 else max(1, (os.cpu_count() or 1) // lanes)


def set_batching(one_at_a_time: bool, documents_at_once: int = 1) -> None:
    """Serve and send one request at a time, or batched (``BATCHED``), from now on.

    With several documents probed at once the server may gather all their
    requests in flight (4 per document) into one batch, up to ``MAX_SERVER_BATCH``.
    """
    global CLIENT_CONCURRENCY, SERVER_MAX_BATCH, CLIENT_IN_FLIGHT
    if one_at_a_time:
        CLIENT_CONCURRENCY, SERVER_MAX_BATCH, CLIENT_IN_FLIGHT = 1, 1, 1
    else:
        conc, batch = BATCHED
        CLIENT_CONCURRENCY = conc
        CLIENT_IN_FLIGHT = conc * max(1, documents_at_once)
        SERVER_MAX_BATCH = min(MAX_SERVER_BATCH, max(batch, conc * documents_at_once))


#: the longest a reference server may take to start, and how often its start is reported meanwhile (seconds)
START_TIMEOUT_S = 1800.0
START_REPORT_S = 30.0


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)  # where the benchmark's own log goes (shadow.bench.cli)


#: where a reference server's start-up is said, line by line; tests replace it
say: Callable[[str], None] = _say


def last_log_line(path: str | Path, tail_bytes: int = 4096) -> str:
    """The last non-empty line of a server's log (a progress bar's last state, after its carriage returns),
    or a note that it has written none yet."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - tail_bytes))
            tail = fh.read().decode("utf-8", "replace")
    except OSError:
        return "(its log cannot be read)"
    lines = [ln.strip() for ln in tail.replace("\r", "\n").split("\n") if ln.strip()]
    return lines[-1][-200:] if lines else "(nothing written yet)"


class ServedTarget:
    """``python -m shadow.serve`` in a child process on a loopback port.

    ``generator`` overrides the profile's model (``--target-model``) only for a
    run without a profile (the first benchmark's form); with a profile the
    server builds the profile's system (``--profile``).
    """

    def __init__(self, kb_file: Path, generator: str, defense: str | None, log_file: Path,
                 profile: str | None = None, paraphraser: str | None = None, api: str = "openai",
                 memo: Path | None = None):
        self.port = _free_port()
        self.api = api
        cmd = [sys.executable, "-m", "shadow.serve", "--corpus", str(kb_file), "--port", str(self.port),
               "--host", "127.0.0.1", "--exit-with-parent", str(os.getpid()), "--max-batch", str(SERVER_MAX_BATCH)]
        cmd += ["--profile", profile] if profile else ["--model", generator]
        if defense:
            cmd += ["--defense", defense]
        if defense == "paraphrase" and paraphraser:
            cmd += ["--paraphraser", paraphraser]
        if memo is not None:  # the SQLite file the servers of a run share their generations through
            cmd += ["--generation-memo", str(memo)]
        env = dict(os.environ, RPA_SERVE_API_KEY=BENCH_KEY, PYTHONPATH=str(ROOT))
        if SERVER_THREADS is not None:  # torch reads it when it starts
            env.update(OMP_NUM_THREADS=str(SERVER_THREADS), MKL_NUM_THREADS=str(SERVER_THREADS))
        self.log = open(log_file, "ab")
        #: what the start-up lines call this server
        self.label = f"{profile or generator}, {defense or 'no defense'}, port {self.port}"
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        root = f"http://127.0.0.1:{self.port}"
        self.base_url = root + "/v1" if api == "openai" else root
        self.model = generator
        self._wait()

    def _wait(self, timeout_s: float = START_TIMEOUT_S, every_s: float = START_REPORT_S) -> None:
        """Wait until the server answers, saying so (``say``): when it starts, every ``every_s`` seconds the
        time it has taken and its log's last line, and when it is ready. Loading the model and indexing the
        knowledge base (2,000 documents) takes minutes on two cores: no stage runs silently."""
        say(f"starting the reference server ({self.label}): loading its model and indexing its knowledge base, "
            f"up to {timeout_s:.0f} s (log: {self.log.name}) ...")
        t0 = time.monotonic()
        next_report = every_s
        while (elapsed := time.monotonic() - t0) < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the reference server exited with code {self.proc.returncode} after "
                                   f"{elapsed:.0f} s; its log ends: {last_log_line(self.log.name)} (see {self.log.name})")
            if server_ready(self.api, f"http://127.0.0.1:{self.port}"):
                say(f"the reference server ({self.label}) is ready after {elapsed:.0f} s")
                return
            if elapsed >= next_report:
                say(f"  reference server ({self.label}) starting: {elapsed:.0f} s of at most {timeout_s:.0f} s; "
                    f"its log: {last_log_line(self.log.name)}")
                next_report = (elapsed // every_s + 1) * every_s
            time.sleep(1)
        raise RuntimeError(f"the reference server did not start in {timeout_s:.0f} s; its log ends: "
                           f"{last_log_line(self.log.name)} (see {self.log.name})")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class LazyServedTarget(Target):
    """The reference server's OpenAI-compatible client, started on the first request.

    Behind the store, a resumed run whose remaining rows the store answers in
    full never starts the server, which would load the generator and index the
    knowledge base (about a minute per defense) only to sit idle.
    ``account`` counts what really went over HTTP, as ``OpenAITarget``'s does.
    """

    @property
    def max_concurrency(self) -> int:  # type: ignore[override]
        return CLIENT_CONCURRENCY  # as ``set_batching`` last set it

    def __init__(self, kb_file: Path, generator: str, defense: str | None, log_file: Path,
                 profile: str | None = None, paraphraser: str | None = None, api: str = "openai",
                 memo: Path | None = None):
        super().__init__()
        self.name = f"reference RAG ({profile or generator}, {defense or 'no defense'})"
        self._args = (kb_file, generator, defense, log_file, profile, paraphraser, api, memo)
        self._lock = threading.Lock()
        self.server: ServedTarget | None = None
        self._http: Target | None = None
        #: seconds spent starting the server (loading the models, indexing the knowledge base), so
        #: that a benchmark leg's time can be told from the start-up it happened to pay
        self.start_s = 0.0
        #: another lane's server of the same system, started before this one: two servers indexing the
        #: same knowledge base into the cache at once would race, the second finds the first's index
        self.after: "LazyServedTarget | None" = None

    def _client(self) -> Target:
        from audit_core.target.openai_compat import OpenAITarget

        if self.after is not None and self._http is None:
            self.after._client()
        with self._lock:
            if self._http is None:
                import shadow.bench.served as served  # looked up at call time: tests replace it

                t0 = time.time()
                self.server = served.ServedTarget(*self._args)
                self.start_s += time.time() - t0
                # the connector's bound on requests in flight covers every document probed at once
                if self.server.api == "custom":
                    http = custom_api_client(self.server.base_url, in_flight=served.CLIENT_IN_FLIGHT)
                else:
                    http = OpenAITarget(base_url=self.server.base_url, model=self.server.model, api_key=BENCH_KEY,
                                        max_concurrency=served.CLIENT_IN_FLIGHT, timeout_s=600)
                http.account = self.account
                self._http = http
            return self._http

    def complete(self, request: ChatRequest) -> Completion:
        return self._client().complete(request)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server, self._http = None, None


#: the target file a user of the http-custom profile would write (assets/targets/)
CUSTOM_TARGET_FILE = ROOT / "assets" / "targets" / "http_custom.yaml"


def custom_api_client(root_url: str, key: str = BENCH_KEY, in_flight: int | None = None) -> Target:
    """The generic HTTP target over the http-custom server, built from the shipped target file.

    The file is what the README tells a user to copy; only its URL (the port
    is the benchmark's) and the key's environment change here, so the
    benchmark goes through the same code path as the user's audit.
    """
    from dataclasses import replace

    from audit_core.target import create_target, load_target_file

    spec, config = load_target_file(CUSTOM_TARGET_FILE)
    config = replace(config, url=root_url + "/ask", timeout_s=600)
    if in_flight is not None:  # the benchmark's bound on requests in flight (``CLIENT_IN_FLIGHT``)
        config = replace(config, max_concurrency=in_flight)
    return create_target(spec, config, environ={"RPA_SERVE_API_KEY": key})


#: how a profile's API is served and reached, by TargetProfile.api: a function
#: (profile, knowledge-base file, defense, log file, paraphraser, generation memo file) -> a Target
#: with ``stop()``. The non-OpenAI API ("custom") registers its server and client here.
API_SERVERS: dict[str, Callable[[TargetProfile, Path, str | None, Path, str | None, Path | None], Target]] = {
    "openai": lambda prof, kb, defense, log, para, memo: LazyServedTarget(kb, prof.rag.generator, defense, log,
                                                                          prof.name, para, memo=memo),
    "custom": lambda prof, kb, defense, log, para, memo: LazyServedTarget(kb, prof.rag.generator, defense, log,
                                                                          prof.name, para, api="custom", memo=memo),
}


def served_target(profile: TargetProfile, kb_file: Path, defense: str | None, log_file: Path,
                  paraphraser: str | None = None, memo: Path | None = None) -> Target:
    """The profile's reference server; ``memo``: the generation memo its run's servers share (None: none)."""
    if profile.api not in API_SERVERS:
        raise KeyError(profile.api)
    return API_SERVERS[profile.api](profile, kb_file, defense, log_file, paraphraser, memo)


def cannot_serve(profile: TargetProfile) -> str | None:
    """Why the benchmark cannot serve this profile (None: it can)."""
    if profile.api not in API_SERVERS:
        return (f"cannot run: no server for the '{profile.api}' API is registered "
                "(shadow.bench.served.API_SERVERS)")
    return None
