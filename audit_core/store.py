"""SQLite store: cached target responses, failed calls, audit runs and their results.

One file (default ``cache_dir()/"audits.sqlite"``), WAL mode so the app can
read while an audit writes, one connection guarded by a lock so any thread
may use a Store. SQLite serialises writers anyway and every read here is a
primary-key lookup, so a single connection costs nothing measurable, and
unlike a connection per thread it does not leak a handle for every worker
thread of every batch.

What is keyed by what:

* **responses**: (target identity, method, method version, ``ChatRequest.key()``)
  -> the ``Completion`` JSON. The target identity is the target's ``name``
  (base URL + model) with any credentials in a URL removed
  (:func:`target_identity`); an API key is never part of a key or a row.
  Only *successful* completions are stored here: a cached failure would make
  every re-run repeat a transient error (rate limit, timeout) forever,
  whereas a re-run should retry it.
* **failures**: every failed call, with its reason code and message, as an
  append-only log for reporting; it is never used to answer a request.
* **runs**, **run_documents**, **results**: an audit run, its documents (text
  and hash) and each (document, method) ``MethodResult`` + ``Observation``:
  everything needed to re-open an audit and re-export its report.

Each write is committed before the call returns, so a process killed at any
point loses nothing already written. ``synchronous=NORMAL`` in WAL mode is
durable against a killed process; only a power cut may lose the last commits.
"""
from __future__ import annotations

import json
import re
import sqlite3
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

from audit_core.documents import Document
from audit_core.methods.base import MethodResult, Observation
from audit_core.target.base import ChatRequest, Completion, TargetError

#: bump when the schema changes incompatibly; files with a newer version are refused
SCHEMA_VERSION = 1
RUN_STATUSES = ("running", "finished", "cancelled", "failed")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    target_id      TEXT NOT NULL,
    method         TEXT NOT NULL,
    method_version TEXT NOT NULL,
    request_key    TEXT NOT NULL,
    request_json   TEXT,
    completion     TEXT NOT NULL,
    created        TEXT NOT NULL,
    PRIMARY KEY (target_id, method, method_version, request_key)
);
CREATE TABLE IF NOT EXISTS failures (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    target_id      TEXT NOT NULL,
    method         TEXT NOT NULL,
    method_version TEXT NOT NULL,
    request_key    TEXT NOT NULL,
    reason         TEXT NOT NULL,
    message        TEXT NOT NULL,
    created        TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS failures_by_target ON failures (target_id, method, method_version);
CREATE TABLE IF NOT EXISTS runs (
    id        TEXT PRIMARY KEY,
    created   TEXT NOT NULL,
    target_id TEXT NOT NULL,
    methods   TEXT NOT NULL,
    params    TEXT NOT NULL,
    status    TEXT NOT NULL,
    summary   TEXT,
    finished  TEXT,
    error     TEXT
);
CREATE TABLE IF NOT EXISTS run_documents (
    run_id    TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    position  INTEGER NOT NULL,
    doc_id    TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    text      TEXT NOT NULL,
    PRIMARY KEY (run_id, doc_id)
);
CREATE TABLE IF NOT EXISTS results (
    run_id      TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    doc_id      TEXT NOT NULL,
    method      TEXT NOT NULL,
    result      TEXT NOT NULL,
    observation TEXT,
    created     TEXT NOT NULL,
    PRIMARY KEY (run_id, doc_id, method)
);
"""

_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]*@")
_URL_QUERY = re.compile(r"\?[^\s]*")


def target_identity(name: str) -> str:
    """A target's cache identity from its ``name``, with URL credentials removed.

    ``Target.name`` is meant to be base URL + model and never to hold a secret;
    this also strips ``user:password@`` and query strings (``?api_key=...``)
    from any URL in it, so a key pasted into a base URL cannot reach the file.
    """
    return _URL_QUERY.sub("", _URL_USERINFO.sub(r"\1", name)).strip()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _json_default(obj: Any) -> Any:
    # numpy scalars and arrays turn up in evidence dicts
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"cannot store a {type(obj).__name__} as JSON")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=_json_default)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


@dataclass
class RunInfo:
    """One audit run as listed in the app's history."""

    id: str
    created: str
    target_id: str
    methods: list[str]
    params: dict[str, Any]
    status: str
    summary: dict[str, Any] | None = None
    finished: str | None = None
    error: str | None = None
    n_documents: int = 0
    n_results: int = 0


@dataclass
class StoredResult:
    doc_id: str
    method: str
    result: MethodResult
    observation: Observation | None


@dataclass
class RunRecord:
    """Everything needed to re-open an audit and re-export its report."""

    info: RunInfo
    documents: list[Document] = field(default_factory=list)
    results: list[StoredResult] = field(default_factory=list)

    def result_for(self, doc_id: str, method: str) -> StoredResult | None:
        for r in self.results:
            if r.doc_id == doc_id and r.method == method:
                return r
        return None


class Store:
    """Thread-safe SQLite store; see the module docstring for what it holds and why."""

    def __init__(self, path: str | Path | None = None, timeout_s: float = 30.0) -> None:
        if path is None:
            from audit_core.models import cache_dir  # lazy: keeps importing the store light

            path = cache_dir() / "audits.sqlite"
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = sqlite3.connect(
            str(self.path), timeout=timeout_s, check_same_thread=False, isolation_level=None
        )
        with self._lock:
            c = self._conn
            c.execute("PRAGMA journal_mode=WAL")
            c.execute("PRAGMA synchronous=NORMAL")
            c.execute("PRAGMA foreign_keys=ON")
            version = c.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                c.close()
                self._conn = None
                raise RuntimeError(
                    f"{self.path} was written by a newer version (schema {version} > {SCHEMA_VERSION})"
                )
            if version < SCHEMA_VERSION:  # new file: opening an existing one writes nothing
                c.executescript(_SCHEMA)
                c.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    # ------------------------------------------------------------------ plumbing

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            if self._conn is None:
                raise RuntimeError("the store is closed")
            return self._conn.execute(sql, params).fetchall()

    def _transaction(self, statements: Iterable[tuple[str, Sequence[Any]]]) -> None:
        """Run statements atomically and commit before returning."""
        with self._lock:
            if self._conn is None:
                raise RuntimeError("the store is closed")
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                for sql, params in statements:
                    c.execute(sql, params)
            except BaseException:
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")

    def close(self) -> None:
        """Close the connection (a checkpoint folds the WAL back into the main file)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ target responses

    def get_response(
        self, target_id: str, request_key: str, method: str = "", method_version: str = ""
    ) -> Completion | None:
        """The stored successful answer to a request, or None if it was never answered."""
        rows = self._execute(
            "SELECT completion FROM responses WHERE target_id=? AND method=? AND method_version=? AND request_key=?",
            (target_identity(target_id), method, method_version, request_key),
        )
        return Completion.from_json(json.loads(rows[0][0])) if rows else None

    def put_response(
        self,
        target_id: str,
        request_key: str,
        completion: Completion,
        method: str = "",
        method_version: str = "",
        request: ChatRequest | None = None,
    ) -> None:
        """Store a successful answer (committed on return). A second put replaces the first."""
        self._transaction([(
            "INSERT OR REPLACE INTO responses VALUES (?,?,?,?,?,?,?)",
            (target_identity(target_id), method, method_version, request_key,
             None if request is None else _dumps(request.to_json()), _dumps(completion.to_json()), _now()),
        )])

    def count_responses(self, target_id: str | None = None) -> int:
        if target_id is None:
            return self._execute("SELECT COUNT(*) FROM responses")[0][0]
        return self._execute("SELECT COUNT(*) FROM responses WHERE target_id=?", (target_identity(target_id),))[0][0]

    def response_keys(self, target_id: str, method: str = "", method_version: str = "") -> set[str]:
        """Request keys already answered for a target and method (to plan or check a resume)."""
        rows = self._execute(
            "SELECT request_key FROM responses WHERE target_id=? AND method=? AND method_version=?",
            (target_identity(target_id), method, method_version),
        )
        return {r[0] for r in rows}

    def delete_responses(self, target_id: str) -> int:
        """Forget every cached answer of a target (e.g. its knowledge base changed)."""
        tid = target_identity(target_id)
        n = self._execute("SELECT COUNT(*) FROM responses WHERE target_id=?", (tid,))[0][0]
        self._transaction([("DELETE FROM responses WHERE target_id=?", (tid,))])
        return n

    def record_failure(
        self,
        target_id: str,
        request_key: str,
        error: TargetError | str,
        method: str = "",
        method_version: str = "",
    ) -> None:
        """Log a failed call. Never consulted by ``get_response``: a re-run retries it."""
        if isinstance(error, TargetError):
            reason, message = error.reason, str(error)
        else:
            reason, message = "error", str(error)
        self._transaction([(
            "INSERT INTO failures (target_id, method, method_version, request_key, reason, message, created)"
            " VALUES (?,?,?,?,?,?,?)",
            (target_identity(target_id), method, method_version, request_key, reason, message, _now()),
        )])

    def failures(self, target_id: str | None = None) -> list[dict[str, str]]:
        """Logged failures, oldest first, as dicts (target_id, method, method_version, request_key, reason, message, created)."""
        cols = ("target_id", "method", "method_version", "request_key", "reason", "message", "created")
        sql = f"SELECT {', '.join(cols)} FROM failures"
        params: tuple = ()
        if target_id is not None:
            sql += " WHERE target_id=?"
            params = (target_identity(target_id),)
        return [dict(zip(cols, r)) for r in self._execute(sql + " ORDER BY id", params)]

    # ------------------------------------------------------------------ runs

    def create_run(
        self,
        target_id: str,
        methods: Sequence[str],
        params: dict[str, Any] | None = None,
        documents: Sequence[Document] = (),
        run_id: str | None = None,
    ) -> str:
        """Start an audit run (status ``running``) with its documents; returns its id."""
        rid = run_id or uuid.uuid4().hex
        stmts: list[tuple[str, Sequence[Any]]] = [(
            "INSERT INTO runs (id, created, target_id, methods, params, status) VALUES (?,?,?,?,?,?)",
            (rid, _now(), target_identity(target_id), _dumps(list(methods)), _dumps(params or {}), "running"),
        )]
        stmts += self._document_rows(rid, documents, start=0)
        try:
            self._transaction(stmts)
        except sqlite3.IntegrityError as exc:
            raise ValueError(f"cannot create run {rid}: {exc}") from None
        return rid

    def _document_rows(self, run_id: str, documents: Sequence[Document], start: int) -> list[tuple[str, Sequence[Any]]]:
        ids = [d.id for d in documents]
        if len(set(ids)) != len(ids):
            raise ValueError("document ids must be unique within a run")
        return [("INSERT INTO run_documents VALUES (?,?,?,?,?)", (run_id, start + i, d.id, d.content_hash(), d.text))
                for i, d in enumerate(documents)]

    def add_documents(self, run_id: str, documents: Sequence[Document]) -> None:
        """Append documents to an existing run."""
        self._require_run(run_id)
        start = self._execute("SELECT COALESCE(MAX(position) + 1, 0) FROM run_documents WHERE run_id=?", (run_id,))[0][0]
        try:
            self._transaction(self._document_rows(run_id, documents, start))
        except sqlite3.IntegrityError as exc:
            raise ValueError(f"cannot add documents to run {run_id}: {exc}") from None

    def _require_run(self, run_id: str) -> None:
        if not self._execute("SELECT 1 FROM runs WHERE id=?", (run_id,)):
            raise KeyError(f"no audit run {run_id!r}")

    def set_status(self, run_id: str, status: str, summary: dict[str, Any] | None = None, error: str | None = None) -> None:
        """Change a run's status (e.g. back to ``running`` when resuming it)."""
        if status not in RUN_STATUSES:
            raise ValueError(f"status must be one of {RUN_STATUSES}")
        self._require_run(run_id)
        finished = None if status == "running" else _now()
        sets = ["status=?", "finished=?", "error=?"]
        params: list[Any] = [status, finished, error]
        if summary is not None:
            sets.append("summary=?")
            params.append(_dumps(summary))
        self._transaction([(f"UPDATE runs SET {', '.join(sets)} WHERE id=?", (*params, run_id))])

    def finish_run(
        self, run_id: str, status: str = "finished", summary: dict[str, Any] | None = None, error: str | None = None
    ) -> None:
        """Close a run as finished, cancelled or failed, with its summary and error reason."""
        if status == "running":
            raise ValueError("finish_run needs a final status")
        self.set_status(run_id, status, summary=summary, error=error)

    def save_result(self, run_id: str, result: MethodResult, observation: Observation | None = None) -> None:
        """Store one (document, method) outcome; saving it again replaces it."""
        try:
            self._transaction([(
                "INSERT OR REPLACE INTO results VALUES (?,?,?,?,?,?)",
                (run_id, result.doc_id, result.method, _dumps(result.to_json()),
                 None if observation is None else _dumps(observation.to_json()), _now()),
            )])
        except sqlite3.IntegrityError:
            raise KeyError(f"no audit run {run_id!r}") from None

    def done(self, run_id: str) -> set[tuple[str, str]]:
        """(doc_id, method) pairs with a saved result: what a resumed run can skip."""
        return {(d, m) for d, m in self._execute("SELECT doc_id, method FROM results WHERE run_id=?", (run_id,))}

    _RUN_COLS = ("id", "created", "target_id", "methods", "params", "status", "summary", "finished", "error")

    def _run_info(self, row: tuple) -> RunInfo:
        d = dict(zip(self._RUN_COLS + ("n_documents", "n_results"), row))
        for k in ("methods", "params", "summary"):
            d[k] = _loads(d[k])
        return RunInfo(**d)

    def _run_select(self) -> str:
        return (
            f"SELECT {', '.join('r.' + c for c in self._RUN_COLS)},"
            " (SELECT COUNT(*) FROM run_documents d WHERE d.run_id=r.id),"
            " (SELECT COUNT(*) FROM results x WHERE x.run_id=r.id) FROM runs r"
        )

    def list_runs(self) -> list[RunInfo]:
        """All runs, newest first."""
        return [self._run_info(r) for r in self._execute(self._run_select() + " ORDER BY r.created DESC, r.rowid DESC")]

    def get_run(self, run_id: str) -> RunInfo:
        rows = self._execute(self._run_select() + " WHERE r.id=?", (run_id,))
        if not rows:
            raise KeyError(f"no audit run {run_id!r}")
        return self._run_info(rows[0])

    def load_run(self, run_id: str) -> RunRecord:
        """The run, its documents in their original order, and every saved result."""
        with self._lock:  # one consistent view even while another thread writes
            info = self.get_run(run_id)
            docs = [Document(i, t) for i, t in self._execute(
                "SELECT doc_id, text FROM run_documents WHERE run_id=? ORDER BY position", (run_id,))]
            rows = self._execute(
                "SELECT doc_id, method, result, observation FROM results WHERE run_id=? ORDER BY created, rowid",
                (run_id,))
        results = []
        for doc_id, method, res, obs in rows:
            o = _loads(obs)
            results.append(StoredResult(doc_id, method, MethodResult(**json.loads(res)),
                                        None if o is None else Observation.from_json(o)))
        return RunRecord(info, docs, results)

    def delete_run(self, run_id: str) -> None:
        """Delete a run with its documents and results. Cached target responses stay:
        they belong to the target, not to a run, and keep a repeat audit free."""
        self._require_run(run_id)
        self._transaction([
            ("DELETE FROM results WHERE run_id=?", (run_id,)),
            ("DELETE FROM run_documents WHERE run_id=?", (run_id,)),
            ("DELETE FROM runs WHERE id=?", (run_id,)),
        ])
