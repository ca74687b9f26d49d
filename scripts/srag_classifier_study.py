"""Design study, shadow only: does another reading of S-RAG's shipped shadow observations separate better?

S-RAG's classifier (AutoGluon on the paper's binned next-word probabilities,
``audit_core.methods.srag``) is compared, by its 5-fold out-of-fold AUC on the
shipped preparation's own shadow documents, with: the same AutoGluon fit on
the paper's features plus order statistics (the five largest readings) and the
mean log probability; AutoGluon on those summaries alone; the paper's features
with a linear model added to AutoGluon's families; and the mean probability as
a score with no classifier at all. No target is queried and no test draw is
read: whatever this finds is chosen on the shadow.

    .venv/bin/python scripts/srag_classifier_study.py --key c424f1dab4ce92db2047 --seeds 0,1
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    import numpy as np
    import pandas as pd
    from sklearn.metrics import roc_auc_score

    import audit_core.methods.srag as S
    from audit_core.evidence.calibration import oof_predictions
    from audit_core.methods.base import Observation

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--key", default="c424f1dab4ce92db2047",
                    help="shipped preparation (assets/preparation/KEY.json.gz); default: S-RAG, completion, 200 + 200")
    ap.add_argument("--seeds", default="0,1", help="fold and AutoGluon seeds, comma-separated")
    args = ap.parse_args(argv)

    d = json.loads(gzip.open(ROOT / "assets" / "preparation" / f"{args.key}.json.gz").read())
    method = S.SragMethod(S.SragConfig())
    rows, y = [], []
    for label, group in ((1, d["members"]), (0, d["nonmembers"])):
        for o in group:
            feats, _, words = method.features(Observation(**o))
            if feats is None:
                continue
            p = np.array([w.prob for w in words if w.prob is not None])
            top = np.sort(p)[::-1]
            extra = {f"top_{i}": float(top[i]) if i < len(top) else 0.0 for i in range(5)}
            extra["mean_logprob"] = float(np.log(p + 1e-4).mean())
            rows.append((feats, extra))
            y.append(label)
    y = np.array(y)
    params = d["calibration"]["params"]
    shipped_aucs = params.get("scorer_shadow_auc") or {
        "autogluon": roc_auc_score(params["oof_labels"], params["oof_scores"])}  # a file from before the choice
    print(f"{len(y)} shadow documents ({y.sum()} members); the shipped calibration's out-of-fold AUCs: "
          + ", ".join(f"{k} {v:.4f}" for k, v in shipped_aucs.items()) + f" (scorer: {params.get('scorer', 'autogluon')})")

    def frame(kind: str):
        if kind == "paper":
            return pd.DataFrame([f for f, _ in rows])
        if kind == "paper+order":
            return pd.DataFrame([{**f, **e} for f, e in rows])
        return pd.DataFrame([{"mean_prob": f["mean_prob"], "below_topk_share": f["below_topk_share"], **e}
                             for f, e in rows])

    shipped = dict(S.HYPERPARAMETERS)
    for kind, families in (("paper", shipped), ("paper+order", shipped), ("summaries", shipped),
                           ("paper", {**shipped, "LR": {}})):
        for seed in (int(s) for s in args.seeds.split(",")):
            df = frame(kind)
            df["member"] = y
            cfg = S.SragConfig(seed=seed)
            S.HYPERPARAMETERS = families
            t = time.time()

            def fit_predict(tr, te):
                model = S.train_predictor(df.iloc[tr], cfg)
                return S.member_probability(model, df.iloc[te].drop(columns=["member"]))

            try:
                oof = oof_predictions(len(df), list(y), fit_predict, folds=5, seed=seed)
            finally:
                S.HYPERPARAMETERS = shipped
            print(f"{kind:12s} {'+'.join(families):10s} seed {seed}: out-of-fold AUC {roc_auc_score(y, oof):.4f} "
                  f"({time.time() - t:.0f} s)", flush=True)
    print(f"mean probability, no classifier: AUC {roc_auc_score(y, [f['mean_prob'] for f, _ in rows]):.4f}")


if __name__ == "__main__":
    main()
