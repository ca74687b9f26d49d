"""Does answering a method's requests together (``RagSystem.complete_many``) beat answering them one by
one (``complete``), on the benchmark's kind of target? And are the answers the same?

The reference server answers one request at a time; the auditor's client
sends up to four at once. This measures, in-process and with nothing else
running, what a server that answered concurrent requests together would save:
the real probe requests of S-RAG, Verbatim continuation, S2MIA-T and MBA for a
few documents of the target corpus, against a knowledge base of that corpus,
each method's requests for one document sent as one batch (what the client
sends at once), then the same requests one by one.

    RPA_CACHE_DIR=<cache> .venv/bin/python scripts/bench_batched_serving.py --docs 4 --out runs/s26/batched.json

``--served``: the quick benchmark itself (10 + 10, no defense, the served
reference target over HTTP), run twice from empty answer stores: once one
request at a time (client concurrency 1, server batch 1: the benchmark before
session 26) and once as it now runs (``shadow.bench.served``'s defaults);
the time of each target leg and whether the scores agree.

    RPA_CACHE_DIR=<cache> .venv/bin/python scripts/bench_batched_serving.py --served \
        --methods srag,mba,verbatim --out runs/s26/batched-served.json
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARED = ROOT.parent / "shared" / "data"


def captured_requests(method_name: str, doc, params: dict | None = None, answer: str = "") -> list:
    """The ChatRequests ``method_name`` sends for ``doc`` to a recording target that answers ``answer``."""
    from audit_core.methods import create_method
    from audit_core.target.base import ChatRequest, Completion, Target, Usage

    class Recorder(Target):
        def __init__(self) -> None:
            super().__init__()
            self.sent: list[ChatRequest] = []

        def complete(self, request: ChatRequest) -> Completion:
            self.sent.append(request)
            return Completion(answer, None, Usage(0, 0))

    rec = Recorder()
    create_method(method_name, **(params or {})).probe(doc, rec)
    return rec.sent


def main(argv: list[str] | None = None) -> int:
    from shadow.corpus import load_corpus
    from shadow.demo import DEMO_MBA_ELICITATION
    from shadow.rag import RagConfig, RagSystem

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=4)
    ap.add_argument("--kb-size", type=int, default=300)
    ap.add_argument("--methods", default="srag,verbatim,s2mia_t,mba")
    ap.add_argument("--defense", default=None)
    ap.add_argument("--generator", default="gemma-3-270m")
    ap.add_argument("--seed", type=int, default=2626)
    ap.add_argument("--served", action="store_true", help="the quick benchmark, one at a time and batched")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.served:
        return served(args)

    docs = [d for d in load_corpus(str(SHARED / "genmedgpt5k.jsonl")) if d.n_words >= 20]
    random.Random(args.seed).shuffle(docs)
    kb, probed = docs[:args.kb_size], docs[:args.docs]  # probed documents are members
    rag = RagSystem(kb, RagConfig(generator=args.generator, defense=args.defense))
    rag.lm  # noqa: B018 -- load before timing
    params = {"mba": {"elicitation": DEMO_MBA_ELICITATION}}
    rows = []
    for m in args.methods.split(","):
        for d in probed:
            reqs = captured_requests(m, d, params.get(m, {}))
            if not reqs:
                continue
            rag._cache = None  # a cold prefix cache for each way
            t0 = time.perf_counter()
            together = rag.complete_many(reqs)
            t_many = time.perf_counter() - t0
            rag._cache = None  # a cold prefix cache for each way
            t0 = time.perf_counter()
            alone = [rag.complete(r) for r in reqs]
            t_one = time.perf_counter() - t0
            same = sum(a.text == b.text for a, b in zip(together, alone) if hasattr(a, "text"))
            rows.append({"method": m, "doc": d.id, "requests": len(reqs), "together_s": t_many, "one_by_one_s": t_one,
                         "same_text": same})
            print(f"{m:10s} {d.id:18s} {len(reqs):2d} requests: together {t_many:6.2f} s, one by one {t_one:6.2f} s, "
                  f"same text {same}/{len(reqs)}", flush=True)
    summary = {}
    for m in args.methods.split(","):
        r = [x for x in rows if x["method"] == m]
        if r:
            summary[m] = {"requests": sum(x["requests"] for x in r), "together_s": sum(x["together_s"] for x in r),
                          "one_by_one_s": sum(x["one_by_one_s"] for x in r),
                          "same_text": sum(x["same_text"] for x in r)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"config": vars(args), "summary": summary, "rows": rows}, indent=1))
    for m, s in summary.items():
        print(f"| {m} | {s['requests']} | {s['one_by_one_s']:.1f} | {s['together_s']:.1f} | "
              f"{s['one_by_one_s'] / max(s['together_s'], 1e-9):.2f}x | {s['same_text']}/{s['requests']} |")
    return 0


def served(args) -> int:
    import shadow.bench as bench
    import shadow.bench.served as srv

    out = Path(args.out)
    runs = {}
    for name, (conc, batch) in (("one at a time", (1, 1)), ("batched", srv.BATCHED)):
        run_dir = out.parent / (out.stem + "-" + name.replace(" ", "-"))
        if run_dir.exists():
            raise SystemExit(f"{run_dir} exists: the comparison needs empty answer stores")
        flags = ["--one-at-a-time"] if name == "one at a time" else []
        assert bench.main(["--quick", "--methods", args.methods, "--out", str(run_dir), *flags]) == 0
        res = json.loads((run_dir / "results.json").read_text())
        scores = {(r["method"], r["doc_id"]): r["score"] for r in map(json.loads, open(run_dir / "scores.jsonl"))}
        runs[name] = {"client_concurrency": conc, "server_max_batch": batch, "timings": res.get("timings"),
                      "scores": {f"{m}/{d}": v for (m, d), v in scores.items()}}
        print(f"{name}: {res.get('timings')}", flush=True)
    a, b = (runs[k]["scores"] for k in ("one at a time", "batched"))
    differ = sorted(k for k in a if a.get(k) != b.get(k))
    summary = {"scores_compared": len(a), "scores_differing": differ}
    Path(args.out).write_text(json.dumps({"config": vars(args), "runs": runs, "summary": summary}, indent=1))
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
