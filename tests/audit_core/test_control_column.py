"""The ``control`` column of a documents file: a row it marks is a text the owner never published.

A value the column did not know (1.0 from a spreadsheet, a tick mark, "oui")
made the row a document without a word: the owner's controls were audited as
published documents and the collection test was gone.
"""
from __future__ import annotations

import pandas as pd
import pytest

from app.cli import main
from audit_core.documents import DocumentInputError, read_table_bytes, split_control_rows

LONG = " ".join(["word"] * 25)


def _table(flags: list[str]) -> pd.DataFrame:
    body = "".join(f"{LONG} number {i},{flag}\n" for i, flag in enumerate(flags))
    return read_table_bytes(f"text,control\n{body}".encode(), "mine.csv")


@pytest.mark.parametrize("yes", ["1", "1.0", "1.00", "TRUE", "Yes", "x", "y"])
@pytest.mark.parametrize("no", ["", "0", "0.0", "no", "FALSE", "n"])
def test_numbers_from_a_spreadsheet_and_the_usual_words_are_read_both_ways(yes, no):
    docs, ctl = split_control_rows(_table([no, yes, no]))
    assert list(ctl["text"].str.split().str[-1]) == ["1"]
    assert list(docs["text"].str.split().str[-1]) == ["0", "2"]


def test_an_empty_cell_of_a_table_not_read_from_a_file_is_a_document():
    df = pd.DataFrame({"text": ["a", "b", "c"], "control": [None, float("nan"), 1.0]})
    docs, ctl = split_control_rows(df)
    assert list(docs["text"]) == ["a", "b"] and list(ctl["text"]) == ["c"]


@pytest.mark.parametrize("value", ["\u2713", "oui", "control", "2", "maybe"])
def test_a_value_that_says_neither_yes_nor_no_refuses_the_file_naming_it_its_rows_and_what_to_write(value):
    with pytest.raises(DocumentInputError) as err:
        split_control_rows(_table(["", value, "yes", value]))
    said = str(err.value)
    assert "'control' column" in said and repr(value) in said and "rows 2, 4" in said
    assert "Write yes" in said and "leave the others empty" in said


def test_many_unknown_values_are_named_a_few_at_a_time():
    with pytest.raises(DocumentInputError) as err:
        split_control_rows(_table([f"v{i}" for i in range(8)]))
    said = str(err.value)
    assert "'v0' (row 1)" in said and "'v4' (row 5)" in said and "'v5'" not in said and "3 other value(s)" in said


def test_a_file_whose_only_column_is_control_is_refused_in_words():
    with pytest.raises(DocumentInputError, match="only column is 'control'"):
        split_control_rows(read_table_bytes(b"control\nyes\n", "mine.csv"))


def test_the_cli_refuses_a_control_column_it_cannot_read_as_bad_input(tmp_path, capsys):
    path = tmp_path / "mine.csv"
    path.write_text(f"text,control\n{LONG} a,\n{LONG} b,\u2713\n", encoding="utf-8")
    assert main(["audit", "--target", "demo", "--docs", str(path), "--estimate-only"]) == 2
    err = capsys.readouterr().err
    assert "error: The 'control' column" in err and "'\u2713' (row 2)" in err and "Traceback" not in err
