"""Project a benchmark's wall time at full size from a small slice of it (issue 18).

A full default benchmark (every method x every defense x 50 + 50 documents)
takes hours on 2 cores, so its cost is measured on a slice: the same command
with ``--n 2`` (or any small n), from empty answer stores. Each leg's seconds
per document (``timings.per_leg`` of the slice's results.json) are scaled to
the full size; what does not grow with the documents (starting the reference
server, Mirabel's honest questions: a defense's seconds outside its legs) and
the shadow preparation are added once.

    python scripts/bench_projection.py runs/<slice>/results.json [runs/<slice2>/results.json ...] --documents 100

Several slices (other methods of the same benchmark, run apart) add up their
legs; each started its own servers, so a defense's once-only seconds are
the largest any slice paid, not their sum.

Assumes the slice ran as the full run would (same machine, idle, same
``documents_at_once``) and that a document's cost does not depend on how
many are probed; with a slice of 4 documents and 4 at once, that is one
round of the pool, so the projection is rough (documents differ in length).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def projection(results: dict | list[dict], documents: int) -> dict:
    """Per leg and per defense: measured seconds and the projection to ``documents`` documents."""
    runs = [results] if isinstance(results, dict) else list(results)
    rows, per_defense, prep, at_once = [], {}, 0.0, None
    for res in runs:
        t = res.get("timings") or {}
        legs = t.get("per_leg") or {}
        if not legs:
            raise ValueError("the results have no per-leg timings (runs before session 36 did not record them)")
        prep += float(t.get("shadow_preparation_s") or 0.0)
        at_once = at_once or t.get("documents_at_once")
        mine: dict[str, dict] = {}
        for name, leg in legs.items():
            prof, defense, method = name.split("/", 2)
            n = max(1, int(leg["documents"]))
            start = float(leg.get("server_start_s") or 0.0)  # the leg that started the server paid it once
            probing = max(0.0, leg["wall_s"] - start)
            projected = probing / n * documents
            rows.append({"profile": prof, "defense": defense, "method": method, "documents": n,
                         "wall_s": leg["wall_s"], "server_start_s": start, "s_per_document": probing / n,
                         "projected_s": projected})
            key = defense if prof == "completion" else f"{prof}/{defense}"
            d = mine.setdefault(key, {"legs_s": 0.0, "server_start_s": 0.0, "projected_legs_s": 0.0})
            d["legs_s"] += leg["wall_s"]
            d["server_start_s"] += start
            d["projected_legs_s"] += projected
        for key, d in mine.items():
            measured = (t.get("per_defense_s") or {}).get(key, d["legs_s"])
            # paid once per defense: the server's start and what ran outside the legs (Mirabel's honest questions)
            fixed = max(0.0, measured - d["legs_s"]) + d["server_start_s"]
            total = per_defense.setdefault(key, {"projected_legs_s": 0.0, "fixed_s": 0.0})
            total["projected_legs_s"] += d["projected_legs_s"]
            total["fixed_s"] = max(total["fixed_s"], fixed)
    for d in per_defense.values():
        d["projected_s"] = d["projected_legs_s"] + d["fixed_s"]
    return {"documents": documents, "legs": rows, "defenses": per_defense, "shadow_preparation_s": prep,
            "projected_total_s": prep + sum(d["projected_s"] for d in per_defense.values()),
            "documents_at_once": at_once}


def markdown(p: dict) -> str:
    lines = [f"| defense | method | s per document (slice) | projected min at {p['documents']} documents |",
             "|---|---|---|---|"]
    for r in sorted(p["legs"], key=lambda r: -r["projected_s"]):
        lines.append(f"| {r['defense']} | {r['method']} | {r['s_per_document']:.1f} | {r['projected_s'] / 60:.1f} |")
    lines.append("")
    lines.append("| defense | legs, projected min | once per defense (server start, honest questions), min | total min |")
    lines.append("|---|---|---|---|")
    for k, d in p["defenses"].items():
        lines.append(f"| {k} | {d['projected_legs_s'] / 60:.1f} | {d['fixed_s'] / 60:.1f} | {d['projected_s'] / 60:.1f} |")
    lines.append("")
    lines.append(f"Shadow preparation {p['shadow_preparation_s'] / 60:.1f} min; projected total "
                 f"**{p['projected_total_s'] / 60:.0f} min** ({p['documents_at_once']} documents at once).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="results.json of the slice (several: their legs add up)")
    ap.add_argument("--documents", type=int, default=100, help="documents per leg at full size (50 + 50)")
    ap.add_argument("--json", help="also write the projection here")
    args = ap.parse_args(argv)
    try:
        p = projection([json.loads(Path(f).read_text()) for f in args.results], args.documents)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(markdown(p))
    if args.json:
        Path(args.json).write_text(json.dumps(p, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
