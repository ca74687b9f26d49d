"""Uploads the way spreadsheets save them: legacy encodings, UTF-16 without a byte-order mark, Excel's "sep="
line, plain text files with commas, and an unclosed quote. Each was read wrong without a word (mojibake audited
as garbage, rows merged or cut); now it is read right, or the owner is told what was assumed."""
from __future__ import annotations

import pytest

from audit_core.documents import (
    NOTES,
    DocumentInputError,
    documents_from_table,
    guess_text_column,
    read_csv_bytes,
    read_table_bytes,
    split_control_rows,
)

RU = ("Моя бабушка каждый вечер писала в своём дневнике о ферме, о погоде и о животных, и каждая страница "
      "заканчивалась короткой молитвой за детей, которые уехали в город")
PL = ("Moja babcia każdego wieczoru pisała w swoim pamiętniku o gospodarstwie, o pogodzie i o zwierzętach, a każda "
      "strona kończyła się krótką modlitwą za dzieci, które wyjechały")
KO = ("우리 할머니는 매일 저녁 일기를 쓰셨는데 농장과 날씨와 동물들에 대해 쓰셨고 모든 페이지는 도시로 떠난 자녀들을 "
      "위한 짧은 기도로 끝났습니다 그리고 또 다른 이야기도 있었습니다 정말로")
ZH = "我的祖母每天晚上都写日记 她写农场 天气和动物 " * 10
JA = "祖母は毎晩日記を書いていました 農場と天気と動物について " * 10
EL = "Η γιαγιά μου έγραφε κάθε βράδυ στο ημερολόγιό της για τη φάρμα, τον καιρό και τα ζώα της αυλής μας"
W = " ".join(f"w{i}" for i in range(25))


@pytest.mark.parametrize("text, encoding", [(RU, "cp1251"), (PL, "cp1250"), (KO, "cp949"), (ZH, "gbk"),
                                            (JA, "shift_jis"), (EL, "cp1253")])
def test_a_file_in_another_languages_windows_encoding_is_read_in_it(text, encoding):
    """Every such file decoded as cp1252 without an error, into mojibake that was audited as garbage."""
    df = read_csv_bytes(f"id;text\na;{text}\n".encode(encoding))
    assert df["text"].tolist() == [text]


def test_the_encoding_assumed_is_told_where_another_fits_as_well():
    """Polish reads as well in the Baltic code page as in the Central European one; a one-word German file
    as well in Mac Roman: the owner hears which was assumed. A long Russian text leaves no doubt."""
    polish = documents_from_table(read_table_bytes(f"id;text\na;{PL}\n".encode("cp1250")), "text", "id")
    assert [d.text for d in polish.documents] == [PL]
    assert len(polish.notes) == 1 and "read as Windows-1250" in polish.notes[0] and "'CSV UTF-8'" in polish.notes[0]
    german = read_csv_bytes("id,text\n1,gr\u00fc\u00dfe\n".encode("cp1252"))
    assert german["text"][0] == "gr\u00fc\u00dfe" and "read as Windows-1252" in german.attrs[NOTES][0]
    assert read_csv_bytes(f"id;text\na;{RU}\n".encode("cp1251")).attrs[NOTES] == []
    assert read_csv_bytes(f"id;text\na;{RU}\n".encode()).attrs[NOTES] == []  # UTF-8: nothing to say


def test_a_cp1252_file_with_a_byte_it_leaves_undefined_keeps_its_other_characters_and_says_where():
    """One stray 0x9D read the whole file as Latin-1: curly quotes and dashes became control characters."""
    body = "id,text,control\n" + "".join(f"r{i},\u201cQuoted\u201d text number {i} \u2013 {W},\n" for i in range(10))
    data = body.encode("cp1252") + f"r99,stray byte \x9d here {W},\n".encode("latin-1")
    docs, _ = split_control_rows(read_table_bytes(data, "mine.csv"))
    batch = documents_from_table(docs, "text", "id")
    assert batch.documents[0].text.startswith("\u201cQuoted\u201d text number 0 \u2013 w0")
    assert batch.documents[-1].text.startswith("stray byte \ufffd here")
    assert any("1 byte(s)" in note and "line 12" in note for note in batch.notes)


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_utf16_without_a_byte_order_mark_is_read_not_refused_as_binary(codec):
    text = f"id\ttext\na\tgr\u00fc\u00dfe \u041c\u043e\u044f {W}\nb\tzweite Zeile {W}\n"
    df = read_csv_bytes(text.encode(codec))
    assert list(df.columns) == ["id", "text"] and df["text"][0] == f"gr\u00fc\u00dfe \u041c\u043e\u044f {W}"
    with pytest.raises(DocumentInputError, match="binary"):  # NULs that are no UTF-16 are still refused
        read_csv_bytes(b"id,text\n1,ab\x00\x00\x00cd\x00\x01\n")


@pytest.mark.parametrize("line", ["sep=;\r\n", "SEP=;\n", '"sep=;"\n'])
def test_excels_sep_line_declares_the_delimiter_and_is_not_the_header(line):
    """It was read as the header (columns 'sep=' and 'Unnamed: 1'), every row number one too high."""
    df = read_csv_bytes(f"{line}id;text\na;short, with comma\nb;doc two {W}\n".encode())
    assert list(df.columns) == ["id", "text"] and df["text"].tolist() == ["short, with comma", f"doc two {W}"]
    assert [p.row for p in documents_from_table(df, "text", "id").problems()] == [1]


def test_a_text_file_of_one_text_a_line_with_commas_is_one_column():
    """Split at its commas, each text lost all but its longest fragment, without a word."""
    a = ("my grandmother kept a diary for forty years in which she wrote about the farm and the weather and the "
         "animals, and every entry ended with a short prayer for her children who had moved away to the city")
    b = ("the letter I sent to the council last spring complained about the potholes on our street, and the "
         "broken lamp near the school, and asked them to fix both before the winter came again")
    df = read_table_bytes(f"{a}\n{b}\n".encode(), "mydocs.txt")
    assert list(df.columns) == ["text"] and df["text"].tolist() == [a, b]


def test_a_file_without_header_split_into_several_columns_of_text_says_only_one_is_audited():
    lines = ["My trip to the sea with all of them,We walked along the beach and ate ice cream all day long",
             "A visit to grandmother in the village,She made soup and we talked about the old days on the farm"]
    df = read_csv_bytes(("\n".join(lines) + "\n").encode())
    assert list(df.columns) == ["column 1", "column 2"]
    assert len(df.attrs[NOTES]) == 1 and "no header row" in df.attrs[NOTES][0]
    assert "'column 1', 'column 2'" in df.attrs[NOTES][0]


def test_an_unclosed_quote_that_swallows_rows_is_reported_with_its_row():
    """The rows after the quote were merged into its cell, and audited as one text, without a word."""
    data = (f'id,text\na,"Start of document one {W}\nb,document two {W}\nc,document three {W}\n'
            f'd,"document four" {W}\n').encode()
    df = read_csv_bytes(data)
    batch = documents_from_table(df, guess_text_column(df), "id")
    assert len(batch.notes) == 1 and batch.notes[0].startswith("Row 1's 'text' cell")
    assert "never closed" in batch.notes[0] and "'b,document two" in batch.notes[0]
    # a text whose own lines hold a comma, in a file whose ids look otherwise, is no such case
    fine = read_csv_bytes(f'id,text\ndoc-1,"First line {W}\nYes, I agree"\ndoc-2,two {W}\n'.encode())
    assert len(fine) == 2 and fine.attrs[NOTES] == []


def test_a_quote_never_closed_to_the_end_of_the_file_names_its_row():
    data = f'id,text\na,document one {W}\nb,"document two {W}\nc,document three {W}\n'.encode()
    with pytest.raises(DocumentInputError, match=r"opened in row 2 .* never closed"):
        read_csv_bytes(data)


def test_the_command_line_says_the_notes_on_how_a_file_was_read(tmp_path, capsys):
    """The notes are said where the owner reads, before anything is sent (the app shows them over the counts)."""
    from app.cli import main

    path = tmp_path / "mine.csv"
    body = "id,text\n" + "".join(f"r{i},\u201cQuoted\u201d text number {i} \u2013 {W}\n" for i in range(10))
    path.write_bytes(body.encode("cp1252") + f"r99,stray byte \x9d here {W}\n".encode("latin-1"))
    assert main(["audit", "--target", "demo", "--docs", str(path), "--estimate-only"]) == 0
    err = capsys.readouterr().err
    assert f"note: {path}: 1 byte(s)" in err and "line 12" in err
