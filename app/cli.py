"""Command line for batch audits: python -m app.cli (or ./run cli).

    ./run cli audit --target demo --docs assets/sample_documents.csv
    ./run cli audit --target https://host/v1 --model my-model --docs my.csv --method srag,mba
    ./run cli prepare --method srag          # shadow preparation only (cached)
    ./run cli runs                            # past audits in the store

The API key comes from --api-key-env (default OPENAI_API_KEY); it is never
printed, stored or written into any output.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _progress_bar():
    """A progress(stage, done, total) callback drawing one tqdm bar per stage."""
    from tqdm import tqdm

    bars: dict[str, tqdm] = {}

    def progress(stage: str, done: int, total: int) -> None:
        bar = bars.get(stage)
        if bar is None:
            bar = bars[stage] = tqdm(total=total, desc=stage, unit="doc", file=sys.stderr, leave=True)
        bar.total = total
        bar.n = done
        bar.refresh()
        if done >= total:
            bar.close()

    return progress


def _load_docs(path: str, text_column: str | None, id_column: str | None):
    from audit_core.documents import documents_from_table, guess_id_column, guess_text_column, read_csv_bytes

    data = Path(path).read_bytes()
    if path.endswith(".jsonl"):
        from shadow.corpus import load_corpus

        return load_corpus(path), []
    df = read_csv_bytes(data)
    text_col = text_column or guess_text_column(df)
    id_col = id_column if id_column is not None else guess_id_column(df, text_col)
    batch = documents_from_table(df, text_col, id_col)
    return batch.documents, batch.problems()


def _target(args):
    if args.target == "demo":
        from shadow.demo import demo_target

        return demo_target(args.demo_defense)
    from audit_core.target.openai_compat import OpenAITarget

    key = os.environ.get(args.api_key_env)
    if not args.model:
        raise SystemExit("--model is required with an endpoint URL")
    return OpenAITarget(base_url=args.target, model=args.model, api_key=key)


def _audit_config(args):
    from shadow.audit import AuditConfig
    from shadow.prepare import ShadowConfig

    shadow = ShadowConfig(n_members=args.shadow_size, n_nonmembers=args.shadow_size,
                          n_per_class_generative=min(args.shadow_size, args.shadow_size_generative))
    if args.aux_corpus:
        shadow.aux_corpus = args.aux_corpus
    params: dict[str, dict] = {}
    if args.bins:
        params.setdefault("srag", {})["bins"] = args.bins
    if args.segment_factor:
        params.setdefault("srag", {})["segment_factor"] = args.segment_factor
    if args.masks:
        params.setdefault("mba", {})["n_masks"] = args.masks
    return AuditConfig(methods=args.method.split(","), shadow=shadow, method_params=params)


def cmd_audit(args) -> int:
    from audit_core.documents import DocumentInputError
    from audit_core.target.base import TargetError
    from shadow.audit import run_audit

    try:
        docs, problems = _load_docs(args.docs, args.text_column, args.id_column)
    except (DocumentInputError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for p in problems:
        print(f"skipped row {p.row}: {p.message}", file=sys.stderr)
    if not docs:
        print("error: no usable documents", file=sys.stderr)
        return 2
    try:
        target = _target(args)
        result = run_audit(docs, target, _audit_config(args), progress=_progress_bar())
    except TargetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    for name, why in result.not_run.items():
        print(f"note: {name} not run: {why}", file=sys.stderr)
    for v in result.verdicts:
        score = "   -  " if v.score is None else f"{v.score:6.3f}"
        print(f"{v.doc_id:>16}  {v.verdict:<13} {score}  {v.reason}")
        if args.evidence:
            srag = result.results[v.doc_id].get("srag")
            if srag is not None and srag.evidence.get("words"):
                words = ", ".join(
                    f"{w['word']}={'fail' if w['prob'] is None else format(w['prob'], '.2f')}" for w in srag.evidence["words"]
                )
                print(f"{'':>16}  S-RAG probed words: {words}")
            mba = result.results[v.doc_id].get("mba")
            if mba is not None and mba.score is not None:
                print(f"{'':>16}  MBA accuracy: {mba.score:.2f}")
    for name, cal in result.calibrations.items():
        if cal.shadow_auc is not None:
            print(f"shadow validation AUC of {name}: {cal.shadow_auc:.3f}", file=sys.stderr)
    acc = result.account
    print(f"target queries: {acc['queries']} (failed {acc['failures']}), tokens: "
          f"{acc['prompt_tokens']} prompt + {acc['completion_tokens']} completion", file=sys.stderr)
    if args.out:
        Path(args.out).write_text(json.dumps(result.to_json(), indent=1, default=str))
        print(f"results written to {args.out}", file=sys.stderr)
    return 0


def cmd_prepare(args) -> int:
    from shadow.audit import select_methods
    from shadow.prepare import prepare_shadow
    from audit_core.target.base import Capabilities

    cfg = _audit_config(args)
    methods, _ = select_methods(cfg, Capabilities(True, True, 20))
    prep = prepare_shadow(methods, cfg.shadow, progress=_progress_bar(), force=args.force)
    for name, cal in prep.calibrations.items():
        src = "cache" if prep.from_cache[name] else "fresh"
        auc = "n/a" if cal.shadow_auc is None else f"{cal.shadow_auc:.3f}"
        print(f"{name}: shadow validation AUC {auc}, {prep.seconds[name]:.1f} s ({src})")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rpa", description="RAG Provenance Auditor command line")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--method", default="srag,mba", help="comma-separated: srag,mba,rag_mia,s2mia_t,s2mia_m,mink")
        p.add_argument("--aux-corpus", help="public auxiliary corpus (JSONL/CSV) for the shadow RAG")
        p.add_argument("--shadow-size", type=int, default=200, help="shadow members (= non-members) per method")
        p.add_argument("--shadow-size-generative", type=int, default=60, help="shadow size for MBA / S2MIA")
        p.add_argument("--bins", type=int, help="S-RAG histogram intervals m (default 10)")
        p.add_argument("--segment-factor", type=int, help="S-RAG segment factor k (default 10)")
        p.add_argument("--masks", type=int, help="MBA masks M (default 10)")

    a = sub.add_parser("audit", help="audit documents against a target")
    a.add_argument("--target", required=True, help="'demo' or an OpenAI-compatible base URL")
    a.add_argument("--model", help="model name at the endpoint")
    a.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    a.add_argument("--demo-defense", choices=["prompt_modification", "paraphrase", "mirabel"])
    a.add_argument("--docs", required=True, help="CSV (or JSONL) of your documents")
    a.add_argument("--text-column")
    a.add_argument("--id-column")
    a.add_argument("--evidence", action="store_true", help="print the evidence under each verdict")
    a.add_argument("--out", help="write the full results as JSON")
    common(a)
    a.set_defaults(func=cmd_audit)

    p = sub.add_parser("prepare", help="prepare (and cache) the shadow RAG calibration")
    p.add_argument("--force", action="store_true")
    common(p)
    p.set_defaults(func=cmd_prepare)

    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
