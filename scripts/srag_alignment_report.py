"""How often S-RAG's chat-style probes were read, from a shadow's observations (no query sent).

A chat model may restate the paragraph before it continues; S-RAG reads a probe only where the
answer reaches the probed word (audit_core.methods.srag.align_answer). This counts, per class,
the probes read ("first", "restated") and the unread ones by the answer's finish reason ("length":
the token budget ended first; "stop": the model stopped), and the mean probability of the read
ones: the numbers behind BENCHMARKS.md's "S-RAG in chat style" paragraph.

    .venv/bin/python scripts/srag_alignment_report.py <cache>/shadow/<key>/observations.json
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def report(path: Path, style: str = "chat") -> dict:
    from audit_core.methods.base import Observation
    from audit_core.methods.srag import SragConfig, SragMethod

    method = SragMethod(SragConfig(style=style))
    raw = json.loads(path.read_text())
    out = {}
    for label in ("members", "nonmembers"):
        counts: Counter = Counter()
        probs: list[float] = []
        for o in raw[label]:
            obs = Observation.from_json(o)
            for word, resp in zip(method.word_observations(obs), obs.responses):
                finish = (resp or {}).get("finish_reason")
                counts[word.aligned if word.aligned != "not_aligned" else f"not_aligned/{finish}"] += 1
                if word.prob is not None:
                    probs.append(word.prob)
        out[label] = {"probes": dict(counts), "read": len(probs),
                      "mean_prob_read": sum(probs) / len(probs) if probs else None,
                      "share_read_above_0.9": sum(p > 0.9 for p in probs) / len(probs) if probs else None}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("observations", type=Path, help="observations.json of an S-RAG shadow preparation")
    ap.add_argument("--style", default="chat", choices=["chat", "completion"])
    args = ap.parse_args(argv)
    print(json.dumps(report(args.observations, args.style), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
