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


class ServedTarget:
    """``python -m shadow.serve`` in a child process on a loopback port.

    ``generator`` overrides the profile's model (``--target-model``) only for a
    run without a profile (the first benchmark's form); with a profile the
    server builds the profile's system (``--profile``).
    """

    def __init__(self, kb_file: Path, generator: str, defense: str | None, log_file: Path,
                 profile: str | None = None, paraphraser: str | None = None):
        self.port = _free_port()
        cmd = [sys.executable, "-m", "shadow.serve", "--corpus", str(kb_file), "--port", str(self.port),
               "--host", "127.0.0.1"]
        cmd += ["--profile", profile] if profile else ["--model", generator]
        if defense:
            cmd += ["--defense", defense]
        if defense == "paraphrase" and paraphraser:
            cmd += ["--paraphraser", paraphraser]
        env = dict(os.environ, RPA_SERVE_API_KEY=BENCH_KEY, PYTHONPATH=str(ROOT))
        self.log = open(log_file, "ab")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.model = generator
        self._wait()

    def _wait(self, timeout_s: float = 1800) -> None:
        import httpx

        t0 = time.time()
        while time.time() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the reference server exited with code {self.proc.returncode}; see {self.log.name}")
            try:
                r = httpx.get(f"{self.base_url}/models", headers={"Authorization": f"Bearer {BENCH_KEY}"}, timeout=2)
                if r.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError("the reference server did not start in time")

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

    max_concurrency = 1

    def __init__(self, kb_file: Path, generator: str, defense: str | None, log_file: Path,
                 profile: str | None = None, paraphraser: str | None = None):
        super().__init__()
        self.name = f"reference RAG ({profile or generator}, {defense or 'no defense'})"
        self._args = (kb_file, generator, defense, log_file, profile, paraphraser)
        self._lock = threading.Lock()
        self.server: ServedTarget | None = None
        self._http: Target | None = None

    def _client(self) -> Target:
        from audit_core.target.openai_compat import OpenAITarget

        with self._lock:
            if self._http is None:
                import shadow.bench.served as served  # looked up at call time: tests replace it

                self.server = served.ServedTarget(*self._args)
                http = OpenAITarget(base_url=self.server.base_url, model=self.server.model, api_key=BENCH_KEY,
                                    max_concurrency=1, timeout_s=600)
                http.account = self.account
                self._http = http
            return self._http

    def complete(self, request: ChatRequest) -> Completion:
        return self._client().complete(request)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server, self._http = None, None


#: how a profile's API is served and reached, by TargetProfile.api: a function
#: (profile, knowledge-base file, defense, log file, paraphraser) -> a Target with ``stop()``.
#: The non-OpenAI API ("custom") registers its server and client here.
API_SERVERS: dict[str, Callable[[TargetProfile, Path, str | None, Path, str | None], Target]] = {
    "openai": lambda prof, kb, defense, log, para: LazyServedTarget(kb, prof.rag.generator, defense, log,
                                                                    prof.name, para),
}


def served_target(profile: TargetProfile, kb_file: Path, defense: str | None, log_file: Path,
                  paraphraser: str | None = None) -> Target:
    if profile.api not in API_SERVERS:
        raise KeyError(profile.api)
    return API_SERVERS[profile.api](profile, kb_file, defense, log_file, paraphraser)


def cannot_serve(profile: TargetProfile) -> str | None:
    """Why the benchmark cannot serve this profile (None: it can)."""
    if profile.api not in API_SERVERS:
        return (f"cannot run: no server for the '{profile.api}' API is registered "
                "(shadow.bench.served.API_SERVERS)")
    return None
