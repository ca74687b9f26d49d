"""Benchmark outputs: per-row metrics, the combined verdict, tables (the membership
benchmark's and the target zoo's), ROC plots, results.json and BENCHMARKS.md sections."""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

import numpy as np

from audit_core.methods import LABELS
from audit_core.methods.base import MethodResult
from audit_core.verdict import VerdictConfig, decide
from shadow.bench.runner import ALL_DEFENSES, ALL_METHODS, BENIGN_FILE, BenchConfig, _row_profile, read_benign

ROOT = Path(__file__).resolve().parents[2]
#: bump when the layout of results.json changes (2: rows carry their target profile)
SCHEMA_VERSION = 2
#: BENCHMARKS.md section (between <!-- NAME:start --> and <!-- NAME:end -->) per mode
SECTIONS = {"full": "membership benchmark", "quick": "quick membership benchmark", "zoo": "target zoo"}

# --------------------------------------------------------------------------- metrics and outputs


def load_rows(out: Path) -> list[dict]:
    rows = {}
    for line in (out / "scores.jsonl").read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            rows[(_row_profile(r), r["defense"], r["method"], r["doc_id"])] = r  # the latest row wins
    return list(rows.values())


#: per-document costs a combined row adds up over the methods it combines
COST_KEYS = ("queries", "prompt_tokens", "completion_tokens", "auditor_cpu_s")


def row_result(row: dict, **evidence) -> MethodResult:
    """A stored row as the method result the verdict rules read (its kept evidence, plus ``evidence``)."""
    return MethodResult(row["method"], row["doc_id"], row["score"], row["decision"], row.get("reason"),
                        {**(row.get("evidence") or {}), **evidence})


def ranking_score(row: dict) -> float | None:
    """What a row is ranked by for its AUC, ROC and TPR: a method's own raw score where the row kept it.

    A method's raw score is its ranking; the calibrated probability beside it is
    only as monotone as the shadow's fit, which before session 44 could run the
    other way and so turn a method's AUC into one minus it (``fit_platt``).
    The combined verdict's score is its own. Rows of earlier runs kept no raw
    score and are ranked by their probability, as they were.
    """
    if row.get("score") is None:
        return None
    if row["method"] == "combined":
        return row["score"]
    return (row.get("evidence") or {}).get("raw_score", row["score"])


#: what every generated table says about its columns (a review of the benchmark, session 51)
TABLE_NOTES = (
    "Where documents are left out of a score metric, the members + non-members cell adds how many of each "
    "were scored, and *AUC, unscored last* ranks every document, those without a score tied below all "
    "others: whether a document gets a score can depend on whether it is a member. TPR@1%FPR allows "
    "floor(0.01 x n0) false positives among n0 scored non-members: below 100 non-members it is the TPR at "
    "zero false positives (and so is TPR@0.1%FPR), read off the single highest-scoring non-member. "
    "Accuracy, precision, recall and F1 are over decided documents only (a \"not cleared\" member is in "
    "none of them). The combined verdict reads every method the run ran, and its queries, tokens and CPU "
    "are theirs together."
)


def combined_rows(rows: list[dict]) -> list[dict]:
    """The product's verdict over the methods this run ran, as one more method.

    The verdict rules read every method's result (S-RAG primary, MBA second
    opinion, and any member call of another method stands against a "not
    found", rule R4), so the row is the verdict an owner who selected the same
    methods would get, and its cost is the sum over all of them. A run with
    baselines beside S-RAG and MBA therefore reports another combined row than
    one with S-RAG and MBA alone (before session 51 the cost counted only the
    primary and the second opinion, while the baselines' calls still moved
    verdicts). Its score, for the AUC, is the
    verdict's; where the verdict has none (nobody decided, e.g. every method
    "not cleared"), the score of the first method in voting order that scored
    the document, so that the AUC is not taken over the decided documents
    alone. Like the method rows beside it, it keeps "not found" calls: the
    verdict of an owner who knows the target retrieves with queries as sent.
    Without that knowledge the product withholds them (rule R5), which would
    leave the row's accuracy, recall and F1 over member calls alone
    (BENCHMARKS.md, session 26).
    """
    vc = VerdictConfig(retrieval_as_sent=True)
    order = vc.order()
    by: dict[tuple[str, str, str], list[dict]] = {}
    for r in rows:
        by.setdefault((_row_profile(r), r["defense"], r["doc_id"]), []).append(r)
    out = []
    for (profile, defense, doc_id), rs in by.items():
        results = [row_result(r) for r in rs]
        v = decide(doc_id, results, vc)
        decision = None if v.verdict == "inconclusive" else v.verdict == "member"
        costs = {k: sum(r[k] for r in rs if r.get(k) is not None) for k in COST_KEYS}  # every method feeds it
        score = v.score
        if score is None:
            scored = {r["method"]: r["score"] for r in rs if r["score"] is not None}
            score = next((scored[m] for m in order if m in scored), None)
        out.append({"profile": profile, "defense": defense, "method": "combined", "doc_id": doc_id, "label": rs[0]["label"],
                    "score": score, "decision": decision, "reason": v.reason} | costs)
    return out


def compute_metrics(rows: list[dict], n_boot: int = 1000) -> dict:
    """defense -> method -> metrics over the rows of one profile (rows of a method that
    cannot run on the profile carry no score and are left out: ``cannot_run_reasons``)."""
    from audit_core.metrics import summarize

    rows = [r for r in rows if not r.get("cannot_run")]
    rows = rows + combined_rows(rows)
    table: dict[str, dict[str, dict]] = {}
    for defense in sorted({r["defense"] for r in rows}, key=lambda d: ALL_DEFENSES.index(d) if d in ALL_DEFENSES else 99):
        for method in [m for m in ALL_METHODS + ["combined"] if any(r["method"] == m for r in rows)]:
            rs = [r for r in rows if r["defense"] == defense and r["method"] == method]
            if not rs:
                continue
            labels = [r["label"] for r in rs]
            scores = [ranking_score(r) for r in rs]
            decisions = [r["decision"] for r in rs]
            s = summarize(labels, scores, decisions, n_boot=n_boot)
            hits = [r["retrieval_hit"] for r in rs if r.get("label") == 1 and r.get("retrieval_hit") is not None]
            s["retrieval_recall_members"] = sum(hits) / len(hits) if hits else None
            for k in COST_KEYS:
                vals = [r[k] for r in rs if r.get(k) is not None]
                s[f"{k}_per_doc"] = sum(vals) / len(vals) if vals else None
            table.setdefault(defense, {})[method] = s
    return table


def _fmt(s: dict, key: str) -> str:
    v = s.get(key)
    ci = s.get(f"{key}_ci")
    if v is None:
        return "n/a"
    if ci and ci[0] is not None:
        return f"{v:.3f} [{ci[0]:.2f}, {ci[1]:.2f}]"
    return f"{v:.3f}"


def _members_cell(s: dict) -> str:
    """ "50 + 50", or "50 + 50 (scored 29 + 26)" where documents without a score were left out."""
    n1, n0 = s.get("n_members", 0), s.get("n_nonmembers", 0)
    s1, s0 = s.get("n_scored_members", n1), s.get("n_scored_nonmembers", n0)
    return f"{n1} + {n0}" if (s1, s0) == (n1, n0) else f"{n1} + {n0} (scored {s1} + {s0})"


def _inconclusive(s: dict) -> str:
    """Documents without a score / without a decision: they differ for the combined
    verdict, which has a score but no decision where its two methods disagree."""
    n_s, n_d = s.get("n_inconclusive_scores", 0), s.get("n_inconclusive_decisions", 0)
    return str(n_s) if n_s == n_d else f"{n_s} / {n_d}"


def benign_cell(benign: dict | None, defense: str) -> str:
    """The defense's false-positive rate on honest questions, for a row under Mirabel ("-" otherwise)."""
    if defense != "mirabel":
        return "-"
    if not benign or benign.get("rate") is None:
        return "not measured" if not benign else f"n/a ({benign.get('reason')})"
    return f"{benign['rate']:.3f} ({benign['flagged']} / {benign['total']})"


def first_profile_benign(results: dict) -> dict | None:
    """Mirabel's benign rate for the profile the membership table shows (the run's first)."""
    first = ((results.get("config") or {}).get("profiles") or ["completion"])[0]
    return (results.get("benign_fpr") or {}).get(first)


def markdown_table(metrics: dict, benign: dict | None = None) -> str:
    """The membership table; ``benign``: Mirabel's rate on honest questions (``runner.benign_fpr``)."""
    from audit_core.metrics import fpr_key

    k1, k01 = fpr_key(0.01), fpr_key(0.001)
    show_benign = "mirabel" in metrics
    lines = ["| defense | method | members + non-members | AUC | AUC, unscored last | accuracy | precision | recall | F1 | TPR@1%FPR | TPR@0.1%FPR | inconclusive | member retrieval recall | queries/doc | tokens/doc | auditor CPU s/doc |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    if show_benign:
        lines = [lines[0] + " defense's benign FPR |", lines[1] + "---|"]
    for defense, ms in metrics.items():
        for method, s in ms.items():
            toks = (s.get("prompt_tokens_per_doc") or 0) + (s.get("completion_tokens_per_doc") or 0)
            rr = s.get("retrieval_recall_members")
            lines.append(
                f"| {defense} | {LABELS.get(method, method)} | {_members_cell(s)} | "
                f"{_fmt(s, 'auc')} | {_fmt(s, 'auc_all')} | {_fmt(s, 'accuracy')} | {_fmt(s, 'precision')} | {_fmt(s, 'recall')} | "
                f"{_fmt(s, 'f1')} | {_fmt(s, k1)} | {_fmt(s, k01)} | {_inconclusive(s)} | "
                f"{'n/a' if rr is None else f'{rr:.2f}'} | {s.get('queries_per_doc') or 0:.1f} | {toks:.0f} | "
                f"{s.get('auditor_cpu_s_per_doc') or 0:.2f} |" + (f" {benign_cell(benign, defense)} |" if show_benign else "")
            )
    return "\n".join(lines)


def method_rows(run: Path, method: str, profile: str, defense: str) -> tuple[list[dict], dict]:
    """A finished run's rows of one method (or of the combined verdict, derived as the tables derive it)
    on one profile under one defense, and the run's configuration; no such row is an error."""
    res = json.loads((run / "results.json").read_text()) if (run / "results.json").exists() else {}
    rows = load_rows(run)
    if method == "combined":
        rows = combined_rows([r for r in rows if not r.get("cannot_run")])
    rows = [r for r in rows if _row_profile(r) == profile and r["defense"] == defense and r["method"] == method]
    if not rows:
        raise ValueError(f"{run} has no {method} rows for profile {profile} under defense {defense}")
    return rows, res.get("config") or {}


def paired_comparison(a: tuple[Path, str], b: tuple[Path, str], profile: str = "completion",
                       defense: str = "none", n_boot: int = 1000) -> dict:
    """AUC of two methods on the same documents and the paired bootstrap interval of their difference.

    ``a`` and ``b`` are (run directory, method); the two runs must hold the same
    draw (the same documents with the same labels; two methods of one run, or
    two runs with one seed). Why paired: two methods measured on one draw
    share the draw's luck, so their separate intervals overlap where the paired
    difference does not (``metrics.bootstrap_auc_difference_ci``). Documents
    without a score under either method are left out and counted.
    """
    from audit_core.metrics import bootstrap_auc_difference_ci, roc_auc

    def scored(run: Path, method: str) -> tuple[dict[str, tuple[int, float | None]], int | None]:
        rows, cfg = method_rows(run, method, profile, defense)
        return {r["doc_id"]: (int(r["label"]), ranking_score(r)) for r in rows}, cfg.get("seed")

    (ra, ma), (rb, mb) = (Path(a[0]), a[1]), (Path(b[0]), b[1])
    sa, seed_a = scored(ra, ma)
    sb, seed_b = scored(rb, mb)
    if seed_a != seed_b:
        raise ValueError(f"not the same draw: {ra} has seed {seed_a}, {rb} seed {seed_b}")
    shared = sorted(set(sa) & set(sb))
    if any(sa[d][0] != sb[d][0] for d in shared):
        raise ValueError("not the same draw: a document is a member in one run and not in the other")
    both = [d for d in shared if sa[d][1] is not None and sb[d][1] is not None]
    y = [sa[d][0] for d in both]
    if len(set(y)) < 2:
        raise ValueError(f"the two runs share {len(both)} scored documents, not members and non-members both")
    xa, xb = [float(sa[d][1]) for d in both], [float(sb[d][1]) for d in both]
    lo, hi = bootstrap_auc_difference_ci(y, xa, xb, n=n_boot)
    auc_a, auc_b = roc_auc(y, xa), roc_auc(y, xb)
    return {"profile": profile, "defense": defense, "a": f"{ra}:{ma}", "b": f"{rb}:{mb}",
            "members": sum(y), "nonmembers": len(y) - sum(y), "left_out": len(shared) - len(both),
            "only_in_one_run": len(set(sa) ^ set(sb)),
            "auc_a": auc_a, "auc_b": auc_b, "difference": auc_a - auc_b, "ci": [lo, hi]}


#: configuration fields that must agree for runs to be draws of one experiment (the seed and the
#: run's bookkeeping -- folder, methods, defenses, profiles run -- may differ)
SAME_EXPERIMENT_FIELDS = ("target_corpus", "kb_size", "target_generator", "n_members", "n_nonmembers", "min_words",
                          "shadow", "top_logprobs", "method_params", "chat_method_params", "shadow_defenses",
                          "paraphraser", "chat_shadow_size")


def pooled_draws(runs: Sequence[Path], method: str, profile: str = "completion", defense: str = "none",
                 n_boot: int = 1000) -> dict:
    """One method's AUC over several independent draws: the mean of the per-draw AUCs and its interval.

    A single 50 + 50 draw reads an AUC to about +-0.02 near 0.98, so whether
    a method "stays at or above 0.98" is a question about its mean over draws,
    not about one draw. Each run must be another draw (another seed) of the
    same experiment (``SAME_EXPERIMENT_FIELDS``); its AUC is read within the
    draw (``metrics.bootstrap_mean_auc_ci``). Documents without a score are
    left out and counted.
    """
    from audit_core.metrics import bootstrap_mean_auc_ci, roc_auc

    if len(runs) < 2:
        raise ValueError("pooling needs at least two runs")
    draws, aucs, left_out, cfgs = [], [], 0, []
    for run in runs:
        run = Path(run)
        rows, cfg = method_rows(run, method, profile, defense)
        if cfg.get("seed") in [c.get("seed") for c in cfgs]:
            raise ValueError(f"{run} repeats the draw of seed {cfg.get('seed')}: each run must be another draw")
        if cfgs and (diff := [k for k in SAME_EXPERIMENT_FIELDS if cfg.get(k) != cfgs[0].get(k)]):
            raise ValueError(f"{run} is another experiment, not another draw: {', '.join(diff)} differ")
        scored = [r for r in rows if r.get("score") is not None]
        left_out += len(rows) - len(scored)
        y, s = [int(r["label"]) for r in scored], [float(ranking_score(r)) for r in scored]
        if len(set(y)) < 2:
            raise ValueError(f"{run} has no scored {method} members and non-members both")
        draws.append((y, s))
        cfgs.append(cfg)
        aucs.append(roc_auc(y, s))
    lo, hi = bootstrap_mean_auc_ci(draws, n=n_boot)
    # the bootstrap resamples documents within each draw; how much knowledge bases differ is in the spread of
    # the per-draw AUCs, which a t interval over them carries (wide with few draws, as it should be)
    from scipy.stats import t as student_t

    k = len(aucs)
    half = float(student_t.ppf(0.975, k - 1) * np.std(aucs, ddof=1) / math.sqrt(k))
    return {"profile": profile, "defense": defense, "method": method, "runs": [str(r) for r in runs],
            "seeds": [c.get("seed") for c in cfgs], "per_draw_auc": aucs, "mean_auc": float(np.mean(aucs)), "ci": [lo, hi],
            # draws that agree exactly give no spread to read an interval from (not certainty): None
            "between_draws_ci": ([max(0.0, float(np.mean(aucs)) - half), min(1.0, float(np.mean(aucs)) + half)]
                                 if half > 0 else None),
            "members": sum(sum(y) for y, _ in draws), "nonmembers": sum(len(y) - sum(y) for y, _ in draws),
            "left_out": left_out}


def pooled_line(p: dict) -> str:
    """One line a BENCHMARKS.md section can quote."""
    seeds = ", ".join(str(s) for s in p["seeds"])
    per = ", ".join(f"{a:.3f}" for a in p["per_draw_auc"])
    return (f"{p['profile']} / {p['defense']} / {p['method']}: mean AUC over {len(p['seeds'])} draws (seeds {seeds}) "
            f"{p['mean_auc']:.3f} [{p['ci'][0]:.3f}, {p['ci'][1]:.3f}] within draws, "
            + (f"[{p['between_draws_ci'][0]:.3f}, {p['between_draws_ci'][1]:.3f}] between draws (t over the draws' "
               f"AUCs)" if p.get("between_draws_ci") else "no interval between draws (they read the same AUC)")
            + f"; per draw {per} "
            f"({p['members']} + {p['nonmembers']} documents; {p['left_out']} without a score left out)")


def comparison_line(c: dict) -> str:
    """One line a BENCHMARKS.md section can quote."""
    return (f"{c['profile']} / {c['defense']}: {c['a']} {c['auc_a']:.3f} vs {c['b']} {c['auc_b']:.3f}, "
            f"paired difference {c['difference']:+.3f} [{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}] "
            f"({c['members']} + {c['nonmembers']} documents; {c['left_out']} without a score under either "
            f"left out; {c['only_in_one_run']} in one run only)")


def roc_png(rows: list[dict], defense: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from audit_core.metrics import roc_auc, roc_curve

    rows = rows + combined_rows(rows)
    # Linear axes for the overall shape; a log FPR axis beside it because the low-FPR
    # end (TPR at 1% and 0.1% FPR) is where membership methods differ in practice.
    fig, (ax, ax_log) = plt.subplots(1, 2, figsize=(10, 5))
    for method in ALL_METHODS + ["combined"]:
        rs = [r for r in rows if r["defense"] == defense and r["method"] == method and r["score"] is not None]
        if len({r["label"] for r in rs}) < 2:
            continue
        labels, scores = [r["label"] for r in rs], [ranking_score(r) for r in rs]
        fpr, tpr, _ = roc_curve(labels, scores)
        # The combined verdict ranks by S-RAG's score, so its curve lies on S-RAG's: dashed, to show both.
        style = {"ls": "--", "lw": 1.2} if method == "combined" else {"lw": 1.6}
        label = f"{LABELS.get(method, method)} (AUC {roc_auc(labels, scores):.2f})"
        ax.plot(fpr, tpr, label=label, **style)
        # Steps, not straight segments: on a log axis a segment from FPR 0 would show a TPR
        # the method never reaches at that FPR (tied scores, as RAG-MIA's yes/no, most of all).
        ax_log.plot(fpr, tpr, label=label, drawstyle="steps-post", **style)
    ax.plot([0, 1], [0, 1], ls=":", c="grey")
    chance = [10 ** (e / 20) for e in range(-60, 1)]
    ax_log.plot(chance, chance, ls=":", c="grey")
    for a in (ax, ax_log):
        a.set_xlabel("false positive rate")
        a.set_ylabel("true positive rate")
    ax_log.set_xscale("log")
    ax_log.set_xlim(1e-3, 1)
    ax.set_title(f"ROC, defense: {defense}")
    ax_log.set_title("same, log false positive rate")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def machine_line() -> str:
    import torch

    return (f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"torch {torch.__version__}, {torch.get_num_threads()} threads")


def cannot_run_reasons(rows: list[dict]) -> dict[str, dict[str, dict[str, str]]]:
    """profile -> defense -> method -> why that method cannot run there."""
    out: dict = {}
    for r in rows:
        if r.get("cannot_run"):
            out.setdefault(_row_profile(r), {}).setdefault(r["defense"], {})[r["method"]] = r["reason"]
    return out


def zoo_metrics(rows: list[dict], n_boot: int = 1000) -> dict:
    """profile -> defense -> method -> metrics (``compute_metrics`` per profile)."""
    profiles = list(dict.fromkeys(_row_profile(r) for r in rows))
    return {p: compute_metrics([r for r in rows if _row_profile(r) == p], n_boot) for p in profiles}


def zoo_table(zoo: dict, cannot: dict, benign: dict | None = None) -> str:
    """The target zoo: one row per profile x method x defense; a method that cannot run says why.

    Under Mirabel each row also gives the defense's false-positive rate on
    honest questions for that profile (``benign``: profile -> ``runner.benign_fpr``).
    """
    from audit_core.metrics import fpr_key

    k1 = fpr_key(0.01)
    benign = benign or {}
    lines = ["| profile | method | defense | members + non-members | AUC [95% CI] | AUC, unscored last | TPR@1%FPR | inconclusive | queries/doc | defense's benign FPR |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    profiles = list(dict.fromkeys(list(zoo) + list(cannot)))
    for p in profiles:
        defenses = list(dict.fromkeys(list(zoo.get(p, {})) + list(cannot.get(p, {}))))
        for defense in defenses:
            ms = zoo.get(p, {}).get(defense, {})
            why = cannot.get(p, {}).get(defense, {})
            for method in [m for m in ALL_METHODS + ["combined"] if m in ms or m in why]:
                cell = benign_cell(benign.get(p), defense)
                if method in why and method not in ms:
                    lines.append(f"| {p} | {LABELS.get(method, method)} | {defense} | - | {why[method]} | - | - | - | - | {cell} |")
                    continue
                s = ms[method]
                lines.append(
                    f"| {p} | {LABELS.get(method, method)} | {defense} | {_members_cell(s)} | "
                    f"{_fmt(s, 'auc')} | {_fmt(s, 'auc_all')} | {_fmt(s, k1)} | {_inconclusive(s)} | "
                    f"{s.get('queries_per_doc') or 0:.1f} | {cell} |")
    return "\n".join(lines)


def finish(cfg: BenchConfig, prep_info: dict | None = None, timings: dict | None = None) -> dict:
    out = Path(cfg.out_dir)
    rows = load_rows(out)
    # the membership tables keep their form: the first profile's rows (the completion target)
    first = cfg.profiles[0] if cfg.profiles else "completion"
    metrics = compute_metrics([r for r in rows if _row_profile(r) == first])
    zoo = zoo_metrics(rows) if len(cfg.profiles) > 1 or first != "completion" else None
    old = {}
    if (out / "results.json").exists():
        old = json.loads((out / "results.json").read_text())
    results = {
        "schema_version": SCHEMA_VERSION,
        "date": _dt.date.today().isoformat(),
        "machine": machine_line(),
        "config": json.loads(json.dumps(asdict(cfg), default=str)),
        "shadow": prep_info if prep_info is not None else old.get("shadow"),
        "timings": timings if timings is not None else old.get("timings"),
        "metrics": metrics,
        "zoo": zoo,
        "cannot_run": cannot_run_reasons(rows),
        "benign_fpr": read_benign(out),
        "rows": rows,
    }
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    table = markdown_table(metrics, results["benign_fpr"].get(first))
    (out / "table.md").write_text(table + "\n")
    first_rows = [r for r in rows if _row_profile(r) == first and not r.get("cannot_run")]
    for defense in metrics:
        roc_png(first_rows, defense, out / f"roc_{defense}.png")
    if zoo is not None:
        (out / "zoo.md").write_text(zoo_table(zoo, results["cannot_run"], results["benign_fpr"]) + "\n")
    return results


def _wall_time_line(t: dict) -> str:
    """The run's timings in one line; a resumed run's covers only its last invocation, and says so."""
    legs = ", ".join(f"{k} {v / 60:.1f} min" for k, v in (t.get("per_defense_s") or {}).items())
    if t.get("merged_runs"):
        return f"Wall time: {t['merged_runs']} runs merged, each timed on its own: {legs}"
    line = (f"Wall time: {t.get('wall_s', 0) / 60:.1f} min (shadow preparation "
            f"{t.get('shadow_preparation_s', 0) / 60:.1f} min{'; ' + legs if legs else ''})")
    if t.get("rows_from_earlier_runs"):
        line += (f"; this invocation only: {t['rows_from_earlier_runs']} of {t['rows_total']} rows came from an "
                 "earlier one, so this is not a cold figure")
    return line


def update_benchmarks_md(results: dict, command: str, path: Path = ROOT / "BENCHMARKS.md",
                         section: str = SECTIONS["full"]) -> None:
    """Replace the section between markers in BENCHMARKS.md with this run's table."""
    start, end = f"<!-- {section}:start -->", f"<!-- {section}:end -->"
    t = results.get("timings") or {}
    shadow = results.get("shadow") or {}
    body = [
        start,
        f"Command: `{command}`  ",
        f"Date: {results['date']}; machine: {results['machine']}  ",
        _wall_time_line(t) + "  ",
        "Shadow validation AUC: " + ", ".join(
            f"{LABELS.get(m, m)} {v['shadow_auc']:.3f}" for m, v in shadow.items() if v.get("shadow_auc") is not None),
        "",
        markdown_table(results["metrics"], first_profile_benign(results)),
        "",
        "Intervals are bootstrap 95% intervals (1,000 stratified resamples). Inconclusive documents are "
        "excluded from the metrics and counted: a single number, or *a / b* where a documents have no "
        "score (left out of AUC and TPR) and b have no decision (left out of accuracy, precision, recall "
        "and F1). " + TABLE_NOTES,
        end,
    ]
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if section == SECTIONS["zoo"]:
        body[4] = "Shadow validation AUC (profile:method, the shadow's style): " + "; ".join(
            f"{k} {v['shadow_auc']:.3f}" + (f" ({v['mirror']['shadow_style']})" if v.get("mirror") else "")
            for k, v in shadow.items() if v.get("shadow_auc") is not None)
        body[6] = zoo_table(results.get("zoo") or {}, results.get("cannot_run") or {}, results.get("benign_fpr"))
        body[8] = ("AUC: bootstrap 95% interval (1,000 stratified resamples). Inconclusive: documents without "
                   "a score (an S-RAG document whose probes the target's answers never reached, a failed "
                   "call...), left out of AUC and TPR. *cannot run*: the method cannot read its signal on "
                   "this target, so it reports no number. " + TABLE_NOTES)
    block = "\n".join(body)
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + f"\n\n## {section[0].upper() + section[1:]}\n\n" + block + "\n"
    path.write_text(text)




def merge_runs(dirs: list[Path], out: Path) -> None:
    """One run directory from several (e.g. one process per profile): rows, shadow info and timings
    together, configuration of the first with the union of profiles, so ``--rescore out`` reports them.

    Runs of different draws (seeds) are kept apart: each of their profiles is reported as
    "<profile> (seed N)", so no row, metric or combined verdict mixes two knowledge bases.
    """
    out.mkdir(parents=True, exist_ok=True)
    rows, shadow, timings, profiles, cfg = [], {}, {"per_defense_s": {}, "wall_s": 0.0, "shadow_preparation_s": 0.0}, [], None
    benign: dict = {}
    results = [json.loads((Path(d) / "results.json").read_text()) for d in dirs]
    several_draws = len({res["config"].get("seed") for res in results}) > 1
    for d, res in zip(dirs, results):
        seed = res["config"].get("seed")

        def label(profile: str) -> str:
            return f"{profile} (seed {seed})" if several_draws else profile

        benign |= {label(p): v for p, v in read_benign(Path(d)).items()}
        cfg = cfg or res["config"]
        profiles += [label(p) for p in res["config"].get("profiles", ["completion"]) if label(p) not in profiles]
        rows += [r | {"profile": label(_row_profile(r))} for r in load_rows(Path(d))]
        names = set(res["config"].get("profiles", ["completion"]))

        def shadow_key(k: str) -> str:  # "profile:method", or a bare method for the completion profile
            prof, sep, rest = k.partition(":")
            if sep and prof in names:
                return f"{label(prof)}:{rest}"
            return f"{label('completion')}:{k}" if several_draws else k

        for k, v in (res.get("shadow") or {}).items():
            key = shadow_key(k)
            if key in shadow and shadow[key] != v:  # two runs of one draw with different shadows (sizes)
                key = f"{key} [{Path(d).name}]"
            shadow[key] = v
        t = res.get("timings") or {}
        timings["per_defense_s"] |= {f"{Path(d).name}:{k}": v for k, v in (t.get("per_defense_s") or {}).items()}
        timings["wall_s"] = max(timings["wall_s"], t.get("wall_s", 0.0))  # the runs ran side by side
        timings["shadow_preparation_s"] = max(timings["shadow_preparation_s"], t.get("shadow_preparation_s", 0.0))
    timings["merged_runs"] = len(dirs)
    cfg["profiles"], cfg["out_dir"], cfg["mode"] = profiles, str(out), "zoo"
    (out / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if benign:
        (out / BENIGN_FILE).write_text(json.dumps(benign, indent=1))
    (out / "results.json").write_text(json.dumps({"config": cfg, "shadow": shadow, "timings": timings}))
