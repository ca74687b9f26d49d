"""Loading and validating a user's documents: encodings, delimiters, statuses, bad input."""
from __future__ import annotations

import csv
import io
import time

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit_core.documents import (
    MIN_WORDS,
    DocumentInputError,
    documents_from_table,
    documents_from_text,
    guess_id_column,
    guess_text_column,
    normalize_whitespace,
    read_csv_bytes,
)

LONG = "the patient reported a mild headache and some dizziness after the new medication was started last week"  # 18 words
TEXT_A = LONG + " at home alone"  # 21 words
TEXT_B = "a second document " + LONG  # 21 words


def _csv(rows: list[list[str]], delimiter: str = ",", encoding: str = "utf-8") -> bytes:
    buf = io.StringIO()
    csv.writer(buf, delimiter=delimiter, lineterminator="\r\n").writerows(rows)
    return buf.getvalue().encode(encoding)


# --- read_csv_bytes -----------------------------------------------------------------------

def test_utf8_comma_with_quoted_delimiter_and_newline():
    data = _csv([["id", "text"], ["a", "hello, world"], ["b", "line one\nline two"]])
    df = read_csv_bytes(data)
    assert list(df.columns) == ["id", "text"]
    assert df["text"].tolist() == ["hello, world", "line one\nline two"]


def test_utf8_bom_is_removed_from_the_header():
    df = read_csv_bytes(b"\xef\xbb\xbf" + _csv([["id", "text"], ["1", "na\u00efve caf\u00e9"]]))
    assert list(df.columns) == ["id", "text"]
    assert df["text"][0] == "na\u00efve caf\u00e9"


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252"])
def test_latin1_and_cp1252_accents_are_preserved(encoding):
    df = read_csv_bytes(_csv([["id", "text"], ["1", "Fi\u00e8vre \u00e0 38 \u00b0C, na\u00efvet\u00e9"]], ";", encoding))
    assert df["text"][0] == "Fi\u00e8vre \u00e0 38 \u00b0C, na\u00efvet\u00e9"


def test_cp1252_specific_characters():
    # the euro sign and curly quotes exist in cp1252 only (bytes 0x80-0x9f)
    df = read_csv_bytes(_csv([["id", "text"], ["1", "\u201cPrice\u201d: 5 \u20ac"]], ",", "cp1252"))
    assert df["text"][0] == "\u201cPrice\u201d: 5 \u20ac"


@pytest.mark.parametrize("delimiter", [";", "\t", "|", ","])
def test_delimiters_are_detected(delimiter):
    rows = [["id", "text", "note"], ["1", "a, b; c | d", "x"], ["2", "plain", "y"]]
    df = read_csv_bytes(_csv(rows, delimiter))
    assert list(df.columns) == ["id", "text", "note"]
    assert df.values.tolist() == rows[1:]


def test_values_stay_strings():
    df = read_csv_bytes(b"id,text\n0012,NA\n1e5,\n")
    assert df["id"].tolist() == ["0012", "1e5"]
    assert df["text"].tolist() == ["NA", ""]


def test_single_column_file_keeps_commas_inside_lines():
    df = read_csv_bytes(b"text\nhello, world\nsemi; colon\n")
    assert list(df.columns) == ["text"]
    assert df["text"].tolist() == ["hello, world", "semi; colon"]


def test_utf16_with_bom():
    df = read_csv_bytes("id\ttext\n1\tgr\u00fc\u00dfe\n".encode("utf-16"))
    assert df["text"][0] == "gr\u00fc\u00dfe"


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b"", "empty"),
        (b"  \r\n\n", "empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", "PNG"),
        (b"PK\x03\x04\x14\x00\x06\x00", "ZIP"),
        (b"%PDF-1.7\n", "PDF"),
        (b"id,text\n1,ab\x00cd\n", "binary"),
        (bytes(range(1, 32)) * 50, "text"),
    ],
)
def test_non_csv_input_is_rejected(data, fragment):
    with pytest.raises(DocumentInputError, match=fragment):
        read_csv_bytes(data)


@pytest.mark.parametrize("data", [b"id,text\n1,a\n2,b\n3,c,d,e\n", b"id,text\n1,hello, world\n"])
def test_rows_wider_than_the_header_raise_a_clear_error(data):
    # the second case is one that pandas would silently read with "1" as the index
    with pytest.raises(DocumentInputError, match="more fields than the header"):
        read_csv_bytes(data)


def test_short_rows_are_padded_with_empty_cells():
    df = read_csv_bytes(b"id,text,note\n1,abc\n2,def,x\n")
    assert df.values.tolist() == [["1", "abc", ""], ["2", "def", "x"]]


# --- column guesses -----------------------------------------------------------------------

def test_guess_columns():
    df = pd.DataFrame({"label": ["x", "y"], "body": [TEXT_A, TEXT_B], "ref": ["r1", "r2"]})
    assert guess_text_column(df) == "body"
    assert guess_id_column(df) == "label"  # first short unique column
    df2 = df.assign(Doc_ID=["1", "2"])
    assert guess_id_column(df2) == "Doc_ID"  # the name wins
    assert guess_id_column(pd.DataFrame({"text": [TEXT_A], "n": ["has space"]})) is None


# --- documents_from_table -----------------------------------------------------------------

def test_statuses_ids_and_counts():
    df = pd.DataFrame(
        {
            "id": ["a", "b", "c", "d", "a", "", "f"],
            "text": [TEXT_A, "   \n\t ", "too short text", "  " + TEXT_A.replace(" ", "\n  "), TEXT_B, LONG + " x y z", ""],
        }
    )
    batch = documents_from_table(df, "text", "id")
    assert [r.status for r in batch.rows] == ["usable", "empty", "too_short", "duplicate", "usable", "usable", "empty"]
    assert batch.counts() == {"usable": 3, "empty": 2, "too_short": 1, "too_long": 0, "duplicate": 1}
    assert [d.id for d in batch.documents] == ["a", "a-2", "doc-6"]
    assert batch.documents[0].text == TEXT_A
    assert "row 1" in batch.rows[3].message and "id a" in batch.rows[3].message
    assert [r.row for r in batch.problems()] == [2, 3, 4, 7]
    assert len({d.id for d in batch.documents}) == len(batch.documents)


def test_default_ids_and_numeric_ids_are_strings():
    df = pd.DataFrame({"n": [7, 7], "text": [TEXT_A, TEXT_B]})
    assert [d.id for d in documents_from_table(df, "text", "n").documents] == ["7", "7-2"]
    assert [d.id for d in documents_from_table(df, "text").documents] == ["doc-1", "doc-2"]


def test_generated_id_does_not_collide_with_a_given_one():
    df = pd.DataFrame({"id": ["doc-2", ""], "text": [TEXT_A, TEXT_B]})
    ids = [d.id for d in documents_from_table(df, "text", "id").documents]
    assert ids == ["doc-2", "doc-2-2"]


def test_min_words_is_a_parameter():
    df = pd.DataFrame({"text": ["one two three", TEXT_A]})
    assert documents_from_table(df, "text").counts()["too_short"] == 1
    assert documents_from_table(df, "text", min_words=3).counts()["usable"] == 2
    assert MIN_WORDS == 20


@pytest.mark.parametrize("kwargs", [{"text_column": "txt"}, {"text_column": "text", "id_column": "ident"}])
def test_wrong_column_names_the_available_columns(kwargs):
    df = pd.DataFrame({"id": ["1"], "text": [TEXT_A], "notes": ["n"]})
    with pytest.raises(DocumentInputError) as err:
        documents_from_table(df, **kwargs)
    assert all(c in str(err.value) for c in ("'id'", "'text'", "'notes'"))


def test_ten_thousand_rows_are_fast():
    rows = [["id", "text"]] + [[f"r{i}", f"document number {i} " + LONG] for i in range(10_000)]
    start = time.perf_counter()
    batch = documents_from_table(read_csv_bytes(_csv(rows, ";")), "text", "id")
    elapsed = time.perf_counter() - start
    assert batch.counts()["usable"] == 10_000
    assert batch.documents[-1].id == "r9999"
    assert elapsed < 5.0


# --- documents_from_text ------------------------------------------------------------------

def test_pasted_text_blocks():
    pasted = f"{TEXT_A}\r\n\r\n  \n\n{TEXT_B.replace(' ', chr(10), 3)}\n \t\nshort one\n\n{TEXT_A}\n"
    batch = documents_from_text(pasted)
    assert [r.status for r in batch.rows] == ["usable", "usable", "too_short", "duplicate"]
    assert [d.text for d in batch.documents] == [TEXT_A, TEXT_B]
    assert [d.id for d in batch.documents] == ["doc-1", "doc-2"]


def test_pasted_single_document_and_empty_paste():
    assert len(documents_from_text(TEXT_A.replace(" ", "\n")).documents) == 1
    with pytest.raises(DocumentInputError):
        documents_from_text(" \n\n \t")


def test_normalize_whitespace():
    assert normalize_whitespace("  a\u00a0b\n\tc  ") == "a b c"


# --- property: any table written by csv.writer round-trips --------------------------------

# Latin-1 texts use ASCII plus U+00C0-U+00FF only: Latin-1 bytes 0xA0-0xBF are also UTF-8
# continuation bytes, so "Ã©" written in Latin-1 is, byte for byte, valid UTF-8 "é" and no
# decoder can tell the two apart.
_ASCII = [chr(c) for c in range(0x20, 0x7F)]
_LATIN = _ASCII + [chr(c) for c in range(0xC0, 0x100)]
_UNICODE = st.characters(blacklist_categories=("Cs", "Cc", "Co", "Cn", "Zl", "Zp"))
_SPACE = st.sampled_from([" ", " ", "\n", "\t"])


def _texts(alphabet) -> st.SearchStrategy[str]:
    word = st.text(alphabet=alphabet, min_size=1, max_size=8)
    return st.lists(st.tuples(word, _SPACE), min_size=0, max_size=30).map(lambda ws: "".join(w + s for w, s in ws))


@st.composite
def _tables(draw):
    encoding = draw(st.sampled_from(["utf-8", "utf-8-sig", "latin-1", "cp1252"]))
    alphabet = _LATIN if encoding in ("latin-1", "cp1252") else _UNICODE
    texts = draw(st.lists(_texts(alphabet), min_size=1, max_size=8))
    delimiter = draw(st.sampled_from([",", ";", "\t", "|"]))
    return texts, delimiter, encoding


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_tables())
def test_property_csv_round_trip(table):
    texts, delimiter, encoding = table
    rows = [["id", "text", "extra"]] + [[str(i), t, "e"] for i, t in enumerate(texts)]
    data = _csv(rows, delimiter, encoding)
    df = read_csv_bytes(data)
    assert list(df.columns) == ["id", "text", "extra"]
    assert len(df) == len(texts)
    batch = documents_from_table(df, "text", "id", min_words=1)
    expected, seen = [], set()
    for t in texts:
        n = normalize_whitespace(t.encode(encoding).decode(encoding))
        if n and n not in seen:
            seen.add(n)
            expected.append(n)
    assert [d.text for d in batch.documents] == expected
    assert sum(batch.counts().values()) == len(texts)


@settings(max_examples=40, deadline=None)
@given(st.lists(_texts(_UNICODE), min_size=1, max_size=6))
def test_property_pasted_blocks(texts):
    batch = documents_from_text("\n\n".join(texts), min_words=1) if any(t.strip() for t in texts) else None
    if batch is None:
        return
    for doc in batch.documents:
        assert doc.text == normalize_whitespace(doc.text) and doc.text
    assert len({d.text for d in batch.documents}) == len(batch.documents)


@pytest.mark.parametrize("data", [b"id,text\n", b"id,text", b"\xef\xbb\xbfdoc_id;note;text\r\n\r\n"])
def test_a_header_without_rows_gets_a_clear_message(data):
    with pytest.raises(DocumentInputError) as err:
        read_csv_bytes(data)
    message = str(err.value)
    assert "header row" in message and "no data rows" in message and "'text'" in message


def test_control_rows_are_split_off_and_renamed():
    from audit_core.documents import as_controls, documents_from_table, split_control_rows

    long = "word " * 30
    df = pd.DataFrame({"id": ["a", "b", "c", "d"], "text": [long + "one", long + "two", long + "three", long + "four"],
                       " CONTROL ": ["", "Yes", "x", "no"]})
    docs, ctl = split_control_rows(df)
    assert list(docs["id"]) == ["a", "d"] and list(ctl["id"]) == ["b", "c"]
    assert list(docs.columns) == list(ctl.columns) == ["id", "text"]
    controls = as_controls(documents_from_table(ctl, "text", "id").documents)
    assert [c.id for c in controls] == ["control-b", "control-c"] and controls[0].text.endswith("two")
    same, none = split_control_rows(df.drop(columns=[" CONTROL "]))
    assert none is None and len(same) == 4


def test_the_cli_reads_controls_from_the_control_column(tmp_path):
    from app.cli import _load_docs

    long = "word " * 30
    path = tmp_path / "mine.csv"
    pd.DataFrame({"text": [long + "one", long + "two", long + "three"], "control": ["0", "1", ""]}).to_csv(path, index=False)
    docs, problems, controls = _load_docs(str(path), None, None, with_controls=True)
    assert [d.text.split()[-1] for d in docs] == ["one", "three"] and not problems
    assert [c.text.split()[-1] for c in controls] == ["two"] and controls[0].id.startswith("control-")


def test_a_one_column_file_without_a_header_keeps_its_first_text():
    """The first line of a list of texts is a document, not a column name (it was dropped unseen)."""
    lines = [" ".join(f"w{i}_{j}" for j in range(25)) for i in range(3)]
    df = read_csv_bytes(("\n".join(lines) + "\n").encode())
    assert list(df.columns) == ["text"] and df["text"].tolist() == lines
    df = read_csv_bytes(("my posts\n" + "\n".join(lines) + "\n").encode())  # a short first line is a header
    assert list(df.columns) == ["my posts"] and len(df) == 3


def test_utf8_with_a_stray_byte_is_refused_rather_than_garbled():
    rows = "id,text\n" + "".join(f"{i},grand-m\u00e8re et caf\u00e9 num\u00e9ro {i}\n" for i in range(4))
    data = rows.encode("utf-8").replace(b"num\xc3\xa9ro 2", b"num\xe9ro 2")
    with pytest.raises(DocumentInputError, match="line 4"):
        read_csv_bytes(data)
    # a file in cp1252 throughout is still read as cp1252
    assert read_csv_bytes(rows.encode("cp1252"))["text"][0] == "grand-m\u00e8re et caf\u00e9 num\u00e9ro 0"


def test_a_control_with_the_text_of_an_audited_document_is_left_out_of_the_controls():
    from audit_core.documents import Document, as_controls, controls_apart

    docs = [Document("a", "the same words here"), Document("b", "other words")]
    controls = as_controls([Document("x", "the  same words here"), Document("y", "never published")])
    kept, same, repeated = controls_apart(controls, docs)
    assert same == 1 and repeated == 0 and [c.id for c in kept] == ["control-y"]


def test_a_control_given_twice_is_used_once_and_the_owner_is_told():
    """The same never-published text in the control column and in the second upload was kept twice under two
    ids, and the permutation test took the copies for independent controls (its p-value too small)."""
    from audit_core.documents import Document, as_controls, controls_apart, controls_apart_note

    column = as_controls([Document("doc-3", "a text I never published"), Document("doc-4", "another one")])
    upload = as_controls([Document("c1", "a text  I never published"), Document("c2", "a third text")])
    kept, same, repeated = controls_apart(column + upload, [Document("a", "an audited document")])
    assert (same, repeated) == (0, 1)
    assert [c.text for c in kept] == ["a text I never published", "another one", "a third text"]
    assert "1 control(s) repeat the text of another control" in controls_apart_note(same, repeated)


def test_controls_merged_from_a_column_and_an_upload_keep_one_id_each():
    """Both without an id column, the two batches' controls shared ids, and one score counted twice."""
    from audit_core.documents import Document, as_controls, controls_apart

    column = as_controls([Document("doc-5", "first never published text"), Document("doc-6", "second one")])
    upload = as_controls([Document("doc-5", "third never published text"), Document("doc-6", "fourth one")])
    kept, same, _ = controls_apart(column + upload, [Document("control-doc-6-2", "an audited document")])
    assert same == 0 and [c.text for c in kept] == [c.text for c in column + upload]
    assert [c.id for c in kept] == ["control-doc-5", "control-doc-6", "control-doc-5-2", "control-doc-6-3"]


def test_rows_keep_their_file_numbers_when_control_rows_are_taken_out():
    from audit_core.documents import split_control_rows

    long = " ".join(["word"] * 25)
    df = read_csv_bytes(f"text,control\n{long} a,\n{long} b,yes\n{long} c,\ntiny,\nshort control,yes\n".encode())
    docs, ctl = split_control_rows(df)
    batch = documents_from_table(docs, "text")
    assert [p.row for p in batch.problems()] == [4] and [d.id for d in batch.documents] == ["doc-1", "doc-3"]
    assert [p.row for p in documents_from_table(ctl, "text").problems()] == [5]


def test_a_jsonl_upload_is_read_as_a_table_of_strings():
    from audit_core.documents import read_table_bytes

    data = b'{"id": 1, "text": "first text", "tags": ["a"]}\n\n{"text": "second", "extra": null}\n'
    for name in ("docs.jsonl", "docs.txt"):  # by its name, or by its first line
        df = read_table_bytes(data, name)
        assert list(df.columns) == ["id", "text", "tags", "extra"]
        assert df.values.tolist() == [["1", "first text", '["a"]', ""], ["", "second", "", ""]]
    assert read_table_bytes(b"id,text\n1,{not json}\n", "x.csv")["text"][0] == "{not json}"
    with pytest.raises(DocumentInputError, match="Line 2"):
        read_table_bytes(b'{"text": "a"}\n[1, 2]\n', "x.jsonl")


def test_a_text_in_a_script_without_spaces_is_told_why_it_cannot_be_audited():
    batch = documents_from_text("我昨天去了医院看医生因为我的膝盖一直很痛医生说我需要休息两个星期并且每天冰敷")
    assert "script without spaces" in batch.problems()[0].message
    batch = documents_from_text("too short a text")
    assert "script without spaces" not in batch.problems()[0].message


@pytest.mark.parametrize("header", ["id,text, text", "id, id,text", "text,control, text"])
def test_two_columns_with_one_name_once_trimmed_are_refused_by_name(header):
    data = f"{header}\n1,{TEXT_A},{TEXT_B}\n".encode()
    with pytest.raises(DocumentInputError, match="Two columns are named"):
        read_csv_bytes(data)


def test_a_document_longer_than_any_query_can_carry_is_refused_with_advice():
    from audit_core.documents import MAX_WORDS

    batch = documents_from_text("\n\n".join([TEXT_A, "word " * (MAX_WORDS + 1), "word " * MAX_WORDS]))
    assert [r.status for r in batch.rows] == ["usable", "too_long", "usable"]
    assert "2,001 words" in batch.rows[1].message and "Split it" in batch.rows[1].message
    assert batch.counts()["too_long"] == 1


_T1 = ("My grandmother kept bees behind the old barn and every summer we helped her collect the honey, "
       "then we sold the jars at the market on Saturdays.")
_T2 = ("The clinic told me my knee pain was from running too much on hard roads and to rest two weeks, "
       "then start again slowly on grass or a track.")


def test_a_csv_with_cr_line_ends_or_no_header_keeps_every_row_and_column():
    """Excel's "CSV (Macintosh)" (CR alone) was read as one line: the id and quotes went into the texts; a
    two-column file without a header lost its first document as the column name."""
    from audit_core.documents import read_csv_bytes

    mac = read_csv_bytes(f'id,text\rp1,"{_T1}"\rp2,"{_T2}"\r'.encode())
    assert mac.to_dict("records") == [{"id": "p1", "text": _T1}, {"id": "p2", "text": _T2}]
    bare = read_csv_bytes(f'p1,"{_T1}"\np2,"{_T2}"\n'.encode())
    assert list(bare.columns) == ["column 1", "column 2"] and bare["column 2"].tolist() == [_T1, _T2]
    assert list(read_csv_bytes(f'id,text\np1,"{_T1}"\n'.encode()).columns) == ["id", "text"]  # a header stays one


def test_a_repeated_id_is_renamed_and_said_and_blank_lines_of_any_space_separate_pasted_texts():
    import pandas as pd

    from audit_core.documents import documents_from_table, documents_from_text

    batch = documents_from_table(pd.DataFrame({"id": ["A", "A"], "text": [_T1, _T2]}), "text", "id")
    assert [d.id for d in batch.documents] == ["A", "A-2"]
    assert [(r.row, r.renamed_from, r.id) for r in batch.renamed()] == [(2, "A", "A-2")]
    for sep in ("\n\u3000\n", "\n\u2003\n", "\n\u200b\n", "\n\x0c\n", "\u2028\u2028", "\n \t\n"):
        assert len(documents_from_text(_T1 + sep + _T2).documents) == 2, repr(sep)
    assert len(documents_from_text(_T1 + "\n" + _T2).documents) == 1
