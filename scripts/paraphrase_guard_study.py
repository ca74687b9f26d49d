"""How alike are the paraphrasing defense's rewrites and the queries they replace?

The simulated paraphrasing defense (``shadow.defenses.QueryParaphraser``) asks a
small instruct model to rewrite each query before retrieval. Session 41 found
that it often does not rewrite: it answers a yes/no question ("Yes.") or gives
a fixed sentence, and that answer is what the retriever embedded. This study
sends every registered method's probes (built for documents of the shipped
auxiliary corpus, never the benchmark's test draw) and honest users' MedQuAD
questions through the paraphraser and measures, with the RAG's own embedder,
the cosine similarity of each rewrite to its query: the quantity a rewrite
check can threshold (``RagConfig.paraphrase_min_similarity``).

    python scripts/paraphrase_guard_study.py --docs 12 --benign 60 --out runs/s42/guard

Writes ``rewrites.jsonl`` (query, rewrite, similarity, source) and prints per
source the share of rewrites below each candidate threshold.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from audit_core.documents import Document  # noqa: E402
from audit_core.target.base import Capabilities, ChatRequest, Completion, Target, TokenLogprob, Usage  # noqa: E402

THRESHOLDS = (0.3, 0.4, 0.5, 0.6, 0.7)


class RecordingTarget(Target):
    """Answers every request with one short sentence and keeps the retrieval query it would have embedded."""

    name = "recording"

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    def complete(self, request: ChatRequest) -> Completion:
        from shadow.rag import _query_of

        self.queries.append(_query_of(request))
        toks = [TokenLogprob(" I", -0.1, [(" I", -0.1)])] if request.logprobs else None
        return Completion("I do not know.", toks, Usage(10, 4))

    def capabilities(self) -> Capabilities:
        return Capabilities(True, True, 20, style="chat")

    def answer_style(self):
        from audit_core.target.style import StyleFinding

        return StyleFinding("chat", "recording target")


def method_queries(docs: list[Document]) -> dict[str, list[str]]:
    """Each registered method's retrieval queries for ``docs``, in the chat style."""
    from audit_core.methods import METHODS, create_method, in_target_style

    params = in_target_style({}, METHODS, "chat")
    out: dict[str, list[str]] = {}
    for name in METHODS:
        target = RecordingTarget()
        try:
            method = create_method(name, **params.get(name, {}))
            method.use_collection([d.text for d in docs])
            for d in docs:
                method.probe(d, target)
        except Exception as exc:  # a method that needs more than this target gives: reported, not fatal
            print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        out[name] = list(dict.fromkeys(target.queries))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=12, help="auxiliary-corpus documents whose probes are rewritten")
    ap.add_argument("--benign", type=int, default=60, help="honest MedQuAD questions rewritten")
    ap.add_argument("--per-method", type=int, default=40, help="at most this many queries per method")
    ap.add_argument("--seed", type=int, default=4242)
    ap.add_argument("--paraphraser", default="smollm2-135m-instruct")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    import numpy as np

    from audit_core.models import DEFAULT_EMBEDDER
    from shadow.defenses import QueryParaphraser, benign_questions
    from shadow.rag import _encode

    aux = ROOT / "assets" / "aux_medquad.jsonl"
    rows = [json.loads(line) for line in aux.open(encoding="utf-8")]
    rng = random.Random(a.seed)
    picked = rng.sample(rows, a.docs + a.benign * 3)
    docs = [Document(f"aux-{i}", r["text"]) for i, r in enumerate(picked[: a.docs])]
    sources = method_queries(docs)
    for name, qs in sources.items():
        sources[name] = rng.sample(qs, min(len(qs), a.per_method))
    sources["benign (MedQuAD questions)"] = benign_questions(str(aux), a.benign, seed=a.seed,
                                                             exclude=[d.text for d in docs])

    from audit_core.models import load_causal_lm

    para = QueryParaphraser(load_causal_lm(a.paraphraser))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    t0 = time.time()
    all_q = [q for qs in sources.values() for q in qs]
    print(f"rewriting {len(all_q)} queries from {len(sources)} sources", flush=True)
    rewrites = {r.query: r.paraphrase for r in para.paraphrase_many(all_q)}
    print(f"rewritten in {time.time() - t0:.0f} s", flush=True)
    for src, qs in sources.items():
        if not qs:
            continue
        qe = _encode(DEFAULT_EMBEDDER, qs)
        re_ = _encode(DEFAULT_EMBEDDER, [rewrites[q] or " " for q in qs])
        sims = np.sum(np.asarray(qe) * np.asarray(re_), axis=1)
        for q, s in zip(qs, sims):
            records.append({"source": src, "query": q, "rewrite": rewrites[q], "similarity": round(float(s), 4)})
    with (out / "rewrites.jsonl").open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"\n{'source':32s} {'n':>4s} {'median':>7s} " + " ".join(f"<{t:.1f}" for t in THRESHOLDS))
    for src in sources:
        sims = np.array([r["similarity"] for r in records if r["source"] == src])
        if not len(sims):
            continue
        shares = " ".join(f"{np.mean(sims < t):4.2f}" for t in THRESHOLDS)
        print(f"{src:32s} {len(sims):4d} {np.median(sims):7.3f} {shares}")


if __name__ == "__main__":
    main()
