"""What the paraphraser of the paraphrasing defense costs and changes (issue 18).

The defense (S-RAG section 5.3) has the target rewrite every query before
retrieval. With Gemma 3 270M as the rewriting model each rewrite decodes
through a 262k-token output layer; SmolLM2-135M's has 49k. This script
measures, for each paraphraser, the seconds per paraphrase (one query at a
time, and all queries as one batch as ``RagSystem.retrieve_records`` sends
them since the batched decoder, with a check that the rewrites agree) and the defense's
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


def measure(paraphrasers: list[str], queries, generator: str) -> list[dict]:
    """Time each paraphraser on the same queries, alternating between them query by query.

    On a shared machine the load changes from minute to minute; alternating
    makes the comparison between paraphrasers fair even when the absolute
    seconds are not those of an idle machine.
    """
    from shadow.corpus import load_corpus
    from shadow.demo import DEMO_KB
    from shadow.rag import RagConfig, RagSystem

    kb = load_corpus(DEMO_KB)
    systems = {}
    for p in paraphrasers:
        defense = None if p == "none" else "paraphrase"
        rag = RagSystem(kb, RagConfig(generator=generator, defense=defense, paraphraser=None if p == "none" else p))
        if defense:
            rag._paraphraser_obj().paraphrase("Warm-up: load the model.")  # loading is not paraphrasing time
        systems[p] = rag
    stats = {p: {"seconds": [], "tokens": [], "hits": 0, "acted": 0, "examples": []} for p in paraphrasers}
    for i, (doc_id, q) in enumerate(queries):
        for p, rag in systems.items():
            t0 = time.perf_counter()
            rec = rag.retrieve_records([q])[0]
            st = stats[p]
            st["seconds"].append(time.perf_counter() - t0)
            st["hits"] += doc_id in rec.doc_ids
            st["acted"] += bool(rec.defense_acted)
            if rec.defense_acted:  # rewrites differ in length: seconds per generated token compare the models
                tok = rag._paraphraser_obj().lm.tokenizer
                st["tokens"].append(len(tok(rec.retrieval_query, add_special_tokens=False)["input_ids"]))
            if len(st["examples"]) < 2:
                st["examples"].append({"query": q[-160:], "retrieval_query": rec.retrieval_query[:240]})
        print(f"  query {i + 1} / {len(queries)}: " + ", ".join(
            f"{p} {stats[p]['seconds'][-1]:.1f} s" + (f" ({stats[p]['tokens'][-1]} tokens)" if p != "none" else "")
            for p in paraphrasers), flush=True)
    for p, rag in systems.items():  # the same queries again, rewritten as one batch by a fresh paraphraser
        if p == "none":
            continue
        from shadow.defenses import QueryParaphraser

        one_by_one = rag._paraphraser_obj()
        fresh = QueryParaphraser(one_by_one.lm, one_by_one.max_new_tokens)
        t0 = time.perf_counter()
        together = fresh.paraphrase_many([q for _, q in queries])
        stats[p]["batched_seconds"] = (time.perf_counter() - t0) / len(queries)
        stats[p]["batched_same"] = sum(a.paraphrase == one_by_one.paraphrase(q).paraphrase
                                       for a, (_, q) in zip(together, queries))
        print(f"  {p}: {len(queries)} queries as one batch, {stats[p]['batched_seconds']:.2f} s per query, "
              f"{stats[p]['batched_same']} rewrites the same as one by one", flush=True)
    return [{"paraphraser": p, "queries": len(queries),
             "batched_seconds_per_query": st.get("batched_seconds"), "batched_same_rewrites": st.get("batched_same"),
             "seconds_per_query_mean": statistics.mean(st["seconds"]),
             "seconds_per_query_median": statistics.median(st["seconds"]),
             "seconds_per_token": (sum(st["seconds"]) / sum(st["tokens"])) if st["tokens"] else None,
             "own_document_retrieved": st["hits"] / len(queries), "paraphrased": st["acted"] / len(queries),
             "examples": st["examples"]} for p, st in stats.items()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=12, help="member documents probed (default: %(default)s)")
    ap.add_argument("--paraphrasers", default="none,smollm2-135m-instruct,gemma-3-270m")
    ap.add_argument("--generator", default="gemma-3-270m", help="the target's generator (the demo's)")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    queries = probe_queries(args.n)
    rows = measure(args.paraphrasers.split(","), queries, args.generator)
    for row in rows:
        p = row["paraphraser"]
        print(f"{p:>24}: {row['seconds_per_query_mean']:.2f} s per query (median "
              f"{row['seconds_per_query_median']:.2f}), own document retrieved "
              f"{row['own_document_retrieved']:.0%}, paraphrased {row['paraphrased']:.0%}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
