"""Retrieval only: do Entailment's broad questions bring the document they are about into the model's context?

On the zoo's targets Entailment's questions reached the member's own document for
only 29-30% of them (BENCHMARKS.md, session 32), so its answers mostly came from
other documents and it read at chance. No language model runs here: the
questions of each rule are embedded and ranked against the padded chat-style
shadow (MedQuAD, 1,750 distractors; shadow data, never a test draw) and a
2,000-item AG News knowledge base (another genre), as the chat profile
retrieves (k = 4), with and without Mirabel. Per rule: the share of questions
that keep the document among the k, the share of documents with at least one
such question, and how often Mirabel flagged a question (its cost to stealth).

Rules:
* ``one phrase`` (the rule before session 44): one key phrase per question;
* ``two phrases``: each question names two key phrases of the document, from
  consecutive sentences ("... about X and Y?"), as a user describing two
  symptoms at once would.

    RPA_CACHE_DIR=<cache> .venv/bin/python scripts/question_retrieval_check.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.mirabel_retrieval_check import K, kept, on_both_corpora  # noqa: E402


def main() -> None:
    from audit_core.methods.questions import rule_broad_questions
    from shadow.rag import _encode

    rules = {"one phrase": lambda t: rule_broad_questions(t, 5, phrases_per_question=1),
             "two phrases": lambda t: rule_broad_questions(t, 5, phrases_per_question=2),
             "two phrases, overlapping": lambda t: rule_broad_questions(t, 5, 2, overlap=True),
             "three phrases, overlapping": lambda t: rule_broad_questions(t, 5, 3, overlap=True)}

    def study(name: str, mat, ids, members, nonmembers, _texts) -> None:
        for rule, make in rules.items():
            qs = [(d, q.question) for d in members for q in make(d.text)]
            embs = _encode("all-minilm-l6-v2", [q for _, q in qs])
            top = {}
            for (d, _), e in zip(qs, embs):
                s = np.asarray(mat @ e).ravel()
                plain = d.id in {ids[j] for j in np.argsort(-s)[:K]}
                in_ctx, flagged, _ = kept(mat, ids, d.id, e)
                top.setdefault(d.id, []).append((plain, in_ctx, flagged))
            rows = [r for v in top.values() for r in v]
            print(f"{name}: {rule}: {len(rows)} questions for {len(top)} of {len(members)} documents; "
                  f"document among the {K}: {np.mean([r[0] for r in rows]):.2f} of questions, "
                  f"{np.mean([any(r[0] for r in v) for v in top.values()]):.2f} of documents; behind Mirabel: "
                  f"{np.mean([r[1] for r in rows]):.2f} and {np.mean([any(r[1] for r in v) for v in top.values()]):.2f}"
                  f", flagged {np.mean([r[2] for r in rows]):.2f}", flush=True)

    on_both_corpora(study)


if __name__ == "__main__":
    main()
