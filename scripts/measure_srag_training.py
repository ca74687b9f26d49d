"""Time S-RAG's classifier training (and its shadow AUC) on a cached shadow preparation.

    python scripts/measure_srag_training.py RPA_CACHE_DIR/shadow/<key> [--seeds 0-7] [--sets current,former]

S-RAG's classifier is re-trained from the cached observations whenever a
preparation is loaded (nothing is unpickled from the cache), so its training
time is paid on every audit; this compares AutoGluon model sets on real
shadow observations (RELIABILITY.md, "Security").
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SETS = {
    "current": None,  # audit_core.methods.srag.HYPERPARAMETERS
    "former": {"GBM": {}, "CAT": {"iterations": 300}, "XGB": {}, "RF": {}, "XT": {}, "LR": {}},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="a shadow preparation folder holding observations.json of S-RAG")
    ap.add_argument("--seeds", default="0-7", help="validation-split seeds, as FIRST-LAST")
    ap.add_argument("--sets", default="current,former")
    a = ap.parse_args()
    import audit_core.methods.srag as srag
    from audit_core.methods.base import Observation

    raw = json.loads((Path(a.folder) / "observations.json").read_text())
    mem = [Observation.from_json(o) for o in raw["members"]]
    non = [Observation.from_json(o) for o in raw["nonmembers"]]
    first, last = (int(x) for x in a.seeds.split("-"))
    current = dict(srag.HYPERPARAMETERS)
    for name in a.sets.split(","):
        srag.HYPERPARAMETERS = SETS[name] or current
        secs, aucs = [], []
        for seed in range(first, last + 1):
            t0 = time.perf_counter()
            cal = srag.SragMethod(srag.SragConfig(seed=seed)).prepare(mem, non)
            secs.append(time.perf_counter() - t0)
            aucs.append(cal.shadow_auc)
        print(f"{name}: {len(mem)} + {len(non)} shadow documents, training median {statistics.median(secs):.1f} s "
              f"(min {min(secs):.1f}, max {max(secs):.1f}), shadow AUC mean {statistics.mean(aucs):.3f}")


if __name__ == "__main__":
    main()
