"""Retrieval only: does each method's probe still bring the audited document into the target's
context when the target rewrites queries (SmolLM2 paraphrasing) or runs Mirabel?

A method's "not found" means something only if its probes reach the document.
Under query rewriting S-RAG called 74% of a target's members "not found"
(BENCHMARKS.md, session 25): its probes quote the document, and a rewritten
quote no longer finds it. This check sends every method's real probe queries
(captured from ``probe`` against a recording target, no target model) through
the retrieval of a padded shadow knowledge base -- half the shipped auxiliary
corpus plus 1,750 other MedQuAD documents, about the size of the benchmark's
target -- three ways: as sent, after the paraphrasing defense's rewrite, and
behind Mirabel. Shadow documents only, never a test draw.

    RPA_CACHE_DIR=<cache> OMP_NUM_THREADS=2 .venv/bin/python scripts/rewriting_retrieval_check.py \
        --n 25 --out runs/s26/rewriting.json
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARED = ROOT.parent / "shared" / "data"
K = 4  # retrieved documents (the completion and chat profiles)
PARAPHRASER = "smollm2-135m-instruct"


def captured_queries(method_name: str, doc, per_doc: int) -> list[str]:
    """The retrieval queries (last user message) the method sends for ``doc``, at most ``per_doc``."""
    from scripts.bench_batched_serving import captured_requests
    from shadow.rag import _query_of

    sent = captured_requests(method_name, doc, answer="I do not know.")
    return list(dict.fromkeys(_query_of(r) for r in sent))[:per_doc]


def main(argv: list[str] | None = None) -> int:
    from tqdm import tqdm

    from audit_core.methods import METHODS
    from scripts.mirabel_retrieval_check import kept
    from scripts.srag_chat_repeat_study import padded_chat_shadow
    from shadow.defenses import QueryParaphraser
    from shadow.prepare import ShadowConfig
    from shadow.rag import _encode

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=25, help="shadow members drawn")
    ap.add_argument("--per-doc", type=int, default=3, help="probe queries per method and document")
    ap.add_argument("--methods", default=",".join(m for m in METHODS if m not in ("s2mia_m", "srag_sampled")),
                    help="S2MIA-M sends S2MIA-T's probes, S-RAG (text only) S-RAG's")
    ap.add_argument("--seed", type=int, default=2626)
    ap.add_argument("--corpus", help="another genre: a knowledge base of --kb-size documents of this JSONL corpus "
                                     "instead of the padded shadow")
    ap.add_argument("--kb-size", type=int, default=2000)
    ap.add_argument("--exclude", help="a JSONL knowledge base whose documents are left out (a benchmark target's)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    cfg = ShadowConfig(probe_retrieval="per_request")
    if args.corpus:
        from shadow.corpus import load_corpus

        skip = {json.loads(line)["id"] for line in open(args.exclude)} if args.exclude else set()
        docs = [d for d in load_corpus(args.corpus) if d.id not in skip]
        random.Random(args.seed).shuffle(docs)
        kb = docs[:args.kb_size]
        ids, mat = [d.id for d in kb], np.asarray(_encode(cfg.embedder, [d.text for d in kb]))
    else:
        rag, kb, _, _ = padded_chat_shadow(cfg, 1750, str(SHARED / "medquad.jsonl"))
        ids, mat = rag._kb_embeddings()
        ids, mat = list(ids), np.asarray(mat)
    members = random.Random(args.seed).sample([d for d in kb if d.n_words >= 24], args.n)
    print(f"knowledge base {len(ids)} documents; {len(members)} members", flush=True)

    probes: list[tuple[str, str, str]] = []  # (method, doc id, query)
    for m in args.methods.split(","):
        for d in members:
            probes += [(m, d.id, q) for q in captured_queries(m, d, args.per_doc)]
    queries = [q for _, _, q in probes]
    print(f"{len(queries)} probe queries from {args.methods}", flush=True)

    para = QueryParaphraser.for_model(PARAPHRASER, 64)
    t0 = time.time()
    rewritten: list[str] = []
    bar = tqdm(total=len(queries), desc="paraphrasing", unit="query")
    for i in range(0, len(queries), 16):
        for q, r in zip(queries[i:i + 16], para.paraphrase_many(queries[i:i + 16], 16)):
            rewritten.append(r.paraphrase if r.acted else q)
        bar.update(len(queries[i:i + 16]))
    bar.close()
    para_s = time.time() - t0

    e_sent, e_rew = _encode(cfg.embedder, queries), _encode(cfg.embedder, rewritten)

    rows = []
    for (m, did, q), r, es, er in zip(probes, rewritten, e_sent, e_rew):
        top_sent = [ids[j] for j in np.argsort(-(mat @ es))[:K]]
        top_rew = [ids[j] for j in np.argsort(-(mat @ er))[:K]]
        kept_mirabel, flagged, _ = kept(mat, ids, did, es)
        rows.append({"method": m, "doc_id": did, "query": q, "rewritten": r, "sent": did in top_sent,
                     "paraphrase": did in top_rew, "mirabel": kept_mirabel, "mirabel_flagged": flagged})

    summary = {}
    for m in args.methods.split(","):
        mr = [r for r in rows if r["method"] == m]
        if not mr:
            summary[m] = {"probes": 0}
            continue
        summary[m] = {"probes": len(mr), "documents": len({r["doc_id"] for r in mr}),
                      **{k: float(np.mean([r[k] for r in mr])) for k in ("sent", "paraphrase", "mirabel",
                                                                         "mirabel_flagged")}}
    out = {"config": {**vars(args), "kb_size": len(ids), "k": K, "paraphraser": PARAPHRASER,
                      "paraphrase_s": para_s}, "summary": summary, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print("| method | probes (documents) | document retrieved: as sent | after the rewrite | behind Mirabel "
          "| Mirabel flagged |\n|---|---|---|---|---|---|")
    for m, s in summary.items():
        if s["probes"]:
            print(f"| {METHODS[m].label} | {s['probes']} ({s['documents']}) | {s['sent']:.2f} | {s['paraphrase']:.2f} "
                  f"| {s['mirabel']:.2f} | {s['mirabel_flagged']:.2f} |")
        else:
            print(f"| {METHODS[m].label} | 0 | -- | -- | -- | -- |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
