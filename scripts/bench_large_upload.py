"""What a large upload costs besides the target's answers: the audit loop, the exports, the history, the test.

An owner may upload thousands of documents. Everything the auditor does around the target's answers must then
grow no faster than the documents: the result so far handed to the app after each document, the four exports
(JSON, CSV, scores CSV, PDF), the history table read on every page run, and the collection test against
controls. This runs all of them at N documents with an instant text-only target and a shadow calibration drawn
from two normal distributions (no model is loaded, no query leaves the machine), and prints seconds, pages and
peak memory as JSON. BENCHMARKS.md, "Session 55", has the figures.

    .venv/bin/python scripts/bench_large_upload.py --n 250,1000,4000 --controls 50 --out runs/large.json

Each N runs in a process of its own, so that the peak memory is that N's.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: the methods audited: two that need no local model (RAG-MIA's yes/no question, DCMI's two statements)
METHODS = ["rag_mia", "perturbation"]


def _documents(n: int, prefix: str) -> list:
    """``n`` distinct patient-style texts, built from the shipped sample documents."""
    import csv

    from audit_core.documents import Document

    with open(ROOT / "assets" / "sample_documents.csv", newline="", encoding="utf-8") as fh:
        texts = [row["text"] for row in csv.DictReader(fh)]
    return [Document(f"{prefix}{i}", f"Note {i}. {texts[i % len(texts)]}") for i in range(n)]


def _target():
    from audit_core.target.base import Completion, Target, Usage

    class Instant(Target):
        """Answers every question at once: "Yes" to every other document, "No" to the rest."""

        name = "http://bench.local/v1 · instant"

        def complete(self, request):
            text = "Yes" if hash(request.key()) % 2 else "No"
            self.account.record(Usage(50, 1))
            return Completion(text, None, Usage(50, 1), "stop", "instant")

    return Instant()


def _prepare(methods, shadow, progress=None):
    """Each method's calibration from 200 + 200 scores drawn from two normals (shadow AUC about 0.9)."""
    import numpy as np

    from audit_core.evidence import calibration as C
    from audit_core.methods.base import Calibration

    rng = np.random.default_rng(0)

    class Prep:
        calibrations = {m.name: C.apply_evidence(Calibration(m.name), C.fit_evidence(
            rng.normal(1.8, 1, 200).tolist(), rng.normal(0, 1, 200).tolist(), source="bench"))
            for m in methods}

    return Prep()


def _peak_mb() -> float:
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 0)


def one(n: int, n_controls: int) -> dict:
    """Every stage at ``n`` documents, in this process."""
    from pypdf import PdfReader

    from audit_core import history, report
    from audit_core.audit import AuditConfig, run_audit
    from audit_core.evidence.collection import collection_test, raw_score
    from audit_core.store import Store
    from audit_core.target.base import Capabilities

    out: dict = {"documents": n, "controls": n_controls}
    docs, controls = _documents(n, "doc-"), _documents(n_controls, "never-published-")
    snapshots = {"count": 0, "s": 0.0}

    def on_document(result) -> None:  # as the app does: the result so far, serialised
        t0 = time.perf_counter()
        result.to_json(observations=False)
        snapshots["count"] += 1
        snapshots["s"] += time.perf_counter() - t0

    caps = Capabilities(True, False, 0, model="instant", style="chat")
    t0 = time.perf_counter()
    result = run_audit(docs, _target(), AuditConfig(methods=METHODS, run_without_signal=METHODS), _prepare,
                       capabilities=caps, controls=controls, on_document=on_document)
    out["audit_s"] = round(time.perf_counter() - t0, 1)
    out["snapshots"] = snapshots["count"]
    out["snapshots_s"] = round(snapshots["s"], 1)
    saved = result.to_json()

    t0 = time.perf_counter()
    view = report.export_view(saved, True)
    exports = [report.results_json(saved, True, view), report.results_csv(saved, True, view),
               report.scores_csv(saved, True, view)]
    out["json_csv_scores_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    pdf = report.pdf_report(saved, redact=True, view=view)
    out["pdf_s"] = round(time.perf_counter() - t0, 1)
    out["pdf_pages"] = len(PdfReader(io.BytesIO(pdf)).pages)
    out["pdf_mb"] = round(len(pdf) / 2 ** 20, 1)
    out["json_mb"] = round(len(exports[0]) / 2 ** 20, 1)

    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "bench.sqlite")
        run_id = history.start_run(store, docs, result.target, saved["config"])
        history.save_audit(store, run_id, saved)
        times = []
        for _ in range(3):  # the app lists the runs on every page run
            t0 = time.perf_counter()
            history.history_rows(store)
            times.append(time.perf_counter() - t0)
        out["history_rows_first_then_s"] = [round(t, 2) for t in times]
        store.close()

    # the test run_audit ran against the controls, again on its own (with its power simulations)
    method = saved["collection"]["method"]
    ev = (result.calibrations[method].params or {}).get("evidence") or {}
    scores = [raw_score(per.get(method)) for per in result.results.values()]
    t0 = time.perf_counter()
    collection_test(scores, list(saved["collection"]["control_scores"].values()), method=method,
                    controls_kind="declared", member_raw=ev.get("member_raw", ()),
                    nonmember_raw=ev.get("nonmember_raw", ()), platt=ev.get("platt"))
    out["collection_test_s"] = round(time.perf_counter() - t0, 1)
    out["peak_rss_mb"] = _peak_mb()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="250,1000", help="documents, comma-separated (each in its own process)")
    ap.add_argument("--controls", type=int, default=50)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child process's N
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.controls)))
        return 0
    rows = []
    for n in (int(x) for x in args.n.split(",")):
        done = subprocess.run([sys.executable, __file__, "--one", str(n), "--controls", str(args.controls)],
                              capture_output=True, text=True, env={**os.environ, "RPA_WARMUP": "0"}, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
