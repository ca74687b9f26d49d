"""Past audits in the store: save an audit as it runs, load it back as the same dict.

The unit everything downstream consumes (app, plots, PDF report) is the dict
of ``AuditResult.to_json()``. A finished or cancelled audit stores that dict
whole as the run's summary, so reopening it gives back exactly what the app
showed. While the audit runs, each (document, method) result and observation
is saved as it arrives (``result_recorder``), so an audit that crashed or was
killed can still be reopened from those rows: verdicts are then recomputed
with the run's verdict configuration, and calibrations (shadow scores) are
missing, which the rebuilt dict says in ``rebuilt_from_rows``.

Nothing here sees an API key: runs are keyed by the target's name (base URL
and model), and the store strips URL credentials from it.
"""
from __future__ import annotations

import datetime as _dt
import sqlite3
import threading
from dataclasses import asdict, replace
from typing import Any, Callable, Sequence

from audit_core.documents import Document
from audit_core.methods.base import MethodResult, Observation
from audit_core.report import target_label
from audit_core.store import RunInfo, Store
from audit_core.verdict import INCONCLUSIVE, MEMBER, NOT_FOUND, VerdictConfig, decide, voters, voting_order

#: on_result(doc_id, method, observation, result), as ``audit_core.audit.run_audit`` calls it
OnResult = Callable[[str, str, Observation, MethodResult], None]


#: what opening a store file that is not a usable SQLite database raises (``Store(path)``): a file cut short
#: or not a database (sqlite3.DatabaseError), a folder or an unreadable file (OSError)
STORE_OPEN_ERRORS = (sqlite3.DatabaseError, OSError)


def store_open_problem(path: str, exc: BaseException) -> str:
    """Which store file cannot be opened and why, in words shared by the app and the command line; each
    adds how its user chooses another file. An OSError's own text repeats the path, so only its reason is
    kept."""
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
    return f"the store file {path}, which keeps past audits and the target's answers, cannot be opened ({why})"


def start_run(store: Store, documents: Sequence[Document], target_name: str, config: dict[str, Any]) -> str:
    """Open a run (status ``running``) with its documents; returns the run id.

    ``config`` is the audit configuration as plain data (methods, shadow,
    method_params, verdict) -- never credentials.
    """
    return store.create_run(target_name, list(config.get("methods", [])), params=config, documents=documents)


#: statuses of a run that did not finish: running the same audit again resumes it
RESUMABLE = ("running", "cancelled", "stopped", "failed")


def resume_or_start_run(
    store: Store, documents: Sequence[Document], target_name: str, config: dict[str, Any]
) -> tuple[str, bool]:
    """The run to record this audit in, and whether it resumes an unfinished one.

    The same audit (same target, configuration and documents, in order) run
    again after it was cancelled, failed or killed continues that run: its
    answers are reused (the run id is the resume scope of
    ``audit_core.target.caching``) and only what was never answered is sent.
    A finished audit is never resumed: auditing again means asking again.
    """
    from audit_core.store import target_identity

    want_docs = [(d.id, d.content_hash()) for d in documents]
    tid = target_identity(target_name)
    for info in store.list_runs(summaries=False):  # newest first; a damaged summary is found by load_run below
        if info.status not in RESUMABLE or info.damaged or info.target_id != tid or info.params != _plain(config):
            continue
        if info.status == "running" and store.running_elsewhere(info.id):
            continue  # another process is auditing it now: joining would send its queries twice
        record = store.load_run(info.id)
        if record.info.damaged:  # its answers cannot all be read back: start afresh rather than trust it
            continue
        if [(d.id, d.content_hash()) for d in record.documents] == want_docs:
            store.set_status(info.id, "running")
            store.claim_run(info.id)
            return info.id, True
    run_id = start_run(store, documents, target_name, config)
    store.claim_run(run_id)
    return run_id, False


def _plain(config: dict[str, Any]) -> Any:
    """The configuration as the store gives it back (JSON round trip: tuples become lists)."""
    import json

    return json.loads(json.dumps(config, default=str))


def delete_audit(store: Store, run_id: str, running: Sequence[str] = ()) -> bool:
    """Delete one past audit: its row, documents, results and the target answers it received.

    ``running`` are the ids of audits in progress; those are refused (their
    thread would write into a run that no longer exists). Returns whether
    the file was rewritten at once (``Store.compact``).
    """
    if run_id in running or store.running_elsewhere(run_id):
        raise ValueError("this audit is still running (here or in another program, such as the command line): "
                         "cancel it first")
    return store.delete_run(run_id)


def delete_all_history(store: Store, running: Sequence[str] = ()) -> bool:
    """Delete every past audit and every stored target answer (refused while an audit runs), and the
    questions made from audited documents (Interrogation's and Entailment's cache, which quotes them)."""
    if running or any(i.status == "running" and store.running_elsewhere(i.id)
                      for i in store.list_runs(summaries=False)):
        raise ValueError("an audit is still running (here or in another program, such as the command line): "
                         "cancel it or let it finish first")
    import shutil

    from audit_core.methods.questions import QUESTIONS_DIR

    from audit_core.models import cache_dir

    deleted = store.delete_all()
    folder = cache_dir() / QUESTIONS_DIR
    if store.path.parent.resolve() == cache_dir().resolve() and folder.is_dir():  # the app's own store
        shutil.rmtree(folder, ignore_errors=True)
    return deleted


def result_recorder(store: Store, run_id: str) -> OnResult:
    """A callback that commits each result and its observation the moment it arrives."""

    def on_result(doc_id: str, method: str, observation: Observation, result: MethodResult) -> None:
        store.save_result(run_id, result, observation)

    return on_result


def save_audit(store: Store, run_id: str, result: dict[str, Any], resumed: bool = False) -> dict[str, Any]:
    """Close the run with the full audit dict as its summary (``run_status``); return that dict.

    A resumed run (``resume_or_start_run``) began when it was first started, so
    its ``created`` is that first start and ``resumed`` the start of this part:
    the report then says when the audit began, as History does.
    """
    if resumed:
        first = store.get_run(run_id).created
        result = {**result, "resumed": result.get("created"),
                  "created": _dt.datetime.fromisoformat(first).isoformat(timespec="seconds")}
    store.finish_run(run_id, run_status(result), summary=result)
    used = (result.get("config") or {}).get("methods")
    if used and (result.get("config") or {}).get("methods_source"):  # chosen by the audit, not named by its user
        store.set_methods(run_id, used)
    return result


def run_status(result: dict[str, Any]) -> str:
    """How an audit ended: "cancelled" by its user, "stopped" by a fatal target error (both resumable: the
    same audit run again sends only what was never answered), else "finished"."""
    if result.get("cancelled"):
        return "cancelled"
    return "stopped" if (result.get("failures") or {}).get("stopped") else "finished"


def mark_failed(store: Store, run_id: str, message: str, cancelled: bool = False) -> None:
    """Close a run that stopped on an error, or was ``cancelled`` before it returned a result (during the
    shadow preparation); its saved rows stay reopenable and the same audit run again resumes it."""
    store.finish_run(run_id, "cancelled" if cancelled else "failed", error=message)


def load_audit(store: Store, run_id: str) -> dict[str, Any]:
    """The audit dict of a run: its stored summary, or one rebuilt from its rows.

    A summary that reads as JSON but is not shaped as an audit (edited, or written by a faulty version) is
    treated as the store treats one that does not read: the run is damaged, and what its rows hold is shown
    (every view of the app and the PDF trusts the shape, so passing it on broke them as "a bug").
    """
    record = store.load_run(run_id)
    summary = record.info.summary
    if summary is not None:
        problem = summary_problem(summary)
        if not problem:
            return summary
        record.info.damaged = record.info.damaged or problem
    return _rebuild(record)  # no summary, or one damaged: the verdicts again from the rows that read


#: the calls a verdict can make (``audit_core.verdict``)
_CALLS = (MEMBER, NOT_FOUND, INCONCLUSIVE)
#: fields of an audit dict that are mappings, and that are texts, where present (older audits lack some)
_MAPPINGS = ("config", "capabilities", "results", "observations", "calibrations", "not_run", "account",
             "failures", "freshness", "no_signal", "collection", "method_power")
_TEXTS = ("target", "created", "finished", "resumed", "what_this_shows")


def summary_problem(summary: Any) -> str:
    """Why a stored summary is not an audit dict (``AuditResult.to_json()``) as the views read it, or "".

    It checks the shape the app, the plots and the PDF rely on (each verdict's call and reason, each
    document's text, the mappings they look up), not the values: a summary an earlier version wrote lacks
    fields added since, and passes.
    """
    def bad(what: str) -> str:
        return f"its stored summary is incomplete or altered ({what})"

    if not isinstance(summary, dict):
        return bad("not a mapping")
    for k in _MAPPINGS:
        if summary.get(k) is not None and not isinstance(summary[k], dict):
            return bad(f"{k} is not a mapping")
    for k in _TEXTS:
        if summary.get(k) is not None and not isinstance(summary[k], str):
            return bad(f"{k} is not a text")
    if summary.get("fpr") is not None and not isinstance(summary["fpr"], (int, float)):
        return bad("fpr is not a number")
    verdicts = summary.get("verdicts")
    if not isinstance(verdicts, list):
        return bad("no list of verdicts")
    for i, v in enumerate(verdicts, 1):
        if not (isinstance(v, dict) and isinstance(v.get("doc_id"), str) and v.get("verdict") in _CALLS
                and isinstance(v.get("reason"), str) and isinstance(v.get("methods") or {}, dict)):
            return bad(f"verdict {i} lacks its document, call or reason")
    documents = summary.get("documents") or []
    if not isinstance(documents, list) or not all(
            isinstance(d, dict) and isinstance(d.get("id"), str) and isinstance(d.get("text"), str) for d in documents):
        return bad("a document lacks its id or text")
    for per in (summary.get("results") or {}).values():
        if not isinstance(per, dict) or not all(
                isinstance(r, dict) and isinstance(r.get("evidence") or {}, dict) for r in per.values()):
            return bad("a document's results are not method results")
    for method, cal in (summary.get("calibrations") or {}).items():
        if not isinstance(cal, dict):
            return bad(f"the calibration of {method} is not a mapping")
    return ""


def _rebuilt_verdict(doc_id: str, results: dict[str, dict], probing: set[str], vcfg: VerdictConfig) -> dict:
    """A document's verdict from its saved rows. One whose rows lack a method that probed other documents
    was cut off mid-way: a "not found" may not stand on the methods that came first (the missing one might
    have called it a member, or not cleared it), nor a member call by a method that votes after a missing
    one (which might have scored it below its member threshold, rule R7); either is inconclusive with that
    reason."""
    rows = [MethodResult(**res) for res in results.values()]
    v = decide(doc_id, rows, vcfg)
    missing = sorted(probing - set(results))
    if missing and v.verdict == NOT_FOUND:
        v = replace(v, verdict=INCONCLUSIVE, rule="R1",
                    reason=f"the audit stopped before {', '.join(missing)} probed this document, so it is not "
                           f"cleared ({v.reason})")
    elif missing and v.verdict == MEMBER:
        order = voting_order(vcfg, [*missing, *results])
        caller = voters(rows, vcfg)[0].method
        ahead = [m for m in missing if order.index(m) < order.index(caller)]
        if ahead:
            v = replace(v, verdict=INCONCLUSIVE, rule="R7",
                        reason=f"the audit stopped before {', '.join(ahead)} probed this document, which votes "
                               f"before the method that calls it a member, so that call is not confirmed ({v.reason})")
    return v.to_json()


def _rebuild(record) -> dict[str, Any]:
    """An ``AuditResult.to_json()``-shaped dict from per-result rows (no calibrations)."""
    info = record.info
    params = info.params or {}
    vcfg = VerdictConfig.from_json(params.get("verdict"))
    results: dict[str, dict[str, dict]] = {}
    observations: dict[str, dict[str, dict]] = {}
    for r in record.results:
        results.setdefault(r.doc_id, {})[r.method] = r.result.to_json()
        if r.observation is not None:
            observations.setdefault(r.doc_id, {})[r.method] = r.observation.to_json()
    docs = [d for d in record.documents if d.id in results]
    probing = {m for per in results.values() for m in per}  # once, not once per document (N x N)
    verdicts = [_rebuilt_verdict(d.id, results[d.id], probing, vcfg) for d in docs]
    return {
        "target": target_label({"target": info.target_id}),
        "created": info.created,
        "config": params,
        "capabilities": {},
        "verdicts": verdicts,
        "results": results,
        "observations": observations,
        "calibrations": {},
        "not_run": {},
        "account": {},
        "documents": [asdict(d) for d in docs],
        # a run that failed or stopped was not cancelled by its user: the report must not say it was
        "cancelled": info.status == "cancelled",
        "failures": {} if info.status in ("finished", "cancelled") else
        {"stopped": info.error or f"the audit ended as '{info.status}' before all documents were audited"},
        "rebuilt_from_rows": True,
        # why part of the run could not be read (``RunInfo.damaged``): the views say so instead of "it stopped"
        **({"damaged": info.damaged} if info.damaged else {}),
    }


def verdict_counts(result: dict[str, Any]) -> dict[str, int]:
    """How many documents got each verdict."""
    out: dict[str, int] = {}
    for v in result.get("verdicts") or []:
        if isinstance(v, dict) and isinstance(v.get("verdict"), str):
            out[v["verdict"]] = out.get(v["verdict"], 0) + 1
    return out


def history_rows(store: Store) -> list[dict[str, Any]]:
    """One row per past audit, newest first, for the app's history table (each stored summary read once per
    process, ``_summary_counts``: the app lists the runs on every page run)."""
    rows = []
    for info in store.list_runs(summaries=False):
        try:
            counts, damaged = _summary_counts(store, info)
        except KeyError:  # deleted since it was listed (by another page or the command line): no longer a row
            continue
        rows.append(_row(replace(info, damaged=info.damaged or damaged), counts))
    return rows


#: (store file, run id, status, finished, summary length) -> (verdict counts, why the summary is damaged)
_COUNTS: dict[tuple, tuple[dict[str, int], str]] = {}
_COUNTS_LOCK = threading.Lock()


def _summary_counts(store: Store, info: RunInfo) -> tuple[dict[str, int], str]:
    """A run's verdict counts from its stored summary, read once per process: a summary is written when its
    run ends (a resumed run ends again, with another ``finished`` and length), so the key names one summary."""
    if not info.summary_chars:
        return {}, ""
    key = (str(store.path), info.id, info.status, info.finished, info.summary_chars)
    with _COUNTS_LOCK:
        found = _COUNTS.get(key)
    if found is None:
        full = store.get_run(info.id)
        problem = summary_problem(full.summary) if full.summary is not None else ""
        # a summary not shaped as an audit is opened rebuilt from its rows (``load_audit``): its counts would
        # not be what opening it shows
        found = ({} if problem or full.summary is None else verdict_counts(full.summary), full.damaged or problem)
        with _COUNTS_LOCK:
            _COUNTS[key] = found
    return found


def _row(info: RunInfo, counts: dict[str, int]) -> dict[str, Any]:
    from audit_core.methods import LABELS

    # what each audit found comes before how it was run: on a laptop's width the table's last columns are
    # scrolled out of view, and they had been the verdict counts
    return {
        "id": info.id,
        "created": info.created[:19].replace("T", " "),
        "documents": info.n_documents,
        "member": counts.get("member", 0),
        "not found": counts.get("not found", 0),
        "inconclusive": counts.get("inconclusive", 0),
        "status": "damaged" if info.damaged else info.status,
        "target": target_label({"target": info.target_id}),
        "methods": ", ".join(LABELS.get(m, m) for m in info.methods),
        "error": (f"{info.damaged}: open it to see what remains, or delete it" if info.damaged else info.error) or "",
    }
