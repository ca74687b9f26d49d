"""``python -m shadow.bench``: command line of the benchmark."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from shadow.bench.report import (SECTIONS, finish, first_profile_benign, markdown_table, update_benchmarks_md,
                                 zoo_table)
from shadow.bench.runner import (ALL_DEFENSES, ALL_METHODS, ALL_PROFILES, METHOD_GROUPS, BenchConfig, expand_methods,
                                 run_bench)
from shadow.prepare import ShadowConfig

def main(argv: list[str] | None = None) -> int:
    import argparse

    import shadow.bench as pkg

    ap = argparse.ArgumentParser(prog="python -m shadow.bench", description=pkg.__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10 + 10 documents, no defense, small shadow")
    ap.add_argument("--config", help="JSON file with BenchConfig fields (shadow: ShadowConfig fields)")
    ap.add_argument("--rescore", metavar="OUT_DIR", help="recompute metrics from a finished run; no target query")
    ap.add_argument("--merge", metavar="DIRS",
                    help="with --rescore OUT_DIR: first gather these finished run directories (comma-separated, "
                         "e.g. one per profile run side by side) into OUT_DIR")
    ap.add_argument("--compare", nargs=2, metavar="RUN:METHOD",
                    help="paired AUC difference of two methods on the same draw from finished runs (no target "
                         "query), e.g. --compare runs/a:verbatim runs/b:s2mia_t; with --profile and --defense")
    ap.add_argument("--pool", metavar="DIRS",
                    help="mean AUC over several draws (finished runs of other seeds, comma-separated) of each "
                         "method in --methods, with its interval (no target query); with --profile and --defense")
    ap.add_argument("--profile", default="completion",
                    help="with --compare or --pool: the profile whose rows are read")
    ap.add_argument("--defense", default="none", help="with --compare or --pool: the defense whose rows are read")
    ap.add_argument("--methods", help="comma-separated subset of " + ",".join(ALL_METHODS) + ", or of the groups "
                    + ", ".join(f"{g} ({','.join(ms) if g != 'all' else 'every method'})" for g, ms in METHOD_GROUPS.items()))
    ap.add_argument("--defenses", help="comma-separated subset of " + ",".join(ALL_DEFENSES))
    ap.add_argument("--profiles", help="target profiles, comma-separated subset of " + ",".join(ALL_PROFILES)
                    + " (writes the target zoo section of BENCHMARKS.md)")
    ap.add_argument("--chat-shadow-size", type=int, help="shadow members (= non-members) for chat-style profiles")
    ap.add_argument("--n", type=int, help="members (= non-members) in the test set")
    ap.add_argument("--kb-size", type=int)
    ap.add_argument("--target-corpus")
    ap.add_argument("--target-model")
    ap.add_argument("--aux-corpus")
    ap.add_argument("--shadow-size", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--shadow-defenses", help="defenses to simulate on the shadow too, comma-separated")
    ap.add_argument("--paraphraser", help="model that rewrites the target's queries under the paraphrasing "
                                          "defense (default: the target's generator when it is an instruct "
                                          "model, else smollm2-135m-instruct)")
    ap.add_argument("--benign-queries", type=int, help="honest questions put through each Mirabel-defended "
                                                        "profile to measure its benign false-positive rate (0: none)")
    ap.add_argument("--one-at-a-time", action="store_true",
                    help="send and serve one request at a time (slower; the exact answers of runs before "
                         "session 26, which batched answers can differ from by float rounding)")
    ap.add_argument("--documents-at-once", type=int,
                    help="documents of one method probed at the same time, so that the reference server "
                         "decodes their requests together (default: BenchConfig.documents_at_once); a method "
                         "with few queries per document probes more (--requests-at-once); 1: one after another")
    ap.add_argument("--requests-at-once", type=int,
                    help="requests a leg keeps in flight: a method whose client sends r of a document's "
                         "queries at a time (its queries per document, at most 4) probes "
                         "max(--documents-at-once, this // r) documents at once (default: "
                         "BenchConfig.requests_at_once, twice the server's batch; 0: every method at "
                         "--documents-at-once)")
    ap.add_argument("--server-lanes", type=int,
                    help="reference servers answering each defense side by side, the cores shared out among "
                         "them (default: BenchConfig.server_lanes, 2; 1: one server with every core)")
    ap.add_argument("--no-reuse-generations", action="store_true",
                    help="every reference server computes every answer, even a prompt another defense's server "
                         "answered in this run (slower; the same answers: BenchConfig.reuse_generations)")
    ap.add_argument("--out")
    ap.add_argument("--update-benchmarks-md", action="store_true", help="write the table into BENCHMARKS.md")
    args = ap.parse_args(argv)

    if args.compare:
        from shadow.bench.report import comparison_line, paired_comparison

        try:
            runs = [tuple(x.rsplit(":", 1)) for x in args.compare]
            if any(len(r) != 2 for r in runs):
                raise ValueError("each of --compare's two arguments is RUN_DIR:METHOD")
            print(comparison_line(paired_comparison(runs[0], runs[1], args.profile, args.defense)))
        except (ValueError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    if args.pool:
        from shadow.bench.report import pooled_draws, pooled_line

        try:
            if not args.methods:
                raise ValueError("--pool needs --methods: the method(s) whose draws are pooled")
            for method in expand_methods(args.methods):
                print(pooled_line(pooled_draws([Path(d) for d in args.pool.split(",")], method, args.profile,
                                               args.defense)))
        except (ValueError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    if args.rescore and args.merge:
        from shadow.bench.report import merge_runs

        merge_runs([Path(d) for d in args.merge.split(",")], Path(args.rescore))
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
        if args.profiles:
            cfg.mode = "zoo"
        for flag, attr in (("defenses", "defenses"), ("shadow_defenses", "shadow_defenses"), ("profiles", "profiles")):
            if getattr(args, flag):
                setattr(cfg, attr, getattr(args, flag).split(","))
        if args.methods:
            try:
                cfg.methods = expand_methods(args.methods)
            except ValueError as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
        if args.n:
            cfg.n_members = cfg.n_nonmembers = args.n
        for flag, attr in (("kb_size", "kb_size"), ("target_corpus", "target_corpus"),
                           ("target_model", "target_generator"), ("seed", "seed"), ("out", "out_dir"),
                           ("chat_shadow_size", "chat_shadow_size"), ("paraphraser", "paraphraser"),
                           ("benign_queries", "benign_queries"), ("documents_at_once", "documents_at_once"),
                           ("requests_at_once", "requests_at_once"), ("server_lanes", "server_lanes")):
            if getattr(args, flag) is not None:
                setattr(cfg, attr, getattr(args, flag))
        if args.one_at_a_time:
            cfg.one_at_a_time = True
        if args.no_reuse_generations:
            cfg.reuse_generations = False
        if args.aux_corpus:
            cfg.shadow.aux_corpus = args.aux_corpus
        if args.shadow_size:
            cfg.shadow.n_members = cfg.shadow.n_nonmembers = args.shadow_size
        if cfg.documents_at_once < 1:
            print("error: --documents-at-once must be at least 1", file=sys.stderr)
            return 2
        if cfg.server_lanes < 1:
            print("error: --server-lanes must be at least 1", file=sys.stderr)
            return 2
        if cfg.requests_at_once < 0:
            print("error: --requests-at-once must be 0 or more", file=sys.stderr)
            return 2
        if not Path(cfg.target_corpus).exists():
            print(f"error: target corpus {cfg.target_corpus} not found (see --target-corpus)", file=sys.stderr)
            return 2
        results = run_bench(cfg, log=lambda s: print(s, file=sys.stderr))
    print(zoo_table(results["zoo"], results.get("cannot_run") or {}, results.get("benign_fpr")) if results.get("zoo")
          else markdown_table(results["metrics"], first_profile_benign(results)))
    if args.update_benchmarks_md:
        # quick mode has its own section (a smoke run must not overwrite the full benchmark's
        # table), kept by a re-score since the mode is part of the saved configuration
        update_benchmarks_md(results, "python -m shadow.bench " + " ".join(argv if argv is not None else sys.argv[1:]),
                             section=SECTIONS.get(cfg.mode, f"{cfg.mode} membership benchmark"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
