"""The CLI's shareable exports: the app's names, redacted by default (issue 20 points 9 and 10)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.cli import _write_report, main
from tests.audit_core.test_report import make_result


def test_report_dir_gets_the_apps_names_and_redacted_texts(tmp_path):
    r = make_result()
    paths, problem = _write_report(r, tmp_path / "out", redact=True)
    assert problem is None and sorted(p.name for p in paths) == sorted(
        f"audit-2025-05-01-127-0-0-1-8000-v1-acme-rag-model-7b.{ext}" for ext in ("pdf", "json", "csv", "scores.csv"))
    data = json.loads(next(p for p in paths if p.suffix == ".json").read_text())
    assert data["redacted"] and "sinus infection" not in json.dumps(data)
    full, _ = _write_report(r, tmp_path / "full", redact=False)
    assert "sinus infection" in next(p for p in full if p.suffix == ".json").read_text()


def test_report_flags_are_parsed(monkeypatch):
    seen = {}
    monkeypatch.setattr("app.cli.cmd_audit", lambda args: seen.update(vars(args)) or 0)
    import app.cli

    # the parser binds cmd_audit when main() runs, so the patched one is called
    assert app.cli.main(["audit", "--target", "demo", "--docs", "x.csv", "--report-dir", "out", "--no-redact",
                         "--run-without-signal", "mba"]) == 0
    assert seen["report_dir"] == "out" and seen["no_redact"] and seen["run_without_signal"] == "mba"
    assert main is app.cli.main


def test_prepare_and_audit_take_the_target_style(monkeypatch):
    """`prepare` asks no target: the shadow answers in --target-style, completion without it; `audit`
    passes the choice on, and without it leaves the style to the capability probe."""
    import shadow.prepare
    from app.cli import _audit_config

    seen = []

    class Prep:
        calibrations, from_cache, seconds = {}, {}, {}

    monkeypatch.setattr(shadow.prepare, "prepare_shadow",
                        lambda methods, shadow, **kw: seen.append((shadow.prompt_style, [
                            getattr(m.config, "style", None) for m in methods])) or Prep())
    assert main(["prepare", "--method", "srag", "--target-style", "chat"]) == 0
    assert main(["prepare", "--method", "srag"]) == 0
    assert seen == [("chat", ["chat"]), ("completion", ["completion"])]
    parsed = []
    monkeypatch.setattr("app.cli.cmd_audit", lambda args: parsed.append(_audit_config(args)) or 0)
    assert main(["audit", "--target", "demo", "--docs", "x.csv", "--target-style", "chat"]) == 0
    assert main(["audit", "--target", "demo", "--docs", "x.csv"]) == 0
    assert [c.target_style for c in parsed] == ["chat", None]


def test_not_found_may_stand_only_where_the_target_retrieves_with_queries_as_sent(monkeypatch):
    """Verdict rule R5 from the command line: known for the demo target (unless its defense changes what the
    retriever sees), the operator's statement (--retrieval-as-sent) for an endpoint, never assumed."""
    import pytest

    from app.cli import _audit_config

    parsed = []
    monkeypatch.setattr("app.cli.cmd_audit", lambda args: parsed.append(_audit_config(args)) or 0)
    for argv in (["--target", "demo"], ["--target", "demo", "--demo-defense", "prompt_modification"],
                 ["--target", "demo", "--demo-defense", "paraphrase"], ["--target", "demo", "--demo-defense", "mirabel"],
                 ["--target", "http://127.0.0.1:9/v1", "--model", "m"],
                 ["--target", "http://127.0.0.1:9/v1", "--model", "m", "--retrieval-as-sent"]):
        assert main(["audit", "--docs", "x.csv", *argv]) == 0
    assert [c.verdict.retrieval_as_sent for c in parsed] == [True, True, False, False, False, True]
    seen = []
    monkeypatch.setattr("app.cli.cmd_audit", lambda args: seen.append(args) or 0)
    main(["audit", "--docs", "x.csv", "--target", "demo", "--demo-defense", "paraphrase", "--retrieval-as-sent"])
    with pytest.raises(ValueError, match="does not retrieve with queries as sent"):
        _audit_config(seen[0])  # which the audit says as bad input, exit 2, before anything is sent


def test_the_cli_tells_the_owner_how_withheld_documents_can_be_cleared():
    from app.cli import withheld_note
    from audit_core.methods.base import MethodResult
    from audit_core.verdict import VerdictConfig, decide

    missed = [MethodResult("srag", "d", 0.1, False, None, {"fpr": 0.05})]
    assert withheld_note([decide("d", missed, VerdictConfig(retrieval_as_sent=True))]) is None
    note = withheld_note([decide("d", missed), decide("e", missed)])
    assert note.startswith("note: 2 document(s) not cleared") and "--retrieval-as-sent --reuse-days 1" in note


def test_the_cli_prints_each_methods_power_and_clearing_without_failing(capsys):
    """Every CLI audit in which a method decides prints this block (it once raised NameError there)."""
    from app.cli import _print_power

    _print_power({"cited_sources": {"decides": True, "power": 0.98, "miss_rate": 0.05, "cleared": 0.0,
                                    "never_clears": True},
                  "srag": {"decides": True, "power": None, "miss_rate": 0.05, "cleared": 0.8},
                  "verbatim": {"decides": False, "reason": "no signal on its shadow"}}, 0.05)
    err = capsys.readouterr().err
    assert "Cited sources: decides at a 5% false-positive rate; shadow power (TPR) 0.98" in err
    assert 'none (this method never says "not found"' in err
    assert "S-RAG: decides" in err and "0.80 (members missed at most 5%)" in err
    assert "Verbatim continuation: abstains: no signal on its shadow" in err


def test_a_scheduled_audit_gets_a_junit_report_and_a_failing_status_on_evidence(tmp_path, capsys):
    """--junit writes the verdicts for a CI's test view; --fail-on turns evidence into exit status 1."""
    import argparse
    import xml.etree.ElementTree as ET

    from app.cli import GATE_FAILED, _ci_outputs

    r = make_result()  # one member, one not found, two inconclusive
    junit = tmp_path / "audit.xml"
    assert _ci_outputs(argparse.Namespace(junit=str(junit), fail_on=None), r) == 0
    assert junit.stat().st_mode & 0o077 == 0  # its owner's only, as --out and --report-dir are
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "1", "2")
    assert _ci_outputs(argparse.Namespace(junit=None, fail_on="member"), r) == GATE_FAILED == 1
    assert "gate (--fail-on member): doc-1: member" in capsys.readouterr().err
    r["verdicts"] = [v for v in r["verdicts"] if v["verdict"] != "member"]
    assert _ci_outputs(argparse.Namespace(junit=None, fail_on="member"), r) == 0
    assert _ci_outputs(argparse.Namespace(junit=None, fail_on="inconclusive"), r) == GATE_FAILED


def test_ci_flags_are_parsed_for_both_audits_and_a_wrong_folder_is_said_before_anything_is_sent(
        monkeypatch, tmp_path, capsys):
    import app.cli

    seen = []
    monkeypatch.setattr("app.cli.cmd_audit", lambda args: seen.append((args.junit, args.fail_on)) or 0)
    monkeypatch.setattr("app.cli.cmd_canaries_audit", lambda args: seen.append((args.junit, args.fail_on)) or 0)
    assert app.cli.main(["audit", "--target", "demo", "--docs", "x.csv", "--junit", "a.xml", "--fail-on", "member"]) == 0
    assert app.cli.main(["canaries", "audit", "--kit", "k", "--target", "demo", "--fail-on", "inconclusive"]) == 0
    assert seen == [("a.xml", "member"), (None, "inconclusive")]
    monkeypatch.undo()
    docs = tmp_path / "docs.csv"
    docs.write_text("text\n" + "A patient asked about a persistent cough and was given advice on rest. " * 3 + "\n")
    missing = tmp_path / "no-such-folder" / "audit.xml"
    assert app.cli.main(["audit", "--target", "demo", "--docs", str(docs), "--method", "rag_mia",
                         "--junit", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"--junit {missing}" in err and "does not exist" in err and "Traceback" not in err


def test_a_junit_file_that_cannot_be_written_is_said_without_a_traceback(tmp_path, capsys):
    import argparse

    from app.cli import _ci_outputs

    folder = tmp_path / "a-folder"
    folder.mkdir()
    assert _ci_outputs(argparse.Namespace(junit=str(folder), fail_on=None), make_result()) == 3  # a folder, not a file
    err = capsys.readouterr().err
    assert "the JUnit report could not be written" in err and "Traceback" not in err
    # a member finding is never hidden behind a file that could not be written
    assert _ci_outputs(argparse.Namespace(junit=str(folder), fail_on="member"), make_result()) == 1
    assert _ci_outputs(argparse.Namespace(junit=None, fail_on=None), make_result(), written=False) == 3


def test_a_crash_exits_3_not_the_1_that_fail_on_reserves_and_a_store_folder_is_bad_input(
        tmp_path, capsys, monkeypatch):
    import app.cli

    def crash(args):
        raise RuntimeError("disk on fire, key sk-abcdefghijklmnop")

    monkeypatch.setattr("app.cli.cmd_audit", crash)
    assert app.cli.main(["audit", "--target", "demo", "--docs", "x.csv", "--fail-on", "member"]) == 3
    err = capsys.readouterr().err
    assert "unexpected failure (RuntimeError: disk on fire" in err and "sk-abcdefghijklmnop" not in err
    monkeypatch.undo()
    folder = tmp_path / "a-folder"
    folder.mkdir()
    assert app.cli.main(["audit", "--target", "demo", "--docs", _docs_csv(tmp_path), "--method", "rag_mia",
                         "--store", str(folder), "--fail-on", "member"]) == 2
    err = capsys.readouterr().err
    assert f"--store {folder} is a folder" in err and "Traceback" not in err


def _docs_csv(tmp_path):
    docs = tmp_path / "docs.csv"
    docs.write_text("text\n" + "A patient asked about a persistent cough and was given advice on rest. " * 3 + "\n")
    return str(docs)


def test_bad_target_arguments_are_bad_input_said_before_the_estimate(tmp_path, capsys, monkeypatch):
    """Exit 2, before any cost is printed or anything sent; a password in the URL is never printed."""
    docs = _docs_csv(tmp_path)
    tf = tmp_path / "t.yaml"
    tf.write_text("type: http\nurl: http://127.0.0.1:9/ask\nheaders:\n  X-Api-Key: $RPA_TEST_UNSET_KEY\n"
                  "body:\n  question: \"{{prompt}}\"\nanswer_path: $.answer\n")
    monkeypatch.delenv("RPA_TEST_UNSET_KEY", raising=False)
    cases = [(["--target", "notaurl", "--model", "m"], "with a host"),
             (["--target", "http://127.0.0.1:9/v1"], "--model is required"),
             (["--target", "http://user:pw-4711@127.0.0.1:9/v1", "--model", "m"], "user name or password"),
             (["--target-file", str(tf)], "run again with --allow-env RPA_TEST_UNSET_KEY"),
             (["--target-file", str(tf), "--allow-env", "RPA_TEST_UNSET_KEY"], "$RPA_TEST_UNSET_KEY, which is not set")]
    for argv, said in cases:
        assert main(["audit", "--docs", docs, "--method", "rag_mia", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert said in err and "estimated cost" not in err and "Traceback" not in err
        assert "pw-4711" not in err and "sent to" not in err


def test_outputs_that_cannot_be_written_and_bad_counts_are_said_before_anything_is_sent(tmp_path, capsys):
    import pytest

    docs = _docs_csv(tmp_path)
    folder = tmp_path / "a-folder"
    folder.mkdir()
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    small = tmp_path / "small.jsonl"
    small.write_text("".join(f'{{"text": "public text number {i} about knees"}}\n' for i in range(5)))
    wrong = tmp_path / "corpus.txt"
    wrong.write_text("text\nsome text\n")
    not_a_db = tmp_path / "notes.sqlite"
    not_a_db.write_text("these are notes, not an answer store")
    for argv, said in [(["--out", str(folder)], "is a folder"), (["--report-dir", str(a_file)], "is a file"),
                       (["--report-dir", str(a_file / "reports")], f"is inside the file {a_file}"),
                       (["--aux-corpus", str(tmp_path / "none.jsonl")], "no such file"),
                       (["--aux-corpus", str(small)], "5 usable text(s)"),
                       (["--aux-corpus", str(wrong)], "unsupported corpus format"),
                       (["--store", str(not_a_db)], "cannot be opened (file is not a database)")]:
        assert main(["audit", "--target", "demo", "--docs", docs, "--method", "rag_mia", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err
    for argv in (["audit", "--target", "demo", "--docs", docs, "--shadow-size", "-1"],
                 ["prepare", "--bins", "0"], ["canaries", "make", "--kit", str(tmp_path / "k"), "--n", "0"]):
        with pytest.raises(SystemExit) as stop:  # argparse: usage and exit 2
            main(argv)
        assert stop.value.code == 2 and " or more" in capsys.readouterr().err
    assert main(["prepare", "--method", "bogus"]) == 2
    assert "unknown method 'bogus'" in capsys.readouterr().err


def test_a_jsonl_of_documents_is_checked_like_a_csv(tmp_path, capsys):
    """Its text field is guessed or named like a CSV column, too-short rows are listed, a broken line is bad input."""
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "a", "body": "' + "word " * 30 + '"}\n{"id": "b", "body": "too short"}\n')
    argv = ["audit", "--target", "demo", "--method", "rag_mia", "--estimate-only", "--docs", str(docs)]
    assert main(argv + ["--text-column", "body"]) == 0
    err = capsys.readouterr().err
    assert "skipped row 2" in err and "for 1 documents" in err
    assert main(argv + ["--text-column", "text"]) == 2
    assert "Text column 'text' not found" in capsys.readouterr().err
    docs.write_text('{"id": "a", "text": "' + "word " * 30 + '"}\nnot json\n')
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Line 2 of this JSONL file is not valid JSON" in err and "Traceback" not in err


def test_documents_given_again_as_controls_are_audited_as_documents_only(tmp_path, capsys):
    docs = _docs_csv(tmp_path)
    assert main(["audit", "--target", "demo", "--docs", docs, "--controls", docs, "--method", "rag_mia",
                 "--estimate-only"]) == 0
    err = capsys.readouterr().err
    assert "1 control(s) have the same text as a document you audit" in err and "for the 1 controls" not in err


def test_an_output_that_is_an_input_is_refused_before_anything_is_sent(tmp_path, capsys):
    """--out or --junit naming the documents or the canary kit replaced that file after the audit (exit 0),
    and a kit's seed has no other copy."""
    from app import cli
    from audit_core.evidence.canaries import load_kit

    docs = tmp_path / "docs.csv"
    docs.write_text("id,text\na," + " ".join(["My knee has hurt for three weeks after a long shift at work."] * 3) + "\n")
    before = docs.read_bytes()
    for flag in ("--out", "--junit"):
        rc = cli.main(["audit", "--target", "demo", "--docs", str(docs), flag, str(docs), "--estimate-only"])
        assert rc == 2 and "would destroy" in capsys.readouterr().err and docs.read_bytes() == before
    kit = tmp_path / "kit.json"
    assert cli.main(["canaries", "make", "--kit", str(kit), "--n", "10"]) == 0
    seed = load_kit(kit).seed
    rc = cli.main(["canaries", "audit", "--kit", str(kit), "--target", "demo", "--out", str(kit), "--estimate-only"])
    assert rc == 2 and "would destroy" in capsys.readouterr().err and load_kit(kit).seed == seed


def test_api_key_env_takes_a_name_and_never_repeats_a_key_given_there(capsys):
    from app import cli

    with pytest.raises(SystemExit) as info:
        cli.main(["audit", "--target", "http://127.0.0.1:9/v1", "--model", "m", "--docs", "x.csv",
                  "--api-key-env", "sk-proj-SECRETKEY123"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "name of an environment variable" in err and "SECRETKEY123" not in err


def test_ctrl_c_outside_the_audit_loop_is_a_message_and_exit_3(monkeypatch, capsys):
    from app import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_prepare", interrupted)
    rc = cli.main(["prepare"])
    err = capsys.readouterr().err
    assert rc == 3 and "interrupted" in err and "Traceback" not in err


def test_canaries_make_leaves_no_canaries_behind_when_the_kit_cannot_be_saved(tmp_path, capsys):
    """The canaries were written before the kit: a failed save left publishable canaries with no seed."""
    from app import cli

    blocker = tmp_path / "docs.csv"
    blocker.write_text("x")
    pub = tmp_path / "pub.txt"
    rc = cli.main(["canaries", "make", "--kit", str(blocker / "kit.json"), "--out", str(pub)])
    err = capsys.readouterr().err
    assert rc == 2 and "the kit file" in err and not pub.exists()
    assert cli.main(["canaries", "make", "--kit", str(tmp_path / "kit.json"), "--out", str(pub)]) == 0


def test_canaries_make_with_force_keeps_the_old_kit_when_the_canaries_cannot_be_written(tmp_path, capsys,
                                                                                         monkeypatch):
    """Under --force the new seed replaced the old kit, then a failed --out deleted the file: the old kit's
    seed, its only copy, was gone. Now the new kit takes the old one's place only once the canaries are out."""
    from pathlib import Path

    from app import cli

    kit = tmp_path / "kit.json"
    assert cli.main(["canaries", "make", "--kit", str(kit), "--n", "10"]) == 0
    before = kit.read_text()
    real = Path.write_text

    def failing(self, *a, **k):
        if self.name == "pub.txt":
            raise OSError(28, "No space left on device")
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", failing)
    capsys.readouterr()
    rc = cli.main(["canaries", "make", "--kit", str(kit), "--n", "10", "--force", "--out", str(tmp_path / "pub.txt")])
    err = capsys.readouterr().err
    assert rc == 2 and "the kit that was there is unchanged" in err
    assert kit.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == ["kit.json"]
    monkeypatch.setattr(Path, "write_text", real)
    assert cli.main(["canaries", "make", "--kit", str(kit), "--n", "10", "--force",
                     "--out", str(tmp_path / "pub.txt")]) == 0
    assert kit.read_text() != before and oct(kit.stat().st_mode & 0o777) == "0o600"


def test_a_key_no_header_can_carry_is_bad_input_said_without_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RPA_TEST_BAD_KEY", "sk-pasted with a space-4711")
    assert main(["audit", "--docs", _docs_csv(tmp_path), "--method", "rag_mia", "--target", "http://127.0.0.1:9/v1",
                 "--model", "m", "--api-key-env", "RPA_TEST_BAD_KEY"]) == 2
    err = capsys.readouterr().err
    assert "$RPA_TEST_BAD_KEY has characters no key has" in err and "4711" not in err


def test_a_cache_folder_that_cannot_be_used_is_bad_input(tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("RPA_CACHE_DIR", str(blocker / "cache"))
    assert main(["audit", "--docs", _docs_csv(tmp_path), "--method", "rag_mia", "--target", "demo",
                 "--store", str(tmp_path / "s.sqlite")]) == 2
    err = capsys.readouterr().err
    assert "the cache folder" in err and "RPA_CACHE_DIR" in err and "bug in the auditor" not in err
    assert main(["prepare", "--method", "rag_mia"]) == 2  # prepare called it a bug in the auditor, exit 3
    err = capsys.readouterr().err
    assert "the cache folder" in err and "bug in the auditor" not in err


def test_an_aux_corpus_from_windows_is_read_and_an_output_folder_not_writable_is_said_before_anything_is_sent(
        tmp_path, capsys, monkeypatch):
    docs = _docs_csv(tmp_path)
    latin = tmp_path / "corpus.jsonl"
    latin.write_bytes(b"".join(b'{"text": "caf\xe9 number %d, a public text"}\n' % i for i in range(60)))
    assert main(["audit", "--target", "demo", "--docs", docs, "--method", "rag_mia", "--aux-corpus", str(latin),
                 "--estimate-only"]) == 0  # read as every upload is (it was "'utf-8' codec can't decode", exit 2)
    err = capsys.readouterr().err
    assert "estimated cost" in err and "codec" not in err
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access  # the tests run as root, for whom every folder is writable
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != locked and real_access(p, mode))
    for argv in (["--report-dir", str(locked / "reports")], ["--out", str(locked / "r.json")],
                 ["--junit", str(locked / "j.xml")]):
        assert main(["audit", "--target", "demo", "--docs", docs, "--method", "rag_mia", *argv]) == 2, argv
        assert f"the folder {locked} is not writable" in capsys.readouterr().err


def test_a_stopped_audit_still_writes_its_junit_report_and_its_findings_still_fail_the_gate(tmp_path):
    import argparse
    import xml.etree.ElementTree as ET

    from app.cli import GATE_FAILED, _ci_outputs
    from audit_core.ci_gate import COMPLETION_CASE

    r = make_result()
    r["failures"] = {**(r.get("failures") or {}), "stopped": "authentication failed -- 3 document(s) not audited"}
    junit = tmp_path / "audit.xml"
    assert _ci_outputs(argparse.Namespace(junit=str(junit), fail_on="member"), r) == GATE_FAILED
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("errors") == "1"
    case = next(c for c in suite.findall("testcase") if c.get("name") == COMPLETION_CASE)
    assert "3 document(s) not audited" in case.find("error").get("message")


def test_generated_controls_are_counted_in_the_estimate_and_made_only_after_every_check(tmp_path, capsys, monkeypatch):
    """--generate-controls ran the local model for minutes, without progress, before the checks and even
    with --estimate-only."""
    import audit_core.evidence.controls as controls

    made = []
    monkeypatch.setattr(controls, "generate_controls", lambda docs, **kw: made.append(len(docs)) or [])
    docs = _docs_csv(tmp_path)
    assert main(["audit", "--target", "demo", "--docs", docs, "--method", "rag_mia", "--generate-controls",
                 "--estimate-only"]) == 0
    err = capsys.readouterr().err
    assert made == [] and "+ at most 1 queries for the 1 controls to be rewritten from the documents" in err
    # the documents are counted apart from the controls (the CLI said "for 2 documents", counting every
    # control under every method, where the app counted one method's)
    assert "estimated cost: 1 target queries for 1 documents" in err
    from app.cli import UPPER_BOUND  # a bound: what cannot run or has no signal sends nothing

    assert UPPER_BOUND in err
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    assert main(["audit", "--target", "demo", "--docs", docs, "--method", "rag_mia", "--generate-controls",
                 "--report-dir", str(a_file)]) == 2
    assert made == []
    # nor before the target answered: a closed port is found in a second, not after every document was rewritten
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        closed = free.getsockname()[1]
    assert main(["audit", "--target", f"http://127.0.0.1:{closed}/v1", "--model", "m", "--docs", docs, "--method",
                 "rag_mia", "--generate-controls", "--store", str(tmp_path / "s.sqlite")]) == 3
    assert made == [] and "cannot connect" in capsys.readouterr().err


def test_run_cli_reads_relative_paths_from_where_it_was_called(tmp_path):
    """./run cd'd into the repository, so `--docs my.csv` named a file there, not the user's."""
    import hashlib
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    venv = Path(sys.prefix)
    want = hashlib.sha256((root / "requirements.txt").read_bytes() + (root / "requirements-nodeps.txt").read_bytes())
    stamp = venv / ".rpa-installed"
    if not stamp.is_file() or stamp.read_text().strip() != want.hexdigest():
        pytest.skip("this interpreter's environment was not installed by ./run (it would install now)")
    Path(_docs_csv(tmp_path)).rename(tmp_path / "mine.csv")
    proc = subprocess.run([str(root / "run"), "cli", "audit", "--target", "demo", "--docs", "mine.csv", "--method",
                           "rag_mia", "--estimate-only"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RPA_VENV": str(venv)})
    assert proc.returncode == 0, proc.stderr
    assert "for 1 documents" in proc.stderr


def test_the_estimate_says_when_a_target_files_answers_have_no_length_cap(tmp_path, capsys):
    """Without {{max_tokens}} in the body a service writes answers as long as it likes: "completion tokens (max)"
    was no maximum. The assumptions behind the figures are said for a billed target."""
    docs = _docs_csv(tmp_path)
    for body, uncapped, retries in (('  question: "{{prompt}}"\n', True, 5),
                                    ('  question: "{{prompt}}"\n  limit: "{{max_tokens}}"\n', False, 5),
                                    ('  question: "{{prompt}}"\nmax_retries: 1\n', True, 1)):
        tf = tmp_path / "t.yaml"
        tf.write_text(f"type: http\nurl: http://127.0.0.1:9/ask\nbody:\n{body}answer_path: $.answer\n")
        assert main(["audit", "--docs", docs, "--method", "rag_mia", "--target-file", str(tf),
                     "--estimate-only"]) == 0
        err = capsys.readouterr().err
        assert ("body has no {{max_tokens}}" in err) is uncapped
        assert "per word" in err and "capability probe" in err and f"sent again up to {retries} times" in err


def test_the_cli_says_which_methods_to_add_for_the_target_found_and_when_nothing_could_decide():
    """The README's audit of a chat service with the default S-RAG + MBA printed 20 "inconclusive" rows and a hint
    about cited sources only: nothing said that Verbatim continuation is the method that works on chat models."""
    from app.cli import method_hints, nothing_decided_note
    from audit_core.target.base import Capabilities

    chat = Capabilities(reachable=True, logprobs=True, max_top_logprobs=20, sources=True)
    hints = method_hints(["srag", "mba"], chat, "chat", False)
    assert any(h.endswith("add --method verbatim") for h in hints)
    assert any("sources" in h and "cited_sources" in h for h in hints)
    assert not any("verbatim" in h for h in method_hints(["srag", "mba"], chat, "completion", False))
    assert not any("verbatim" in h for h in method_hints(["srag", "verbatim"], chat, "chat", False))
    text_only = Capabilities(reachable=True, logprobs=False, max_top_logprobs=0)
    hints = method_hints(["srag", "mba"], text_only, "chat", True)
    # said once, not twice; MBA only where the target continues text (its chat shadows abstain, session 51)
    assert hints == ["for a target without logprobs, --method verbatim"]
    assert method_hints(["srag", "mba"], text_only, "completion", True) == [
        "for a target without logprobs, --method mba,verbatim"]

    chat_audit = {"config": {"methods": ["srag", "mba"], "target_style": "chat"},
                  "no_signal": {"srag": "no signal"}, "not_run": {"mba": "uncalibrated"}}
    assert nothing_decided_note(chat_audit).endswith("on this chat-style target run --method verbatim")
    assert nothing_decided_note({**chat_audit, "not_run": {}}) is None  # MBA could decide
    completion = {**chat_audit, "config": {"methods": ["srag", "mba"], "target_style": "completion"}}
    assert "notes above" in nothing_decided_note(completion)


def test_a_shadow_size_beyond_the_corpus_is_said(monkeypatch, capsys):
    from app.cli import _audit_config
    from shadow.prepare import ShadowConfig, corpus_allows

    most_in, most_out = corpus_allows(ShadowConfig())
    parsed = []
    monkeypatch.setattr("app.cli.cmd_audit", lambda args: parsed.append(args) or 0)
    main(["audit", "--target", "demo", "--docs", "x.csv", "--shadow-size", "2000"])
    _audit_config(parsed[0])
    assert f"the shadow uses {most_in} + {most_out}" in capsys.readouterr().err
    main(["audit", "--target", "demo", "--docs", "x.csv", "--shadow-size", str(min(most_in, most_out))])
    _audit_config(parsed[1])
    assert "the shadow uses" not in capsys.readouterr().err


# --------------------------------------------------------------------------- target files, evidence, private outputs


def _scripted_file(tmp_path, port: int) -> Path:
    tf = tmp_path / "api.yaml"
    tf.write_text(f"type: http\nurl: http://127.0.0.1:{port}/ask\nheaders:\n  X-Api-Key: $RPA_TEST_FILE_KEY\n"
                  "body:\n  q: \"{{prompt}}\"\nanswer_path: $.answer\n")
    return tf


def _fake_audit(results: dict, cancelled: bool = False):
    """A run_audit that returns ``results`` ({doc id: {method: MethodResult}}) at once (no shadow, nothing sent)."""
    import audit_core.audit
    from audit_core.verdict import VerdictConfig, decide

    def run(docs, target, cfg, prepare, **kw):
        return audit_core.audit.AuditResult(
            target=target.name, created="2026-11-29T00:00:00+00:00", config=audit_core.audit.config_dict(cfg),
            capabilities={}, verdicts=[decide(d.id, list(results.get(d.id, {}).values()), VerdictConfig())
                                       for d in docs],
            results={d.id: results.get(d.id, {}) for d in docs}, observations={d.id: {} for d in docs},
            calibrations={}, not_run={}, account={"queries": 1, "failures": 0, "prompt_tokens": 0,
                                                  "completion_tokens": 0},
            documents=list(docs), cancelled=cancelled)

    return run


def test_canaries_audit_takes_a_target_file_as_audit_does(tmp_path, monkeypatch, capsys):
    """`rpa canaries audit` took --target only: a canary kit could not be audited on an API described by a file."""
    import audit_core.audit
    from audit_core.evidence.canaries import MIN_CANARIES, new_kit, save_kit
    from tests.fake_openai_server import FakeOpenAIServer, Reply

    kit = tmp_path / "kit.json"
    save_kit(new_kit(MIN_CANARIES), kit)
    monkeypatch.setenv("RPA_TEST_FILE_KEY", "file-key-0123456789")
    monkeypatch.setattr(audit_core.audit, "run_audit", _fake_audit({}))
    with FakeOpenAIServer() as srv:
        srv.script(*[Reply.json(200, {"answer": "fine"})] * 10, path="/ask")
        tf = _scripted_file(tmp_path, srv.port)
        common = ["canaries", "audit", "--kit", str(kit), "--target-file", str(tf), "--method", "verbatim",
                  "--store", str(tmp_path / "s.sqlite")]
        assert main(common) == 2  # the same consent as audit
        assert "--allow-env RPA_TEST_FILE_KEY" in capsys.readouterr().err and srv.requests == []
        assert main([*common, "--allow-env", "RPA_TEST_FILE_KEY", "--estimate-only"]) == 0
        assert "estimated cost" in capsys.readouterr().err
        assert main([*common, "--allow-env", "RPA_TEST_FILE_KEY"]) == 0
        err = capsys.readouterr().err
        assert f"sent to 127.0.0.1:{srv.port} only" in err and "file-key-0123456789" not in err
        assert srv.requests and all("x-api-key" in r["header_names"] for r in srv.requests)
    with pytest.raises(SystemExit):  # one target or the other, as for audit
        main(["canaries", "audit", "--kit", str(kit), "--target", "demo", "--target-file", str(tf)])


def test_evidence_is_printed_for_every_method_not_only_srag_and_mba(tmp_path, monkeypatch, capsys):
    """--evidence printed S-RAG's words and MBA's accuracy only: a Verbatim or Cited sources audit showed nothing."""
    import audit_core.audit
    from app.cli import evidence_lines
    from audit_core.methods.base import MethodResult
    from tests.fake_openai_server import FakeOpenAIServer, Reply

    results = {"a": {
        "verbatim": MethodResult("verbatim", "a", 0.91234, True, None, {"raw_score": 0.4567, "probes": 3,
                                                                         "pieces": [1, 2], "style": "chat"}),
        "cited_sources": MethodResult("cited_sources", "a", None, None,
                                      "no_sources: the target's answers carried no sources", {"questions": 4}),
        "srag": MethodResult("srag", "a", 0.2, False, None, {"words": [{"word": "cough", "prob": 0.25}]}),
        "mba": MethodResult("mba", "a", None, None, "not_cleared", {"accuracy": None, "masks": 10}),
    }}
    lines = evidence_lines(results["a"])
    # the words of the app's and the PDF's line for a method (report.result_line), then its scalar evidence
    assert lines[0] == ("Verbatim continuation: score 0.91; on its shadow's threshold it says \u201cmember\u201d; "
                        "raw_score=0.457, probes=3, style=chat")
    assert lines[1].startswith("Cited sources: no answer (the target's answers") \
        and lines[1].endswith("questions=4")
    assert lines[2] == "S-RAG probed words: cough=0.25"
    assert lines[3] == "MBA: no answer (not cleared); accuracy=none, masks=10"  # no accuracy: generic; no code
    many = evidence_lines({"x": MethodResult("x", "a", 0.5, None, "r", {f"f{i}": i for i in range(12)})})
    assert many[0].endswith("f7=7, +4 more in --out")
    # the audit prints them under the document's row
    docs = tmp_path / "docs.csv"
    docs.write_text("id,text\na," + " ".join(f"word{i}" for i in range(60)) + "\n")
    monkeypatch.setenv("RPA_TEST_FILE_KEY", "file-key-0123456789")
    monkeypatch.setattr(audit_core.audit, "run_audit", _fake_audit(results))
    with FakeOpenAIServer() as srv:
        srv.script(*[Reply.json(200, {"answer": "fine"})] * 10, path="/ask")
        assert main(["audit", "--target-file", str(_scripted_file(tmp_path, srv.port)), "--allow-env",
                     "RPA_TEST_FILE_KEY", "--docs", str(docs), "--method", "verbatim,cited_sources", "--evidence",
                     "--store", str(tmp_path / "s.sqlite")]) == 0
    out = capsys.readouterr().out
    assert "Verbatim continuation: score 0.91; on its shadow's threshold it says" in out
    assert "raw_score=0.457" in out and "Cited sources: no answer" in out


def test_the_unredacted_out_file_is_private_and_the_pdf_has_a_progress_bar(tmp_path, monkeypatch, capsys):
    """--out holds every document's text and was written 0644 under the usual umask; the PDF, minutes for a large
    audit, was built with no progress while every other stage had a bar."""
    import stat

    import app.cli
    import audit_core.audit
    from tests.fake_openai_server import FakeOpenAIServer, Reply

    stages = []
    monkeypatch.setattr(app.cli, "_progress_bar", lambda: lambda stage, done, total: stages.append((stage, done, total)))
    old = os.umask(0o022)
    try:
        paths, _ = app.cli._write_report(make_result(), tmp_path / "shared", redact=False)
    finally:
        os.umask(old)
    # --report-dir --no-redact holds the documents whole: its files are as private as --out
    assert sorted(stat.S_IMODE(p.stat().st_mode) for p in paths) == [0o600] * 4
    pdf = [s for s in stages if s[0] == "writing the PDF report"]
    assert pdf and pdf[-1][1] == pdf[-1][2] > 0 and [s[1] for s in pdf] == list(range(1, pdf[-1][2] + 1))
    assert any(p.suffix == ".pdf" for p in paths)

    docs = tmp_path / "docs.csv"
    docs.write_text("id,text\na,A patient with a persistent cough " + " ".join(f"w{i}" for i in range(60)) + "\n")
    out = tmp_path / "results.json"
    out.write_text("{}")
    out.chmod(0o644)  # an older file, readable by all: replaced by a private one
    monkeypatch.setenv("RPA_TEST_FILE_KEY", "file-key-0123456789")
    monkeypatch.setattr(audit_core.audit, "run_audit", _fake_audit({}))
    old = os.umask(0o022)
    try:
        with FakeOpenAIServer() as srv:
            srv.script(*[Reply.json(200, {"answer": "fine"})] * 10, path="/ask")
            assert main(["audit", "--target-file", str(_scripted_file(tmp_path, srv.port)), "--allow-env",
                         "RPA_TEST_FILE_KEY", "--docs", str(docs), "--method", "verbatim", "--out", str(out),
                         "--store", str(tmp_path / "s.sqlite")]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert "persistent cough" in out.read_text() and not list(tmp_path.glob(".results.json.*"))


def test_a_pdf_that_cannot_be_made_leaves_the_other_exports_and_the_gate(tmp_path, monkeypatch, capsys):
    """The PDF was built first and its LayoutError (no OSError) crashed the CLI: no JSON, no CSV, no --fail-on."""
    import audit_core.audit
    import audit_core.report
    from audit_core.methods.base import MethodResult
    from reportlab.platypus.doctemplate import LayoutError
    from tests.fake_openai_server import FakeOpenAIServer, Reply

    def broken(*_a, **_k):
        raise LayoutError("Flowable <Table> too large on page 5\nsecond line")

    monkeypatch.setattr(audit_core.report, "pdf_report", broken)
    paths, problem = _write_report(make_result(), tmp_path / "direct", redact=True)
    assert problem == "LayoutError: Flowable <Table> too large on page 5"
    assert sorted(p.suffix for p in paths) == [".csv", ".csv", ".json"]
    docs = tmp_path / "docs.csv"
    docs.write_text("id,text\na," + " ".join(f"word{i}" for i in range(60)) + "\n")
    monkeypatch.setenv("RPA_TEST_FILE_KEY", "file-key-0123456789")
    member = {"a": {"verbatim": MethodResult("verbatim", "a", 0.9, True, None, {"fpr": 0.05})}}
    monkeypatch.setattr(audit_core.audit, "run_audit", _fake_audit(member))
    with FakeOpenAIServer() as srv:
        srv.script(*[Reply.json(200, {"answer": "fine"})] * 20, path="/ask")
        common = ["audit", "--target-file", str(_scripted_file(tmp_path, srv.port)), "--allow-env",
                  "RPA_TEST_FILE_KEY", "--docs", str(docs), "--method", "verbatim",
                  "--store", str(tmp_path / "s.sqlite"), "--report-dir", str(tmp_path / "reports")]
        assert main([*common, "--fail-on", "member"]) == 1  # the finding is never hidden behind the PDF
        err = capsys.readouterr().err
        assert "error: the PDF report could not be made (LayoutError: Flowable <Table>" in err
        assert "Traceback" not in err and "gate (--fail-on member): a: member" in err
        assert sorted(p.suffix for p in (tmp_path / "reports").iterdir()) == [".csv", ".csv", ".json"]
        assert main(common) == 3  # as for any output that could not be written
