"""The benchmark: S-RAG, MBA and the baselines side by side, with and without
target-side defenses, end to end through the real code paths.

    python -m shadow.bench                       # full default run (see BenchConfig)
    python -m shadow.bench --quick               # 10 + 10 documents, no defense
    python -m shadow.bench --rescore runs/bench  # recompute metrics, no target query

The target is a reference RAG served by ``shadow.serve`` in a child process
over loopback HTTP and probed through the OpenAI-compatible connector (the
path a real user's audit takes). The auditor's shadow uses another model
family (SmolLM2) over another corpus (the shipped MedQuAD subset).

Every target answer goes through a CachingTarget into ``<out>/responses.sqlite``
as it arrives, and every per-document result is appended to
``<out>/scores.jsonl``, so an interrupted run continues where it stopped and a
re-run over a finished one sends no query.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import random
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from audit_core.documents import Document  # noqa: E402
from audit_core.methods import LABELS, METHODS, create_method  # noqa: E402
from audit_core.methods.base import MethodResult  # noqa: E402
from audit_core.target.base import ChatRequest, Completion, Target  # noqa: E402
from audit_core.verdict import VerdictConfig, decide  # noqa: E402
from audit_core.audit import probe_document  # noqa: E402
from shadow.demo import DEMO_MBA_ELICITATION  # noqa: E402
from shadow.prepare import ShadowConfig, prepare_shadow  # noqa: E402

#: bump when the layout of results.json changes
SCHEMA_VERSION = 1
DEFAULT_TARGET_CORPUS = ROOT.parent / "shared" / "data" / "genmedgpt5k.jsonl"
ALL_METHODS = list(METHODS)
ALL_DEFENSES = ["none", "prompt_modification", "paraphrase", "mirabel"]
#: BENCHMARKS.md section (between <!-- NAME:start --> and <!-- NAME:end -->) per mode
SECTIONS = {"full": "membership benchmark", "quick": "quick membership benchmark"}
BENCH_KEY = "bench-local-key"  # loopback-only key of the reference server


@dataclass
class BenchConfig:
    target_corpus: str = str(DEFAULT_TARGET_CORPUS)
    kb_size: int = 2000  # documents in the target's knowledge base
    target_generator: str = "gemma-3-270m"
    n_members: int = 50
    n_nonmembers: int = 50
    min_words: int = 20  # test documents shorter than this are not drawn
    seed: int = 0
    methods: list[str] = field(default_factory=lambda: list(ALL_METHODS))
    #: run order, cheapest first: paraphrasing makes the target rewrite every
    #: request with its generator (about 5 s each on 2 cores), so it goes last
    #: and an interrupted run already holds the other defenses' rows
    defenses: list[str] = field(default_factory=lambda: ["none", "prompt_modification", "mirabel", "paraphrase"])
    shadow: ShadowConfig = field(default_factory=ShadowConfig)
    out_dir: str = str(ROOT / "runs" / "bench")
    top_logprobs: int = 20
    #: per-method configuration, as AuditConfig.method_params. The reference
    #: target is the demo target's kind of system, so MBA asks it the same way.
    method_params: dict[str, dict] = field(default_factory=lambda: {"mba": {"elicitation": DEMO_MBA_ELICITATION}})
    #: defenses the auditor also simulates on its shadow: that defense's rows are
    #: scored with a shadow RAG running the same defense (an auditor who expects
    #: it). Empty: one undefended shadow calibrates every defense's rows.
    shadow_defenses: list[str] = field(default_factory=list)
    #: the model that rewrites queries under the target's paraphrasing defense
    #: (shadow.rag.RagConfig.paraphraser); None: the target's generator
    paraphraser: str | None = None
    #: which section of BENCHMARKS.md the run's table goes to: "full", "quick", or
    #: any other name for an experiment of one's own ("<mode> membership benchmark")
    mode: str = "full"

    @classmethod
    def quick(cls, **kw) -> "BenchConfig":
        base = dict(mode="quick", kb_size=300, n_members=10, n_nonmembers=10, defenses=["none"],
                    shadow=ShadowConfig(n_members=40, n_nonmembers=40, n_per_class_generative=15),
                    out_dir=str(ROOT / "runs" / "bench-quick"))
        base.update(kw)
        return cls(**base)


# --------------------------------------------------------------------------- data


def split_target_corpus(cfg: BenchConfig) -> tuple[list[Document], list[Document], list[Document]]:
    """Knowledge base, member test documents (from it), non-member test documents (held out)."""
    from shadow.corpus import load_corpus

    docs = sorted(load_corpus(cfg.target_corpus), key=lambda d: d.id)
    rnd = random.Random(cfg.seed)
    rnd.shuffle(docs)
    kb = docs[: cfg.kb_size]
    held = docs[cfg.kb_size:]
    eligible_m = [d for d in kb if d.n_words >= cfg.min_words]
    eligible_n = [d for d in held if d.n_words >= cfg.min_words]
    members = rnd.sample(eligible_m, cfg.n_members)
    nonmembers = rnd.sample(eligible_n, cfg.n_nonmembers)
    return kb, members, nonmembers


# --------------------------------------------------------------------------- the target server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServedTarget:
    """``python -m shadow.serve`` in a child process on a loopback port."""

    def __init__(self, kb_file: Path, generator: str, defense: str | None, log_file: Path,
                 paraphraser: str | None = None):
        self.port = _free_port()
        cmd = [sys.executable, "-m", "shadow.serve", "--corpus", str(kb_file), "--model", generator,
               "--port", str(self.port), "--host", "127.0.0.1"]
        if defense:
            cmd += ["--defense", defense]
        if defense == "paraphrase" and paraphraser:
            cmd += ["--paraphraser", paraphraser]
        env = dict(os.environ, RPA_SERVE_API_KEY=BENCH_KEY, PYTHONPATH=str(ROOT))
        self.log = open(log_file, "ab")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.model = generator
        self._wait()

    def _wait(self, timeout_s: float = 900) -> None:
        import httpx

        t0 = time.time()
        while time.time() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the reference server exited with code {self.proc.returncode}; see {self.log.name}")
            try:
                r = httpx.get(f"{self.base_url}/models", headers={"Authorization": f"Bearer {BENCH_KEY}"}, timeout=2)
                if r.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError("the reference server did not start in time")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class LazyServedTarget(Target):
    """The reference server's OpenAI-compatible client, started on the first request.

    Behind the store, a resumed run whose remaining rows the store answers in
    full never starts the server, which would load the generator and index the
    knowledge base (about a minute per defense) only to sit idle.
    ``account`` counts what really went over HTTP, as ``OpenAITarget``'s does.
    """

    max_concurrency = 1

    def __init__(self, kb_file: Path, generator: str, defense: str | None, log_file: Path,
                 paraphraser: str | None = None):
        super().__init__()
        self.name = f"reference RAG ({generator}, {defense or 'no defense'})"
        self._args = (kb_file, generator, defense, log_file, paraphraser)
        self._lock = threading.Lock()
        self.server: ServedTarget | None = None
        self._http: Target | None = None

    def _client(self) -> Target:
        from audit_core.target.openai_compat import OpenAITarget

        with self._lock:
            if self._http is None:
                self.server = ServedTarget(*self._args)
                http = OpenAITarget(base_url=self.server.base_url, model=self.server.model, api_key=BENCH_KEY,
                                    max_concurrency=1, timeout_s=600)
                http.account = self.account
                self._http = http
            return self._http

    def complete(self, request: ChatRequest) -> Completion:
        return self._client().complete(request)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server, self._http = None, None


# --------------------------------------------------------------------------- running


def _done_keys(scores_file: Path) -> set[tuple[str, str, str]]:
    """(defense, method, document) already scored; a row whose target calls failed is done again
    (answered requests come back from the store, only the failed ones are re-sent)."""
    done = set()
    if scores_file.exists():
        for line in scores_file.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                if not r.get("failed"):
                    done.add((r["defense"], r["method"], r["doc_id"]))
    return done


def retrieval_hit(obs_responses: list[dict | None], doc_id: str) -> float | None:
    """Share of a document's probes for which the target retrieved that document.

    The reference server reports what it retrieved in a vendor field of each
    response (see shadow.serve); a real target never does.
    """
    hits = total = 0
    for r in obs_responses:
        if not r or not r.get("raw"):
            continue
        ids = _retrieved_ids(r["raw"])
        if ids is None:
            continue
        total += 1
        hits += doc_id in ids
    return None if total == 0 else hits / total


def _retrieved_ids(raw: dict) -> list[str] | None:
    info = raw.get("rpa_retrieval") or raw.get("rpa") or {}
    ids = info.get("doc_ids") or info.get("retrieved_ids") or info.get("ids")
    return list(ids) if ids is not None else None


def run_bench(cfg: BenchConfig, log=print) -> dict:
    from tqdm import tqdm

    from audit_core.store import Store
    from audit_core.target.caching import CachingTarget
    from shadow.corpus import write_jsonl

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    kb, members, nonmembers = split_target_corpus(cfg)
    kb_file = out / "target_kb.jsonl"
    if not kb_file.exists():
        write_jsonl(kb, kb_file)
    labels = {d.id: 1 for d in members} | {d.id: 0 for d in nonmembers}
    test_docs = members + nonmembers
    random.Random(cfg.seed + 7).shuffle(test_docs)

    methods = [create_method(m, **cfg.method_params.get(m, {})) for m in cfg.methods]
    log(f"shadow preparation for {', '.join(cfg.methods)} ...")
    t0 = time.time()

    def shadow_progress(stage: str, done: int, total: int) -> None:
        if done == total or done % 25 == 0:
            log(f"  {stage}: {done}/{total}")

    prep = prepare_shadow(methods, cfg.shadow, progress=shadow_progress)
    preps = {d: prep for d in cfg.defenses}
    for d in cfg.shadow_defenses:
        if d in preps and d != "none":
            log(f"shadow preparation with the '{d}' defense simulated ...")
            preps[d] = prepare_shadow(methods, replace(cfg.shadow, defense=d), progress=shadow_progress)
    shadow_seconds = time.time() - t0

    store = Store(out / "responses.sqlite")
    scores_file = out / "scores.jsonl"
    done = _done_keys(scores_file)
    # a resumed run's wall time covers only this invocation; the report says how much came before
    keys = [(defense, m.name, d.id) for defense in cfg.defenses for m in methods for d in test_docs]
    timings: dict[str, Any] = {"shadow_preparation_s": shadow_seconds, "per_defense_s": {},
                               "rows_total": len(keys), "rows_from_earlier_runs": sum(k in done for k in keys)}
    for defense in cfg.defenses:
        todo = [(m, d) for m in methods for d in test_docs if (defense, m.name, d.id) not in done]
        if not todo:
            log(f"[{defense}] all results present")
            continue
        t_def = time.time()
        http = LazyServedTarget(kb_file, cfg.target_generator, None if defense == "none" else defense,
                                out / f"server-{defense}.log", cfg.paraphraser)
        paraphrased_by = f" ({cfg.paraphraser})" if defense == "paraphrase" and cfg.paraphraser else ""
        try:
            # stored under the system, not its address: the server takes a new
            # port every run, and a re-run must find the answers of the last one
            caching = CachingTarget(http, store, identity=f"reference RAG · {cfg.target_generator} · "
                                                          f"{cfg.target_corpus} · kb {cfg.kb_size} · {defense}{paraphrased_by}")
            with open(scores_file, "a") as fh:
                for m, d in tqdm(todo, desc=f"[{defense}] probing", unit="probe", file=sys.stderr):
                    target = caching.for_method(m.probe_scope, m.version)
                    c0 = time.process_time()
                    q0 = (http.account.queries, http.account.prompt_tokens, http.account.completion_tokens)
                    obs = probe_document(m, d, target, cfg.top_logprobs)
                    res = m.score(obs, preps[defense].calibrations[m.name])
                    cpu = time.process_time() - c0
                    p_tok, c_tok = obs.tokens_used()
                    row = {
                        "defense": defense, "method": m.name, "doc_id": d.id, "label": labels[d.id],
                        "score": res.score, "decision": res.decision, "reason": res.reason,
                        "queries": obs.queries, "failed": obs.failed, "prompt_tokens": p_tok,
                        "completion_tokens": c_tok, "auditor_cpu_s": cpu,
                        "sent_queries": http.account.queries - q0[0],
                        "retrieval_hit": retrieval_hit(obs.responses, d.id),
                        "shadow_defense": defense if defense in cfg.shadow_defenses else None,
                        "evidence": _small_evidence(res),
                    }
                    fh.write(json.dumps(row) + "\n")
                    fh.flush()
        finally:
            http.stop()
        timings["per_defense_s"][defense] = time.time() - t_def
    timings["wall_s"] = time.time() - t_start
    info = {}
    for d, p in [(None, prep)] + [(d, p) for d, p in preps.items() if p is not prep]:
        info |= {m if d is None else f"{m}@{d}": {"shadow_auc": c.shadow_auc, "threshold": c.threshold}
                 for m, c in p.calibrations.items()}
    return finish(cfg, prep_info=info, timings=timings)


def _small_evidence(res: MethodResult) -> dict:
    ev = res.evidence or {}
    keep = {}
    if "words" in ev:
        keep["probs"] = [w.get("prob") for w in ev["words"]]
    for k in ("accuracy", "similarity", "answer", "p_yes"):
        if k in ev:
            keep[k] = ev[k]
    return keep


# --------------------------------------------------------------------------- metrics and outputs


def load_rows(out: Path) -> list[dict]:
    rows = {}
    for line in (out / "scores.jsonl").read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            rows[(r["defense"], r["method"], r["doc_id"])] = r  # the latest row wins
    return list(rows.values())


#: per-document costs a combined row adds up over the methods it combines
COST_KEYS = ("queries", "prompt_tokens", "completion_tokens", "auditor_cpu_s")


def combined_rows(rows: list[dict]) -> list[dict]:
    """The product's verdict (S-RAG primary, MBA second opinion) as one more method.

    Its cost is what the product pays for the verdict: the sum over the
    primary and second methods' rows (the baselines do not feed it).
    """
    vc = VerdictConfig()
    by: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        by.setdefault((r["defense"], r["doc_id"]), []).append(r)
    out = []
    for (defense, doc_id), rs in by.items():
        results = [MethodResult(r["method"], doc_id, r["score"], r["decision"], r["reason"]) for r in rs]
        v = decide(doc_id, results, vc)
        decision = None if v.verdict == "inconclusive" else v.verdict == "member"
        feeding = [r for r in rs if r["method"] in (vc.primary, vc.second)]
        costs = {k: sum(r[k] for r in feeding if r.get(k) is not None) if feeding else None for k in COST_KEYS}
        out.append({"defense": defense, "method": "combined", "doc_id": doc_id, "label": rs[0]["label"],
                    "score": v.score, "decision": decision, "reason": v.reason} | costs)
    return out


def compute_metrics(rows: list[dict], n_boot: int = 1000) -> dict:
    from audit_core.metrics import summarize

    rows = rows + combined_rows(rows)
    table: dict[str, dict[str, dict]] = {}
    for defense in sorted({r["defense"] for r in rows}, key=lambda d: ALL_DEFENSES.index(d) if d in ALL_DEFENSES else 99):
        for method in [m for m in ALL_METHODS + ["combined"] if any(r["method"] == m for r in rows)]:
            rs = [r for r in rows if r["defense"] == defense and r["method"] == method]
            if not rs:
                continue
            labels = [r["label"] for r in rs]
            scores = [r["score"] for r in rs]
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


def _inconclusive(s: dict) -> str:
    """Documents without a score / without a decision: they differ for the combined
    verdict, which has a score but no decision where its two methods disagree."""
    n_s, n_d = s.get("n_inconclusive_scores", 0), s.get("n_inconclusive_decisions", 0)
    return str(n_s) if n_s == n_d else f"{n_s} / {n_d}"


def markdown_table(metrics: dict) -> str:
    from audit_core.metrics import fpr_key

    k1, k01 = fpr_key(0.01), fpr_key(0.001)
    lines = ["| defense | method | members + non-members | AUC | accuracy | precision | recall | F1 | TPR@1%FPR | TPR@0.1%FPR | inconclusive | member retrieval recall | queries/doc | tokens/doc | auditor CPU s/doc |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for defense, ms in metrics.items():
        for method, s in ms.items():
            toks = (s.get("prompt_tokens_per_doc") or 0) + (s.get("completion_tokens_per_doc") or 0)
            rr = s.get("retrieval_recall_members")
            lines.append(
                f"| {defense} | {LABELS.get(method, method)} | {s.get('n_members', 0)} + {s.get('n_nonmembers', 0)} | "
                f"{_fmt(s, 'auc')} | {_fmt(s, 'accuracy')} | {_fmt(s, 'precision')} | {_fmt(s, 'recall')} | "
                f"{_fmt(s, 'f1')} | {_fmt(s, k1)} | {_fmt(s, k01)} | {_inconclusive(s)} | "
                f"{'n/a' if rr is None else f'{rr:.2f}'} | {s.get('queries_per_doc') or 0:.1f} | {toks:.0f} | "
                f"{s.get('auditor_cpu_s_per_doc') or 0:.2f} |"
            )
    return "\n".join(lines)


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
        labels, scores = [r["label"] for r in rs], [r["score"] for r in rs]
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


def finish(cfg: BenchConfig, prep_info: dict | None = None, timings: dict | None = None) -> dict:
    out = Path(cfg.out_dir)
    rows = load_rows(out)
    metrics = compute_metrics(rows)
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
        "rows": rows,
    }
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    table = markdown_table(metrics)
    (out / "table.md").write_text(table + "\n")
    for defense in metrics:
        roc_png(rows, defense, out / f"roc_{defense}.png")
    return results


def _wall_time_line(t: dict) -> str:
    """The run's timings in one line; a resumed run's covers only its last invocation, and says so."""
    legs = ", ".join(f"{k} {v / 60:.1f} min" for k, v in (t.get("per_defense_s") or {}).items())
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
        markdown_table(results["metrics"]),
        "",
        "Intervals are bootstrap 95% intervals (1,000 stratified resamples). Inconclusive documents are "
        "excluded from the metrics and counted: a single number, or *a / b* where a documents have no "
        "score (left out of AUC and TPR) and b have no decision (left out of accuracy, precision, recall "
        "and F1). Queries, tokens and CPU of the combined verdict are those of S-RAG and MBA together.",
        end,
    ]
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = "\n".join(body)
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + f"\n\n## {section[0].upper() + section[1:]}\n\n" + block + "\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m shadow.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10 + 10 documents, no defense, small shadow")
    ap.add_argument("--config", help="JSON file with BenchConfig fields (shadow: ShadowConfig fields)")
    ap.add_argument("--rescore", metavar="OUT_DIR", help="recompute metrics from a finished run; no target query")
    ap.add_argument("--methods", help="comma-separated subset of " + ",".join(ALL_METHODS))
    ap.add_argument("--defenses", help="comma-separated subset of " + ",".join(ALL_DEFENSES))
    ap.add_argument("--n", type=int, help="members (= non-members) in the test set")
    ap.add_argument("--kb-size", type=int)
    ap.add_argument("--target-corpus")
    ap.add_argument("--target-model")
    ap.add_argument("--aux-corpus")
    ap.add_argument("--shadow-size", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--shadow-defenses", help="defenses to simulate on the shadow too, comma-separated")
    ap.add_argument("--paraphraser", help="model that rewrites the target's queries under the paraphrasing "
                                          "defense (default: the target's generator)")
    ap.add_argument("--out")
    ap.add_argument("--update-benchmarks-md", action="store_true", help="write the table into BENCHMARKS.md")
    args = ap.parse_args(argv)

    if args.rescore:
        results = json.loads((Path(args.rescore) / "results.json").read_text())
        cfg_d = results["config"]
        cfg_d["shadow"] = ShadowConfig(**cfg_d["shadow"])
        cfg = BenchConfig(**cfg_d)
        cfg.out_dir = args.rescore
        results = finish(cfg)
    else:
        cfg = BenchConfig.quick() if args.quick else BenchConfig()
        if args.config:
            d = json.loads(Path(args.config).read_text())
            if "shadow" in d:
                d["shadow"] = ShadowConfig(**d["shadow"])
            for k, v in d.items():
                setattr(cfg, k, v)
        for flag, attr in (("methods", "methods"), ("defenses", "defenses"), ("shadow_defenses", "shadow_defenses")):
            if getattr(args, flag):
                setattr(cfg, attr, getattr(args, flag).split(","))
        if args.n:
            cfg.n_members = cfg.n_nonmembers = args.n
        for flag, attr in (("kb_size", "kb_size"), ("target_corpus", "target_corpus"),
                           ("target_model", "target_generator"), ("seed", "seed"), ("out", "out_dir"),
                           ("paraphraser", "paraphraser")):
            if getattr(args, flag) is not None:
                setattr(cfg, attr, getattr(args, flag))
        if args.aux_corpus:
            cfg.shadow.aux_corpus = args.aux_corpus
        if args.shadow_size:
            cfg.shadow.n_members = cfg.shadow.n_nonmembers = args.shadow_size
        if not Path(cfg.target_corpus).exists():
            print(f"error: target corpus {cfg.target_corpus} not found (see --target-corpus)", file=sys.stderr)
            return 2
        results = run_bench(cfg, log=lambda s: print(s, file=sys.stderr))
    print(markdown_table(results["metrics"]))
    if args.update_benchmarks_md:
        # quick mode has its own section (a smoke run must not overwrite the full benchmark's
        # table), kept by a re-score since the mode is part of the saved configuration
        update_benchmarks_md(results, "python -m shadow.bench " + " ".join(argv if argv is not None else sys.argv[1:]),
                             section=SECTIONS.get(cfg.mode, f"{cfg.mode} membership benchmark"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
