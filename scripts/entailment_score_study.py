"""Design study, no queries: would another reading of Entailment's stored answers separate better?

Entailment (MEntA-style) scores an answer by its largest MiniLM cosine to any
sentence of the document. On the zoo's targets it reads at or below chance
(0.40-0.42): a small chat model that did not see the document still writes about
the same topic, so the cosine is about as high. A model that answers from a
retrieved document tends to copy its words instead. This script re-scores the
answers of the SHIPPED Entailment preparations (assets/preparation, MedQuAD
shadow; never a test draw) and prints, per reading, the document AUC with its
bootstrap interval and its difference from the method's own score (paired):

* ``support``: the method's score before session 44 (``support="cosine"``);
* ``copied (the method's default)``: its score since (``support="copied"``): the largest share of
  an answer's 4-grams copied from the document (not from its own question), minus the share of
  "I don't know" answers;
* ``copied_mean`` / ``copied_max``: per answer, the share of its word 4-grams that occur in
  the document and not in the question (what it copied), averaged / maximised over answers;
  an "I don't know" answer counts as -1 in the mean, as in the method's own score;
* ``copied_doc``: the share of the document's 4-grams (those not in any question) that some
  answer reproduced, Verbatim's reading applied to these answers;
* ``entailed_share``: the issue's "share of answers entailed minus 'I don't know' answers", an
  answer counted as entailed when it copied at least one of the document's 4-grams.

    .venv/bin/python scripts/entailment_score_study.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from audit_core.methods.base import Observation  # noqa: E402
from audit_core.methods.entailment import EntailmentConfig, EntailmentMethod  # noqa: E402
from audit_core.methods.questions import EMPTY, IDK, read_answer  # noqa: E402
from audit_core.methods.textonly_base import answers  # noqa: E402
from audit_core.methods.verbatim import word_ngrams  # noqa: E402
from audit_core.metrics import bootstrap_auc_ci, bootstrap_auc_difference_ci, roc_auc  # noqa: E402
from audit_core.scoring import norm_words  # noqa: E402
from shadow.shipped import load_shipped, read_manifest  # noqa: E402

N = 4


def readings(cosine: EntailmentMethod, default: EntailmentMethod, obs: Observation) -> dict[str, float]:
    """Every reading of one document's answers; NaN where the method itself has no score."""
    score = cosine.observation_score(obs)[0]
    names = ("support", "copied (the method's default)", "copied_mean", "copied_max", "copied_doc", "entailed_share")
    if score is None:
        return {k: float("nan") for k in names}
    qs = obs.data.get("questions", [])
    doc = set(word_ngrams(norm_words(obs.data["document"]), N))
    asked = {g for q in qs for g in word_ngrams(norm_words(q["question"]), N)}
    fresh = doc - asked
    per, best, hit, votes = [], 0.0, set(), []
    for q, a in zip(qs, answers(obs)):
        if a is None:
            continue
        lab = read_answer(a)
        if lab == IDK:
            per.append(-1.0)
            votes.append(-1.0)
            continue
        grams = word_ngrams(norm_words(a), N)
        if lab == EMPTY or not grams:
            per.append(0.0)
            votes.append(0.0)
            continue
        took = [g for g in grams if g in fresh]
        share = len(took) / len(grams)
        per.append(share)
        votes.append(1.0 if took else 0.0)
        best = max(best, share)
        hit |= set(took)
    return {"support": score, "copied (the method's default)": default.observation_score(obs)[0],
            "copied_mean": float(np.mean(per)) if per else float("nan"), "copied_max": best,
            "copied_doc": len(hit) / len(fresh) if fresh else 0.0,
            "entailed_share": float(np.mean(votes)) if votes else float("nan")}


def main() -> None:
    keys = sorted((v["style"], v["size"], k) for k, v in read_manifest().items() if v["method"] == "entailment")
    cosine, copied = EntailmentMethod(EntailmentConfig(support="cosine")), EntailmentMethod()
    for style, size, key in keys:
        got = load_shipped(key)
        if got is None:
            continue
        mem, non = got
        rows = [readings(cosine, copied, o) for o in [*mem, *non]]
        y = np.array([1] * len(mem) + [0] * len(non))
        keep = np.array([np.isfinite(r["support"]) for r in rows])
        y = y[keep]
        print(f"\nshipped Entailment preparation, {style} style, {size} ({key}): {int(y.sum())} + "
              f"{int((y == 0).sum())} documents with a score")
        print("| reading | AUC [95% CI] | minus support's AUC, paired [95% CI] | mean, members / non-members |")
        print("|---|---|---|---|")
        base = np.array([r["support"] for r in rows])[keep]
        for name in rows[0]:
            s = np.array([r[name] for r in rows])[keep]
            lo, hi = bootstrap_auc_ci(y, s)
            d_lo, d_hi = bootstrap_auc_difference_ci(y, s, base)
            print(f"| {name} | {roc_auc(y, s):.3f} [{lo:.2f}, {hi:.2f}] | {roc_auc(y, s) - roc_auc(y, base):+.3f} "
                  f"[{d_lo:+.3f}, {d_hi:+.3f}] | {np.nanmean(s[y == 1]):.3f} / {np.nanmean(s[y == 0]):.3f} |")


if __name__ == "__main__":
    main()
