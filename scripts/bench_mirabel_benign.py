"""Mirabel's cost to honest users: the share of benign questions it flags as membership attacks.

    nice -n 10 .venv/bin/python scripts/bench_mirabel_benign.py [--kb ../shared/data/genmedgpt5k.jsonl]
        [--kb-size 2000] [--queries ../shared/data/medquad.jsonl] [--n 500] [--rho 0.05]

The defended system is ``shadow.rag.RagSystem`` (all-MiniLM-L6-v2, Mirabel with
significance rho) over the first ``--kb-size`` documents of ``--kb``; benign
traffic is ``--n`` MedQuAD questions (``benign_questions``; records that are in
the knowledge base are left out). Only retrieval runs: Mirabel decides before
generation. Without ../shared the shipped auxiliary corpus serves as both
(its questions then quote stored documents; the output says so).
Prints one Markdown row per knowledge base.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_kb = SHARED / "genmedgpt5k.jsonl"
    default_q = SHARED / "medquad.jsonl"
    aux = ROOT / "assets" / "aux_medquad.jsonl"
    ap.add_argument("--kb", nargs="+", default=[str(default_kb if default_kb.exists() else aux)])
    ap.add_argument("--kb-size", type=int, default=2000)
    ap.add_argument("--queries", default=str(default_q if default_q.exists() else aux))
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--rho", type=float, default=0.05)
    a = ap.parse_args(argv)

    from shadow.corpus import load_corpus
    from shadow.defenses import benign_false_positive_rate, benign_questions
    from shadow.rag import RagConfig, RagSystem

    print("| knowledge base | documents | benign queries | flagged | benign FPR | seconds |")
    print("|---|---|---|---|---|---|")
    for kb_path in a.kb:
        t0 = time.time()
        kb = load_corpus(kb_path)[: a.kb_size]
        queries = benign_questions(a.queries, a.n, exclude=[d.text for d in kb])
        rag = RagSystem(kb, RagConfig(defense="mirabel", mirabel_rho=a.rho))
        fpr = benign_false_positive_rate(rag, queries)
        print(f"| {Path(kb_path).name} | {len(kb)} | {fpr.total} | {fpr.flagged} | {fpr.rate:.3f} | "
              f"{time.time() - t0:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
