"""AUC of the text-only methods (and the RAG-MIA / S2MIA-T baselines) on a chat RAG, small n.

    nice -n 10 .venv/bin/python scripts/bench_textonly.py [--corpus assets/aux_medquad.jsonl]
        [--n 20] [--methods perturbation,rag_mia,...] [--samples 1,3] [--out results.json]

The corpus is split as the shadow preparation splits it (seeded halves:
knowledge base / outside); ``--n`` members are drawn from the knowledge base
and ``--n`` non-members from outside. The target is ``shadow.rag.RagSystem``
with SmolLM2-135M-Instruct in the style ``--style`` names (chat by default;
"completion" is the completion-style shadow the preparation builds for a
completion target), retrieval per request, no logprobs requested by the
text-only methods. Every method's score per document is
ranked against the labels (scikit-learn ROC AUC); documents a method abstains
on are left out and counted. For S-RAG (text only) the AUC is that of the
mean estimated next-word probability (the histogram's ``mean_prob``), so that
n can be compared without training a classifier per n.

Results go to ``--out`` (JSON, written after every method) and a Markdown
table on stdout.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_METHODS = "perturbation,rag_mia,s2mia_t,interrogation,robustness,srag_sampled,entailment"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=str(ROOT / "assets" / "aux_medquad.jsonl"))
    ap.add_argument("--max-words", type=int, default=120)
    ap.add_argument("--n", type=int, default=20, help="members and non-members each")
    ap.add_argument("--methods", default=DEFAULT_METHODS)
    ap.add_argument("--samples", default="1", help="n_samples values for srag_sampled, e.g. 1,3")
    ap.add_argument("--style", choices=["chat", "completion"], default="chat",
                    help="how the RAG prompts its generator, and how srag_sampled reads the answers")
    ap.add_argument("--defense", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="textonly_bench.json")
    a = ap.parse_args(argv)

    from sklearn.metrics import roc_auc_score

    from audit_core.methods import create_method
    from shadow.corpus import filter_by_words, load_corpus, split_members
    from shadow.rag import RagConfig, RagSystem

    docs = filter_by_words(load_corpus(a.corpus), max_words=a.max_words)
    half = len(docs) // 2
    kb, outside = split_members(docs, half, len(docs) - half, a.seed)
    rnd = random.Random(a.seed + 1)
    members = rnd.sample(list(kb), a.n)
    nonmembers = rnd.sample(list(outside), a.n)
    rag = RagSystem(kb, RagConfig(generator="smollm2-135m-instruct", prompt_style=a.style, defense=a.defense))
    results: dict = {"corpus": a.corpus, "n": a.n, "kb": len(kb), "defense": a.defense, "style": a.style,
                     "seed": a.seed,
                     "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}", "methods": {}}
    runs: list[tuple[str, dict]] = []
    for name in a.methods.split(","):
        if name == "srag_sampled":
            runs += [(f"srag_sampled_n{s}", {"n_samples": int(s), "style": a.style}) for s in a.samples.split(",")]
        else:
            runs.append((name, {}))
    for label, params in runs:
        name = label.split("_n")[0] if label.startswith("srag_sampled") else label
        m = create_method(name, **params)
        t0 = time.time()
        q0 = rag.account.queries
        scores, labels, abstained = [], [], {}
        # members and non-members interleaved, results written after every document:
        # a run cut short still gives an AUC over the documents it finished
        order = [(lab, d) for pair in zip(members, nonmembers) for lab, d in zip((1, 0), pair)]
        for done, (lab, d) in enumerate(order, 1):
            obs = m.probe(d, rag)
            if name == "srag_sampled":
                feats, reason, _ = m.features(obs)
                s = None if feats is None else feats["mean_prob"]
            elif name == "s2mia_t":
                from audit_core.methods.s2mia import S2miaFeatures, extract_features

                f = extract_features([obs], m.config.embedder)[0]
                s, reason = (f.similarity, None) if isinstance(f, S2miaFeatures) else (None, f)
            elif name == "rag_mia":
                s, ev = m.observation_score(obs)
                reason = None if s is not None else "unparseable_answer"
            elif obs.skipped:
                s, reason = None, obs.skipped
            else:
                s, _, reason = m.observation_score(obs)
            if s is None:
                abstained[reason or "?"] = abstained.get(reason or "?", 0) + 1
            else:
                scores.append(float(s))
                labels.append(lab)
            auc = roc_auc_score(labels, scores) if len(set(labels)) == 2 else None
            results["methods"][label] = {
                "auc": auc, "scored": len(scores), "abstained": abstained, "docs_done": done,
                "queries_per_doc": (rag.account.queries - q0) / done, "seconds": round(time.time() - t0, 1),
                "scores": scores, "labels": labels,
            }
            Path(a.out).write_text(json.dumps(results, indent=1))
        auc = roc_auc_score(labels, scores) if len(set(labels)) == 2 else None
        secs = time.time() - t0
        print(f"{label}: AUC {auc if auc is None else round(auc, 3)}  scored {len(scores)}  "
              f"abstained {abstained}  q/doc {(rag.account.queries - q0) / (2 * a.n):.1f}  {secs:.0f}s", flush=True)
    print("\n| method | AUC | scored | abstained | queries/doc | seconds |\n|---|---|---|---|---|---|")
    for label, r in results["methods"].items():
        auc = "n/a" if r["auc"] is None else f"{r['auc']:.3f}"
        print(f"| {label} | {auc} | {r['scored']} | {sum(r['abstained'].values())} | "
              f"{r['queries_per_doc']:.1f} | {r['seconds']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
