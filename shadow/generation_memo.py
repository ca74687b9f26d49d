"""Generations of a served RAG kept by their exact prompt, for the servers of one benchmark run.

Why: the benchmark serves one target per defense, and each defense leg sends
the same probes as the undefended leg. Where a defense leaves the prompt as it
was (Mirabel hides a document only from the queries it flags: about 70% of the
probes of a completion-profile slice reached the generator with the undefended
prompt), the generator's answer is the same computation again: the same model,
token ids and decoding settings give the same answer (greedy, or sampled with
the same seed), up to the float rounding that the batch it was decoded in
already brings. The memo answers those from the first computation.

Only the simulated targets use it (``shadow.serve --generation-memo``); it
changes no answer, so it is a cost of running the benchmark, not of an audit:
the per-leg timings of a run with it say how much of a leg was recomputed.
A memo belongs to one run folder: a run started in an empty folder is cold.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Sequence

from audit_core.scoring import Generation, TokenScore
from audit_core.target.base import ChatRequest

#: bump when the key or the stored layout changes
_FORMAT = 1


def memo_key(generator: str, prompt_ids: Sequence[int], request: ChatRequest) -> str | None:
    """The key of a generation, or None when it is not repeatable (sampled without a seed)."""
    sampled = request.temperature > 0
    if sampled and request.seed is None:
        return None
    parts = [_FORMAT, generator, list(prompt_ids), request.max_tokens, request.temperature,
             request.seed if sampled else None, request.logprobs, request.top_logprobs]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _to_json(gen: Generation) -> str:
    tokens = [[t.token_id, t.text, t.start, t.end, t.logprob, [list(p) for p in t.top], t.rank] for t in gen.tokens]
    return json.dumps([gen.text, tokens, gen.prompt_tokens, gen.finish_reason])


def _from_json(raw: str) -> Generation:
    text, tokens, prompt_tokens, finish = json.loads(raw)
    return Generation(text, [TokenScore(i, s, a, b, lp, [tuple(p) for p in top], rank)
                             for i, s, a, b, lp, top, rank in tokens], prompt_tokens, finish)


class GenerationMemo:
    """An SQLite table of generations by ``memo_key``; safe to share between threads and processes."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS generations "
                         "(key TEXT PRIMARY KEY, generation TEXT NOT NULL, hits INTEGER NOT NULL DEFAULT 0)")
        self._db.commit()

    def get(self, key: str | None) -> Generation | None:
        if key is None:
            return None
        with self._lock:
            row = self._db.execute("SELECT generation FROM generations WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            self._db.execute("UPDATE generations SET hits = hits + 1 WHERE key = ?", (key,))
            self._db.commit()
        return _from_json(row[0])

    def put(self, key: str | None, gen: Generation) -> None:
        if key is None:
            return
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO generations (key, generation) VALUES (?, ?)", (key, _to_json(gen)))
            self._db.commit()

    def counts(self) -> tuple[int, int]:
        """(generations kept, answers given from them), over every process that used this file."""
        with self._lock:
            kept, reused = self._db.execute("SELECT COUNT(*), COALESCE(SUM(hits), 0) FROM generations").fetchone()
        return int(kept), int(reused)
