"""How biased are generated controls? (issue 17 point 3c)

    python scripts/bench_generated_controls.py --bench-out runs/zoo-completion-s4-std \
        --out runs/generated-controls-s4.json

An owner with no never-published texts can let the app rewrite their own
documents with a local model and use the rewrites as controls
(``audit_core.evidence.controls``). A rewrite cannot be in the target, but it
is not exchangeable with its original, so the collection test against
rewrites is only as sound as the rewriting is neutral. This measures that on a
finished ``shadow.bench`` run (completion profile, no defense):

1. every test document of the run (members and non-members) is rewritten by
   the app's rewriting code, and the rewrite is probed with the method on the
   same target the run built (its knowledge base, in-process, as the shadow is
   probed) and scored with the same shadow calibration;
2. ``--check`` originals are probed again the same way: their scores must
   equal the run's served-path scores, or the comparison would measure the
   path, not the rewriting;
3. the bias: over random collections of 20 non-members, the collection test
   of the originals against their own rewrites (what the app does), whose
   rejection rate would be <= 5% if rewrites were exchangeable with originals;
   and the power for 5 members + 15 non-members against their rewrites; with
   the likelihood-ratio weights and with Savage ranks.

Writes every score and number to ``--out`` (JSON) and prints a Markdown summary.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _rows(bench_out: Path, method: str) -> list[dict]:
    """The run's rows of ``method`` on the completion profile without a defense, the last of each document."""
    rows = {}
    for line in (bench_out / "scores.jsonl").read_text().splitlines():
        r = json.loads(line) if line.strip() else None
        if r and r["method"] == method and r.get("profile", "completion") == "completion" \
                and r.get("defense", "none") == "none" and r["score"] is not None:
            rows[r["doc_id"]] = r
    return list(rows.values())


def collections(orig: dict[str, float], rew: dict[str, float], members: list[str], nonmembers: list[str],
                n_sim: int, platt: dict | None, seed: int = 0) -> dict:
    """Rejection rates of the app's test, the owner's documents against their own rewrites."""
    from audit_core.evidence.collection import ALPHA, top_weighted_test

    rng = np.random.default_rng(seed)
    null = alt = 0
    for i in range(n_sim):
        docs0 = list(rng.choice(nonmembers, 20, replace=False))
        docs1 = list(rng.choice(members, 5, replace=False)) + list(rng.choice(nonmembers, 15, replace=False))
        null += top_weighted_test([orig[d] for d in docs0], [rew[d] for d in docs0], seed=i, platt=platt)[1] <= ALPHA
        alt += top_weighted_test([orig[d] for d in docs1], [rew[d] for d in docs1], seed=i, platt=platt)[1] <= ALPHA
    return {"n_collections": n_sim, "fpr_20_nonmembers_vs_their_rewrites": null / n_sim,
            "power_5_members_of_20_vs_their_rewrites": alt / n_sim}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench-out", required=True, help="a finished shadow.bench run (completion profile)")
    ap.add_argument("--method", default="srag")
    ap.add_argument("--check", type=int, default=10, help="originals probed again to check the path")
    ap.add_argument("--collections", type=int, default=1000)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    from scipy.stats import wilcoxon
    from tqdm import tqdm

    from audit_core.documents import Document
    from audit_core.audit import probe_document
    from audit_core.evidence.collection import LOG_ODDS, log_odds, weights_kind
    from audit_core.evidence.controls import REWRITE_MODEL, generate_controls
    from audit_core.methods import create_method
    from shadow.bench.runner import BenchConfig, profile_method_params, profile_shadow
    from shadow.corpus import load_corpus
    from shadow.prepare import ShadowConfig, prepare_shadow
    from shadow.profiles import get_profile
    from shadow.rag import RagSystem

    bench_out = Path(args.bench_out)
    conf = json.loads((bench_out / "results.json").read_text())["config"]
    conf["shadow"] = ShadowConfig(**conf["shadow"])
    cfg = BenchConfig(**{k: v for k, v in conf.items() if k in BenchConfig.__dataclass_fields__})
    rows = _rows(bench_out, args.method)
    texts = {d.id: d.text for d in load_corpus(cfg.target_corpus)}
    docs = [Document(r["doc_id"], texts[r["doc_id"]]) for r in rows]
    label = {r["doc_id"]: r["label"] for r in rows}
    stored = {r["doc_id"]: r["score"] for r in rows}

    prof = get_profile("completion")
    method = create_method(args.method, **profile_method_params(cfg, prof).get(args.method, {}))  # as the run
    method.use_collection([d.text for d in docs])
    cal = prepare_shadow([method], profile_shadow(cfg, prof)).calibrations[args.method]
    platt = ((cal.params or {}).get("evidence") or {}).get("platt")

    t0 = time.time()
    bar = tqdm(total=len(docs), desc=f"rewriting with {REWRITE_MODEL}", unit="doc", file=sys.stderr)
    rewrites = generate_controls(docs, progress=lambda i, n: bar.update(i - bar.n))
    bar.close()
    rewrite_s = time.time() - t0
    by_orig = {c.id.removeprefix("control-"): c for c in rewrites}

    kb = prof.knowledge_base(load_corpus(bench_out / "target_kb.jsonl"))
    rag = RagSystem(kb, prof.rag_config())
    check = [d for d in docs if label[d.id] == 0][: args.check]
    todo = list(by_orig.values()) + check
    t0 = time.time()
    bar = tqdm(total=len(todo), desc=f"probing rewrites (+{len(check)} originals) with {args.method}",
               unit="doc", file=sys.stderr)
    results = {}
    for d in todo:
        results[d.id] = method.score(probe_document(method, d, rag, cfg.top_logprobs), cal)
        bar.update(1)
    bar.close()
    probe_s = time.time() - t0

    rew = {o: results[c.id].score for o, c in by_orig.items() if results[c.id].score is not None}
    ok = [d for d in rew if d in stored]
    mem = [d for d in ok if label[d] == 1]
    non = [d for d in ok if label[d] == 0]
    check_diff = [abs(results[d.id].score - stored[d.id]) for d in check if results[d.id].score is not None]
    # both are calibrated probabilities: the test weighs their log-odds as the audit weighs raw scores
    orig_lo = dict(zip(ok, log_odds([stored[d] for d in ok])))
    rew_lo = dict(zip(ok, log_odds([rew[d] for d in ok])))
    res = {
        "command": "python scripts/bench_generated_controls.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "bench_out": str(bench_out), "method": args.method, "rewrite_model": REWRITE_MODEL,
        "rewrite_seconds": rewrite_s, "probe_seconds": probe_s, "documents": len(docs), "rewrites": len(rewrites),
        "rewrites_scored": len(rew),
        "path_check": {"originals": len(check_diff), "max_abs_score_difference": max(check_diff, default=None)},
        "score_means": {
            "members": {"original": float(np.mean([stored[d] for d in mem])), "rewrite": float(np.mean([rew[d] for d in mem]))},
            "nonmembers": {"original": float(np.mean([stored[d] for d in non])),
                           "rewrite": float(np.mean([rew[d] for d in non]))}},
        "nonmembers_original_above_rewrite": float(np.mean([stored[d] > rew[d] for d in non])),
        "nonmembers_paired_wilcoxon_p": float(wilcoxon([stored[d] for d in non], [rew[d] for d in non]).pvalue),
        "collection": collections(orig_lo, rew_lo, mem, non, args.collections,
                                  LOG_ODDS if weights_kind(platt) == "likelihood ratio" else None),
        "collection_savage": collections(orig_lo, rew_lo, mem, non, args.collections, None),
        "scores": {d: {"label": label[d], "original": stored[d], "rewrite": rew[d]} for d in ok},
        "rewrite_texts": {o: c.text for o, c in by_orig.items()},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    c, cs, m = res["collection"], res["collection_savage"], res["score_means"]
    print("| run | rewrites scored | mean score members: original / rewrite | non-members: original / rewrite | "
          "non-members scoring above their rewrite (paired Wilcoxon p) | collection FPR, 20 non-members vs their "
          "rewrites: LR / Savage | power, 5 of 20 vs their rewrites: LR / Savage | path check (max difference, n) |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| {bench_out.name} | {len(rew)} / {len(docs)} | {m['members']['original']:.3f} / {m['members']['rewrite']:.3f} "
          f"| {m['nonmembers']['original']:.3f} / {m['nonmembers']['rewrite']:.3f} | "
          f"{res['nonmembers_original_above_rewrite']:.2f} (p = {res['nonmembers_paired_wilcoxon_p']:.3g}) | "
          f"{c['fpr_20_nonmembers_vs_their_rewrites']:.3f} / {cs['fpr_20_nonmembers_vs_their_rewrites']:.3f} | "
          f"{c['power_5_members_of_20_vs_their_rewrites']:.3f} / {cs['power_5_members_of_20_vs_their_rewrites']:.3f} | "
          f"{res['path_check']['max_abs_score_difference']} ({res['path_check']['originals']}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
