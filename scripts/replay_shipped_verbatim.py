"""Score the shipped Verbatim preparations' stored answers with this tree's code; no query is sent.

Used to tell whether a change in how Verbatim (or the non-answer reader) reads replies moves its figures
on real answers: run it in two trees (e.g. a ``git worktree`` of the commit before) and compare the JSON
files. The preparations hold SmolLM2-135M's answers from the shadow RAG built from the shipped corpus.

    PYTHONPATH=<tree> .venv/bin/python scripts/replay_shipped_verbatim.py out.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from audit_core.methods import create_method
from shadow.shipped import load_shipped

#: shipped key -> (label, target style) of the Verbatim preparations (assets/preparation/manifest.json)
PREPARATIONS = {"1a53eb9d8c12f7bf52af": ("chat standard", "chat"), "38982a15c14a6b2fcce4": ("chat quick", "chat"),
                "d29da1546d41efa18ab8": ("completion standard", "completion")}


def main(out_path: str) -> None:
    folder = Path(__file__).resolve().parents[1] / "assets" / "preparation"
    out = {}
    for key, (label, style) in PREPARATIONS.items():
        mem, non = load_shipped(key, folder)
        m = create_method("verbatim", style=style)
        ev = m.prepare(mem, non).params["evidence"]
        scores, kinds = {}, {}
        for o in mem + non:
            s, e, why = m.observation_score(o)
            scores[o.doc_id] = (s, why)
            kinds[o.doc_id] = [r.get("non_answer") for r in e.get("probes", [])]
        out[label] = {"auc": ev["auc"], "auc_ci": ev["auc_ci"], "power5": ev["at_fpr"]["0.05"]["power"],
                      "scores": scores, "kinds": kinds}
        print(f"{label}: shadow AUC {ev['auc']:.3f}, {sum(map(len, kinds.values()))} replies", flush=True)
    Path(out_path).write_text(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
