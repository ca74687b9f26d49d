"""Design study for S-RAG on chat targets, second round: ask for a restatement, read only after it.

On the shadow corpus only (never a test draw). The first study
(``srag_chat_prompt_study.py``, BENCHMARKS.md "S-RAG on chat targets") found that a
chat model's reading after it restated the sent text separates members from
non-members well (mean probability 0.47 against 0.01), while a reading of an answer
that did not restate ("first": "The answer is ...") carries no signal, and that two
thirds of the probes were never read. This study asks the model to restate on
purpose (Verbatim continuation's "repeat" wording), gives it the tokens to do so,
and scores a document from its restated readings only, so that the "first"
readings no longer dilute the histogram.

``--distractors N`` adds N MedQuAD documents that are not in the auxiliary corpus to
the shadow's knowledge base (never drawn as members or non-members), so that
retrieval with a shorter sent text faces a knowledge base of the target's size.

    .venv/bin/python scripts/srag_chat_repeat_study.py --n 12 --variants srag_whole,repeat_whole,repeat_tail40
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPEAT = "{prefix}\n\nPlease repeat the text above word for word, and then write how it goes on."


def padded_chat_shadow(cfg, distractors: int, medquad: str):
    """The shadow RAG of ``cfg`` over half its corpus, padded with ``distractors`` MedQuAD documents that are
    not in the auxiliary corpus (never drawn): (rag, members, non-members, distractors)."""
    from audit_core.documents import Document
    from shadow.corpus import split_members
    from shadow.prepare import build_shadow_rag

    docs = cfg.corpus_docs()
    half = len(docs) // 2
    kb, outside = split_members(docs, half, len(docs) - half, cfg.seed)
    extra: list[Document] = []
    if distractors:
        have = {d.text for d in docs} | {d.id for d in docs}
        pool = {}
        for line in open(medquad, encoding="utf-8"):
            r = json.loads(line)
            if r["text"] not in have and r["id"] not in have and len(r["text"].split()) <= (cfg.max_doc_words or 10**9):
                pool.setdefault(r["id"], Document(id=r["id"], text=r["text"]))
        pool = sorted(pool.values(), key=lambda d: d.id)
        extra = random.Random(7).sample(pool, min(distractors, len(pool)))
    return build_shadow_rag(cfg, list(kb) + extra), kb, outside, extra


def main(argv: list[str] | None = None) -> int:
    import numpy as np
    from sklearn.metrics import roc_auc_score
    from tqdm import tqdm

    from audit_core.methods.srag import SRAG_PROMPT, SragConfig, normalise_word, segment
    from audit_core.methods.verbatim import reproduction
    from scripts.srag_chat_prompt_study import probe_document
    from shadow.prepare import ShadowConfig

    def budget(cap: int):
        return lambda w: min(cap, math.ceil(1.5 * w) + 16)

    variants = {  # name: (prompt, words of the prefix sent (None: all), token budget for that many words)
        "srag_whole": (SRAG_PROMPT, None, lambda w: min(96, math.ceil(1.5 * w) + 8)),  # the default today
        "repeat_whole": (REPEAT, None, budget(192)),
        "repeat_tail40": (REPEAT, 40, budget(192)),
        "srag_tail40": (SRAG_PROMPT, 40, budget(192)),
    }
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=12, help="members (= non-members) drawn from the shadow")
    ap.add_argument("--variants", default="srag_whole,repeat_whole,repeat_tail40")
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--distractors", type=int, default=0)
    ap.add_argument("--medquad", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "medquad.jsonl"))
    ap.add_argument("--out", help="JSON file for the per-document rows")
    args = ap.parse_args(argv)

    cfg = ShadowConfig(prompt_style="chat", probe_retrieval="per_request")
    rag, kb, outside, extra = padded_chat_shadow(cfg, args.distractors, args.medquad)
    rng = random.Random(args.seed)
    drawn = [(1, d) for d in rng.sample(list(kb), args.n)] + [(0, d) for d in rng.sample(list(outside), args.n)]
    probes = {d.id: segment(d.text, SragConfig(style="chat")) for _, d in drawn}
    print(f"knowledge base {len(kb) + len(extra)} documents ({len(extra)} distractors); "
          f"{args.n} + {args.n} drawn, {sum(len(p) for p in probes.values())} probes", file=sys.stderr)
    report: dict = {}
    for name in args.variants.split(","):
        prompt, tail_words, tokens = variants[name]
        t0, rows = time.time(), []
        for label, d in tqdm(drawn, desc=f"{name}: documents", file=sys.stderr):
            ps = probes[d.id]
            sent, comps, obs = probe_document(rag, ps, prompt, tail_words, tokens)
            retrieved = [d.id in rec.doc_ids for rec in rag.retrieve_records([prompt.format(prefix=s) for s in sent])]
            rep = reproduction("\n".join(c.text for c in comps), "\n".join(sent), d.text, 4)
            # how far a restated answer goes on copying the document after the probed word
            runs = []
            for p, c, o in zip(ps, comps, obs):
                if o.aligned != "restated" or o.position is None:
                    continue
                after = [normalise_word(w) for w in "".join(t.token for t in c.tokens[o.position:]).split()]
                doc_after = [normalise_word(w) for w in d.text.split()[p.word_index:]]
                k = 0
                while k < min(len(after), len(doc_after)) and after[k] == doc_after[k]:
                    k += 1
                runs.append(k)
            rows.append({"label": label, "id": d.id, "how": [o.aligned for o in obs],
                         "prob": [o.prob for o in obs], "reproduced": rep["share"], "runs": runs,
                         "retrieved": retrieved})
        report[name] = rows
        y = np.array([r["label"] for r in rows])

        def restated(r):
            return [p for p, h in zip(r["prob"], r["how"]) if h == "restated" and p is not None]

        mean_all = [float(np.mean([p for p in r["prob"] if p is not None] or [0.0])) for r in rows]
        mean_rest = [float(np.mean(restated(r))) if restated(r) else 0.0 for r in rows]
        covered = np.array([bool(restated(r)) for r in rows])
        run_mean = [float(np.mean(r["runs"])) if r["runs"] else 0.0 for r in rows]
        repro = [r["reproduced"] for r in rows]
        auc = lambda s, m=None: (roc_auc_score(y[m], np.asarray(s)[m]) if m is not None  # noqa: E731
                                 else roc_auc_score(y, s)) if len(set(y if m is None else y[m])) == 2 else float("nan")
        print(f"\n{name}: {time.time() - t0:.0f} s ({(time.time() - t0) / len(rows):.1f} s per document)")
        print(f"  document AUC: mean of all readings {auc(mean_all):.3f}; mean of restated readings (0 if none) "
              f"{auc(mean_rest):.3f}; the same over the {covered.sum()} documents with one "
              f"{auc(mean_rest, covered):.3f}; copied run after the word {auc(run_mean):.3f}; "
              f"reproduced share {auc(repro):.3f}; restated mean + reproduced {auc(np.add(mean_rest, repro)):.3f}")
        for label, cls in ((1, "members"), (0, "non-members")):
            sel = [r for r in rows if r["label"] == label]
            how = collections.Counter(h for r in sel for h in r["how"])
            rp = [p for r in sel for p in restated(r)]
            print(f"  {cls}: probes {sum(how.values())} ({dict(how)}); restated readings: mean {np.mean(rp or [0]):.3f}, "
                  f"above 0.5 {np.mean([p > 0.5 for p in rp] or [0]):.2f}; documents with one "
                  f"{sum(bool(restated(r)) for r in sel)}/{len(sel)}; mean reproduced share "
                  f"{np.mean([r['reproduced'] for r in sel]):.2f}; own document retrieved "
                  f"{np.mean([x for r in sel for x in r['retrieved']] or [0]):.2f}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
