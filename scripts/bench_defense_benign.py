"""What each defense costs honest users: how often their question still retrieves the document that answers it.

    nice -n 10 .venv/bin/python scripts/bench_defense_benign.py [--corpus ../shared/data/medquad.jsonl]
        [--n 200] [--kb-size 2000]
        [--defenses none,paraphrase:gemma-3-270m,paraphrase:smollm2-135m-instruct,mirabel]

The knowledge base holds MedQuAD answers (``honest_questions_with_answers``:
the answer parts only, ``--kb-size`` of them); ``--n`` honest users ask the
questions of records whose question occurs once in the corpus, so exactly one
stored document answers each. Each defended ``shadow.rag.RagSystem`` (k = 4,
all-MiniLM-L6-v2, generator Gemma 3 270M as the benchmark's completion target)
retrieves for them as a served request would; ``paraphrase:<model>`` rewrites
with that model, ``paraphrase`` with the default (``shadow.rag.default_paraphraser``).
Only retrieval runs: the generator still receives the user's own question
under every defense here, so the retrieved documents are all that changes.
Prints one Markdown row per defense; ``--out`` keeps the rows and a few rewrites.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"


def main(argv: list[str] | None = None) -> int:
    from tqdm import tqdm

    from shadow.defenses import benign_retrieval_recall, honest_questions_with_answers
    from shadow.rag import RagConfig, RagSystem

    default_corpus = SHARED / "medquad.jsonl"
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=str(default_corpus if default_corpus.exists()
                                            else ROOT / "assets" / "aux_medquad.jsonl"))
    ap.add_argument("--n", type=int, default=200, help="honest questions")
    ap.add_argument("--kb-size", type=int, default=2000)
    ap.add_argument("--generator", default="gemma-3-270m")
    ap.add_argument("--defenses", default="none,paraphrase:gemma-3-270m,paraphrase:smollm2-135m-instruct,mirabel")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)

    kb, questions, gold = honest_questions_with_answers(a.corpus, a.n, a.kb_size, a.seed)
    print(f"{Path(a.corpus).name}: {len(kb)} stored answers, {len(questions)} honest questions", file=sys.stderr)
    print("| defense | honest questions | answer retrieved (top 4) | share | defense acted | s per question |")
    print("|---|---|---|---|---|---|")
    rows = []
    for spec in a.defenses.split(","):
        defense, _, paraphraser = spec.partition(":")
        cfg = RagConfig(generator=a.generator, defense=None if defense == "none" else defense,
                        paraphraser=paraphraser or None)
        rag = RagSystem(kb, cfg)
        if defense == "paraphrase":
            rag._paraphraser_obj().paraphrase("Warm-up: load the model.")  # loading is not rewriting time
        t0 = time.perf_counter()
        with tqdm(total=len(questions), desc=spec, unit="question", file=sys.stderr) as bar:
            res = benign_retrieval_recall(rag, questions, gold, progress=bar.update)
        secs = (time.perf_counter() - t0) / len(questions)
        label = spec if spec != "paraphrase" else f"paraphrase:{cfg.effective_paraphraser} (the default)"
        print(f"| {label} | {res.total} | {res.found} | {res.rate:.3f} | {res.acted} | {secs:.2f} |", flush=True)
        row = {"defense": spec, **res.to_json(), "seconds_per_question": secs}
        if defense == "paraphrase":
            row["examples"] = [{"question": q, "rewrite": rag._paraphraser_obj().paraphrase(q).paraphrase}
                               for q in questions[:5]]
        rows.append(row)
    if a.out:
        a.out.write_text(json.dumps({"corpus": a.corpus, "n": len(questions), "kb_size": len(kb), "rows": rows},
                                    indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
