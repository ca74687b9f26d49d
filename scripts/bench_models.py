"""Model loading and forward-pass throughput on this machine.

    .venv/bin/python scripts/bench_models.py [--models smollm2-135m-instruct,gemma-3-270m]

Cold load = de-quantizing the packaged GGUF into an empty cache directory;
cached load = a new process-level load from the safetensors cache. Throughput
= tokens per second of one forward pass (no generation) over 256 and 1024
tokens, median of 3 runs after a warm-up. Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="smollm2-135m-instruct,gemma-3-270m")
    args = ap.parse_args()
    import torch

    from audit_core import models

    rows = []
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["RPA_CACHE_DIR"] = tmp
            models.load_causal_lm.cache_clear()
            t0 = time.perf_counter()
            models.load_causal_lm(name)
            cold = time.perf_counter() - t0
            models.load_causal_lm.cache_clear()
            t0 = time.perf_counter()
            lm = models.load_causal_lm(name)
            cached = time.perf_counter() - t0
        tps = {}
        for n in (256, 1024):
            ids = torch.randint(100, 1000, (1, n))
            with torch.inference_mode():
                lm.model(input_ids=ids)
                times = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    lm.model(input_ids=ids)
                    times.append(time.perf_counter() - t0)
            tps[n] = n / statistics.median(times)
        rows.append((name, cold, cached, tps[256], tps[1024]))
        models.load_causal_lm.cache_clear()
    print(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads\n")
    print("| model | cold load (de-quantize) s | cached load s | forward 256 tok/s | forward 1024 tok/s |")
    print("|---|---|---|---|---|")
    for name, cold, cached, a, b in rows:
        print(f"| {name} | {cold:.1f} | {cached:.1f} | {a:.0f} | {b:.0f} |")


if __name__ == "__main__":
    main()
