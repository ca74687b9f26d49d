"""Bad input through the CLI: every case gets a clear message and an exit code, never a traceback.

Most cases stop before any query (``--estimate-only`` or a refused file), so
they run ``app.cli.main`` in-process; a binary upload and the 10,000-row CSV
also run as a real subprocess, to see exactly what a user's terminal shows.
Two cases run a whole audit against the fake target: a Latin-1, ';'-separated
file with every kind of bad row (the texts must reach the target intact), and
a document longer than the target's context (a per-document reason).
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from app.cli import main
from audit_core.documents import MIN_WORDS
from tests.fake_openai_server import Reply
from tests.reliability.support import (
    MEMBERS_DEFAULT, METHODS, MODEL, RecordingServer, answer, audit_args, cli_env, make_documents, method_of,
    record_figure, run_cli, write_csv,
)

DOCS = make_documents(4)
NO_TARGET = "http://127.0.0.1:9/v1"  # --estimate-only never contacts it
TRIED: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def _count_inputs_tried():
    """After the module: how many inputs it tried, for RELIABILITY.md."""
    yield
    if TRIED:
        record_figure("bad_inputs_tried", {"count": len(TRIED), "cases": TRIED})


def estimate_only(path: Path, *extra: str) -> list[str]:
    return ["audit", "--target", NO_TARGET, "--model", MODEL, "--docs", str(path), "--method", ",".join(METHODS),
            "--estimate-only", *extra]


def run_main(capsys, args: list[str], case: str) -> tuple[int, str]:
    TRIED.append(case)
    rc = main(args)  # an exception here is a crash the user would see as a traceback
    out = capsys.readouterr()
    return rc, out.err + out.out


@pytest.mark.parametrize("case, encoding, delimiter", [
    ("utf-8", "utf-8", ","),
    ("utf-8 with BOM", "utf-8-sig", ","),
    ("Latin-1", "latin-1", ","),
    ("semicolon", "utf-8", ";"),
    ("tab", "utf-8", "\t"),
    ("Latin-1 and semicolon", "latin-1", ";"),
])
def test_encodings_and_delimiters_are_accepted(tmp_path, capsys, case, encoding, delimiter):
    rows = [(i, t.replace("writing", "écrivant à Zürich")) for i, t in DOCS]
    path = write_csv(tmp_path / "docs.csv", rows, delimiter=delimiter, encoding=encoding)
    rc, text = run_main(capsys, estimate_only(path), case)
    assert rc == 0, text
    assert "estimated cost: 8 target queries for 4 documents" in text
    assert "skipped row" not in text


def test_bad_rows_are_each_reported_with_the_minimum_stated(tmp_path, capsys):
    text_ok = DOCS[0][1]
    rows = [("a", text_ok), ("b", ""), ("c", "   \t  "), ("d", text_ok), ("e", "only five words in here"),
            ("f", DOCS[1][1])]
    path = write_csv(tmp_path / "rows.csv", rows)
    rc, text = run_main(capsys, estimate_only(path), "empty, whitespace, duplicate and too-short rows")
    assert rc == 0, text
    assert "skipped row 2: Row 2 has no text." in text
    assert "skipped row 3: Row 3 has no text." in text
    assert "skipped row 4: Row 4 repeats the text of row 1 (id a)." in text
    assert f"skipped row 5: Row 5 has 5 words; at least {MIN_WORDS} are needed." in text
    assert "for 2 documents" in text


@pytest.mark.parametrize("case, data, message", [
    ("PNG image", b"\x89PNG\r\n\x1a\n" + bytes(200), "This file is a PNG image, not a CSV"),
    ("xlsx (zip)", b"PK\x03\x04" + bytes(200), "a ZIP archive (an .xlsx/.docx/.odt file is one)"),
    ("PDF", b"%PDF-1.7\n" + bytes(100), "This file is a PDF file, not a CSV"),
    ("binary with NUL bytes", b"id,text\n1,\x00\x01\x02\x03 binary", "binary data (NUL bytes)"),
    ("control characters", bytes(range(1, 32)) * 40, "does not look like text"),
    ("empty file", b"", "The file is empty."),
    ("whitespace only", b" \n\n\t \n", "The file is empty."),
    ("ragged rows", b"id,text\n1,a b c,extra,more\n", "a row has more fields than the header"),
])
def test_unreadable_files_are_refused_with_a_reason(tmp_path, capsys, case, data, message):
    path = tmp_path / "upload.csv"
    path.write_bytes(data)
    rc, text = run_main(capsys, estimate_only(path), case)
    assert rc == 2
    assert f"error: {message}" in text or message in text, text


def test_nothing_usable_and_wrong_options_are_clear_errors(tmp_path, capsys):
    short = write_csv(tmp_path / "short.csv", [("a", "too short"), ("b", "")])
    rc, text = run_main(capsys, estimate_only(short), "no usable row")
    assert rc == 2 and "error: no usable documents" in text
    rc, text = run_main(capsys, estimate_only(tmp_path / "missing.csv"), "missing file")
    assert rc == 2 and f"error: cannot read {tmp_path / 'missing.csv'}: No such file or directory" in text
    assert "Errno" not in text
    ok = write_csv(tmp_path / "ok.csv", DOCS)
    rc, text = run_main(capsys, estimate_only(ok, "--text-column", "body"), "unknown text column")
    assert rc == 2 and "error: Text column 'body' not found; the columns are: 'id', 'text'." in text
    rc, text = run_main(capsys, estimate_only(ok)[:-1] + ["--method", "rag_mia,nope", "--estimate-only"],
                        "unknown method")
    assert rc == 2 and "error: unknown method 'nope'" in text


def test_binary_upload_in_a_real_terminal_has_no_traceback(tmp_path, rel_cache):
    path = tmp_path / "photo.csv"
    path.write_bytes(b"\xff\xd8\xff\xe0" + bytes(500))
    TRIED.append("JPEG (subprocess)")
    proc = run_cli(estimate_only(path), cli_env(rel_cache), timeout_s=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: This file is a JPEG image, not a CSV. Export your table as CSV (comma or semicolon separated)."
    assert proc.stdout == ""


def test_ten_thousand_rows_are_accepted_and_the_cost_is_shown_first(tmp_path, rel_cache):
    base = DOCS[0][1]
    rows = [(f"r{i:05d}", f"{base} Entry number {i}.") for i in range(10_000)]
    path = write_csv(tmp_path / "big.csv", rows)
    TRIED.append("10,000 rows (subprocess)")
    t0 = time.monotonic()
    proc = run_cli(estimate_only(path), cli_env(rel_cache), timeout_s=180)
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "estimated cost: 20000 target queries for 10000 documents" in proc.stderr
    assert "RAG-MIA (rag_mia): 10000 queries" in proc.stderr and "Min-k% Prob (mink): 10000 queries" in proc.stderr
    record_figure("csv_10000_rows", {"bytes": path.stat().st_size, "cli_estimate_seconds": round(seconds, 1)})


def test_bad_rows_in_a_latin1_semicolon_file_then_a_full_audit(tmp_path, rel_cache, capsys, monkeypatch):
    """The whole path: a messy file is audited, its accents reach the target intact, bad rows are named."""
    monkeypatch.setenv("OPENAI_API_KEY", "none")
    accented = [(i, t.replace("I am writing", "Je vous écris, ça va, à Zürich")) for i, t in DOCS]
    rows = accented + [("dup", accented[0][1]), ("blank", "  "), ("tiny", "Fièvre depuis hier soir.")]
    path = write_csv(tmp_path / "messy.csv", rows, delimiter=";", encoding="cp1252")
    with RecordingServer(models=[MODEL], responder=lambda b: answer(b, MEMBERS_DEFAULT)) as srv:
        rc, text = run_main(capsys, audit_args(srv.base_url, path, tmp_path / "s.sqlite"), "full audit of a messy file")
        sent = [b["messages"][0]["content"] for b in srv.chat_requests() if method_of(b) == "rag_mia"]
    assert rc == 0, text
    assert "skipped row 5: Row 5 repeats the text of row 1" in text
    assert "skipped row 6: Row 6 has no text." in text
    assert f"skipped row 7: Row 7 has 4 words; at least {MIN_WORDS} are needed." in text
    assert len(sent) == 4 and all("Je vous écris, ça va, à Zürich" in s for s in sent)
    assert text.index("estimated cost") < text.index("target queries: ")


def test_a_document_longer_than_the_target_context_is_inconclusive_with_the_reason(tmp_path, rel_cache, capsys,
                                                                                   monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "none")
    max_chars = 2_000

    def responder(body: dict) -> Reply:
        size = sum(len(m["content"]) for m in body["messages"])
        if size > max_chars:
            return Reply.error(400, f"This model's maximum context length is {max_chars} characters. "
                                    f"However, your messages resulted in {size}.", code="context_length_exceeded")
        return answer(body, MEMBERS_DEFAULT)

    long_text = " ".join(DOCS[1][1] for _ in range(20))  # ~1,000 words, ~6,000 characters
    path = write_csv(tmp_path / "long.csv", [DOCS[0], ("long", long_text)])
    with RecordingServer(models=[MODEL], responder=responder) as srv:
        rc, text = run_main(capsys, audit_args(srv.base_url, path, tmp_path / "s.sqlite"), "document beyond the context")
        attempts = [b for b in srv.chat_requests() if "Record 001" in str(b["messages"])]
    assert rc == 0, text
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("long "))
    # the verdict's reason in words (verdict.plain_reason), the first voter whole and the other in brief
    assert "inconclusive" in line and "RAG-MIA: the request was too long for the target's context" in line
    assert "Min-k% Prob (the request was too long for the target's context)" in line
    assert "target errors: the request was too long for the target's context (2 calls)" in text
    assert len(attempts) == 2  # refused once per method, never retried, never truncated behind the user's back
    first = next(ln for ln in text.splitlines() if ln.strip().startswith("q000"))
    # the short document fits: whatever its verdict (the 4 + 4 seed shadow is too small for a method to
    # decide at a 5% false-positive rate), it is never blamed on the context
    assert "context_too_long" not in first
