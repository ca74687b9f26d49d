"""The benchmark's quick mode, end to end: served reference target over loopback HTTP,
the OpenAI connector, every method, metrics, outputs; then a re-run and a re-score
that must send no target query."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import shadow.bench as bench
from shadow.bench import ALL_METHODS, BenchConfig, run_bench
from shadow import prepare
from shadow.prepare import ShadowConfig
from shadow.shipped import SHIPPED_SIZES, read_manifest

#: the default suite runs quick mode with the primary method and the cheapest
#: baseline on the shadow size whose preparation ships (assets/preparation), so
#: no shadow is probed (a few minutes on 2 cores, most of it serving the target);
#: every method runs in the slow test below (about 20 minutes)
SMOKE_METHODS = ["srag", "rag_mia"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("bench-quick")
    n_m, n_n, n_g = SHIPPED_SIZES["quick"]
    cfg = BenchConfig.quick(out_dir=str(out), target_corpus=str(shared_data / "genmedgpt5k.jsonl"),
                            methods=list(SMOKE_METHODS),
                            shadow=ShadowConfig(n_members=n_m, n_nonmembers=n_n, n_per_class_generative=n_g))
    logs: list[str] = []
    built: list[str] = []  # shadow RAGs built: one is built only to probe the shadow
    real_build = prepare.build_shadow_rag
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prepare, "build_shadow_rag", lambda c, kb, *_: built.append(c.prompt_style) or real_build(c, kb))
        results = run_bench(cfg, log=logs.append)
    return cfg, results, {"logs": logs, "shadow_rags_built": built}


def test_the_benchmark_uses_the_shipped_preparation_of_its_shadow(quick_run):
    """At a shipped size the benchmark's shadow comes from assets/preparation, as an audit's does:
    no shadow RAG is built and nothing is probed on it (which also keeps this module's fixture to minutes)."""
    _, results, seen = quick_run
    assert seen["shadow_rags_built"] == []
    shipped = read_manifest()
    assert all(results["shadow"][m]["key"] in shipped for m in SMOKE_METHODS)


def test_the_run_says_how_much_of_it_is_left_after_every_leg(quick_run):
    _, _, seen = quick_run
    lines = [line for line in seen["logs"] if line.startswith("run: ")]
    assert lines[0].startswith("run: 1 of 2 legs done (20 of 40 documents); about ")
    assert lines[-1] == "run: 2 of 2 legs done (40 of 40 documents); all done"


def _check_every_method_scored(cfg: BenchConfig, results: dict) -> None:
    assert results["schema_version"] == bench.SCHEMA_VERSION
    rows = results["rows"]
    n_docs = cfg.n_members + cfg.n_nonmembers
    for m in cfg.methods:
        mine = [r for r in rows if r["method"] == m]
        assert len(mine) == n_docs, m
        assert sum(r["label"] for r in mine) == cfg.n_members
        # every probe went through the HTTP connector and was answered
        assert all(r["failed"] == 0 and r["queries"] >= 1 for r in mine if r["reason"] is None), m
        assert sum(r["score"] is not None for r in mine) >= n_docs - 2, m
    metrics = results["metrics"]["none"]
    assert set(cfg.methods) | {"combined"} <= set(metrics)
    for m in cfg.methods:
        s = metrics[m]
        assert 0.0 <= s["auc"] <= 1.0 and s["auc_ci"][0] <= s["auc"] <= s["auc_ci"][1]
        assert s["queries_per_doc"] >= 1 and s["prompt_tokens_per_doc"] > 0
    # the reference target reports what it retrieved: its members are found by their own probes
    assert metrics["srag"]["retrieval_recall_members"] > 0.5
    # S-RAG, the primary method, separates members from non-members on the served target
    assert metrics["srag"]["auc"] > 0.7


def test_quick_benchmark_scores_every_method_on_every_document(quick_run):
    cfg, results, _ = quick_run
    _check_every_method_scored(cfg, results)


@pytest.mark.slow
def test_quick_mode_with_every_method(tmp_path, shared_data):
    cfg = BenchConfig.quick(out_dir=str(tmp_path), target_corpus=str(shared_data / "genmedgpt5k.jsonl"))
    assert cfg.methods == ALL_METHODS and cfg.defenses == ["none"] and cfg.n_members == cfg.n_nonmembers == 10
    _check_every_method_scored(cfg, run_bench(cfg, log=lambda s: None))


def test_quick_benchmark_writes_its_outputs(quick_run):
    cfg, results, _ = quick_run
    out = bench.Path(cfg.out_dir)
    saved = json.loads((out / "results.json").read_text())
    assert saved["metrics"].keys() == results["metrics"].keys() and len(saved["rows"]) == len(results["rows"])
    assert (out / "roc_none.png").stat().st_size > 1000
    # the defense was served by two servers side by side (BenchConfig.server_lanes), and both answered probes
    assert cfg.server_lanes == 2
    for log in ("server-none.log", "server-none-lane2.log"):
        assert " in " in (out / log).read_text() and "completions" in (out / log).read_text(), log
    table = (out / "table.md").read_text()
    assert table.startswith("| defense | method | members + non-members | AUC") and "S-RAG" in table
    md = out / "BENCHMARKS.md"
    md.write_text("# Benchmarks\n\n<!-- membership benchmark:start -->\nold\n<!-- membership benchmark:end -->\ntail\n")
    bench.update_benchmarks_md(results, "python -m shadow.bench --quick", md)
    text = md.read_text()
    assert "old" not in text and text.rstrip().endswith("tail") and "python -m shadow.bench --quick" in text


def test_rerun_and_rescore_send_no_target_query(quick_run, monkeypatch):
    cfg, results, _ = quick_run

    def no_server(*a, **k):
        raise AssertionError("a finished run must not start the target again")

    monkeypatch.setattr(bench.served, "ServedTarget", no_server)
    logs: list[str] = []
    again = run_bench(cfg, log=logs.append)
    assert any("all results present" in line for line in logs)
    assert again["metrics"]["none"]["srag"]["auc"] == results["metrics"]["none"]["srag"]["auc"]
    assert results["timings"]["rows_from_earlier_runs"] == 0
    # the re-run's wall time is not a cold figure, and the report says so
    assert again["timings"]["rows_from_earlier_runs"] == again["timings"]["rows_total"] == len(results["rows"])
    md = Path(cfg.out_dir) / "BENCHMARKS-rerun.md"
    bench.update_benchmarks_md(again, "python -m shadow.bench --quick", md)
    assert f"{len(results['rows'])} of {len(results['rows'])} rows came from an earlier one" in md.read_text()
    assert bench.main(["--rescore", cfg.out_dir]) == 0
    # a quick run's table goes to its own section of BENCHMARKS.md, never the full benchmark's
    written: dict = {}
    monkeypatch.setattr(bench.cli, "update_benchmarks_md",
                        lambda results, command, section: written.update(section=section, command=command))
    assert bench.main(["--rescore", cfg.out_dir, "--update-benchmarks-md"]) == 0
    assert written["section"] == bench.SECTIONS["quick"] != bench.SECTIONS["full"]


def test_a_folder_of_another_draw_is_refused_before_anything_runs(quick_run, monkeypatch, tmp_path):
    """With another seed in the same folder, the old knowledge base was served and its stored answers read:
    27 of 50 "members" were not in the knowledge base being served, and two draws were pooled in one AUC."""
    from dataclasses import replace

    cfg, _, _ = quick_run
    monkeypatch.setattr(bench.runner, "prepare_shadow",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("nothing may run")))
    with pytest.raises(ValueError, match=r"another draw's results \(seed: 0 there, 1 now"):
        run_bench(replace(cfg, seed=cfg.seed + 1), log=lambda s: None)
    # a folder of results from before the draw was recorded cannot be checked: refused too
    (tmp_path / "scores.jsonl").write_text("{}\n")
    with pytest.raises(ValueError, match="did not record its draw"):
        run_bench(replace(cfg, out_dir=str(tmp_path)), log=lambda s: None)
    # a shadow corpus that holds a target document is refused
    shared = bench.runner.split_target_corpus(cfg)[2][:1]
    with pytest.raises(ValueError, match="shares 1 text"):
        bench.runner.check_disjoint(shared, bench.runner.split_target_corpus(cfg)[0] + shared)
    # answers are stored under the knowledge base they came from
    prof = bench.runner.get_profile("completion")
    assert (bench.runner.target_identity(cfg, "completion", prof, "none", "aaa")
            != bench.runner.target_identity(cfg, "completion", prof, "none", "bbb"))


def test_a_row_whose_target_calls_failed_is_done_again(tmp_path):
    rows = [{"defense": "none", "method": "srag", "doc_id": "a", "failed": 0},
            {"defense": "none", "method": "srag", "doc_id": "b", "failed": 2},
            {"defense": "none", "method": "mink", "doc_id": "b", "failed": 0}]
    f = tmp_path / "scores.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert bench._done_keys(f) == {("completion", "none", "srag", "a"), ("completion", "none", "mink", "b")}
    # the re-done row replaces the failed one in the metrics
    with f.open("a") as fh:
        fh.write(json.dumps({"defense": "none", "method": "srag", "doc_id": "b", "failed": 0, "score": 0.9}) + "\n")
    b = [r for r in bench.load_rows(tmp_path) if r["doc_id"] == "b" and r["method"] == "srag"]
    assert len(b) == 1 and b[0]["failed"] == 0


def test_shadow_defenses_calibrate_their_rows_on_a_defended_shadow(tmp_path, monkeypatch):
    """--shadow-defenses mirabel: a second shadow preparation with Mirabel simulated on it."""
    import audit_core.store
    from audit_core.methods.base import Calibration
    from shadow.prepare import ShadowPreparation

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "text": f"document {i} " + "word " * 30}) + "\n"
                              for i in range(12)))
    prepared: list[str | None] = []

    def fake_prepare(methods, cfg, progress=None):
        prepared.append(cfg.defense)
        return ShadowPreparation({m.name: Calibration(m.name, 0.5) for m in methods}, {}, {})

    class Stop(Exception):
        pass

    def stop(*a, **k):
        raise Stop

    monkeypatch.setattr(bench.runner, "prepare_shadow", fake_prepare)
    monkeypatch.setattr(audit_core.store, "Store", stop)  # the first thing after preparation
    cfg = BenchConfig(target_corpus=str(corpus), kb_size=6, n_members=2, n_nonmembers=2, methods=["rag_mia"],
                      defenses=["none", "prompt_modification", "mirabel"], shadow_defenses=["mirabel"],
                      out_dir=str(tmp_path / "out"))
    with pytest.raises(Stop):
        run_bench(cfg, log=lambda s: None)
    assert prepared == [None, "mirabel"]
    # the CLI flag sets the same field
    monkeypatch.setattr(bench.cli, "run_bench", lambda c, log=None: pytest.fail(str(c.shadow_defenses))
                        if c.shadow_defenses != ["mirabel"] else {"metrics": {}})
    monkeypatch.setattr(bench.cli, "markdown_table", lambda m, benign=None: "")
    assert bench.main(["--target-corpus", str(corpus), "--shadow-defenses", "mirabel"]) == 0


def _cli_settings(tmp_path, monkeypatch, attr: str, *argvs: list[str]) -> list:
    """The value of BenchConfig.<attr> that ``python -m shadow.bench`` runs with, for each argument list."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "d0", "text": "word " * 30}) + "\n")
    seen = []
    monkeypatch.setattr(bench.cli, "run_bench", lambda c, log=None: seen.append(getattr(c, attr)) or {"metrics": {}})
    monkeypatch.setattr(bench.cli, "markdown_table", lambda m, benign=None: "")
    for argv in argvs:
        assert bench.main(["--target-corpus", str(corpus), *argv]) == 0
    return seen


def test_one_at_a_time_sends_and_serves_single_requests(tmp_path, monkeypatch):
    """By default the client sends 4 requests at once and the server answers them together; --one-at-a-time
    restores the exact one-by-one answers of earlier runs, and the run records which it was."""
    import shadow.bench.served as served

    assert _cli_settings(tmp_path, monkeypatch, "one_at_a_time", ["--one-at-a-time"], []) == [True, False]
    lazy = served.LazyServedTarget(tmp_path / "corpus.jsonl", "m", None, tmp_path / "log")
    try:
        served.set_batching(True)
        assert (lazy.max_concurrency, served.SERVER_MAX_BATCH) == (1, 1)
        served.set_batching(False)
        assert (lazy.max_concurrency, served.SERVER_MAX_BATCH) == served.BATCHED and served.BATCHED[0] > 1
    finally:
        served.set_batching(False)


def test_the_run_folder_keeps_what_its_servers_generated(quick_run, tmp_path, monkeypatch):
    """The servers of a run share a generation memo in its folder (a defense leg that leaves a prompt
    as it was reuses the answer); --no-reuse-generations turns it off."""
    cfg, results, _ = quick_run
    memo = results["timings"]["generation_memo"]
    assert (Path(cfg.out_dir) / bench.runner.GENERATION_MEMO_FILE).exists()
    assert memo["generations_kept"] >= len({(r["doc_id"], r["method"]) for r in results["rows"]})
    assert _cli_settings(tmp_path, monkeypatch, "reuse_generations", ["--no-reuse-generations"], []) == [False, True]


def test_rows_lost_after_a_run_are_redone_from_the_store_without_the_server(quick_run, monkeypatch):
    """The reference server takes a new port every run; the answers of the last run must still
    be found (stored under the system's identity), so redoing rows sends no target query,
    and the server, only started on a request the store cannot answer, is never started."""
    cfg, results, _ = quick_run
    scores = Path(cfg.out_dir) / "scores.jsonl"
    kept = scores.read_text()
    started: list[tuple] = []
    real_server = bench.served.ServedTarget

    def counting_server(*a, **k):
        started.append(a)
        return real_server(*a, **k)

    monkeypatch.setattr(bench.served, "ServedTarget", counting_server)
    try:
        scores.write_text("")  # as if the scores had been lost: every row is done again
        again = run_bench(cfg, log=lambda s: None)
        rows = again["rows"]
        assert len(rows) == len(results["rows"])
        assert sum(r["sent_queries"] for r in rows) == 0
        assert started == []
        assert sum(r["queries"] for r in rows) == sum(r["queries"] for r in results["rows"])
        assert again["metrics"]["none"]["srag"]["auc"] == results["metrics"]["none"]["srag"]["auc"]
    finally:
        scores.write_text(kept)


def test_the_combined_verdict_costs_what_its_two_methods_cost():
    def row(method, doc, score, queries, cpu):
        return {"defense": "none", "method": method, "doc_id": doc, "label": 1, "score": score,
                "decision": score >= 0.5, "reason": None, "queries": queries, "prompt_tokens": 10 * queries,
                "completion_tokens": queries, "auditor_cpu_s": cpu}

    rows = [row("srag", "a", 0.9, 5, 0.5), row("mba", "a", 0.8, 10, 0.25), row("mink", "a", 0.1, 1, 2.0)]
    (c,) = bench.combined_rows(rows)
    assert c["decision"] is True and c["score"] == 0.9
    # every method the run ran feeds the verdict (a Min-k% member call stands against a "not found", R4),
    # so its cost is counted too: it was left out while its calls still moved verdicts
    assert (c["queries"], c["prompt_tokens"], c["completion_tokens"], c["auditor_cpu_s"]) == (16, 160, 16, 2.75)
    assert bench.compute_metrics(rows, n_boot=10)["none"]["combined"]["queries_per_doc"] == 16
    (not_found,) = bench.combined_rows([row("srag", "b", 0.1, 5, 0.5), row("mba", "b", 0.2, 10, 0.25)])
    (moved,) = bench.combined_rows([row("srag", "b", 0.1, 5, 0.5), row("mba", "b", 0.2, 10, 0.25),
                                    row("rag_mia", "b", 0.9, 1, 0.1)])
    assert not_found["decision"] is False and moved["decision"] is None and moved["queries"] == 16
    # where neither S-RAG nor MBA ran (a text-only chat target), the methods that ran in their place pay
    (c,) = bench.combined_rows([row("verbatim", "a", 0.9, 3, 0.1)])
    assert c["queries"] == 3


def test_the_tables_say_how_many_of_each_class_were_scored_and_rank_every_document_too():
    """Whether a document gets a score can depend on its label (20 unscored non-members raised an AUC from
    0.69 to 0.86 while the row read "50 + 50"): the scored counts per class and an AUC over every document
    say so."""
    from shadow.bench.report import zoo_table

    rows = []
    for i in range(10):
        rows.append({"defense": "none", "method": "verbatim", "doc_id": f"m{i}", "label": 1, "score": 0.55 + i / 100,
                     "decision": None, "reason": None})
        hidden = i >= 6  # the four best non-members could not be scored
        rows.append({"defense": "none", "method": "verbatim", "doc_id": f"n{i}", "label": 0,
                     "score": None if hidden else [0.2, 0.3, 0.4, 0.7, 0.8, 0.9][i], "decision": None,
                     "reason": "x" if hidden else None})
    s = bench.compute_metrics(rows, n_boot=10)["none"]["verbatim"]
    assert (s["n_scored_members"], s["n_scored_nonmembers"]) == (10, 6)
    # scored: every member above 3 of the 6 scored non-members; all: above those 3 and the 4 ranked last
    assert s["auc"] == pytest.approx(30 / 60) and s["auc_all"] == pytest.approx(70 / 100)
    line = next(x for x in zoo_table({"chat": {"none": {"verbatim": s}}}, {}).splitlines() if "Verbatim" in x)
    assert "| 10 + 10 (scored 10 + 6) |" in line and f"| {s['auc_all']:.3f}" in line
    line = next(x for x in bench.markdown_table({"none": {"verbatim": s}}).splitlines() if "Verbatim" in x)
    assert "(scored 10 + 6)" in line


def test_the_table_counts_undecided_combined_verdicts():
    """Where S-RAG finds nothing and MBA calls a member the verdict is inconclusive (rule R4): it keeps a
    score for the AUC but has no decision, and the table must say so beside its accuracy."""
    rows = []
    for i, (label, srag, mba) in enumerate([(1, 0.9, 0.9), (1, 0.4, 0.9), (0, 0.1, 0.1), (0, 0.2, 0.2)]):
        for method, score in (("srag", srag), ("mba", mba)):
            rows.append({"defense": "none", "method": method, "doc_id": f"d{i}", "label": label, "score": score,
                         "decision": score >= 0.5, "reason": None})
    metrics = bench.compute_metrics(rows, n_boot=10)
    # R4 for d1 only: the row keeps "not found" for the non-members both methods missed, like the method rows
    assert metrics["none"]["combined"]["n_inconclusive_decisions"] == 1
    line = next(x for x in bench.markdown_table(metrics).splitlines() if "| combined |" in x)
    assert "| 0 / 1 |" in line
    line = next(x for x in bench.markdown_table(metrics).splitlines() if "| S-RAG |" in x)
    assert "| 0 |" in line


def test_the_combined_row_keeps_a_score_where_no_method_decided():
    """A document every method left "not cleared" has no verdict score; the combined row ranks it by the
    first scored method, so its AUC is not computed over the decided documents alone."""
    gray = "not cleared: below the member threshold, but 9 of the shadow's 30 members score this low"
    rows = [{"defense": "none", "method": "verbatim", "doc_id": "a", "label": 1, "score": 0.9, "decision": True,
             "reason": None},
            {"defense": "none", "method": "verbatim", "doc_id": "b", "label": 1, "score": 0.2, "decision": None,
             "reason": gray},
            {"defense": "none", "method": "verbatim", "doc_id": "c", "label": 0, "score": 0.1, "decision": None,
             "reason": gray}]
    combined = {r["doc_id"]: r for r in bench.combined_rows(rows)}
    assert combined["b"]["decision"] is None and combined["b"]["score"] == 0.2 and combined["c"]["score"] == 0.1
    assert bench.compute_metrics(rows, n_boot=10)["none"]["combined"]["n_inconclusive_scores"] == 0


def test_the_combined_row_reads_the_evidence_rule_r6_needs():
    """A member S-RAG leaves "not cleared" (13% of its shadow's members score as low) and MBA calls "not found"
    is inconclusive (rule R6), not cleared: the rows keep ``member_p_value`` and the combined row reads it."""
    gray = "not cleared: below the member threshold, but 26 of the shadow's 200 members (13%) score this low"
    rows = [{"defense": "none", "method": "srag", "doc_id": "a", "label": 1, "score": 0.66, "decision": None,
             "reason": gray, "evidence": {"member_p_value": 0.13}},
            {"defense": "none", "method": "mba", "doc_id": "a", "label": 1, "score": 0.27, "decision": False,
             "reason": None, "evidence": {"member_p_value": 0.02}}]
    (c,) = bench.combined_rows(rows)
    assert c["decision"] is None and "S-RAG does not clear it" in c["reason"]
    rows[0]["evidence"] = {"member_p_value": 0.03}  # within the clearing rule's 5%: MBA's "not found" stands
    (c,) = bench.combined_rows(rows)
    assert c["decision"] is False


def _finished_run(folder: Path, seed: int, profile: str, method: str, doc_ids: list[str]) -> Path:
    """A finished benchmark folder as ``run_bench`` leaves it: results.json and scores.jsonl."""
    folder.mkdir(parents=True)
    cfg = json.loads(json.dumps(BenchConfig(seed=seed, profiles=[profile], out_dir=str(folder)).__dict__, default=str))
    cfg["shadow"] = ShadowConfig().__dict__
    key = method if profile == "completion" else f"{profile}:{method}"
    (folder / "results.json").write_text(json.dumps({"config": cfg, "shadow": {key: {"shadow_auc": 0.8}},
                                                     "timings": {}}))
    rows = [{"profile": profile, "defense": "none", "method": method, "doc_id": d, "label": i % 2,
             "score": 0.9 if i % 2 else 0.1, "decision": bool(i % 2), "reason": None, "queries": 1}
            for i, d in enumerate(doc_ids)]
    (folder / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_merging_runs_of_different_draws_keeps_each_draw_apart(tmp_path):
    """Two draws of the completion profile (one document in both test sets, with another knowledge base) and
    a chat run: the merged zoo reports each draw on its own rows, never pooled."""
    from shadow.bench.report import load_rows, merge_runs, zoo_metrics, zoo_table

    a = _finished_run(tmp_path / "a", 3, "completion", "srag", ["x", "y", "s", "t"])
    b = _finished_run(tmp_path / "b", 4, "completion", "srag", ["x", "z", "u", "v", "w", "q"])
    c = _finished_run(tmp_path / "c", 4, "chat", "verbatim", ["x", "z"])
    out = tmp_path / "merged"
    merge_runs([a, b, c], out)
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["profiles"] == ["completion (seed 3)", "completion (seed 4)", "chat (seed 4)"]
    assert set(res["shadow"]) == {"completion (seed 3):srag", "completion (seed 4):srag", "chat (seed 4):verbatim"}
    zoo = zoo_metrics(load_rows(out), n_boot=5)
    assert zoo["completion (seed 3)"]["none"]["srag"]["n_members"] == 2
    assert zoo["completion (seed 4)"]["none"]["srag"]["n_members"] == 3
    assert set(zoo["chat (seed 4)"]["none"]) == {"verbatim", "combined"}
    table = zoo_table(zoo, {})
    assert "| completion (seed 3) | S-RAG | none | 2 + 2 |" in table and "| chat (seed 4) | Verbatim" in table
    assert res["timings"]["merged_runs"] == 3
    # a second run of one draw with another shadow keeps its shadow line apart
    d = _finished_run(tmp_path / "d", 4, "chat", "verbatim", ["x", "z"])
    r = json.loads((d / "results.json").read_text())
    r["shadow"]["chat:verbatim"]["shadow_auc"] = 0.6
    (d / "results.json").write_text(json.dumps(r))
    merge_runs([a, c, d], tmp_path / "two-shadows")
    assert set(json.loads((tmp_path / "two-shadows" / "results.json").read_text())["shadow"]) == {
        "completion (seed 3):srag", "chat (seed 4):verbatim", "chat (seed 4):verbatim [d]"}
    # runs of one draw (e.g. one process per profile) keep their profile names
    merge_runs([b, c], tmp_path / "one")
    assert json.loads((tmp_path / "one" / "results.json").read_text())["config"]["profiles"] == ["completion", "chat"]


def _rescored(folder: Path, scores: dict[str, float | None]) -> None:
    """Give the rows of a finished run other scores."""
    rows = [json.loads(x) for x in (folder / "scores.jsonl").read_text().splitlines()]
    for r in rows:
        r["score"] = scores[r["doc_id"]]
    (folder / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_paired_comparison_of_two_methods_on_one_draw(tmp_path, capsys):
    """The paired difference of two runs' scores of the same documents; other draws are refused, and
    documents without a score under either method are left out and counted."""
    from shadow.bench.cli import main
    from shadow.bench.report import paired_comparison

    ids = [f"d{i}" for i in range(40)]  # odd index = member (``_finished_run``)
    a = _finished_run(tmp_path / "a", 2, "chat", "verbatim", ids)
    b = _finished_run(tmp_path / "b", 2, "chat", "s2mia_t", ids)
    # a separates perfectly; b ranks the documents at random-looking fixed positions
    _rescored(a, {d: (0.6 if i % 2 else 0.1) + i / 100 for i, d in enumerate(ids)})
    _rescored(b, {d: ((i * 7) % 40) / 40 for i, d in enumerate(ids)} | {"d0": None})
    c = paired_comparison((a, "verbatim"), (b, "s2mia_t"), profile="chat", n_boot=200)
    assert c["auc_a"] == 1.0 and c["auc_b"] < 0.75
    assert c["members"] == 20 and c["nonmembers"] == 19 and c["left_out"] == 1
    assert c["difference"] == pytest.approx(c["auc_a"] - c["auc_b"])
    assert 0 < c["ci"][0] <= c["difference"] <= c["ci"][1]
    # the same method against itself: no difference
    same = paired_comparison((a, "verbatim"), (a, "verbatim"), profile="chat", n_boot=50)
    assert same["difference"] == 0 and same["ci"] == [0.0, 0.0]
    # another seed, or labels that disagree, are another draw
    other = _finished_run(tmp_path / "other", 3, "chat", "s2mia_t", ids)
    with pytest.raises(ValueError, match="not the same draw"):
        paired_comparison((a, "verbatim"), (other, "s2mia_t"), profile="chat")
    flipped = _finished_run(tmp_path / "flipped", 2, "chat", "s2mia_t", ["x"] + ids)  # every label shifted by one
    with pytest.raises(ValueError, match="member in one run"):
        paired_comparison((a, "verbatim"), (flipped, "s2mia_t"), profile="chat")
    disjoint = _finished_run(tmp_path / "disjoint", 2, "chat", "s2mia_t", [f"e{i}" for i in range(4)])
    with pytest.raises(ValueError, match="share 0 scored documents"):
        paired_comparison((a, "verbatim"), (disjoint, "s2mia_t"), profile="chat")
    with pytest.raises(ValueError, match="no rag_mia rows"):
        paired_comparison((a, "rag_mia"), (b, "s2mia_t"), profile="chat")
    # the command line prints one line, and a clear error with status 2
    assert main(["--compare", f"{a}:verbatim", f"{b}:s2mia_t", "--profile", "chat"]) == 0
    assert "paired difference +" in capsys.readouterr().out
    assert main(["--compare", f"{a}:verbatim", f"{b}:s2mia_t", "--profile", "chat", "--defense", "mirabel"]) == 2
    assert "no verbatim rows" in capsys.readouterr().err


def test_pooling_draws_reads_each_draw_apart_and_refuses_what_is_not_another_draw(tmp_path, capsys):
    """The mean of per-draw AUCs of one method; a repeated seed, another experiment or a missing method is
    refused with a clear message, and the command line prints one line."""
    from shadow.bench.cli import main
    from shadow.bench.report import pooled_draws, pooled_line

    ids = [f"d{i}" for i in range(20)]  # odd index = member
    a = _finished_run(tmp_path / "a", 3, "completion", "srag", ids)
    b = _finished_run(tmp_path / "b", 4, "completion", "srag", ids)
    # a separates perfectly; b on another scale, with two members below every non-member
    _rescored(b, {d: 10 + (0.6 if i % 2 else 0.1) - (1.0 if i in (1, 3) else 0) for i, d in enumerate(ids)}
              | {"d0": None})
    p = pooled_draws([a, b], "srag", n_boot=200)
    assert p["per_draw_auc"][0] == 1.0 and p["per_draw_auc"][1] == pytest.approx(0.8)
    assert p["mean_auc"] == pytest.approx(0.9) and p["ci"][0] < 0.9 <= p["ci"][1] <= 1.0
    # between draws: two draws 0.2 apart give a t interval (1 degree of freedom) far wider than the bootstrap's
    assert p["between_draws_ci"] == [0.0, 1.0] and "between draws" in pooled_line(p)  # 0.9 -+ 12.7 x 0.1
    assert (p["seeds"], p["members"], p["nonmembers"], p["left_out"]) == ([3, 4], 20, 19, 1)
    with pytest.raises(ValueError, match="repeats the draw of seed 3"):
        pooled_draws([a, _finished_run(tmp_path / "again", 3, "completion", "srag", ids)], "srag")
    other = _finished_run(tmp_path / "other", 5, "completion", "srag", ids)
    r = json.loads((other / "results.json").read_text())
    r["config"]["kb_size"] = 300
    (other / "results.json").write_text(json.dumps(r))
    with pytest.raises(ValueError, match="another experiment.*kb_size"):
        pooled_draws([a, other], "srag")
    with pytest.raises(ValueError, match="no mba rows"):
        pooled_draws([a, b], "mba")
    # the product's combined verdict is pooled from the stored rows as the tables derive it
    assert pooled_draws([a, b], "combined", n_boot=50)["members"] == 20
    with pytest.raises(ValueError, match="at least two"):
        pooled_draws([a], "srag")
    assert main(["--pool", f"{a},{b}", "--methods", "srag"]) == 0
    assert "mean AUC over 2 draws (seeds 3, 4) 0.900" in capsys.readouterr().out
    assert main(["--pool", f"{a},{b}"]) == 2
    assert "--pool needs --methods" in capsys.readouterr().err


def test_a_row_keeps_the_readings_the_rules_need_and_which_scorer_scored():
    from audit_core.methods.base import MethodResult
    from shadow.bench.runner import _small_evidence

    res = MethodResult("srag", "d", 0.9, True, evidence={
        "words": [{"word": "x", "prob": 0.5, "aligned": "first"}], "member_p_value": 0.1,
        "scorer": "mean_probability", "histogram": [1, 0, 0], "raw_score": 0.5})
    assert _small_evidence(res) == {"probs": [0.5], "aligned": ["first"], "member_p_value": 0.1,
                                    "scorer": "mean_probability", "raw_score": 0.5}


def test_a_method_row_is_ranked_by_its_raw_score_the_combined_row_by_its_own():
    """A calibration that ran the other way must not turn a method's AUC into one minus it."""
    from shadow.bench.report import compute_metrics, ranking_score

    rows = []
    for i in range(10):
        label = int(i < 5)
        raw = 0.9 - 0.1 * i  # members score higher
        rows.append({"profile": "completion", "defense": "none", "method": "entailment", "doc_id": f"d{i}",
                     "label": label, "score": 1 - raw, "decision": None, "reason": "no signal",
                     "evidence": {"raw_score": raw}})
    assert ranking_score(rows[0]) == pytest.approx(0.9)
    assert compute_metrics(rows)["none"]["entailment"]["auc"] == pytest.approx(1.0)
    old = [{k: v for k, v in r.items() if k != "evidence"} for r in rows]  # a run before raw scores were kept
    assert compute_metrics(old)["none"]["entailment"]["auc"] == pytest.approx(0.0)
    assert ranking_score({"method": "combined", "score": 0.3, "evidence": {"raw_score": 9.0}}) == 0.3
    assert ranking_score({"method": "srag", "score": None, "evidence": {"raw_score": 9.0}}) is None


def test_methods_take_group_names(tmp_path, monkeypatch, capsys):
    """--methods paper is the benchmark as issues 6 and 18 first measured it; groups and names mix, in registry
    order, and a name that is neither is refused with the choices before anything runs."""
    from shadow.bench.runner import METHOD_GROUPS, expand_methods

    assert expand_methods("paper") == ["srag", "mba", "rag_mia", "s2mia_t", "s2mia_m", "mink"]
    assert expand_methods("verbatim,paper") == ["srag", "mba", "rag_mia", "s2mia_t", "s2mia_m", "mink", "verbatim"]
    assert expand_methods("all") == bench.ALL_METHODS
    assert sorted(METHOD_GROUPS["paper"] + METHOD_GROUPS["text-only"]) == sorted(bench.ALL_METHODS)
    assert _cli_settings(tmp_path, monkeypatch, "methods", ["--methods", "text-only,srag"], []) == [
        ["srag", *METHOD_GROUPS["text-only"]], bench.ALL_METHODS]
    assert bench.main(["--methods", "srag,papers"]) == 2
    assert "unknown method or group 'papers'" in capsys.readouterr().err


class _StartingServer:
    """A fake ``shadow.serve`` child on a fake clock: it writes a line to its log every 10 s and answers
    ``ready_at`` seconds after it started; ``exit_at`` it dies instead."""

    def __init__(self, clock, log, ready_at=95.0, exit_at=None):
        self.clock, self.log, self.ready_at, self.exit_at = clock, log, ready_at, exit_at
        self.returncode = None

    def tick(self):  # one simulated second of loading
        self.clock[0] += 1.0
        if self.clock[0] % 10 == 0:
            self.log.write(f"indexing knowledge base: {int(self.clock[0]) * 20}/2000\r".encode())
            self.log.flush()

    def poll(self):
        if self.exit_at is not None and self.clock[0] >= self.exit_at:
            self.returncode = 1
        return self.returncode


def _fake_start(monkeypatch, tmp_path, **server):
    """ServedTarget's constructor with its child process, clock and readiness check faked: no server runs."""
    import subprocess
    import types

    from shadow.bench import served

    clock, said, child = [0.0], [], []

    def popen(cmd, cwd, env, stdout, stderr):
        child.append(_StartingServer(clock, stdout, **server))
        return child[0]

    monkeypatch.setattr(served, "subprocess", types.SimpleNamespace(Popen=popen, STDOUT=subprocess.STDOUT))
    monkeypatch.setattr(served, "time", types.SimpleNamespace(monotonic=lambda: clock[0],
                                                               sleep=lambda s: child[0].tick()))
    monkeypatch.setattr(served, "server_ready", lambda api, url: clock[0] >= child[0].ready_at)
    monkeypatch.setattr(served, "say", said.append)
    make = lambda: served.ServedTarget(tmp_path / "kb.jsonl", "m", None, tmp_path / "server.log", profile="chat")
    return make, said, clock


def test_a_reference_server_start_is_reported_while_it_loads(tmp_path, monkeypatch):
    """Loading the model and indexing 2,000 documents takes minutes: the start is said, then every 30 s the
    time taken and the server's last log line, then the time it took."""
    make, said, clock = _fake_start(monkeypatch, tmp_path, ready_at=95.0)
    make()
    assert clock[0] == 95.0
    assert said[0].startswith("starting the reference server (chat, no defense, port ") and "1800 s" in said[0]
    assert str(tmp_path / "server.log") in said[0]
    progress = said[1:-1]
    assert [line.split(": ")[1].split(" s of")[0] for line in progress] == ["30", "60", "90"]  # every 30 s
    assert all("of at most 1800 s" in line for line in progress)
    # the last line the server wrote (a progress bar's last state) by then
    assert progress[0].endswith("its log: indexing knowledge base: 600/2000")
    assert progress[2].endswith("its log: indexing knowledge base: 1800/2000")
    assert said[-1].startswith("the reference server (chat, no defense") and said[-1].endswith("ready after 95 s")


def test_a_reference_server_that_dies_while_starting_says_when_and_its_last_log_line(tmp_path, monkeypatch):
    make, said, _ = _fake_start(monkeypatch, tmp_path, ready_at=1e9, exit_at=42.0)
    with pytest.raises(RuntimeError, match=r"exited with code 1 after 42 s; its log ends: indexing knowledge "
                                           r"base: 800/2000"):
        make()
    assert [line.split(": ")[1].split(" s of")[0] for line in said[1:]] == ["30"]
