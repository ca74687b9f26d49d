"""What the paraphraser of the paraphrasing defense costs and changes (issue 18).

The defense (S-RAG section 5.3) has the target rewrite every query before
retrieval. With Gemma 3 270M as the rewriting model each rewrite decodes
through a 262k-token output layer; SmolLM2-135M's has 49k. This script
measures, for each paraphraser, the seconds per paraphrase and the defense's
effect on what S-RAG relies on: how often a member document's own probe still
retrieves that document (no defense: nearly always).

Setup: the demo target's knowledge base (assets/demo_kb.jsonl, Gemma 3 270M
generator, k = 4); ``--n`` member documents drawn with seed 0; one S-RAG probe
per document (its middle probe: the instruction plus the document's prefix).

    nice -n 10 .venv/bin/python scripts/bench_paraphraser.py --n 12
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def probe_queries(n: int, seed: int = 0):
    """(document id, S-RAG probe text) for ``n`` knowledge-base documents."""
    from audit_core.methods.srag import SragConfig, segment
    from shadow.corpus import load_corpus
    from shadow.demo import DEMO_KB

    cfg = SragConfig()
    docs = load_corpus(DEMO_KB)
    out = []
    for d in random.Random(seed).sample(docs, len(docs)):
        probes = segment(d.text, cfg)  # ranks the words with the proxy model: only as many as needed
        if probes:
            out.append((d.id, cfg.prompt.format(prefix=probes[len(probes) // 2].prefix)))
        if len(out) == n:
            break
    return out


def measure(paraphraser: str | None, queries, generator: str) -> dict:
    from shadow.corpus import load_corpus
    from shadow.demo import DEMO_KB
    from shadow.rag import RagConfig, RagSystem

    defense = None if paraphraser == "none" else "paraphrase"
    rag = RagSystem(load_corpus(DEMO_KB), RagConfig(generator=generator, defense=defense,
                                                    paraphraser=None if paraphraser == "none" else paraphraser))
    if defense:
        rag._paraphraser_obj().paraphrase("Warm-up: load the model.")  # loading is not paraphrasing time
    seconds, hits, acted, examples = [], 0, 0, []
    for doc_id, q in queries:
        t0 = time.perf_counter()
        rec = rag.retrieve_records([q])[0]
        seconds.append(time.perf_counter() - t0)
        hits += doc_id in rec.doc_ids
        acted += bool(rec.defense_acted)
        if len(examples) < 2:
            examples.append({"query": q[-160:], "retrieval_query": rec.retrieval_query[:240]})
    return {"paraphraser": paraphraser, "queries": len(queries),
            "seconds_per_query_mean": statistics.mean(seconds), "seconds_per_query_median": statistics.median(seconds),
            "own_document_retrieved": hits / len(queries), "paraphrased": acted / len(queries),
            "examples": examples}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=12, help="member documents probed (default: %(default)s)")
    ap.add_argument("--paraphrasers", default="none,smollm2-135m-instruct,gemma-3-270m")
    ap.add_argument("--generator", default="gemma-3-270m", help="the target's generator (the demo's)")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    queries = probe_queries(args.n)
    rows = []
    for p in args.paraphrasers.split(","):
        row = measure(p, queries, args.generator)
        rows.append(row)
        print(f"{p:>24}: {row['seconds_per_query_mean']:.2f} s per query (median "
              f"{row['seconds_per_query_median']:.2f}), own document retrieved "
              f"{row['own_document_retrieved']:.0%}, paraphrased {row['paraphrased']:.0%}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
