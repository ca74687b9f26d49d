"""Design study, no queries: which word runs should Verbatim continuation count as stock phrases?

Verbatim continuation does not count a 4-word run that occurs in two or more
documents of the collection audited together: such a run belongs to the genre
("based on your symptoms it seems"), and a model writes it without holding the
document. Two weaknesses follow from taking the stock phrases from the audited
collection alone:

* an owner who audits 20 documents gets a thinner list of stock phrases than
  the benchmark's 100 or the shadow's 60 + 60, so more of a non-member's
  coincidental runs count, against a threshold fitted on the larger list;
* on the benchmark's chat targets the non-members that "copied" something
  copied runs such as "help with the pain" or "the pain and inflammation",
  common English of the genre that happens to be in one audited document.

This script re-scores the answers of the SHIPPED Verbatim preparations
(assets/preparation; never a test draw) with the stock phrases taken from:

* ``collection``: the shadow's own documents (the method up to session 45);
* ``collection+reference``: those and the shipped public reference corpus
  (assets/aux_medquad.jsonl, distinct texts, so a shadow document that is also
  in the reference counts once, as a target's document does; the method's
  ``stock_reference`` since session 46);
* ``20 of the collection``: each document with 19 others drawn from its
  shadow (an owner's small upload), and ``20+reference``.

Per variant: the document AUC with its interval, the AUC minus today's
(paired), TPR at 1% and 5% FPR, how many non-members and members copied
anything, and the simulated collection test (5 members of 20 against 20
controls, each variant's own Platt fit on the same rows).

    RPA_CACHE_DIR=<cache> .venv/bin/python scripts/verbatim_stock_study.py

With ``--bench-out RUN`` it reads a stored benchmark run's answers instead (a
replay: no query is sent) and asks what an owner's small upload does to the
decisions: the threshold at a stated false-positive rate fitted on the run's
shadow preparation with the shadow's stock phrases taken one way, the run's
documents scored with theirs taken from the whole draw (the benchmark) or from
each document and 19 others of it (an owner's upload), each with and without
the reference; realised FPR and TPR per combination.

    RPA_CACHE_DIR=<cache> .venv/bin/python scripts/verbatim_stock_study.py --bench-out runs/s45/chat-s5-none

With ``--owner-splits K`` it checks on the shadow alone what a threshold promises
to an owner whose texts are of the shadow's genre: each shipped standard
preparation is split K times at random into a calibrating half (threshold at
5% on its non-members, stock phrases from the half, with or without the
reference) and an owner's half, whose documents are scored with the stock
phrases of an upload of ``--owner-docs`` of them (and without their texts in the
reference: an owner's documents are not public); realised FPR and TPR.

    RPA_CACHE_DIR=<cache> .venv/bin/python scripts/verbatim_stock_study.py --owner-splits 10
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from audit_core.documents import Document  # noqa: E402
from audit_core.evidence.calibration import conformal_threshold, fit_platt  # noqa: E402
from audit_core.evidence.collection import simulated_power  # noqa: E402
from audit_core.methods.verbatim import SHIPPED_REFERENCE as REFERENCE  # noqa: E402
from audit_core.methods.verbatim import VerbatimConfig, VerbatimMethod, _text_of, shared_ngrams  # noqa: E402
from audit_core.metrics import bootstrap_auc_ci, bootstrap_auc_difference_ci, roc_auc, tpr_at_fpr  # noqa: E402
from audit_core.target.base import Completion  # noqa: E402
from shadow.shipped import load_shipped, read_manifest  # noqa: E402


def verbatim_keys() -> list[tuple[str, str, str]]:
    """(style, size, key) of every shipped Verbatim preparation."""
    return sorted((v["style"], v["size"], k) for k, v in read_manifest().items() if v["method"] == "verbatim")


def scores(method: VerbatimMethod, observations, shared_for) -> np.ndarray:
    """The method's own score of each observation, with ``shared_for(i)`` as its stock phrases."""
    out = []
    for i, o in enumerate(observations):
        method._shared = shared_for(i)
        s = method.observation_score(o)[0]
        out.append(np.nan if s is None else s)
    return np.array(out, dtype=float)


class StoredAnswers:
    """A target that answers each request with the answer a benchmark run stored for the same user message."""

    def __init__(self, store: Path, defense: str) -> None:
        import sqlite3

        con = sqlite3.connect(store)
        self.by_message = {json.loads(rq)["messages"][-1]["content"]: json.loads(c)
                           for target, rq, c in con.execute("select target_id, request_json, completion from responses")
                           if target.endswith(f" · {defense}")}  # one run may hold several defenses' answers
        con.close()

    def complete_many(self, requests, progress=None):
        return [Completion.from_json(self.by_message[r.messages[-1][1]]) for r in requests]


def small_uploads(texts: list[str], size: int, rng) -> list[list[str]]:
    """Each text with ``size - 1`` others drawn from ``texts``: the collection of an owner's small upload."""
    return [[t, *[texts[j] for j in rng.choice([j for j in range(len(texts)) if j != i],
                                               size=min(size - 1, len(texts) - 1), replace=False)]]
            for i, t in enumerate(texts)]


def stock_lists(texts: list[str], n: int, min_docs: int, size: int, rng) -> dict:
    """Per way of taking stock phrases, a function from a document's index to its stock n-grams."""
    whole = shared_ngrams(texts, n, min_docs)
    whole_ref = shared_ngrams(texts, n, min_docs, REFERENCE)
    small = small_uploads(texts, size, rng)
    small_sets = [shared_ngrams(c, n, min_docs) for c in small]
    small_ref = [shared_ngrams(c, n, min_docs, REFERENCE) for c in small]
    return {"collection": lambda i: whole, "collection+reference": lambda i: whole_ref,
            f"{size} of the collection": lambda i: small_sets[i], f"{size}+reference": lambda i: small_ref[i]}


def bench_mode(run: Path, defense: str, size: int, seed: int) -> None:
    """Shadow-fitted thresholds against a stored run's documents, stock phrases taken each way."""
    res = json.loads((run / "results.json").read_text())
    rows = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["method"] == "verbatim" and r["defense"] == defense]
    entry = next(v for k, v in res["shadow"].items() if k.endswith(":verbatim"))
    style = entry["mirror"]["target_style"]
    corpus = {}
    for line in Path(res["config"]["target_corpus"]).read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            corpus[d["id"]] = d["text"]
    docs = [Document(r["doc_id"], corpus[r["doc_id"]]) for r in rows]
    y = np.array([r["label"] for r in rows])
    method = VerbatimMethod(VerbatimConfig(style=style))
    n, k = method.config.ngram, method.config.shared_min_docs
    target = StoredAnswers(run / "responses.sqlite", defense)
    obs = [method.probe(d, target) for d in docs]
    mem, non = load_shipped(entry["key"])
    shadow_obs = [*mem, *non]
    sy = np.array([1] * len(mem) + [0] * len(non))
    rng = np.random.default_rng(seed)
    shadow_lists = stock_lists([_text_of(o) for o in shadow_obs], n, k, size, rng)
    target_lists = stock_lists([d.text for d in docs], n, k, size, rng)
    print(f"\n{run} ({defense}): {int(y.sum())} + {int((1 - y).sum())} documents, shadow {entry['key']} "
          f"({len(mem)} + {len(non)}); conformal thresholds on the shadow's non-members")
    print("| shadow's stock phrases | target's stock phrases | target AUC | FPR at 5% (TPR) | FPR at 1% (TPR) | "
          "non-members / members that copied anything |")
    print("|---|---|---|---|---|---|")
    pairs = [("collection", "collection"), ("collection", f"{size} of the collection"),
             (f"{size} of the collection", f"{size} of the collection"),
             ("collection+reference", "collection+reference"), ("collection+reference", f"{size}+reference"),
             (f"{size}+reference", f"{size}+reference")]
    cache: dict[tuple[str, str], np.ndarray] = {}
    for sh, tg in pairs:
        if ("s", sh) not in cache:
            cache["s", sh] = scores(method, shadow_obs, shadow_lists[sh])
        if ("t", tg) not in cache:
            cache["t", tg] = scores(method, obs, target_lists[tg])
        s_sh, s_tg = cache["s", sh], cache["t", tg]
        ok = np.isfinite(s_tg)
        cells = []
        for fpr in (0.05, 0.01):
            t = conformal_threshold(s_sh[(sy == 0) & np.isfinite(s_sh)], fpr)
            if t is None:  # too few shadow non-members to promise this rate
                cells.append("-")
                continue
            called = s_tg >= t
            cells.append(f"{called[(y == 0) & ok].mean():.3f} ({called[(y == 1) & ok].mean():.2f})")
        print(f"| {sh} | {tg} | {roc_auc(y[ok], s_tg[ok]):.3f} | {cells[0]} | {cells[1]} | "
              f"{int((s_tg[(y == 0) & ok] >= 1).sum())} / {int((s_tg[(y == 1) & ok] >= 1).sum())} |")


def owner_splits(reference_all: list[str], splits: int, sizes: list[int]) -> None:
    """The ``--owner-splits`` check (module docstring): does the shadow's 5% hold for a small upload?"""
    for style, size, key in verbatim_keys():
        if size != "standard":
            continue
        mem, non = load_shipped(key)
        obs = [*mem, *non]
        texts = [_text_of(o) for o in obs]
        method = VerbatimMethod(VerbatimConfig(style=style, tie_break="none"))  # thresholds lie on counts
        n, k = method.config.ngram, method.config.shared_min_docs
        y = np.array([1] * len(mem) + [0] * len(non))
        calls: dict[tuple[int, str], list[tuple[float, float]]] = {}
        for split in range(splits):
            rng = np.random.default_rng(split)
            order = rng.permutation(len(obs))
            half, owner = order[:len(obs) // 2], order[len(obs) // 2:]
            private = {texts[i] for i in owner}
            public = [t for t in reference_all if t not in private]
            for docs in sizes:  # the reference as a list: the owner's half is taken out of it
                uploads = [[i, *rng.choice([j for j in owner if j != i], size=docs - 1, replace=False)] for i in owner]
                for way, ref in (("collection only", []), ("collection + reference", public)):
                    cal = shared_ngrams([texts[i] for i in half] + ref, n, k)
                    s_cal = scores(method, [obs[i] for i in half], lambda i: cal)
                    t = conformal_threshold(s_cal[(y[half] == 0) & np.isfinite(s_cal)], 0.05)
                    if t is None:
                        continue
                    lists = [shared_ngrams([texts[j] for j in u] + ref, n, k) for u in uploads]
                    s_own = scores(method, [obs[i] for i in owner], lambda i: lists[i])
                    ok = np.isfinite(s_own)
                    calls.setdefault((docs, way), []).append((float(np.mean(s_own[(y[owner] == 0) & ok] >= t)),
                                                              float(np.mean(s_own[(y[owner] == 1) & ok] >= t))))
        print(f"\nshipped Verbatim preparation, {style} style, standard ({key}): {len(mem)} + {len(non)}; "
              f"{splits} splits into a calibrating half and an owner's half")
        print("| owner's upload | stock phrases from | splits with a 5% threshold | realised FPR (mean) | TPR (mean) |")
        print("|---|---|---|---|---|")
        for (docs, way), got in sorted(calls.items()):
            arr = np.array(got)
            print(f"| {docs} documents | {way} | {len(arr)} | {arr[:, 0].mean():.3f} | {arr[:, 1].mean():.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collections", type=int, default=1000, help="simulated collections per power figure")
    ap.add_argument("--owner-docs", type=int, default=20, help="documents of the simulated small upload")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bench-out", type=Path, action="append", default=[],
                    help="a stored benchmark run to replay instead of the shipped shadows (repeatable)")
    ap.add_argument("--defense", default="none", help="with --bench-out: the run's defense leg to read")
    ap.add_argument("--owner-splits", type=int, default=0, help="run the small-upload check with this many splits")
    args = ap.parse_args()
    if args.owner_splits:
        reference = [json.loads(line)["text"] for line in REFERENCE.read_text().splitlines() if line.strip()]
        owner_splits(reference, args.owner_splits, sorted({10, args.owner_docs}))
        return
    if args.bench_out:
        for run in args.bench_out:
            bench_mode(run, args.defense, args.owner_docs, args.seed)
        return
    for style, size, key in verbatim_keys():
        got = load_shipped(key)
        if got is None:
            continue
        mem, non = got
        obs = [*mem, *non]
        texts = [_text_of(o) for o in obs]
        method = VerbatimMethod(VerbatimConfig(style=style))
        variants = stock_lists(texts, method.config.ngram, method.config.shared_min_docs, args.owner_docs,
                               np.random.default_rng(args.seed))
        y = np.array([1] * len(mem) + [0] * len(non))
        print(f"\nshipped Verbatim preparation, {style} style, '{size}' ({key}): {len(mem)} + {len(non)} documents; "
              f"{len(variants['collection'](0))} stock 4-grams from the collection, "
              f"{len(variants['collection+reference'](0))} with the reference")
        print("| stock phrases from | AUC [95% CI] | minus today's, paired [95% CI] | TPR@1%FPR | TPR@5%FPR | "
              "copied anything, members / non-members | power, 5 of 20 vs 20 controls |")
        print("|---|---|---|---|---|---|---|")
        base = None
        for name, shared_for in variants.items():
            s = scores(method, obs, shared_for)
            ok = np.isfinite(s)
            if base is None:
                base = s
            lo, hi = bootstrap_auc_ci(y[ok], s[ok])
            both = ok & np.isfinite(base)
            d_lo, d_hi = bootstrap_auc_difference_ci(y[both], s[both], base[both])
            m_raw, n_raw = s[(y == 1) & ok], s[(y == 0) & ok]
            power = simulated_power(m_raw, n_raw, 20, 20, member_share=0.25, n_sim=args.collections,
                                    platt=fit_platt(m_raw.tolist(), n_raw.tolist()))
            auc = roc_auc(y[ok], s[ok])
            print(f"| {name} | {auc:.3f} [{lo:.2f}, {hi:.2f}] | "
                  f"{auc - roc_auc(y[both], base[both]):+.3f} [{d_lo:+.3f}, {d_hi:+.3f}] | "
                  f"{tpr_at_fpr(y[ok], s[ok], 0.01):.2f} | {tpr_at_fpr(y[ok], s[ok], 0.05):.2f} | "
                  f"{int((m_raw >= 1).sum())} / {int((n_raw >= 1).sum())} | {power:.3f} |")


if __name__ == "__main__":
    main()
