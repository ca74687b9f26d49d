"""Shadow-only study: do the question methods get answers from a model that continues text?

On a completion-style target (a base model continuing the prompt), Interrogation
and Entailment send a bare question, and the shipped quick completion shadow
shows what comes back: mostly an empty answer or the start of an answer format
("\\n\\nA:") cut off by the token budget, so most documents have no readable
answer and the methods abstain. A user of such a system would write the
question the way a text-continuing model expects it, ending with an answer cue.

This compares, on a completion-style shadow RAG built from the shipped
auxiliary corpus (SmolLM2-135M-Instruct rendered as plain text, as
``ShadowConfig(prompt_style="completion")`` does; no target draw), each
method's own probes sent as they are ("plain") and with the question framed as
"Question: ...\\nAnswer:" ("cue"), scored by the methods' own
``observation_score``.

    RPA_CACHE_DIR=<cache> .venv/bin/python scripts/question_format_study.py --n 15 --out runs/qformat.json

Session 35 (15 + 15, BENCHMARKS.md "Session 35"): the cue turns most answers
into readable ones (Interrogation: yes / no / "I don't know"; Entailment: an
answer instead of an empty string) but neither method separates members on this
shadow (Interrogation 0.27 plain, 0.24 cue; Entailment 0.40 and 0.40, 12-17 of
the 30 documents scored), so the methods were not changed.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from audit_core.methods import create_method  # noqa: E402
from audit_core.methods.questions import read_answer  # noqa: E402
from audit_core.methods.textonly_base import answers  # noqa: E402
from audit_core.metrics import bootstrap_auc_ci, roc_auc  # noqa: E402
from audit_core.target.base import ChatRequest, Target  # noqa: E402
from srag_prefill_study import miniature_chat_shadow  # noqa: E402  (this folder: the studies' one shadow)


def cue(text: str) -> str:
    return f"Question: {text}\nAnswer:"


class Reworded(Target):
    """Passes every request on with its last user message rewritten by ``fn``."""

    def __init__(self, inner: Target, fn) -> None:
        super().__init__()
        self.inner, self.fn = inner, fn
        self.name = getattr(inner, "name", "target")

    def _rewrite(self, req: ChatRequest) -> ChatRequest:
        from dataclasses import replace

        msgs = list(req.messages)
        role, content = msgs[-1]
        msgs[-1] = (role, self.fn(content))
        return replace(req, messages=tuple(msgs))

    def complete(self, request: ChatRequest):
        return self.inner.complete(self._rewrite(request))

    def complete_many(self, requests, progress=None):
        return self.inner.complete_many([self._rewrite(r) for r in requests], progress)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=15, help="shadow members and as many non-members")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default="interrogation,entailment")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    rag, kb, outside = miniature_chat_shadow(args.seed, style="completion")
    results = {}
    t0 = time.time()
    for name in args.methods.split(","):
        method = create_method(name)
        for variant, target in (("plain", rag), ("cue", Reworded(rag, cue))):
            y, s, labels, skipped = [], [], Counter(), 0
            docs = [(1, d) for d in kb[: args.n]] + [(0, d) for d in outside[: args.n]]
            t_leg = time.time()
            for i, (label, d) in enumerate(docs, 1):
                obs = method.probe(d, target)
                left = (time.time() - t_leg) / i * (len(docs) - i) / 60
                print(f"  {name} {variant}: {i} / {len(docs)}, about {left:.1f} min left", flush=True)
                if obs.skipped:
                    skipped += 1
                    continue
                labels.update(read_answer(a) for a in answers(obs) if a is not None)
                score = method.observation_score(obs)[0]
                if score is not None:
                    y.append(label)
                    s.append(score)
            auc = roc_auc(y, s) if len(set(y)) == 2 else None
            ci = bootstrap_auc_ci(y, s) if auc is not None else (None, None)
            results[f"{name}/{variant}"] = {"auc": auc, "ci": ci, "scored": [sum(y), len(y) - sum(y)],
                                            "skipped": skipped, "answers": dict(labels)}
            print(f"{name} {variant}: AUC {auc} {ci}, scored members/non-members {sum(y)}/{len(y) - sum(y)}, "
                  f"answers {dict(labels)}, {time.time() - t0:.0f} s", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
