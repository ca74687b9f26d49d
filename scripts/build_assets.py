"""Build the data shipped in assets/ from the public corpora in ../shared/data.

    .venv/bin/python scripts/build_assets.py [--data-dir ../shared/data] [--out assets]

Deterministic: the same input files give byte-identical outputs. Writes
  aux_medquad.jsonl (+ .LICENSE.md)  auxiliary corpus for the shadow RAG
  demo_kb.jsonl (+ .LICENSE.md)      knowledge base of the built-in demo target
  decoy_questions.txt                honest questions for Verbatim continuation's decoy probes
  sample_documents.csv               "personal documents" a user may upload
  sample_documents_truth.csv         answer key: which sample documents are in the demo KB
  README.md                          what each asset is, where it comes from, its license
"""
from __future__ import annotations

import argparse
import csv
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from audit_core.documents import Document  # noqa: E402
from shadow.corpus import filter_by_words, load_corpus, write_jsonl  # noqa: E402
from shadow.defenses import benign_questions  # noqa: E402


@dataclass(frozen=True)
class AssetConfig:
    """Sizes, word ranges and seeds of the shipped assets."""

    aux_size: int = 1200
    aux_min_words: int = 60
    aux_max_words: int = 300
    aux_seed: int = 0
    demo_size: int = 300
    demo_min_words: int = 40
    demo_max_words: int = 200
    demo_seed: int = 1
    sample_members: int = 10
    sample_nonmembers: int = 10
    sample_seed: int = 2
    #: a candidate non-member is rejected as a near-copy of a KB text if more
    #: than this share of its word 8-grams occurs in the demo KB. GenMedGPT-5k
    #: dialogues share stock phrases (median share 8%, 99th percentile 37%), so
    #: a lower bound would also drop ordinary dialogues and bias the sample.
    near_dup_ngram: int = 8
    near_dup_max_share: float = 0.5
    #: honest MedQuAD questions for Verbatim continuation's decoy probes; none occurs in the
    #: auxiliary corpus, so a shadow's knowledge base never holds the record a question came from
    decoy_count: int = 300
    decoy_seed: int = 3


MEDQUAD_SOURCE = "abachaa/MedQuAD"
GENMED_SOURCE = "Kent0n-Li/ChatDoctor:chatdoctor5k.json"


def seeded_sample(docs: list[Document], n: int, seed: int, what: str) -> list[Document]:
    """``n`` documents drawn with random.Random(seed) from ``docs`` sorted by id, returned sorted by id."""
    if len(docs) < n:
        raise SystemExit(f"{what}: only {len(docs)} eligible documents, {n} needed")
    ordered = sorted(docs, key=lambda d: d.id)
    return sorted(random.Random(seed).sample(ordered, n), key=lambda d: d.id)


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def _ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = _key(text).split()
    return {tuple(words[i : i + n]) for i in range(max(len(words) - n + 1, 1))}


def pick_nonmembers(
    pool: list[Document], kb: list[Document], n: int, seed: int, cfg: AssetConfig
) -> list[Document]:
    """Non-members: documents of ``pool`` whose text is neither in the KB nor a near-copy of a KB text."""
    kb_keys = {_key(d.text) for d in kb}
    kb_grams: set[tuple[str, ...]] = set()
    for d in kb:
        kb_grams |= _ngrams(d.text, cfg.near_dup_ngram)
    kb_ids = {d.id for d in kb}
    ordered = sorted(pool, key=lambda d: d.id)
    random.Random(seed).shuffle(ordered)
    out: list[Document] = []
    for d in ordered:
        if d.id in kb_ids or _key(d.text) in kb_keys:
            continue
        grams = _ngrams(d.text, cfg.near_dup_ngram)
        if len(grams & kb_grams) / len(grams) > cfg.near_dup_max_share:
            continue
        out.append(d)
        if len(out) == n:
            return out
    raise SystemExit(f"only {len(out)} non-members found, {n} needed")


AUX_LICENSE = """# aux_medquad.jsonl — license and attribution

This file contains {n} question–answer documents from **MedQuAD**
(source: GitHub repository `abachaa/MedQuAD`, NIH question + answer pairs),
licensed under the **Creative Commons Attribution 4.0 International license
(CC BY 4.0)**: https://creativecommons.org/licenses/by/4.0/

Attribution (as required by the license):

> Ben Abacha & Demner-Fushman, "A Question-Entailment Approach to Question Answering", BMC Bioinformatics 2019

## Changes made
- Sampled subset: {n} of the question–answer pairs, drawn with
  `random.Random({seed})` among those of {lo}–{hi} words (no text truncated).
- Each pair was joined into one text "Question: … Answer: …", HTML tags were
  stripped, whitespace normalised and exact duplicates removed.

Use in this product: the public auxiliary corpus from which the auditor builds
its shadow RAG system. The material is provided as is, without warranties; the
authors do not endorse this product.
"""

DEMO_LICENSE = """# demo_kb.jsonl and sample_documents*.csv — license and notice

`demo_kb.jsonl` contains {n} dialogues from **GenMedGPT-5k**, the synthetic
patient–doctor dialogues of the ChatDoctor project (source: GitHub repository
`Kent0n-Li/ChatDoctor`, file `chatdoctor5k.json`). The repository is licensed
under the **Apache License 2.0**: https://www.apache.org/licenses/LICENSE-2.0

Notice from the ChatDoctor README: the data is for **research use only**; it
is **not for clinical use** and gives no medical advice. The dialogues are
synthetic (generated), not records of real patients.

## Changes made
- Sampled subset: {n} dialogues drawn with `random.Random({seed})` among those
  of {lo}–{hi} words (no text truncated); each dialogue was joined into one
  text "Patient: … Doctor: …", whitespace normalised, exact duplicates removed.
- `sample_documents.csv` holds {m} dialogues of `demo_kb.jsonl` and {k} other
  GenMedGPT-5k dialogues that are neither in the demo KB nor near-copies of a
  demo KB text, shuffled with `random.Random({sample_seed})` and renamed
  `note-01`… ; `sample_documents_truth.csv` says which is which.
  The same license and notice cover both CSV files.

Use in this product: the private knowledge base of the built-in demo target,
and example documents to audit against it.
"""

README = """# Shipped assets

Built by `.venv/bin/python scripts/build_assets.py` from the public corpora in
`../shared/data` (deterministic: rebuilding gives identical files).

| file | content | origin | license |
|---|---|---|---|
| `aux_medquad.jsonl` | {aux_n} MedQuAD question–answer texts, {aux_lo}–{aux_hi} words; JSONL `{{"id","text","source"}}` | abachaa/MedQuAD | CC BY 4.0, see `aux_medquad.LICENSE.md` |
| `demo_kb.jsonl` | {demo_n} GenMedGPT-5k patient–doctor dialogues, {demo_lo}–{demo_hi} words; same format | Kent0n-Li/ChatDoctor (`chatdoctor5k.json`) | Apache-2.0 repository, research use only, see `demo_kb.LICENSE.md` |
| `sample_documents.csv` | {sample_n} documents to upload (`id,text`): {m} from the demo KB, {k} not | as `demo_kb.jsonl` | as `demo_kb.jsonl` |
| `preparation/<key>.json.gz`, `preparation/manifest.json` | the default shadow preparation: raw probe results (members, non-members; JSON, no model) of each method's default configuration on the shadow RAG over `aux_medquad.jsonl`, named by `shadow.prepare.preparation_key`; built by `scripts/build_default_preparation.py` | computed by this project from `aux_medquad.jsonl` with SmolLM2-135M-Instruct | as `aux_medquad.jsonl` (CC BY 4.0: texts of MedQuAD appear inside the probes) |
| `decoy_questions.txt` | {decoy_n} MedQuAD questions, one per line, none of them in `aux_medquad.jsonl`: the honest questions Verbatim continuation's `quote_decoy` probes send before a quote | abachaa/MedQuAD | CC BY 4.0, as `aux_medquad.jsonl` |
| `sample_documents_truth.csv` | answer key (`id,truth,source_id`), `truth` = member / non-member | as `demo_kb.jsonl` | as `demo_kb.jsonl` |

- The auxiliary corpus is public data from which the auditor builds its shadow
  RAG; it is not the target's knowledge base.
- The answer key is kept in its own file so that the sample a user uploads does
  not reveal the answer.
"""


def build(data_dir: Path, out: Path, cfg: AssetConfig = AssetConfig()) -> None:
    """Write every asset of the module docstring into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    medquad = filter_by_words(load_corpus(data_dir / "medquad.jsonl"), cfg.aux_min_words, cfg.aux_max_words)
    aux = seeded_sample(medquad, cfg.aux_size, cfg.aux_seed, "aux_medquad")
    write_jsonl(aux, out / "aux_medquad.jsonl", source=MEDQUAD_SOURCE)
    (out / "aux_medquad.LICENSE.md").write_text(
        AUX_LICENSE.format(n=cfg.aux_size, seed=cfg.aux_seed, lo=cfg.aux_min_words, hi=cfg.aux_max_words),
        encoding="utf-8",
    )

    aux_texts = [d.text for d in aux]
    questions = benign_questions(str(data_dir / "medquad.jsonl"), 10**6, cfg.decoy_seed, exclude=aux_texts)
    decoys = [q for q in questions if '"' not in q and not any(q in t for t in aux_texts)][:cfg.decoy_count]
    (out / "decoy_questions.txt").write_text("\n".join(decoys) + "\n", encoding="utf-8")

    genmed_all = load_corpus(data_dir / "genmedgpt5k.jsonl")
    genmed = filter_by_words(genmed_all, cfg.demo_min_words, cfg.demo_max_words)
    kb = seeded_sample(genmed, cfg.demo_size, cfg.demo_seed, "demo_kb")
    write_jsonl(kb, out / "demo_kb.jsonl", source=GENMED_SOURCE)

    rng_members = sorted(random.Random(cfg.sample_seed).sample(kb, cfg.sample_members), key=lambda d: d.id)
    nonmembers = pick_nonmembers(genmed, kb, cfg.sample_nonmembers, cfg.sample_seed + 1, cfg)
    labelled = [(d, "member") for d in rng_members] + [(d, "non-member") for d in nonmembers]
    random.Random(cfg.sample_seed).shuffle(labelled)
    width = len(str(len(labelled)))
    rows = [(f"note-{i + 1:0{width}d}", d, truth) for i, (d, truth) in enumerate(labelled)]
    with (out / "sample_documents.csv").open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["id", "text"])
        w.writerows((rid, d.text) for rid, d, _ in rows)
    with (out / "sample_documents_truth.csv").open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["id", "truth", "source_id"])
        w.writerows((rid, truth, d.id) for rid, d, truth in rows)

    (out / "demo_kb.LICENSE.md").write_text(
        DEMO_LICENSE.format(
            n=cfg.demo_size, seed=cfg.demo_seed, lo=cfg.demo_min_words, hi=cfg.demo_max_words,
            m=cfg.sample_members, k=cfg.sample_nonmembers, sample_seed=cfg.sample_seed,
        ),
        encoding="utf-8",
    )
    (out / "README.md").write_text(
        README.format(
            aux_n=cfg.aux_size, aux_lo=cfg.aux_min_words, aux_hi=cfg.aux_max_words,
            demo_n=cfg.demo_size, demo_lo=cfg.demo_min_words, demo_hi=cfg.demo_max_words,
            sample_n=len(rows), m=cfg.sample_members, k=cfg.sample_nonmembers, decoy_n=len(decoys),
        ),
        encoding="utf-8",
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=ROOT / "assets")
    args = parser.parse_args(argv)
    if not (args.data_dir / "medquad.jsonl").exists():
        raise SystemExit(f"{args.data_dir}: medquad.jsonl not found (pass --data-dir)")
    build(args.data_dir, args.out)
    print(f"assets written to {args.out}")


if __name__ == "__main__":
    main()
