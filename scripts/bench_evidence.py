"""Evidence benchmark (issue 17): realised false-positive rates, the collection test, canaries.

    python scripts/bench_evidence.py --bench-out runs/bench-evidence            # (a) + (b) from stored scores
    python scripts/bench_evidence.py --bench-out runs/bench-evidence --canaries 100   # + (c), probes the shadow RAG

(a) Per-document decisions: on the benchmark's held-out test documents
    (``shadow.bench`` output: ``scores.jsonl``, scored with the calibration of
    this code), the realised FPR of every method at the requested 5% (and 1%,
    10% from the thresholds stored in each calibration), with the shadow's
    promised power and the realised TPR.
(b) The collection test (``top_weighted_test``, weighted by the primary method's
    shadow-estimated member odds), simulated from those stored per-document scores (no
    target query): >= 1,000 collections of 20 non-members against 20
    controls (FPR) and of 5 members + 15 non-members against 20 controls
    (power), on the primary method's score. Documents and controls are drawn
    without replacement from the held-out non-members when there are enough
    (35), with replacement otherwise (said in the output). With
    ``--pool shadow`` the pool is the method's out-of-fold shadow scores.
(c) Canaries: 2n canaries from a fixed benchmark seed, none of them in the
    target (the shadow RAG, which never saw them), probed with S-RAG through
    the real code. Reported: the shadow-calibrated per-canary FPR at 5% over
    all 2n, and the sibling-calibrated FPR (``sibling_calls``) and the
    collection test's rejection rate over 1,000 random published/sibling splits.

Writes a JSON of every number (``--out``) and, with ``--update-benchmarks-md``,
the evidence section of BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from audit_core.evidence.calibration import FPR_CHOICES, NOT_CLEARED, fpr_key  # noqa: E402
from audit_core.evidence.collection import LOG_ODDS, log_odds, top_weighted_test, weights_kind  # noqa: E402


def load_rows(bench_out: Path, defense: str = "none", profile: str | None = None) -> list[dict]:
    """One defense's rows of a benchmark folder; of one target profile where the folder holds several
    (``profile`` None: the first profile of the folder's rows, so two profiles' rows never mix)."""
    from shadow.bench.report import load_rows as bench_rows
    from shadow.bench.runner import _row_profile

    if not (bench_out / "scores.jsonl").exists():
        return []
    rows = bench_rows(bench_out)  # the last row of a key wins, as in the benchmark's own tables
    if profile is None and rows:
        profile = _row_profile(rows[0])
    return [r for r in rows if r.get("defense", "none") == defense and _row_profile(r) == profile]


def calibrations(cache: Path, bench_out: Path | None = None, profile: str | None = None) -> dict[str, dict]:
    """Each method's stored calibration under ``cache/shadow``: the one the benchmark run used, else the newest.

    A cache can hold several shadows of one method (the quick and the
    standard size, say); the run's results.json names the key it used
    (``key``), or, for runs from before it did, its threshold at 5%.
    """
    from shadow.bench.runner import shadow_entry

    used: dict = {}
    if bench_out is not None and (bench_out / "results.json").exists():
        used = json.loads((bench_out / "results.json").read_text()).get("shadow") or {}
    out: dict[str, tuple[tuple, dict]] = {}
    for f in (cache / "shadow").glob("*/calibration.json"):
        d = json.loads(f.read_text())
        if (d.get("params") or {}).get("evidence") is None:
            continue
        info = used.get(shadow_entry(profile, d["method"])) or {}
        match = (info.get("key") == f.parent.name if info.get("key") else
                 info.get("threshold") is not None and d.get("threshold") is not None
                 and abs(info["threshold"] - d["threshold"]) < 1e-12)
        rank = (bool(match), f.stat().st_mtime)
        if d["method"] not in out or rank > out[d["method"]][0]:
            out[d["method"]] = (rank, d)
    return {m: d for m, (_, d) in out.items()}


# --------------------------------------------------------------------------- (a)


def realised_fpr(rows: list[dict], cals: dict[str, dict]) -> dict[str, dict]:
    """Per method: realised FPR / TPR on the held-out test documents at each offered rate."""
    out = {}
    for method in sorted({r["method"] for r in rows}):
        rs = [r for r in rows if r["method"] == method]
        non = [r for r in rs if r["label"] == 0]
        mem = [r for r in rs if r["label"] == 1]
        cal = cals.get(method) or {}
        ev = (cal.get("params") or {}).get("evidence") or {}
        res = {"n_members": len(mem), "n_nonmembers": len(non), "shadow_auc": ev.get("auc"),
               "shadow_auc_ci": ev.get("auc_ci"), "decides": ev.get("signal"), "abstain_reason": ev.get("reason"),
               "at_fpr": {}}
        for fpr in FPR_CHOICES:
            at = (ev.get("at_fpr") or {}).get(fpr_key(fpr)) or {}
            t = at.get("threshold")
            if fpr == 0.05:  # the decisions the method itself made (its reason when it abstained)
                dn = [r["decision"] is True for r in non if _judged(r)]
                dm = [r["decision"] is True for r in mem if _judged(r)]
                res["not_found"] = {"members": sum(r["decision"] is False for r in mem),
                                    "nonmembers": sum(r["decision"] is False for r in non),
                                    "not_cleared_members": sum(_not_cleared(r) for r in mem),
                                    "not_cleared_nonmembers": sum(_not_cleared(r) for r in non)}
            elif t is not None and ev.get("signal"):
                dn = [r["score"] >= t for r in non if r["score"] is not None]
                dm = [r["score"] >= t for r in mem if r["score"] is not None]
            else:
                dn = dm = []
            res["at_fpr"][fpr_key(fpr)] = {
                "realised_fpr": float(np.mean(dn)) if dn else None, "decided_nonmembers": len(dn),
                "false_positives": int(sum(dn)),
                "realised_tpr": float(np.mean(dm)) if dm else None, "shadow_power": at.get("power"),
                "reason": at.get("reason") if t is None else None,
            }
        out[method] = res
    return out


def _not_cleared(row: dict) -> bool:
    """Under the member threshold but not low enough for "not found" (calibration point 4)."""
    return row["decision"] is None and (row.get("reason") or "").startswith(NOT_CLEARED)


def _judged(row: dict) -> bool:
    """The method had signal and set the document against its member threshold."""
    return row["decision"] is not None or _not_cleared(row)


def heldout_shadow_fpr(member_raw: list[float], nonmember_raw: list[float], fpr: float = 0.05,
                       reps: int = 1000, seed: int = 0) -> dict:
    """(a) without target scores: the threshold set on half of the out-of-fold shadow non-members,
    the FPR measured on the other half (and the TPR on the members), over random halvings."""
    from audit_core.evidence.calibration import conformal_threshold

    rng = np.random.default_rng(seed)
    m, n = np.asarray(member_raw, float), np.asarray(nonmember_raw, float)
    fprs, tprs = [], []
    for _ in range(reps):
        perm = rng.permutation(n)
        calib, test = perm[: len(n) // 2], perm[len(n) // 2:]
        t = conformal_threshold(calib, fpr)
        if t is None:
            return {"reason": f"{len(calib)} calibration non-members are too few for {fpr:.0%}"}
        fprs.append(float(np.mean(test >= t)))
        tprs.append(float(np.mean(m >= t)))
    return {"reps": reps, "fpr_requested": fpr, "calibration_nonmembers": len(n) // 2,
            "test_nonmembers": len(n) - len(n) // 2, "mean_fpr": float(np.mean(fprs)),
            "fpr_q05_q95": [float(np.quantile(fprs, 0.05)), float(np.quantile(fprs, 0.95))],
            "mean_tpr": float(np.mean(tprs))}


def control_calibrated_fpr(rows: list[dict], n_controls: int = 20, splits: int = 1000, fpr: float = 0.05,
                           seed: int = 0) -> dict[str, dict]:
    """(a, controls) Per method: each held-out document called against ``n_controls`` held-out non-members.

    What an owner with never-published controls gets (``audit.collection_summary``'s
    ``document_p_values``): a document is a member when its conformal p-value
    against the controls is at most ``fpr``. Each split draws the controls from
    the target's held-out non-members and tests the others and every member;
    the realised FPR is over the tested non-members, averaged over splits.
    """
    from audit_core.evidence.canaries import sibling_calls

    rng = np.random.default_rng(seed)
    out = {}
    for method in sorted({r["method"] for r in rows}):
        rs = [r for r in rows if r["method"] == method and r["score"] is not None]
        non = np.asarray([r["score"] for r in rs if r["label"] == 0], float)
        mem = [r["score"] for r in rs if r["label"] == 1]
        if len(non) <= n_controls:
            out[method] = {"reason": f"{len(non)} scored non-members: too few for {n_controls} controls and a test"}
            continue
        fprs, tprs = [], []
        for _ in range(splits):
            perm = rng.permutation(non)
            ctl, test = perm[:n_controls], perm[n_controls:]
            fprs.append(float(np.mean([c for _, c in sibling_calls(test.tolist(), ctl.tolist(), fpr)])))
            tprs.append(float(np.mean([c for _, c in sibling_calls(mem, ctl.tolist(), fpr)])) if mem else float("nan"))
        out[method] = {"splits": splits, "controls": n_controls, "tested_nonmembers": len(non) - n_controls,
                       "members": len(mem), "fpr_requested": fpr, "mean_fpr": float(np.mean(fprs)),
                       "fpr_q05_q95": [float(np.quantile(fprs, 0.05)), float(np.quantile(fprs, 0.95))],
                       "mean_tpr": float(np.nanmean(tprs)) if mem else None}
    return out


def control_led_verdicts(rows: list[dict], lead: str, n_controls: int = 20, splits: int = 1000, fpr: float = 0.05,
                         seed: int = 0) -> dict:
    """(a, verdicts) Whole verdicts with and without rule R0 (``verdict.decide_with_controls``).

    ``rows`` hold every method's stored result for the same held-out documents
    (one benchmark draw; several runs of it may be merged). Each split takes
    ``n_controls`` non-members as the owner's declared controls, calls every
    other document against them with ``lead`` (the collection test's method),
    and decides each one as the audit does, once with R0 and once with the
    shadow's calls alone. Reported: the share of tested non-members and of
    members whose verdict is "member", and of members called "not found".
    """
    from audit_core.evidence.canaries import document_calls
    from audit_core.verdict import MEMBER, NOT_FOUND, VerdictConfig, decide, decide_with_controls
    from shadow.bench.report import row_result

    # as an owner who knows the target retrieves with queries as sent, the only case where a "not found"
    # stands (verdict rule R5): what is measured is how often the rules would clear a member
    vc = VerdictConfig(retrieval_as_sent=True)

    docs: dict[str, dict[str, dict]] = {}
    for r in rows:
        docs.setdefault(r["doc_id"], {})[r["method"]] = r
    scored = {d: ms for d, ms in docs.items() if (ms.get(lead) or {}).get("score") is not None}
    non = sorted(d for d, ms in scored.items() if ms[lead]["label"] == 0)
    mem = sorted(d for d, ms in scored.items() if ms[lead]["label"] == 1)
    if len(non) <= n_controls or not mem:
        return {"reason": f"{len(non)} scored non-members and {len(mem)} members of {lead}: too few"}
    rng = np.random.default_rng(seed)
    tally = {k: {"nonmember_member": [], "member_member": [], "member_not_found": []} for k in ("r0", "shadow")}
    for _ in range(splits):
        perm = list(rng.permutation(non))
        ctl, tested = perm[:n_controls], perm[n_controls:] + mem
        ctl_scores = [scored[c][lead]["score"] for c in ctl]
        # the collection block as audit.collection_summary writes it
        coll = {"method": lead, "controls_kind": "declared", "control_scores": dict(zip(ctl, ctl_scores))} | \
            document_calls(tested, [scored[d][lead]["score"] for d in tested], ctl_scores, fpr)
        got = {"r0": [], "shadow": []}
        for d in tested:
            results = [row_result(r, fpr=fpr) for r in scored[d].values()]
            got["r0"].append(decide_with_controls(d, results, coll, vc).verdict)
            got["shadow"].append(decide(d, results, vc).verdict)
        label = [scored[d][lead]["label"] for d in tested]
        for k, verdicts in got.items():
            t = tally[k]
            t["nonmember_member"].append(np.mean([v == MEMBER for v, y in zip(verdicts, label) if y == 0]))
            t["member_member"].append(np.mean([v == MEMBER for v, y in zip(verdicts, label) if y == 1]))
            t["member_not_found"].append(np.mean([v == NOT_FOUND for v, y in zip(verdicts, label) if y == 1]))
    return {"lead": lead, "methods": sorted({m for ms in scored.values() for m in ms}), "splits": splits,
            "controls": n_controls, "tested_nonmembers": len(non) - n_controls, "members": len(mem),
            "fpr_requested": fpr,
            **{k: {q: float(np.mean(v)) for q, v in t.items()} for k, t in tally.items()}}


# --------------------------------------------------------------------------- (b)


def simulate_collections(members: list[float], nonmembers: list[float], n_sim: int, seed: int = 0,
                         n_docs: int = 20, n_members: int = 5, n_controls: int = 20, alpha: float = 0.05,
                         platt: dict | None = None) -> dict:
    rng = np.random.default_rng(seed)
    m, n = np.asarray(members, float), np.asarray(nonmembers, float)
    need = n_docs - n_members + n_controls
    # the null collections draw n_docs + n_controls non-members, the member ones ``need``
    replace = len(n) < n_docs + n_controls or len(m) < n_members
    fp = tp = 0
    for i in range(n_sim):
        if replace:
            docs0, ctl0 = rng.choice(n, n_docs), rng.choice(n, n_controls)
            docs1 = np.r_[rng.choice(m, n_members), rng.choice(n, n_docs - n_members)]
            ctl1 = rng.choice(n, n_controls)
        else:
            perm = rng.permutation(n)
            docs0, ctl0 = perm[:n_docs], perm[n_docs:n_docs + n_controls]
            perm = rng.permutation(n)
            docs1 = np.r_[rng.permutation(m)[:n_members], perm[:n_docs - n_members]]
            ctl1 = perm[n_docs - n_members:need]
        fp += top_weighted_test(docs0, ctl0, seed=i, platt=platt)[1] <= alpha
        tp += top_weighted_test(docs1, ctl1, seed=i, platt=platt)[1] <= alpha
    return {"n_collections": n_sim, "n_controls": n_controls, "fpr": fp / n_sim, "power_5_of_20": tp / n_sim,
            "pool_members": len(m), "pool_nonmembers": len(n),
            "weights": weights_kind(platt),
            "draws": "with replacement (pool too small)" if replace else "without replacement"}


def oracle_log_lr(members: list[float], nonmembers: list[float]) -> tuple[list[float], list[float]]:
    """Each score's log-likelihood ratio member / non-member read off the draw's OWN labels: an upper bound.

    An isotonic fit of the label on the raw score over the pooled draw (members
    and non-members in equal numbers, so its odds are the likelihood ratio),
    clipped half a document from 0 and 1. Weighted with ``LOG_ODDS`` this gives
    the collection test the statistic that is most powerful against a
    quarter-member collection if the draw's own distributions were the truth.
    No audit can have it (it uses the labels it would have to find), and it is
    fitted on the documents it is then tested on, so its power is optimistic:
    where even it stays under a target, no statistic of these scores reaches it.
    """
    from scipy.special import logit
    from sklearn.isotonic import IsotonicRegression

    m, n = np.asarray(members, float), np.asarray(nonmembers, float)
    k = min(len(m), len(n))  # a balanced pool: prior odds 1
    rng = np.random.default_rng(0)
    x = np.r_[rng.permutation(m)[:k], rng.permutation(n)[:k]]
    y = np.r_[np.ones(k), np.zeros(k)]
    eps = 0.5 / (k + 1)
    iso = IsotonicRegression(y_min=eps, y_max=1 - eps, out_of_bounds="clip").fit(x, y)
    return [float(v) for v in logit(iso.predict(m))], [float(v) for v in logit(iso.predict(n))]


# --------------------------------------------------------------------------- (c)


def canary_experiment(n: int, shadow_size: int, n_splits: int, fpr: float = 0.05) -> dict:
    """Probe 2n never-published canaries on the shadow RAG with S-RAG; FPRs by shadow and by siblings."""
    import hashlib
    import random

    from audit_core.evidence.canaries import CanaryKit, sibling_calls
    from audit_core.evidence.calibration import with_fpr
    from audit_core.evidence.collection import raw_score
    from audit_core.methods.srag import SragMethod
    from shadow.corpus import split_members
    from shadow.prepare import ShadowConfig, build_shadow_rag, prepare_shadow

    kit = CanaryKit(hashlib.sha256(b"rpa evidence benchmark canaries").hexdigest()[:32], n)
    canaries = kit.published() + kit.siblings()
    cfg = ShadowConfig(n_members=shadow_size, n_nonmembers=shadow_size, n_per_class_generative=15)
    from shadow.bench.runner import TqdmProgress

    method = SragMethod()
    progress = TqdmProgress()
    cal = with_fpr(prepare_shadow([method], cfg, progress).calibrations["srag"], fpr)
    docs = cfg.corpus_docs()
    half = len(docs) // 2
    kb, _ = split_members(docs, half, len(docs) - half, cfg.seed)
    rag = build_shadow_rag(cfg, kb)
    t0 = time.time()
    stage, done = "probing the canaries (S-RAG)", [0]

    def tick(k: int) -> None:
        done[0] += k
        progress(stage, done[0], len(canaries))

    progress(stage, 0, len(canaries))
    obs = method.probe_many(canaries, rag, progress=tick, top_logprobs=cfg.top_logprobs)
    results = [method.score(o, cal) for o in obs]
    platt = ((cal.params or {}).get("evidence") or {}).get("platt")
    probe_s = time.time() - t0
    scores = [raw_score(r) for r in results]
    decided = [r.decision for r in results if r.decision is not None]
    rnd = random.Random(0)
    idx = list(range(len(canaries)))
    rates, rejections = [], 0
    for s in range(n_splits):
        rnd.shuffle(idx)
        pub, sib = [scores[i] for i in idx[:n]], [scores[i] for i in idx[n:]]
        calls = sibling_calls(pub, sib, fpr)
        rates.append(float(np.mean([bool(c) for _, c in calls if c is not None])) if calls else float("nan"))
        pub_ok = [x for x in pub if x is not None]
        sib_ok = [x for x in sib if x is not None]
        rejections += top_weighted_test(pub_ok, sib_ok, seed=s, platt=platt)[1] <= 0.05
    finite = [x for x in scores if x is not None]
    return {
        "n_canaries": len(canaries), "probe_seconds": probe_s,
        # ties show whether "no canary called" is a decision or the absence of any reading
        "scores": {"n": len(finite), "distinct": len(set(round(x, 9) for x in finite)),
                   "min": min(finite, default=None), "max": max(finite, default=None),
                   "shadow_threshold": cal.threshold},
        "shadow_calibrated": {"fpr_requested": fpr, "decided": len(decided),
                              "false_positives": int(sum(decided)),
                              "realised_fpr": float(np.mean(decided)) if decided else None,
                              "abstained": sum(r.decision is None for r in results),
                              "reasons": sorted({r.reason for r in results if r.reason})[:3]},
        "sibling_calibrated": {"splits": n_splits, "canaries_per_split": n,
                               "mean_fpr": float(np.nanmean(rates)), "max_fpr": float(np.nanmax(rates)),
                               "collection_test_rejection_rate": rejections / n_splits},
    }


# --------------------------------------------------------------------------- output


def _resampled_fpr_table(intro: str, sizes_header: str, draws: str, results: dict, sizes) -> list[str]:
    """A Markdown table of realised FPR and TPR over resamplings, one row per method (its reason if none)."""
    lines = [intro, "", f"| method | {sizes_header} | requested FPR | mean realised FPR [5%, 95% of {draws}] | "
             "mean TPR |", "|---|---|---|---|---|"]
    for m, r in results.items():
        if "reason" in r:
            lines.append(f"| {m} | - | 5% | n/a ({r['reason']}) | n/a |")
            continue
        q = r["fpr_q05_q95"]
        tpr = "n/a" if r.get("mean_tpr") is None else f"{r['mean_tpr']:.2f}"
        lines.append(f"| {m} | {sizes(r)} | 5% | {r['mean_fpr']:.3f} [{q[0]:.2f}, {q[1]:.2f}] | {tpr} |")
    return lines + [""]


def markdown(res: dict) -> str:
    lines = [f"Command: `{res['command']}`  ", f"Date: {res['date']}; machine: {res['machine']}  ", ""]
    a = res.get("a") or {}
    if a:
        lines += ["**(a) Per-document decisions on the benchmark's held-out test documents** "
                  f"({res.get('bench_note', '')})", "",
                  "| method | shadow AUC (out of fold) [95% CI] | decides | requested FPR | realised FPR (FP / decided non-members) | shadow power | realised TPR |",
                  "|---|---|---|---|---|---|---|"]
        for m, r in a.items():
            ci = r.get("shadow_auc_ci")
            auc = "n/a" if r["shadow_auc"] is None else f"{r['shadow_auc']:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
            for k, at in r["at_fpr"].items():
                rf = "n/a" if at["realised_fpr"] is None else f"{at['realised_fpr']:.3f} ({at['false_positives']} / {at['decided_nonmembers']})"
                pw = "n/a" if at["shadow_power"] is None else f"{at['shadow_power']:.2f}"
                tp = "n/a" if at["realised_tpr"] is None else f"{at['realised_tpr']:.2f}"
                dec = "yes" if r["decides"] else f"no ({(r.get('abstain_reason') or at.get('reason') or '')[:60]})"
                lines.append(f"| {m} | {auc} | {dec} | {float(k):.0%} | {rf} | {pw} | {tp} |")
        lines.append("")
    a_c = res.get("a_controls") or {}
    if a_c:
        lines += _resampled_fpr_table(
            "**(a, controls) Each held-out document against controls**: M held-out non-members drawn as the "
            "owner's never-published controls, every other document called a member where its p-value against "
            "them is at most 5% (what the audit reports per document when controls are given), over random draws "
            "of the controls:", "controls + tested non-members", "draws", a_c,
            lambda r: f"{r['controls']} + {r['tested_nonmembers']}")
    a_v = res.get("a_verdicts") or {}
    if a_v.get("lead"):
        lines += [f"**(a, verdicts) Whole verdicts with rule R0** ({', '.join(a_v['methods'])}; {a_v['lead']}'s "
                  f"call against {a_v['controls']} held-out non-members as declared controls leads; "
                  f"{a_v['tested_nonmembers']} tested non-members and {a_v['members']} members per draw, "
                  f"{a_v['splits']:,} draws of the controls; requested rate {a_v['fpr_requested']:.0%}):", "",
                  "| verdicts from | non-members called member | members called member | members called not found |",
                  "|---|---|---|---|"]
        for k, name in (("shadow", "the shadow's calls alone (no controls)"), ("r0", "R0: the controls' call leads")):
            t = a_v[k]
            lines.append(f"| {name} | {t['nonmember_member']:.3f} | {t['member_member']:.3f} | "
                         f"{t['member_not_found']:.3f} |")
        lines.append("")
    a_sh = res.get("a_shadow") or {}
    if a_sh:
        lines += _resampled_fpr_table(
            "**(a, shadow) Held-out shadow documents**: the 5% threshold set on a random half of a method's "
            "out-of-fold shadow non-members, the false-positive rate measured on the other half, 1,000 halvings "
            "(this checks the calibration, not the shift from shadow to target):",
            "non-members (calibration + test)", "halvings", a_sh,
            lambda r: f"{r['calibration_nonmembers']} + {r['test_nonmembers']}")
    b = res.get("b")
    if b:
        how = {"likelihood ratio": "log-likelihood-ratio (member odds from the shadow)",
               "oracle": "log-likelihood-ratio (odds read off the draw's own labels: an upper bound, not a method)",
               }.get(b.get("weights"), "Savage-score")
        lines += [f"**(b) Collection test** (one-sided {how} permutation test on {b['method']}'s score, {b['pool']}; "
                  f"{b['draws']}; pool {b['pool_members']} members, {b['pool_nonmembers']} non-members): "
                  f"false-positive rate over {b['n_collections']:,} collections of 20 non-members against "
                  f"{b.get('n_controls', 20)} controls **{b['fpr']:.3f}**; power for 20 documents of which 5 members "
                  f"against {b.get('n_controls', 20)} controls **{b['power_5_of_20']:.3f}**.", ""]
    if res.get("b_controls"):
        lines += ["| controls M | draws | FPR (20 non-members against M) | power (5 members of 20 against M) |",
                  "|---|---|---|---|"]
        lines += [f"| {m} | {r['draws']} | {r['fpr']:.3f} | {r['power_5_of_20']:.3f} |"
                  for m, r in res["b_controls"].items()]
        lines.append("")
    c = res.get("c")
    if c:
        sc, sb = c["shadow_calibrated"], c["sibling_calibrated"]
        rf = "n/a" if sc["realised_fpr"] is None else f"{sc['realised_fpr']:.3f} ({sc['false_positives']} / {sc['decided']})"
        lines += [f"**(c) Canaries** ({c['n_canaries']} never-published canaries on the shadow RAG, S-RAG, "
                  f"{c['probe_seconds'] / 60:.1f} min of probing): S-RAG's shadow-calibrated calls at 5%: "
                  f"realised FPR {rf}; calls against never-published siblings at 5% over "
                  f"{sb['splits']:,} random published/sibling splits: mean FPR **{sb['mean_fpr']:.3f}** "
                  f"(max {sb['max_fpr']:.3f} in one split); the collection test rejected at p <= 0.05 in "
                  f"{sb['collection_test_rejection_rate']:.3f} of the splits.", ""]
    return "\n".join(lines)


def update_benchmarks_md(text: str, path: Path = ROOT / "BENCHMARKS.md") -> None:
    start, end = "<!-- evidence:start -->", "<!-- evidence:end -->"
    md = path.read_text()
    block = f"{start}\n{text}\n{end}"
    if start in md and end in md:
        md = md[: md.index(start)] + block + md[md.index(end) + len(end):]
    else:
        md = md.rstrip() + "\n\n## Evidence: false-positive control, collection test, canaries (issue 17)\n\n" + block + "\n"
    path.write_text(md)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench-out", default=str(ROOT / "runs" / "bench-evidence"), help="a shadow.bench output folder")
    ap.add_argument("--cache", help="RPA_CACHE_DIR the benchmark used (default: this process's)")
    ap.add_argument("--primary", default="srag", help="method whose score the collection test uses")
    ap.add_argument("--pool", choices=["target", "shadow"], default="target",
                    help="(b) from the target's held-out scores, or the primary's out-of-fold shadow scores")
    ap.add_argument("--defense", default="none", help="which defense's rows of the benchmark to read")
    ap.add_argument("--profile", help="which target profile's rows to read (default: the folder's first)")
    ap.add_argument("--collections", type=int, default=1000)
    ap.add_argument("--controls", default="20",
                    help="(b): controls per collection, comma-separated (e.g. 20,30,40,60: power against M)")
    ap.add_argument("--weights", choices=["lr", "savage", "oracle"], default="lr",
                    help="(b): the test's statistic: the shadow's likelihood ratio (as the audit uses), Savage "
                         "ranks (the statistic before session 14, for comparison), or an upper bound no audit can "
                         "use: the likelihood ratio read off the draw's own labels (oracle_log_lr; --pool target)")
    ap.add_argument("--canaries", type=int, default=0, help="(c): n published-role + n siblings (0: skip)")
    ap.add_argument("--canary-shadow-size", type=int, default=40, help="shadow per class for S-RAG in (c)")
    ap.add_argument("--splits", type=int, default=1000)
    ap.add_argument("--verdict-runs", help="(a, verdicts): comma-separated shadow.bench folders of one draw (e.g. "
                                          "one per method); whole verdicts with and without rule R0, "
                                          "--primary leading")
    ap.add_argument("--out", default=str(ROOT / "runs" / "bench-evidence.json"))
    ap.add_argument("--update-benchmarks-md", action="store_true")
    args = ap.parse_args(argv)
    if args.weights == "oracle" and args.pool != "target":
        ap.error("--weights oracle reads the labels of the target's held-out rows: use it with --pool target")

    import os

    if args.cache:
        os.environ["RPA_CACHE_DIR"] = args.cache
    from audit_core.models import cache_dir

    res: dict = {"command": "python scripts/bench_evidence.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                 "date": _dt.date.today().isoformat(),
                 "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"}
    rows = load_rows(Path(args.bench_out), args.defense, args.profile)
    cals = calibrations(cache_dir(), Path(args.bench_out), args.profile)
    if rows:
        res["a"] = realised_fpr(rows, cals)
        res["a_controls"] = control_calibrated_fpr(rows, int(args.controls.split(",")[0]), args.splits)
        res["bench_note"] = f"{args.bench_out}, {len(rows)} rows"
    if args.verdict_runs:
        merged = [r for d in args.verdict_runs.split(",") for r in load_rows(Path(d), args.defense, args.profile)]
        res["a_verdicts"] = control_led_verdicts(merged, args.primary, int(args.controls.split(",")[0]), args.splits)
    res["a_shadow"] = {m: heldout_shadow_fpr(c["params"]["evidence"]["member_raw"],
                                             c["params"]["evidence"]["nonmember_raw"])
                       for m, c in cals.items() if c["params"]["evidence"]["nonmember_raw"]}
    b_pool, platt = None, None
    if args.pool == "target" and rows:
        prim = [r for r in rows if r["method"] == args.primary and r["score"] is not None]
        b_pool = ([r["score"] for r in prim if r["label"] == 1], [r["score"] for r in prim if r["label"] == 0],
                  "the target's held-out test documents")
        fit = ((cals.get(args.primary) or {}).get("params") or {}).get("evidence", {}).get("platt")
        if weights_kind(fit) == "likelihood ratio":
            b_pool = (log_odds(b_pool[0]), log_odds(b_pool[1]), b_pool[2])  # stored calibrated probabilities
            platt = LOG_ODDS
    elif args.primary in cals:
        ev = cals[args.primary]["params"]["evidence"]
        b_pool = (ev["member_raw"], ev["nonmember_raw"], "the shadow's out-of-fold scores (not the target's)")
        platt = ev.get("platt")
    if args.weights == "savage":
        platt = None
    elif args.weights == "oracle" and b_pool:
        from shadow.bench.report import ranking_score

        prim = [r for r in rows if r["method"] == args.primary and ranking_score(r) is not None]
        b_pool = (*oracle_log_lr([ranking_score(r) for r in prim if r["label"] == 1],
                                 [ranking_score(r) for r in prim if r["label"] == 0]),
                  b_pool[2] + ", weighted by the likelihood ratio of the draw's own labels (an upper bound)")
        platt = LOG_ODDS
    if b_pool and b_pool[0] and len(b_pool[1]) >= 2:
        t0 = time.time()
        counts = [int(x) for x in args.controls.split(",") if x]
        res["b"] = simulate_collections(b_pool[0], b_pool[1], args.collections, n_controls=counts[0],
                                        platt=platt) | {
            "method": args.primary, "pool": b_pool[2], "seconds": time.time() - t0}
        if len(counts) > 1:
            res["b_controls"] = {str(m): simulate_collections(b_pool[0], b_pool[1], args.collections, n_controls=m,
                                                              platt=platt) for m in counts}
        if args.weights == "oracle":
            for b in [res["b"], *res.get("b_controls", {}).values()]:
                b["weights"] = "oracle"
    if args.canaries:
        res["c"] = canary_experiment(args.canaries, args.canary_shadow_size, args.splits)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1, default=str))
    text = markdown(res)
    print(text)
    if args.update_benchmarks_md:
        update_benchmarks_md(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
