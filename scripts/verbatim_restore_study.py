"""Design study for Verbatim continuation on chat targets: does the model put back words the quote left out?

On the shadow corpus only (never a test draw). The usual way SmolLM2-135M-Instruct
fails Verbatim's quote request is to restate the sent beginning and stop, so the
remainder is never reached (BENCHMARKS.md, sessions 23-43). A restatement can still
be evidence: if some content words are left out of the sent beginning, a model that
restates from the document in its context puts them back, and one that restates the
user's message cannot (unless the words are predictable from the sentence, which the
non-members measure). The score is Verbatim's own reproduction share, with the
"unseen" text being every word run of the original document that the altered query
does not contain: the runs around each left-out word, and the remainder.

Each drawn document gets three probes, all cut at a half: the method's quote request
(``quote``), the same with ``--drop`` of the beginning's content words left out
(``quote_gaps``), and the method's repeat request with the same gaps
(``repeat_gaps``). The script prints each probe's AUC, the documents reproducing
anything, the share of the left-out words put back (members, non-members), and the
best of the plain quote and each gap probe, with paired bootstrap differences.

    .venv/bin/python scripts/verbatim_restore_study.py --n 25 --seed 6061 --distractors 1750 \
        --out runs/s43/restore-s6061.json
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

_WORD = re.compile(r"[A-Za-z]{4,}")
#: the three probes every drawn document gets, in the order sent
KINDS = ("quote", "quote_gaps", "repeat_gaps")


def with_gaps(text: str, share: float, keep_last: int, seed: int) -> tuple[str, list[str]]:
    """``text`` with ``share`` of its content words (at least 2) left out, never among its last ``keep_last``
    words, so the place where the remainder starts is sent intact: (altered text, the words left out)."""
    from audit_core.methods.text_edits import STOPWORDS

    tokens = text.split(" ")
    last = max(0, len(tokens) - keep_last)
    candidates = [i for i, t in enumerate(tokens[:last])
                  if _WORD.fullmatch(t.strip(".,;:!?\"'()")) and t.strip(".,;:!?\"'()").lower() not in STOPWORDS]
    k = min(len(candidates), max(2, round(share * len(candidates))))
    gone = set(random.Random(seed).sample(candidates, k)) if k else set()
    return " ".join(t for i, t in enumerate(tokens) if i not in gone), [tokens[i] for i in sorted(gone)]


def main(argv: list[str] | None = None) -> int:
    from tqdm import tqdm

    from audit_core.methods import verbatim as vb
    from audit_core.methods.baseline_common import split_at
    from audit_core.methods.text_edits import text_seed
    from audit_core.methods.textonly_base import answers
    from audit_core.scoring import norm_words
    from scripts.srag_chat_repeat_study import padded_chat_shadow
    from shadow.prepare import ShadowConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=25, help="members (= non-members) drawn from the shadow")
    ap.add_argument("--drop", type=float, default=0.2, help="share of the beginning's content words left out")
    ap.add_argument("--cut", type=float, default=0.5)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--seed", type=int, default=6061)
    ap.add_argument("--distractors", type=int, default=1750)
    ap.add_argument("--medquad", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "medquad.jsonl"))
    ap.add_argument("--out", help="JSON file for the per-document rows")
    ap.add_argument("--read", help="a run's --out file: print its table again, send nothing")
    args = ap.parse_args(argv)
    if args.read:
        return report(json.loads(Path(args.read).read_text())["documents"])

    cfg = ShadowConfig(prompt_style="chat", probe_retrieval="per_request")
    rag, kb, outside, extra = padded_chat_shadow(cfg, args.distractors, args.medquad)
    rng = random.Random(args.seed)
    drawn = ([(1, d) for d in rng.sample([d for d in kb if d.n_words >= 24], args.n)]
             + [(0, d) for d in rng.sample([d for d in outside if d.n_words >= 24], args.n)])
    m = vb.VerbatimMethod(vb.VerbatimConfig(max_tokens=args.max_tokens))
    m.use_collection([d.text for _, d in drawn])
    t0, docs = time.time(), []
    for label, d in tqdm(drawn, desc="documents", file=sys.stderr):
        h = split_at(d.text, args.cut, 12)
        gapped, gone = with_gaps(h.first, args.drop, 3, text_seed(d.text))
        prompts = [vb.TEMPLATES["quote"].format(query=h.first), vb.TEMPLATES["quote"].format(query=gapped),
                   vb.TEMPLATES["repeat"].format(query=gapped)]
        obs = m.send(d, rag, prompts, {}, args.max_tokens)
        row = {"label": label, "id": d.id, "gone": gone, "probes": {}}
        for kind, query, a in zip(KINDS, [h.first, gapped, gapped], answers(obs)):
            a = a or ""
            rep = vb.reproduction(a, query, f"{h.first} {h.second}" if kind != "quote" else h.second, m.config.ngram,
                                  m._shared)
            said = set(norm_words(a))
            back = sum(1 for w in gone if norm_words(w) and norm_words(w)[0] in said) / len(gone) if gone else 0.0
            row["probes"][kind] = {"share": rep["share"], "longest": rep["longest"], "back": back, "answer": a[:500]}
        docs.append(row)
    print(f"{(time.time() - t0) / len(docs):.1f} s / document for {len(KINDS)} probes", file=sys.stderr)
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "documents": docs}, indent=1))
    return report(docs)


def report(docs: list[dict]) -> int:
    """The table of the three probes and of the best of the plain quote and each gap probe."""
    import numpy as np

    from audit_core.metrics import bootstrap_auc_difference_ci, roc_auc

    y = np.array([r["label"] for r in docs])

    def col(kind: str, key: str = "share") -> np.ndarray:
        return np.array([r["probes"][kind][key] for r in docs])

    def paired(a: np.ndarray, b: np.ndarray) -> str:
        lo, hi = bootstrap_auc_difference_ci(y, a, b)
        return f"{roc_auc(y, a) - roc_auc(y, b):+.3f} [{lo:+.3f}, {hi:+.3f}]"

    base = col("quote")
    print("| probe | AUC | minus quote, paired | members / non-members reproducing anything | "
          "left-out words put back, members / non-members |")
    print("|---|---|---|---|---|")
    for kind in KINDS:
        s = col(kind)
        back = col(kind, "back") if kind != "quote" else None
        print(f"| {kind} | {roc_auc(y, s):.3f} | {paired(s, base) if kind != 'quote' else '-'} | "
              f"{int(((s > 0) & (y == 1)).sum())} / {int(((s > 0) & (y == 0)).sum())} | "
              + ("-" if back is None else f"{back[y == 1].mean():.2f} / {back[y == 0].mean():.2f}") + " |")
    for kind in KINDS[1:]:
        s = np.maximum(base, col(kind))
        print(f"| best of quote and {kind} | {roc_auc(y, s):.3f} | {paired(s, base)} | "
              f"{int(((s > 0) & (y == 1)).sum())} / {int(((s > 0) & (y == 0)).sum())} | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
