"""SQLite store: cached target responses, failed calls, audit runs and their results.

One file (default ``cache_dir()/"audits.sqlite"``), WAL mode so the app can
read while an audit writes, one connection guarded by a lock so any thread
may use a Store. SQLite serialises writers anyway and every read here is a
primary-key lookup, so a single connection costs nothing measurable, and
unlike a connection per thread it does not leak a handle for every worker
thread of every batch.

What is keyed by what:

* **responses**: (target identity, credential id, method, method version,
  ``ChatRequest.key()``, run id) -> the ``Completion`` JSON and the time it
  was received (``created``). The target identity is the target's ``name``
  (base URL + model) with any credentials in a URL removed
  (:func:`target_identity`); the credential id is a scrypt hash of the key under
  this file's own random salt (``credential_salt``), so two tenants behind
  one URL never share answers while the key itself is never part of a key or
  a row. The run id is the audit that received the answer: an audit reuses
  its own answers (resume) and another audit's only under an explicit
  freshness policy (``audit_core.target.caching``). Only *successful*
  completions are stored here: a cached failure would make every re-run
  repeat a transient error (rate limit, timeout) forever.
* **failures**: every failed call, with its reason code and message, as an
  append-only log for reporting; it is never used to answer a request.
* **meta**: the credential salt.

Deleting an audit (``delete_run``, ``delete_all``) removes its rows and its
answers, then rewrites the file (``secure_delete``, VACUUM, WAL truncated) so
that the deleted texts are not left in free pages or in the WAL.
* **runs**, **run_documents**, **results**: an audit run, its documents (text
  and hash) and each (document, method) ``MethodResult`` + ``Observation``:
  everything needed to re-open an audit and re-export its report.

Each write is committed before the call returns, so a process killed at any
point loses nothing already written. ``synchronous=NORMAL`` in WAL mode is
durable against a killed process; only a power cut may lose the last commits.
"""
from __future__ import annotations

import errno
import json
import os
import re
import sqlite3
import stat
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

from audit_core.documents import Document
from audit_core.methods.base import MethodResult, Observation
from audit_core.target.base import ChatRequest, Completion, TargetError

#: bump when the schema changes; older files are migrated (``_MIGRATIONS``), newer ones refused
SCHEMA_VERSION = 2
RUN_STATUSES = ("running", "finished", "cancelled", "stopped", "failed")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    target_id      TEXT NOT NULL,
    cred_id        TEXT NOT NULL DEFAULT '',
    method         TEXT NOT NULL,
    method_version TEXT NOT NULL,
    request_key    TEXT NOT NULL,
    run_id         TEXT NOT NULL DEFAULT '',
    request_json   TEXT,
    completion     TEXT NOT NULL,
    created        TEXT NOT NULL,
    PRIMARY KEY (target_id, cred_id, method, method_version, request_key, run_id)
);
CREATE INDEX IF NOT EXISTS responses_by_run ON responses (run_id);
CREATE TABLE IF NOT EXISTS failures (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    target_id      TEXT NOT NULL,
    method         TEXT NOT NULL,
    method_version TEXT NOT NULL,
    request_key    TEXT NOT NULL,
    reason         TEXT NOT NULL,
    message        TEXT NOT NULL,
    created        TEXT NOT NULL,
    run_id         TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS failures_by_target ON failures (target_id, method, method_version);
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
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

#: schema version -> the statements that bring a file of that version to the next one
_MIGRATIONS: dict[int, str] = {
    # 1 -> 2: answers get the credential id and the run that received them. Old
    # answers keep cred_id '' and run_id '': no keyed target and no new audit
    # matches them, so they are never replayed as fresh (only deleted).
    1: """
    ALTER TABLE responses RENAME TO responses_v1;
    CREATE TABLE responses (
        target_id      TEXT NOT NULL,
        cred_id        TEXT NOT NULL DEFAULT '',
        method         TEXT NOT NULL,
        method_version TEXT NOT NULL,
        request_key    TEXT NOT NULL,
        run_id         TEXT NOT NULL DEFAULT '',
        request_json   TEXT,
        completion     TEXT NOT NULL,
        created        TEXT NOT NULL,
        PRIMARY KEY (target_id, cred_id, method, method_version, request_key, run_id)
    );
    INSERT INTO responses (target_id, cred_id, method, method_version, request_key, run_id, request_json,
                           completion, created)
        SELECT target_id, '', method, method_version, request_key, '', request_json, completion, created
        FROM responses_v1;
    DROP TABLE responses_v1;
    CREATE INDEX IF NOT EXISTS responses_by_run ON responses (run_id);
    ALTER TABLE failures ADD COLUMN run_id TEXT NOT NULL DEFAULT '';
    CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """,
}

_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]*@")
#: a URL's query string (the URL kept in group 1); a "?" elsewhere in a name is the name's (a JSONPath filter
#: in its sources path, a model name), and stripping it had made targets that read different sources one
_URL_QUERY = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s?]*)\?[^\s]*")


def target_identity(name: str) -> str:
    """A target's cache identity from its ``name``, with URL credentials removed.

    ``Target.name`` is meant to be base URL + model and never to hold a secret;
    this also strips ``user:password@`` and query strings (``?api_key=...``)
    from any URL in it, so a key pasted into a base URL cannot reach the file.
    """
    return _URL_QUERY.sub(r"\1", _URL_USERINFO.sub(r"\1", name)).strip()


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
class StoredAnswer:
    """A stored target answer, when it was received, and by which run."""

    completion: Completion
    created: str
    run_id: str


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
    #: why part of the run's record could not be read (a file cut short, edited or damaged on disk), or "":
    #: the run is still listed, so it can be opened as far as it reads and deleted, and it is never resumed
    damaged: str = ""
    #: the stored summary's length in characters (0: none); with ``summary``, what tells one stored summary
    #: from the next without reading it (``Store.list_runs(summaries=False)``)
    summary_chars: int = 0


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


_NOT_A_FILE = {stat.S_IFDIR: "a folder", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device",
               stat.S_IFIFO: "a named pipe", stat.S_IFSOCK: "a socket"}


def _not_a_file(path: Path, mode: int) -> OSError:
    """The error for a store path that names no regular file: an OSError, which the CLI and the app report as a
    store file that cannot be opened (bad input), never as a bug."""
    what = _NOT_A_FILE.get(stat.S_IFMT(mode), "not a regular file")
    return OSError(errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL,
                   f"it is {what}, not a store file", str(path))


def _private_store_file(path: Path) -> Path:
    """Create the store file readable by its owner only (0600), or make an existing one so; returns the file
    SQLite is to open. It holds documents, prompts and answers, and SQLite gives the -wal and -shm files the
    main file's mode, so the main file is made private before SQLite opens it.

    A path that is no regular file is refused before anything is changed: ``--store /dev/null`` run as root
    had made /dev/null 0600 (``chmod`` of whatever the path names), breaking it for every other user. A
    link is followed on purpose, as for every file the user names (a store kept on another disk): the file it
    names is checked, then opened without following links again (``O_NOFOLLOW``; a link swapped in between
    is refused by the open), checked once more on the open descriptor, and only that descriptor is chmod'ed.
    """
    real = Path(os.path.realpath(path))
    try:
        st = os.lstat(real)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):  # never opened: opening a device can have effects
        raise _not_a_file(path, st.st_mode)
    flags = (os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_CLOEXEC", 0))
    fd = os.open(real, flags, 0o600)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # replaced between the check and the open
            raise _not_a_file(path, mode)
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return real


class Store:
    """Thread-safe SQLite store; see the module docstring for what it holds and why."""

    def __init__(self, path: str | Path | None = None, timeout_s: float = 30.0) -> None:
        if path is None:
            from audit_core.models import cache_dir  # lazy: keeps importing the store light

            path = cache_dir() / "audits.sqlite"
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        real = _private_store_file(self.path)
        self._conn: sqlite3.Connection | None = sqlite3.connect(
            str(real), timeout=timeout_s, check_same_thread=False, isolation_level=None
        )
        with self._lock:
            c = self._conn
            c.execute("PRAGMA journal_mode=WAL")
            c.execute("PRAGMA synchronous=NORMAL")
            c.execute("PRAGMA foreign_keys=ON")
            c.execute("PRAGMA secure_delete=ON")  # deleted rows are overwritten, not left in free pages
            version = c.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                c.close()
                self._conn = None
                raise RuntimeError(
                    f"{self.path} was written by a newer version (schema {version} > {SCHEMA_VERSION})"
                )
            if version == 0:  # new file: opening an up-to-date one writes nothing
                c.executescript(_SCHEMA)
                c.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            elif version < SCHEMA_VERSION:
                self._migrate(version)

    def _migrate(self, version: int) -> None:
        """Bring an older file up to SCHEMA_VERSION, one version at a time, each step atomic."""
        c = self._conn
        assert c is not None
        while version < SCHEMA_VERSION:
            c.execute("BEGIN IMMEDIATE")
            # another process may have migrated the file between our reading its version and this lock
            current = c.execute("PRAGMA user_version").fetchone()[0]
            if current != version:
                c.execute("COMMIT")
                version = current
                continue
            try:
                for stmt in _MIGRATIONS[version].split(";"):
                    if stmt.strip():
                        c.execute(stmt)
                c.execute(f"PRAGMA user_version={version + 1}")
            except BaseException:
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")
            version += 1

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

    # ------------------------------------------------------------------ which process runs a run

    def claim_run(self, run_id: str) -> None:
        """Record that this process (host and pid) is running ``run_id`` (``running_elsewhere`` reads it)."""
        import socket

        self._transaction([("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                            (f"lease:{run_id}", f"{socket.gethostname()}:{os.getpid()}"))])

    def running_elsewhere(self, run_id: str) -> bool:
        """Whether another live process on this host holds ``run_id`` (a run left "running" by a process that
        died, or by another host, is not: it may be resumed)."""
        import socket

        rows = self._execute("SELECT value FROM meta WHERE key=?", (f"lease:{run_id}",))
        if not rows:
            return False
        host, _, pid = rows[0][0].rpartition(":")
        if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
            return False
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # alive, and another user's
            return True
        return True

    # ------------------------------------------------------------------ target responses

    def credential_salt(self) -> bytes:
        """This file's random salt for credential ids (made on first use, never leaves the file)."""
        rows = self._execute("SELECT value FROM meta WHERE key='credential_salt'")
        if rows:
            return bytes.fromhex(rows[0][0])
        self._transaction([("INSERT OR IGNORE INTO meta VALUES ('credential_salt', ?)", (os.urandom(16).hex(),))])
        return bytes.fromhex(self._execute("SELECT value FROM meta WHERE key='credential_salt'")[0][0])

    def get_response(
        self, target_id: str, request_key: str, method: str = "", method_version: str = "", *,
        cred_id: str = "", run_id: str = "",
    ) -> Completion | None:
        """The answer this run (and credential) received for a request, or None."""
        found = self.find_response(target_id, request_key, method, method_version, cred_id=cred_id, run_id=run_id)
        return None if found is None else found.completion

    def find_response(
        self, target_id: str, request_key: str, method: str = "", method_version: str = "", *,
        cred_id: str = "", run_id: str | None = "", since: str | None = None,
    ) -> "StoredAnswer | None":
        """A stored answer with the time it was received.

        ``run_id`` given: that run's answer only (resume). ``run_id=None``: the
        newest answer of any run received at or after ``since`` (ISO time) --
        the cross-audit reuse a freshness policy allows.
        """
        sql = ("SELECT completion, created, run_id FROM responses WHERE target_id=? AND cred_id=? AND method=?"
               " AND method_version=? AND request_key=?")
        params: list[Any] = [target_identity(target_id), cred_id, method, method_version, request_key]
        if run_id is not None:
            sql += " AND run_id=?"
            params.append(run_id)
        if since is not None:
            sql += " AND created>=?"
            params.append(since)
        rows = self._execute(sql + " ORDER BY created DESC LIMIT 1", params)
        if not rows:
            return None
        return StoredAnswer(Completion.from_json(json.loads(rows[0][0])), rows[0][1], rows[0][2])

    def put_response(
        self,
        target_id: str,
        request_key: str,
        completion: Completion,
        method: str = "",
        method_version: str = "",
        request: ChatRequest | None = None,
        *,
        cred_id: str = "",
        run_id: str = "",
        created: str | None = None,
    ) -> None:
        """Store a successful answer (committed on return). A second put replaces the first.

        ``created`` is when it was received: now, unless an answer reused
        from another run is copied into this one with its original time.
        """
        self._transaction([(
            "INSERT OR REPLACE INTO responses (target_id, cred_id, method, method_version, request_key, run_id,"
            " request_json, completion, created) VALUES (?,?,?,?,?,?,?,?,?)",
            (target_identity(target_id), cred_id, method, method_version, request_key, run_id,
             None if request is None else _dumps(request.to_json()), _dumps(completion.to_json()),
             created or _now()),
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
        run_id: str = "",
    ) -> None:
        """Log a failed call. Never consulted by ``get_response``: a re-run retries it."""
        if isinstance(error, TargetError):
            reason, message = error.reason, str(error)
        else:
            reason, message = "error", str(error)
        self._transaction([(
            "INSERT INTO failures (target_id, method, method_version, request_key, reason, message, created, run_id)"
            " VALUES (?,?,?,?,?,?,?,?)",
            (target_identity(target_id), method, method_version, request_key, reason, message, _now(), run_id),
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

    def set_methods(self, run_id: str, methods: Sequence[str]) -> None:
        """The methods a run used, once the audit chose them for its target (``methods.AUTO``): History lists
        these rather than "auto". Resuming compares a run's configuration, not this column."""
        self._transaction([("UPDATE runs SET methods=? WHERE id=?", (_dumps(list(methods)), run_id))])

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
        """One run's row; a column that does not decode is left empty and named in ``damaged`` (one bad row
        had made the whole history unreadable and every new audit fail to start)."""
        d = dict(zip(self._RUN_COLS + ("n_documents", "n_results", "summary_chars"), row))
        d["summary_chars"] = d["summary_chars"] or 0
        bad = []
        for k, kind, empty in (("methods", list, []), ("params", dict, {}), ("summary", dict, None)):
            try:
                value = _loads(d[k])
                readable = value is None or isinstance(value, kind)
            except ValueError:
                value, readable = None, False
            d[k] = value if readable else empty
            if not readable:
                bad.append(k)
        if bad:
            d["damaged"] = f"its stored {' and '.join(bad)} could not be read"
        return RunInfo(**d)

    def _run_select(self, summaries: bool = True) -> str:
        cols = ", ".join("r." + c if summaries or c != "summary" else "NULL" for c in self._RUN_COLS)
        return (
            f"SELECT {cols},"
            " (SELECT COUNT(*) FROM run_documents d WHERE d.run_id=r.id),"
            " (SELECT COUNT(*) FROM results x WHERE x.run_id=r.id), length(r.summary) FROM runs r"
        )

    def list_runs(self, summaries: bool = True) -> list[RunInfo]:
        """All runs, newest first. ``summaries=False`` leaves every ``summary`` out (None; ``summary_chars`` still
        says whether there is one): a 4,000-document audit's summary is 80 MB of JSON, 1.5 s to read, and
        the app lists the runs on every page run (session 55)."""
        return [self._run_info(r) for r in self._execute(self._run_select(summaries)
                                                          + " ORDER BY r.created DESC, r.rowid DESC")]

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
            try:
                o = _loads(obs)
                results.append(StoredResult(doc_id, method, MethodResult(**json.loads(res)),
                                            None if o is None else Observation.from_json(o)))
            except (ValueError, TypeError, KeyError, AttributeError):  # a damaged row: that result is missing
                info.damaged = info.damaged or "some of its stored results could not be read"
        return RunRecord(info, docs, results)

    def delete_run(self, run_id: str) -> bool:
        """Delete a run with its documents, results, and the target answers it received.

        The answers hold the document texts (in the prompts), so they go too;
        an answer another audit reused was copied into that audit and stays
        there. Answers and failures stored before they were tied to a run
        (schema 1, migrated with run id '') cannot be told apart, so those of
        the same target all go: they are never replayed to resume an audit, and
        losing them costs at most a query sent again. Returns whether the file
        could be rewritten at once so that no deleted text is left in it (see
        ``compact``).
        """
        self._require_run(run_id)
        target_id = self._execute("SELECT target_id FROM runs WHERE id=?", (run_id,))[0][0]
        self._transaction([
            ("DELETE FROM results WHERE run_id=?", (run_id,)),
            ("DELETE FROM run_documents WHERE run_id=?", (run_id,)),
            ("DELETE FROM responses WHERE run_id=? OR (run_id='' AND target_id=?)", (run_id, target_id)),
            ("DELETE FROM failures WHERE run_id=? OR (run_id='' AND target_id=?)", (run_id, target_id)),
            ("DELETE FROM runs WHERE id=?", (run_id,)),
        ])
        return self.compact()

    def delete_all(self) -> bool:
        """Delete every run, document, result, stored answer and failure; see ``delete_run``."""
        self._transaction([(f"DELETE FROM {table}", ()) for table in
                           ("results", "run_documents", "responses", "failures", "runs")])
        return self.compact()

    def compact(self) -> bool:
        """Rewrite the file without free pages and empty the WAL, so deleted texts are gone from disk.

        ``secure_delete`` already zeroes deleted rows in the pages written;
        VACUUM rebuilds the file, and a TRUNCATE checkpoint empties the WAL,
        which still holds earlier versions of the pages. Returns False when
        another connection (an audit in another process) keeps a reader open:
        the rows are deleted, and the next ``compact`` clears the file.
        """
        with self._lock:
            if self._conn is None:
                raise RuntimeError("the store is closed")
            c = self._conn
            try:
                c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                c.execute("VACUUM")
                busy, _, _ = c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            except sqlite3.OperationalError:
                return False
            return busy == 0
