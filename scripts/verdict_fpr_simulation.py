"""How often the combined verdict calls a non-member a member, through the real ``verdict.decide``.

Each method's result for a non-member is drawn independently: a member call
with probability alpha (its stated false-positive rate), a "not found" with
probability ``clear``, else "not cleared" (a score below its member
threshold that it cannot clear). With independent methods the worst case of
a vote that falls through "not cleared" to the next method is one chance per
method; rule R7 (session 53) keeps the verdict's rate at one method's.

    .venv/bin/python scripts/verdict_fpr_simulation.py [--n 20000] [--alpha 0.05]
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: (name, [(method, share of non-members it clears)]) in voting order
CHAINS = [
    ("S-RAG (clears 80%), then MBA", [("srag", 0.8), ("mba", 0.8)]),
    ("S-RAG (never clears), then MBA", [("srag", 0.0), ("mba", 0.8)]),
    ("Verbatim, S-RAG text only, Interrogation", [("verbatim", 0.0), ("srag_sampled", 0.0), ("interrogation", 0.8)]),
]


def main(argv: list[str] | None = None) -> int:
    from audit_core.methods.base import MethodResult
    from audit_core.verdict import MEMBER, decide

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000, help="non-members per chain (default: %(default)s)")
    ap.add_argument("--alpha", type=float, default=0.05, help="each method's false-positive rate")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)

    def result(method: str, clear: float) -> MethodResult:
        u = rng.random()
        if u < args.alpha:
            return MethodResult(method, "d", 0.9, True, None, {"fpr": args.alpha})
        if u < args.alpha + clear:
            return MethodResult(method, "d", 0.1, False, None, {"fpr": args.alpha, "member_p_value": 0.01})
        return MethodResult(method, "d", 0.3, None, "not cleared: ...", {"fpr": args.alpha, "member_p_value": 0.5})

    for name, chain in CHAINS:
        members = sum(decide("d", [result(m, c) for m, c in chain]).verdict == MEMBER for _ in range(args.n))
        print(f"{name}: member verdicts on {args.n} non-members {members / args.n:.3f} (each method {args.alpha:g})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
