"""The benchmark: S-RAG, MBA and the baselines side by side, with and without
target-side defenses, end to end through the real code paths.

    python -m shadow.bench                       # full default run (see BenchConfig)
    python -m shadow.bench --quick               # 10 + 10 documents, no defense
    python -m shadow.bench --rescore runs/bench  # recompute metrics, no target query
    python -m shadow.bench --compare runs/a:verbatim runs/b:s2mia_t --profile chat --defense mirabel
                                                 # paired AUC difference, same draw, no target query
    python -m shadow.bench --profiles completion,chat,chat-nologprobs,chunked,http-custom
                                                 # the target zoo (shadow.profiles)

The target is a reference RAG served by ``shadow.serve`` in a child process
over loopback HTTP and probed through the OpenAI-compatible connector (the
path a real user's audit takes). The auditor's shadow uses another model
family (SmolLM2) over another corpus (the shipped MedQuAD subset).

Every target answer goes through a CachingTarget into ``<out>/responses.sqlite``
as it arrives, and every per-document result is appended to
``<out>/scores.jsonl``, so an interrupted run continues where it stopped and a
re-run over a finished one sends no query.

Modules: ``runner`` (configuration, data split, shadow preparation and probing
per profile), ``served`` (each profile served over loopback and reached by the
real client), ``report`` (metrics, tables, plots, BENCHMARKS.md), ``cli``.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shadow.bench import cli, report, runner, served  # noqa: E402
from shadow.bench.cli import main  # noqa: E402
from shadow.bench.report import (SCHEMA_VERSION, SECTIONS, combined_rows, compute_metrics, finish,  # noqa: E402
                                 load_rows, markdown_table, update_benchmarks_md, zoo_metrics, zoo_table)
from shadow.bench.runner import (ALL_DEFENSES, ALL_METHODS, ALL_PROFILES, BenchConfig, _done_keys,  # noqa: E402
                                 retrieval_hit, run_bench, split_target_corpus)
from shadow.bench.served import BENCH_KEY, LazyServedTarget, ServedTarget  # noqa: E402
