"""Design study for Verbatim on chat targets that return logprobs: does the probability of the unseen word break its ties?

On the shadow corpus only (never a test draw). On chat targets most non-members
and about a third of the members reproduce no 4-word run of their document, so
Verbatim's scores tie at 0 and the collection test against 20 controls cannot
reach 0.9 power (BENCHMARKS.md, "why 20 controls fall short"). A chat endpoint
that returns logprobs (the ``chat`` profile) gives one more reading per probe:
where the answer restates the sent beginning and reaches its end, the
probability the model gave to the document's next word (S-RAG's reading,
``srag.observe_word``, aligned the same way). Session 12 found such readings at
0.47 for members and 0.01 for non-members with S-RAG's prompt. This script sends
Verbatim's nine chat probes with logprobs to the chat-style shadow RAG (its
knowledge base padded to the target's size with MedQuAD documents outside the
auxiliary corpus, as the other chat studies do) and prints, per reading, the
document AUC with its interval, the AUC minus Verbatim's own (paired bootstrap),
how many documents score 0, and the simulated collection-test power for 5
members of 20 documents against 20 controls:

* ``share``: Verbatim's own score (the best reproduced share of the unseen 4-grams);
* ``p_restated``: the highest probability of the next word over the probes whose answer restated
  the sent text up to its end (0 without such a probe);
* ``p_any``: the same over every aligned reading, the answer's first token included;
* ``share+p``: ``share`` with ``p_restated`` breaking its ties (1e-3 x);
* ``share|p``: the larger of ``share`` and ``p_restated``;
* ``conf``: how sure the model was of what it wrote from the aligned position on (the mean
  probability of its next ``--conf-tokens`` generated tokens), highest over the probes -- a model
  copying a passage it holds writes with near-certainty, one making text up does not (session 41);
* ``share+conf``: ``share`` with ``conf`` breaking its ties (1e-3 x).

    RPA_CACHE_DIR=<cache> .venv/bin/python scripts/verbatim_logprob_study.py --n 25 --distractors 1750
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    import numpy as np
    from tqdm import tqdm

    from audit_core.evidence.calibration import fit_platt
    from audit_core.evidence.collection import simulated_power
    from audit_core.methods.base import Observation, send_all
    from audit_core.methods.srag import observe_word
    from audit_core.methods.verbatim import VerbatimConfig, VerbatimMethod
    from audit_core.metrics import bootstrap_auc_ci, bootstrap_auc_difference_ci, roc_auc
    from audit_core.target.base import ChatRequest, Completion
    from scripts.srag_chat_repeat_study import padded_chat_shadow
    from shadow.prepare import ShadowConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=25, help="members (= non-members) drawn from the shadow")
    ap.add_argument("--seed", type=int, default=321)
    ap.add_argument("--distractors", type=int, default=1750)
    ap.add_argument("--top-logprobs", type=int, default=20)
    ap.add_argument("--collections", type=int, default=1000)
    ap.add_argument("--conf-tokens", type=int, default=20, help="generated tokens read by the conf reading")
    ap.add_argument("--medquad", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "medquad.jsonl"))
    ap.add_argument("--out", help="JSON file for the per-document rows")
    args = ap.parse_args(argv)

    class WithLogprobs(VerbatimMethod):
        """Verbatim's own probes, asking for logprobs (greedy: the same answers as without them)."""

        def send(self, doc, target, prompts, data, max_tokens, temperature=0.0):
            obs = Observation(self.name, doc.id, data=data)
            send_all(target, [ChatRequest.chat([{"role": "user", "content": p}], max_tokens=max_tokens,
                                               temperature=temperature, seed=0, logprobs=True,
                                               top_logprobs=args.top_logprobs) for p in prompts], obs)
            return obs

    cfg = ShadowConfig(prompt_style="chat", probe_retrieval="per_request")
    rag, kb, outside, extra = padded_chat_shadow(cfg, args.distractors, args.medquad)
    rng = random.Random(args.seed)
    drawn = ([(1, d) for d in rng.sample([d for d in kb if d.n_words >= 24], args.n)]
             + [(0, d) for d in rng.sample([d for d in outside if d.n_words >= 24], args.n)])
    print(f"knowledge base {len(kb) + len(extra)} documents ({len(extra)} distractors); {args.n} + {args.n} drawn",
          file=sys.stderr)
    m = WithLogprobs(VerbatimConfig(style="chat"))
    m.use_collection([d.text for _, d in drawn])  # the drawn documents' stock phrases, as prepare() does
    t0, docs = time.time(), []
    for label, d in tqdm(drawn, desc="documents (nine probes each)", file=sys.stderr):
        obs = m.probe(d, rag)
        share, ev, why = m.observation_score(obs)
        readings = []
        for q, rest, raw in zip(obs.data.get("queries", []), obs.data.get("remainders", []), obs.responses):
            if raw is None or not rest.split():
                readings.append({"aligned": "", "prob": None})
                continue
            comp = Completion.from_json(raw)
            wo = observe_word(rest.split()[0], comp, prefix=q)
            after = [] if wo.position is None else [
                (t.token, round(t.logprob, 4)) for t in comp.tokens[wo.position:wo.position + args.conf_tokens]]
            conf = float(np.mean([math.exp(lp) for _, lp in after])) if after else None
            readings.append({"aligned": wo.aligned, "prob": wo.prob, "word": wo.word, "conf": conf,
                             "after": after})
        docs.append({"label": label, "id": d.id, "share": share, "why": why, "readings": readings})
    print(f"{(time.time() - t0) / len(docs):.1f} s / document", file=sys.stderr)

    def best(doc, kinds):
        ps = [r["prob"] for r in doc["readings"] if r["aligned"] in kinds and r["prob"] is not None]
        return max(ps, default=0.0)

    def best_conf(doc):
        return max((r["conf"] for r in doc["readings"] if r.get("conf") is not None), default=0.0)

    usable = [d for d in docs if d["share"] is not None]
    y = np.array([d["label"] for d in usable])
    share = np.array([d["share"] for d in usable])
    p_rest = np.array([best(d, ("restated",)) for d in usable])
    scores = {"share": share, "p_restated": p_rest, "p_any": np.array([best(d, ("restated", "first")) for d in usable]),
              "share+p": share + 1e-3 * p_rest, "share|p": np.maximum(share, p_rest)}
    conf = np.array([best_conf(d) for d in usable])
    scores.update({"conf": conf, "share+conf": share + 1e-3 * conf})
    restated = {lab: sum(r["aligned"] == "restated" for d in usable if d["label"] == lab for r in d["readings"])
                for lab in (1, 0)}
    print(f"{len(usable)} of {len(docs)} documents with a Verbatim score; probes read after a restatement: "
          f"members {restated[1]}, non-members {restated[0]} (of {9 * int(y.sum())} and {9 * int((y == 0).sum())})")
    print("| reading | AUC [95% CI] | minus share's AUC, paired [95% CI] | scoring 0, members / non-members | "
          "power, 5 of 20 vs 20 controls |")
    print("|---|---|---|---|---|")
    for name, s in scores.items():
        lo, hi = bootstrap_auc_ci(y, s)
        d_lo, d_hi = bootstrap_auc_difference_ci(y, s, share)
        ms, ns = s[y == 1], s[y == 0]
        power = simulated_power(ms, ns, 20, 20, member_share=0.25, n_sim=args.collections,
                                platt=fit_platt(ms.tolist(), ns.tolist()))
        print(f"| {name} | {roc_auc(y, s):.3f} [{lo:.2f}, {hi:.2f}] | {roc_auc(y, s) - roc_auc(y, share):+.3f} "
              f"[{d_lo:+.3f}, {d_hi:+.3f}] | {int((ms == 0).sum())} / {int((ns == 0).sum())} | {power:.3f} |")
    if args.out:
        Path(args.out).write_text(json.dumps(docs, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
