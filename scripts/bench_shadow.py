"""Time S-RAG shadow preparation: cold (nothing cached but the model weights) and cached.

Usage: .venv/bin/python scripts/bench_shadow.py [--n 200] [--probe-retrieval shared|per_request]

Cold means a fresh shadow cache folder and a fresh chromadb directory (the
knowledge base is embedded again); the de-quantized model weights stay cached,
as they do after the first run of the product.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=200, help="shadow members (= non-members)")
    ap.add_argument("--probe-retrieval", default="shared", choices=["shared", "per_request"])
    ap.add_argument("--time-limit", type=int, default=120, help="AutoGluon budget (s)")
    ap.add_argument("--in-place", action="store_true",
                    help="prepare into the real cache (RPA_CACHE_DIR), so audits and the benchmark reuse it; "
                         "cold only if that preparation is not cached yet")
    args = ap.parse_args()

    from audit_core.models import cache_dir

    # a fresh cache root that shares only the de-quantized weights with the real one
    real = cache_dir()
    if args.in_place:
        work = real
    else:
        work = Path(tempfile.mkdtemp(prefix="rpa-bench-shadow-"))
        for sub in ("models", "gguf"):
            if (real / sub).exists():
                (work / sub).symlink_to(real / sub)
        os.environ["RPA_CACHE_DIR"] = str(work)

    from audit_core.methods.srag import SragConfig, SragMethod
    from shadow.prepare import ShadowConfig, prepare_shadow
    cfg = ShadowConfig(n_members=args.n, n_nonmembers=args.n, probe_retrieval=args.probe_retrieval)
    stages: dict[str, float] = {}
    current = {"stage": None, "t": time.perf_counter()}

    def progress(stage: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if current["stage"] is not None:
            stages[current["stage"]] = stages.get(current["stage"], 0.0) + now - current["t"]
        current.update(stage=stage, t=now)
        if done % 50 == 0:
            print(f"  {now - t_start:7.1f} s  {stage}: {done}/{total}", flush=True)

    load0 = os.getloadavg()[0]
    t_start = t0 = time.perf_counter()
    prep = prepare_shadow([SragMethod(SragConfig(time_limit_s=args.time_limit))], cfg, progress=progress,
                          root=work / "shadow")
    print(f"first preparation came from the cache: {prep.from_cache['srag']}")
    cold = time.perf_counter() - t0
    progress("end", 0, 0)
    t1 = time.perf_counter()
    prep2 = prepare_shadow([SragMethod(SragConfig(time_limit_s=args.time_limit))], cfg, root=work / "shadow")
    cached = time.perf_counter() - t1
    cal = prep.calibrations["srag"]
    obs = prep.observations["srag"]
    n_probes = sum(len(o.responses) for g in obs.values() for o in g)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average at start {load0:.2f}, "
          f"at end {os.getloadavg()[0]:.2f}")
    print(f"shadow {args.n} + {args.n}, probe_retrieval={args.probe_retrieval}, probes sent: {n_probes}")
    for stage, secs in stages.items():
        print(f"  stage '{stage}': {secs:.1f} s")
    print(f"cold preparation: {cold:.1f} s; cached: {cached:.1f} s (from cache: {prep2.from_cache['srag']})")
    print(f"shadow validation AUC: {cal.shadow_auc:.3f}; best model: {cal.params.get('best_model')}")


if __name__ == "__main__":
    main()
