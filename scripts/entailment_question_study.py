"""Design study on shadow data: do questions that name more of a document's key phrases make Entailment separate?

``question_retrieval_check.py`` showed that naming two or three key phrases per
question brings the document into the model's context about twice as often as
one phrase (on the padded chat-style shadow: 0.29 of questions -> 0.49-0.62).
Here the chat-style shadow RAG (SmolLM2-135M-Instruct, MedQuAD knowledge base
padded with 1,750 distractors; never a test draw) answers the questions of
each rule for a fresh draw of members and non-members, and each rule's answers
are scored by the method (the copied reading, and the cosine one for
reference). Prints per rule the document AUC, its paired difference from one
phrase per question, and the questions sent per document.

    RPA_CACHE_DIR=<cache> .venv/bin/python scripts/entailment_question_study.py --n 20 --seed 6262
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARED = ROOT.parent / "shared" / "data"


def main(argv: list[str] | None = None) -> int:
    from tqdm import tqdm

    from audit_core.methods.entailment import EntailmentConfig, EntailmentMethod
    from audit_core.metrics import bootstrap_auc_difference_ci, roc_auc
    from scripts.srag_chat_repeat_study import padded_chat_shadow
    from shadow.prepare import ShadowConfig

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20, help="members and as many non-members")
    ap.add_argument("--seed", type=int, default=6262)
    ap.add_argument("--phrases", default="1,2,3", help="key phrases per question, one rule each")
    ap.add_argument("--distractors", type=int, default=1750)
    args = ap.parse_args(argv)

    cfg = ShadowConfig(prompt_style="chat", probe_retrieval="per_request")
    rag, kb, outside, extra = padded_chat_shadow(cfg, args.distractors, str(SHARED / "medquad.jsonl"))
    base = EntailmentMethod()

    def askable(d) -> bool:  # enough statements for the one-phrase rule's two questions
        from audit_core.methods.questions import rule_broad_questions
        return d.n_words >= 24 and len(rule_broad_questions(d.text, 5)) >= base.config.min_questions

    rng = random.Random(args.seed)
    drawn = ([(1, d) for d in rng.sample([d for d in kb if askable(d)], args.n)]
             + [(0, d) for d in rng.sample([d for d in outside if askable(d)], args.n)])
    print(f"knowledge base {len(kb) + len(extra)} documents ({len(extra)} distractors); {args.n} + {args.n} drawn "
          f"(seed {args.seed})", file=sys.stderr)
    y = np.array([lab for lab, _ in drawn])
    scores: dict[str, np.ndarray] = {}
    for k in (int(x) for x in args.phrases.split(",")):
        copied = EntailmentMethod(EntailmentConfig(phrases_per_question=k))
        cosine = EntailmentMethod(EntailmentConfig(phrases_per_question=k, support="cosine"))
        t0, rows, sent = time.time(), [], []
        for _, d in tqdm(drawn, desc=f"{k} phrase(s) per question", file=sys.stderr):
            obs = copied.probe(d, rag)
            sent.append(len(obs.requests))
            rows.append((copied.observation_score(obs)[0] if obs.skipped is None else None,
                         cosine.observation_score(obs)[0] if obs.skipped is None else None))
        for j, reading in enumerate(("copied", "cosine")):
            scores[f"{k} phrase(s), {reading}"] = np.array([np.nan if r[j] is None else r[j] for r in rows])
        print(f"{k} phrase(s): {np.mean(sent):.1f} questions / document, "
              f"{(time.time() - t0) / len(drawn):.1f} s / document", file=sys.stderr)
    keep = np.all([np.isfinite(s) for s in scores.values()], axis=0)
    ref = scores[next(iter(scores))]
    print(f"{int(keep.sum())} of {len(drawn)} documents scored under every rule")
    print("| rule, reading | AUC | minus one phrase (copied), paired [95% CI] | mean, members / non-members |")
    print("|---|---|---|---|")
    for name, s in scores.items():
        lo, hi = bootstrap_auc_difference_ci(y[keep], s[keep], ref[keep])
        print(f"| {name} | {roc_auc(y[keep], s[keep]):.3f} | {roc_auc(y[keep], s[keep]) - roc_auc(y[keep], ref[keep]):+.3f}"
              f" [{lo:+.3f}, {hi:+.3f}] | {np.mean(s[keep & (y == 1)]):.3f} / {np.mean(s[keep & (y == 0)]):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
