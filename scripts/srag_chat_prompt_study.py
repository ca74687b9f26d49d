"""Design study for S-RAG on chat targets, on the shadow corpus only (never a test draw).

Builds the chat-style shadow RAG (SmolLM2-135M-Instruct over the shipped MedQuAD
auxiliary corpus, half of it in the knowledge base), draws N members and N
non-members, and probes their S-RAG words with several ways of sending the
prefix. For each variant it prints how many probes are read (and how: the
answer continued at once, "first", or restated the sent text and went on,
"restated"), the mean probability read per class, and per-document AUCs of
the mean reading and of the share of the document's unsent word 4-grams the
answers reproduce (``verbatim.reproduction``). BENCHMARKS.md ("S-RAG on chat
targets") reports the run that chose the value of the option ``SragConfig.chat_tail_words``.

    .venv/bin/python scripts/srag_chat_prompt_study.py --n 10 --variants whole,tail25,tail12
"""
from __future__ import annotations

import argparse
import collections
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def probe_document(rag, probes, prompt: str, tail_words: int | None, budget):
    """One document's S-RAG probes in chat style with ``prompt``: (texts sent, completions, word readings)."""
    from audit_core.methods.srag import SragConfig, observe_word
    from audit_core.target.base import ChatRequest

    scfg = SragConfig(style="chat", chat_tail_words=tail_words)
    sent = [scfg.sent_text(p.prefix) for p in probes]
    reqs = [ChatRequest.chat([{"role": "user", "content": prompt.format(prefix=s)}],
                             max_tokens=budget(len(s.split())), temperature=0.0, logprobs=True, top_logprobs=20)
            for s in sent]
    comps = rag.complete_many(reqs)
    return sent, comps, [observe_word(p.word, c, s) for p, c, s in zip(probes, comps, sent)]


def main(argv: list[str] | None = None) -> int:
    import numpy as np
    from sklearn.metrics import roc_auc_score

    from audit_core.methods.srag import SRAG_PROMPT, SragConfig, segment
    from audit_core.methods.verbatim import reproduction
    from tqdm import tqdm
    from shadow.corpus import split_members
    from shadow.prepare import ShadowConfig, build_shadow_rag

    variants = {  # name: (words of the prefix sent, None = all; token budget for that many words)
        "whole": (None, lambda w: min(96, math.ceil(1.5 * w) + 8)),  # S-RAG chat style before the study
        # the study's budgets; SragConfig's formula gives 46 for 25 words
        "tail25": (25, lambda w: 48),
        "tail12": (12, lambda w: 32),
    }
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10, help="members (= non-members) drawn from the shadow")
    ap.add_argument("--variants", default=",".join(variants))
    ap.add_argument("--seed", type=int, default=123)
    args = ap.parse_args(argv)

    cfg = ShadowConfig(prompt_style="chat")
    docs = cfg.corpus_docs()
    half = len(docs) // 2
    kb, outside = split_members(docs, half, len(docs) - half, cfg.seed)
    rag = build_shadow_rag(cfg, kb)
    rng = random.Random(args.seed)
    drawn = [(1, d) for d in rng.sample(list(kb), args.n)] + [(0, d) for d in rng.sample(list(outside), args.n)]
    probes = {d.id: segment(d.text, SragConfig(style="chat")) for _, d in drawn}
    for name in args.variants.split(","):
        tail_words, budget = variants[name]
        t0, rows = time.time(), []
        for label, d in tqdm(drawn, desc=f"{name}: documents", file=sys.stderr):
            sent, comps, obs = probe_document(rag, probes[d.id], SRAG_PROMPT, tail_words, budget)
            rep = reproduction("\n".join(c.text for c in comps), "\n".join(sent), d.text, 4)
            rows.append((label, obs, rep["share"]))
        y = [r[0] for r in rows]
        mean_read = [float(np.mean([o.prob for o in r[1] if o.prob is not None] or [0.0])) for r in rows]
        repro = [r[2] for r in rows]
        print(f"{name}: {time.time() - t0:.0f} s; document AUC of the mean reading {roc_auc_score(y, mean_read):.3f}, "
              f"of the reproduced share {roc_auc_score(y, repro):.3f}, of their sum "
              f"{roc_auc_score(y, np.add(mean_read, repro)):.3f}")
        for label, cls in ((1, "members"), (0, "non-members")):
            how = collections.Counter(o.aligned for r in rows if r[0] == label for o in r[1])
            by = {h: [o.prob for r in rows if r[0] == label for o in r[1] if o.aligned == h and o.prob is not None]
                  for h in ("first", "restated")}
            read = sum(how[h] for h in ("first", "restated"))
            print(f"  {cls}: probes {sum(how.values())}, read {read} (first {how['first']}, restated "
                  f"{how['restated']}), mean probability first {np.mean(by['first'] or [0]):.3f}, restated "
                  f"{np.mean(by['restated'] or [0]):.3f}; mean reproduced share "
                  f"{np.mean([r[2] for r in rows if r[0] == label]):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
