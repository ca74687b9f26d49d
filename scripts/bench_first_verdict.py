"""Time to the first verdict of the README's first audit (issue 18).

The audit: assets/sample_documents.csv (20 documents), the demo target, the
default methods S-RAG + MBA with the app's settings for the demo (MBA's
"continue" elicitation), audit size "quick" (60 + 60 shadow documents, 30 +
30 for MBA). Each run gets an EMPTY cache directory (``RPA_CACHE_DIR``): no
shadow observations, no calibration, no indexed knowledge base. With
``--models cold`` the de-quantized model weights are not there either (the
very first start); with ``--models warm`` they are linked in from an existing
cache (``--models-from``), as on every later start. The shipped default
preparation (assets/preparation/) is used when it has the key.

Each run is a fresh Python process (imports count); it reports the seconds
from its start to the end of the shadow preparation, to the first verdict
(every method of the first document answered) and to the last, and the time
spent per stage (the profile).

    nice -n 10 .venv/bin/python scripts/bench_first_verdict.py --models cold,warm --out runs/first-verdict.json
"""
from __future__ import annotations

import time

T_START = time.time()  # before the heavy imports: the child's clock starts with the process

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: the app's "quick" audit size (app/sidebar.py AUDIT_SIZES)
QUICK = (60, 60, 30)


def audit_config():
    """The configuration the app builds for the README's first audit (demo target, defaults, quick)."""
    from audit_core.audit import AuditConfig
    from audit_core.verdict import VerdictConfig
    from shadow.demo import mba_elicitation_for
    from shadow.prepare import ShadowConfig

    n_m, n_n, n_g = QUICK
    return AuditConfig(methods=["srag", "mba"],
                       shadow=ShadowConfig(n_members=n_m, n_nonmembers=n_n, n_per_class_generative=n_g),
                       method_params={"srag": {"bins": 10},
                                      "mba": {"n_masks": 10, "gamma": 0.5, "elicitation": mba_elicitation_for(True)}},
                       verdict=VerdictConfig(retrieval_as_sent=True))  # the demo target, as the app knows it


def child(out: Path, use_shipped: bool) -> None:
    """One audit in this process; timings relative to the process start."""
    from audit_core.audit import run_audit
    from audit_core.documents import documents_from_table, guess_id_column, guess_text_column, read_csv_bytes
    from shadow.demo import SAMPLE_CSV, demo_target
    from shadow.prepare import prepare_shadow

    stages: dict[str, list[float]] = {}  # stage -> [first seen, last seen] (seconds)
    lines: list[str] = []

    def progress(stage: str, done: int, total: int) -> None:
        now = time.time() - T_START
        stages.setdefault(stage, [now, now])[1] = now
        if stage == "auditing documents" or done in (0, total):
            lines.append(f"{now:7.1f} s  {stage}: {done} / {total}")
            print(lines[-1], file=sys.stderr, flush=True)

    t_imports = time.time() - T_START
    df = read_csv_bytes(SAMPLE_CSV.read_bytes())
    text_col = guess_text_column(df)
    docs = documents_from_table(df, text_col, guess_id_column(df, text_col)).documents
    t0 = time.time()
    target = demo_target()
    t_target = time.time() - t0
    cfg = audit_config()
    n_methods = len(cfg.methods)
    answered: dict[str, int] = {}
    verdict_at: list[float] = []

    def on_result(doc_id, method, obs, res) -> None:
        answered[doc_id] = answered.get(doc_id, 0) + 1
        if answered[doc_id] == n_methods:
            verdict_at.append(time.time() - T_START)

    prep_seconds: dict = {}
    from_cache: dict = {}

    def prepare(methods, shadow, prog):
        t = time.time()
        prep = prepare_shadow(methods, shadow, prog, use_shipped=use_shipped)
        prep_seconds.update(prep.seconds, total=time.time() - t)
        from_cache.update(prep.from_cache)
        return prep

    result = run_audit(docs, target, cfg, prepare, progress=progress, on_result=on_result)
    out.write_text(json.dumps({
        "imports_s": t_imports, "demo_target_s": t_target,
        "preparation_s": prep_seconds, "observations_from_cache_or_shipped": from_cache,
        "first_verdict_s": verdict_at[0] if verdict_at else None,
        "all_verdicts_s": verdict_at[-1] if verdict_at else None,
        "verdicts": {v.doc_id: v.verdict for v in result.verdicts},
        "scores": {v.doc_id: v.score for v in result.verdicts},
        "stages": stages, "log": lines,
    }, indent=1))


def link_models(cache: Path, source: Path) -> None:
    """Put the de-quantized weights (and the assembled Gemma file) of ``source`` into ``cache``."""
    for sub in ("models", "gguf"):
        if (source / sub).exists():
            (cache / sub).symlink_to((source / sub).resolve(), target_is_directory=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="cold,warm", help="cold, warm or both (default: %(default)s)")
    ap.add_argument("--models-from", type=Path, default=None,
                    help="cache holding de-quantized models for --models warm (default: the user's cache)")
    ap.add_argument("--no-shipped", action="store_true",
                    help="ignore assets/preparation (probe the shadow as without a shipped preparation)")
    ap.add_argument("--out", type=Path, default=None, help="write every run's numbers here (JSON)")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, use_shipped=not args.no_shipped)
        return 0

    from audit_core.models import cache_dir

    source = args.models_from or cache_dir()
    runs = {}
    for mode in [m for m in args.models.split(",") if m]:
        with tempfile.TemporaryDirectory(prefix=f"rpa-first-verdict-{mode}-") as tmp:
            cache = Path(tmp) / "cache"
            cache.mkdir()
            if mode == "warm":
                link_models(cache, source)
            elif mode != "cold":
                ap.error(f"unknown --models value {mode!r}")
            out = Path(tmp) / "run.json"
            env = dict(os.environ, RPA_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
            cmd = [sys.executable, __file__, "--child", str(out)] + (["--no-shipped"] if args.no_shipped else [])
            print(f"[{mode} models] {' '.join(cmd)}", file=sys.stderr, flush=True)
            subprocess.run(cmd, env=env, check=True)
            runs[mode] = json.loads(out.read_text())
        r = runs[mode]
        print(f"[{mode} models] first verdict {r['first_verdict_s']:.0f} s, all {len(r['verdicts'])} verdicts "
              f"{r['all_verdicts_s']:.0f} s (shadow preparation {r['preparation_s'].get('total', 0):.0f} s)",
              flush=True)
    if len(runs) > 1:
        first, *rest = runs.values()
        same = all(r["verdicts"] == first["verdicts"] for r in rest)
        print(f"verdicts identical across runs: {same}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
