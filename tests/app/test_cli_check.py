"""``rpa check``: the app's Check connection on the command line (what the target supports, what can run there).

Before it, a command-line owner learned which methods could run on a target only from an audit's first lines,
after its documents were read and its store opened; ``audit --estimate-only`` sends nothing, so it cannot say.
"""
from __future__ import annotations

import socket

from app.cli import _named, main
from tests.fake_openai_server import CHAT_PATH, FakeOpenAIServer


def _chat_requests(srv) -> int:
    return sum(r["path"].endswith(CHAT_PATH) for r in srv.requests)


def test_check_on_a_text_only_endpoint_says_what_cannot_run_and_what_to_use(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("RPA_AUDIT_DB", str(tmp_path / "store.sqlite"))
    with FakeOpenAIServer(models=["m"], supports_logprobs=False) as srv:
        rc = main(["check", "--target", srv.base_url, "--model", "m", "--method", "srag,mba"])
        sent = _chat_requests(srv)
    out = capsys.readouterr().out
    assert rc == 0
    assert "logprobs: no (text only)" in out and "sources listed with its answers: no" in out
    assert f"can run: {_named('mba')}\n" in out and f"  {_named('srag')}: no logprobs" in out
    # the fake answers every probe "OK", a reply and no continuation: read as a chat model, Verbatim is offered
    assert "target style: chat" in out and "hint: for a target without logprobs, --method verbatim" in out
    # the capability probe's few short queries, and nothing is kept: no store was made
    assert 1 <= sent <= 6 and not (tmp_path / "store.sqlite").exists()


def test_check_on_an_endpoint_with_logprobs_says_how_many_alternatives(capsys):
    with FakeOpenAIServer(models=["m"]) as srv:
        assert main(["check", "--target", srv.base_url, "--model", "m", "--method", "srag"]) == 0
    out = capsys.readouterr().out
    assert "logprobs: yes;" in out and f"can run: {_named('srag')}\n" in out
    assert "alternatives per token" in out  # the probe's detail: how many S-RAG's probes may ask for
    assert "no logprobs" not in out


def test_check_says_in_words_when_the_target_does_not_answer_or_the_input_is_bad(capsys, tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["check", "--target", f"http://127.0.0.1:{port}/v1", "--model", "m"]) == 3
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    bad = tmp_path / "t.yaml"
    bad.write_text("type: http\n")  # no url, no body: refused before anything is sent
    assert main(["check", "--target-file", str(bad)]) == 2
    assert "error:" in capsys.readouterr().err
    assert main(["check", "--target", "not a url"]) == 2
    assert main(["check", "--target", "demo", "--method", "bogus"]) == 2


def test_by_default_the_methods_are_chosen_for_what_the_probe_finds(capsys, monkeypatch, tmp_path):
    """``--method auto``, the default: on a chat endpoint without logprobs the method that can decide there,
    said with the reason, instead of S-RAG and MBA that cannot run or abstain."""
    with FakeOpenAIServer(models=["m"], supports_logprobs=False) as srv:
        assert main(["check", "--target", srv.base_url, "--model", "m"]) == 0
    out = capsys.readouterr().out
    assert f"methods: {_named('verbatim')} (chosen for this target (--method auto): it returns text only" in out
    assert f"can run: {_named('verbatim')}\n" in out and "hint:" not in out
    with FakeOpenAIServer(models=["m"]) as srv:  # logprobs, and the fake answers like a chat model
        assert main(["check", "--target", srv.base_url, "--model", "m"]) == 0
    out = capsys.readouterr().out
    assert f"can run: {_named('srag')}, {_named('mba')}, {_named('verbatim')}\n" in out


def test_the_estimate_before_the_probe_counts_the_dearest_choice_and_says_each(capsys, tmp_path):
    docs = tmp_path / "d.csv"
    docs.write_text("id,text\n" + "".join(f"d{i},{' '.join(['word'] * 60)} number {i}\n" for i in range(3)))
    assert main(["audit", "--target", "http://127.0.0.1:9/v1", "--model", "m", "--docs", str(docs),
                 "--estimate-only"]) == 0
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert "--method auto: the methods are chosen once the target's capability probe has answered" in first
    outcomes = next(line for line in err.splitlines() if line.startswith("  by what the probe finds: "))
    counts = [int(q) for q in __import__("re").findall(r"\((\d+) queries\)", outcomes)]
    assert len(counts) == 4 and int(first.split()[2]) >= max(counts)
    assert f"text only, chat style: {_named('verbatim').split(' (')[0]}" in outcomes
    # the demo's capabilities are known: its estimate names its methods with no outcomes to choose from
    assert main(["audit", "--target", "demo", "--docs", str(docs), "--estimate-only"]) == 0
    err = capsys.readouterr().err
    assert "by what the probe finds" not in err and f"{_named('srag')}:" in err and f"{_named('mba')}:" in err


def test_a_slow_pace_says_how_long_the_probe_takes_and_method_names_may_have_spaces(capsys, monkeypatch):
    """At 0.5 requests a minute the probe's queries took minutes with nothing on screen (a review's finding);
    "srag, mba" as typed was refused as the unknown method ' mba'."""
    import app.cli
    from app.cli import _audit_config

    with FakeOpenAIServer(models=["m"]) as srv:
        assert main(["check", "--target", srv.base_url, "--model", "m", "--method", "srag, mba",
                     "--requests-per-minute", "60000"]) == 0
    assert "the target's pace is 60000 requests a minute: the capability probe's" in capsys.readouterr().err
    parsed = []
    monkeypatch.setattr(app.cli, "cmd_check", lambda args: parsed.append(_audit_config(args)) or 0)
    main(["check", "--target", "demo", "--method", " srag ,mba,"])
    assert parsed[0].methods == ["srag", "mba"]


def test_progress_where_stderr_is_no_terminal_is_a_few_readable_lines(capsys):
    """tqdm's redraws, kept by a CI log, made one line of hundreds of carriage returns."""
    from app.cli import _progress_bar

    progress = _progress_bar()  # capsys: stderr is no terminal
    for done in range(0, 121):
        progress("MBA: calibrating", done, 120)
    progress("MBA: calibrating", 120, 120)  # a stage reported done twice is said once
    err = capsys.readouterr().err
    assert "\r" not in err
    assert err.splitlines() == ["MBA: calibrating: 0 / 120 · measuring the rate...", "MBA: calibrating: 120 / 120 · done"]
