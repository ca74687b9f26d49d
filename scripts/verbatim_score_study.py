"""Design study, no queries: would another reading of Verbatim's stored chat answers separate better?

On chat targets about a third of the members and most non-members reproduce no
4-word run of their document, so their scores tie at 0, and the collection test
against 20 controls stays near 0.6 power (BENCHMARKS.md). This script re-scores
the answers of the SHIPPED chat-style shadow preparations (assets/preparation,
MedQuAD shadow, nine probes per document; never a test draw) in other ways and
prints, per reading, the document AUC with its bootstrap interval, how many
documents score 0, and the simulated collection-test power for 5 members of 20
documents against 20 controls (the pre-registered test, with each reading's own
Platt fit on the same rows, so it flatters every reading alike), with each
reading's AUC minus the method's own on the same documents (paired bootstrap):

* ``share``: the method's own score (``observation_score``), the best share of the remainder's
  fresh 4-grams reproduced; a document it leaves inconclusive is left out of every reading;
* ``longest``: the longest reproduced run, in words (long documents are not penalised);
* ``hits``: how many fresh 4-grams the best answer reproduced (a count, not a share);
* ``share_first{W}``: the share over only the first W words of the remainder, what a
  128-token answer that restates first can still reach;
* ``embed_max``: the largest cosine similarity between an answer and its remainder
  (the shipped MiniLM embedder), a reading that needs no exact copy;
* ``share+embed``: ``share`` with ``embed_max`` breaking its ties (1e-3 x), what the method's
  default ``tie_break`` now does (session 43);
* ``content_words``: the largest share of the remainder's content words (not in the query, not stop
  words, over two letters) that an answer contains, and ``share+words``, that reading as the tie-break;
* readings across the probes instead of the best one (a model that holds the document tends to copy
  from it at several cuts, a coincidental 4-gram turns up in one answer): ``share_sum``, the shares
  added up; ``copying_probes``, how many probes reproduced anything, ties broken by the best share;
  ``union_share``, the document's fresh 4-grams reproduced by any answer over all fresh 4-grams of
  the remainders; and ``share_sum+embed``, the sum with the method's tie-break.

Below the table, each tie-break reading's AUC among the documents whose share is 0 (the ties).

    .venv/bin/python scripts/verbatim_score_study.py
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS  # noqa: E402

from audit_core.evidence.answers import non_answer  # noqa: E402
from audit_core.evidence.calibration import fit_platt  # noqa: E402
from audit_core.evidence.collection import simulated_power  # noqa: E402
from audit_core.methods.base import Observation  # noqa: E402
from audit_core.methods.textonly_base import answers  # noqa: E402
from audit_core.methods.verbatim import (VerbatimConfig, VerbatimMethod, _text_of, reproduction,  # noqa: E402
                                         unseen_ngrams, word_ngrams)
from audit_core.metrics import bootstrap_auc_ci, bootstrap_auc_difference_ci, roc_auc  # noqa: E402
from audit_core.scoring import norm_words  # noqa: E402
from shadow.shipped import read_manifest, load_shipped  # noqa: E402


def chat_keys() -> list[tuple[str, str]]:
    """(size, key) of every shipped chat-style Verbatim preparation."""
    return sorted((v["size"], k) for k, v in read_manifest().items()
                  if v["method"] == "verbatim" and v["style"] == "chat")


def readings(method: VerbatimMethod, obs: Observation, windows: list[int], embed) -> dict[str, float]:
    """Every reading of one document's answers; all NaN where the method itself has no score (inconclusive)."""
    score = method.observation_score(obs)[0]
    names = ["share", "longest", "hits", *[f"share_first{w}" for w in windows], "embed_max", "share+embed",
             "content_words", "share+words", "share_sum", "copying_probes", "union_share", "share_sum+embed",
             "hits+embed", "longest+embed", "log_hits+embed"]
    if score is None:
        return {name: float("nan") for name in names}
    d, n, shared = obs.data, method.config.ngram, method._shared
    out: dict[str, float] = {"share": score, "longest": 0.0, "hits": 0.0, **{f"share_first{w}": 0.0 for w in windows},
                             "content_words": 0.0, "share_sum": 0.0, "copying_probes": 0.0}
    fresh_all: set[tuple[str, ...]] = set()
    hit_all: set[tuple[str, ...]] = set()
    pairs: list[tuple[str, str]] = []
    for query, rest, answer in zip(d["queries"], d["remainders"], answers(obs)[-len(d["queries"]):]):
        if answer is None or non_answer(answer) is not None:
            continue
        rep = reproduction(answer, query, rest, n, shared)
        out["longest"] = max(out["longest"], float(rep["longest_words"]))
        out["share_sum"] += rep["share"]
        out["copying_probes"] += float(rep["share"] > 0)
        fresh = unseen_ngrams(query, rest, n) - shared
        fresh_all |= fresh
        hit_all |= fresh & set(word_ngrams(norm_words(answer), n))
        out["hits"] = max(out["hits"], float(rep["ngrams"]))
        for w in windows:
            part = reproduction(answer, query, " ".join(rest.split()[:w]), n, shared)
            out[f"share_first{w}"] = max(out[f"share_first{w}"], part["share"])
        said, asked = set(norm_words(answer)), set(norm_words(query))
        content = {w for w in norm_words(rest) if w not in asked and w not in ENGLISH_STOP_WORDS and len(w) > 2}
        if content:
            out["content_words"] = max(out["content_words"], len(content & said) / len(content))
        pairs.append((answer, rest))
    a = embed.encode([p[0] for p in pairs], normalize_embeddings=True)
    r = embed.encode([p[1] for p in pairs], normalize_embeddings=True)
    out["embed_max"] = float((a * r).sum(axis=1).max())
    out["share+embed"] = out["share"] + 1e-3 * out["embed_max"]
    out["share+words"] = out["share"] + 1e-3 * out["content_words"]
    out["copying_probes"] += out["share"]  # ties among equal counts broken by the best share (at most 1)
    out["union_share"] = len(hit_all) / len(fresh_all) if fresh_all else 0.0
    out["share_sum+embed"] = out["share_sum"] + 1e-3 * out["embed_max"]
    out["hits+embed"] = out["hits"] + 1e-3 * out["embed_max"]
    out["longest+embed"] = out["longest"] + 1e-3 * out["embed_max"]
    out["log_hits+embed"] = float(np.log1p(out["hits"])) + 1e-3 * out["embed_max"]
    return out



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", default="20,30,45", help="W values for share_first{W}")
    ap.add_argument("--collections", type=int, default=400, help="simulated collections per power figure")
    ap.add_argument("--ngram", type=int, default=VerbatimConfig.ngram,
                    help="words per n-gram (the method's: %(default)s)")
    args = ap.parse_args()
    from audit_core.models import load_embedder

    embed = load_embedder()
    windows = [int(w) for w in args.windows.split(",")]
    for size, key in chat_keys():
        got = load_shipped(key)
        if got is None:
            continue
        mem, non = got
        # the share alone: the score up to session 44, against which every reading is compared
        method = VerbatimMethod(VerbatimConfig(style="chat", tie_break="none", reading="share", ngram=args.ngram))
        method.use_collection([_text_of(o) for o in [*mem, *non]])  # the shadow's stock phrases, as prepare() does
        rows = [readings(method, o, windows, embed) for o in [*mem, *non]]
        y = np.array([1] * len(mem) + [0] * len(non))
        left_out = sum(np.isnan(r["share"]) for r in rows)
        print(f"\nshipped chat preparation '{size}' ({key}): {len(mem)} + {len(non)} documents, {left_out} "
              "inconclusive for the method (too many non-answers) and left out of every reading")
        print("| reading | AUC [95% CI] | minus share's AUC, paired [95% CI] | scoring 0, members / non-members | "
              "power, 5 of 20 vs 20 controls |")
        print("|---|---|---|---|---|")
        share = np.array([r["share"] for r in rows])
        for name in rows[0]:
            s = np.array([r[name] for r in rows])
            lo, hi = bootstrap_auc_ci(y, s)
            m_raw, n_raw = s[(y == 1) & np.isfinite(s)], s[(y == 0) & np.isfinite(s)]
            power = simulated_power(m_raw, n_raw, 20, 20, member_share=0.25, n_sim=args.collections,
                                    platt=fit_platt(m_raw.tolist(), n_raw.tolist()))
            d_lo, d_hi = bootstrap_auc_difference_ci(y, s, share)
            print(f"| {name} | {roc_auc(y, s):.3f} [{lo:.2f}, {hi:.2f}] | {roc_auc(y, s) - roc_auc(y, share):+.3f} "
                  f"[{d_lo:+.3f}, {d_hi:+.3f}] | {int((m_raw == 0).sum())} / "
                  f"{int((n_raw == 0).sum())} | {power:.3f} |")
        ties = np.isfinite(share) & (share == 0)
        for name in ("embed_max", "content_words"):
            s = np.array([r[name] for r in rows])
            print(f"{name} among the {int(ties.sum())} documents whose share is 0 ({int((ties & (y == 1)).sum())} "
                  f"members): AUC {roc_auc(y[ties], s[ties]):.3f}")


if __name__ == "__main__":
    main()
