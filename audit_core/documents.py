"""The unit of an audit: a document with a stable id."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import warnings
from dataclasses import dataclass
from typing import Literal, Sequence

import pandas as pd


@dataclass(frozen=True)
class Document:
    id: str
    text: str

    @property
    def n_words(self) -> int:
        return len(self.text.split())

    def content_hash(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------
# Loading and validating a user's own documents (CSV upload or pasted text).
#
# A "word" here is a maximal run of non-space characters, the same definition
# as ``audit_core.scoring.split_words`` and ``Document.n_words``; it is
# recomputed with ``str.split`` so that loading documents never imports torch.
# ---------------------------------------------------------------------------

#: Documents shorter than this are reported as "too_short" and not audited.
#: Why 20: the half-document methods (S2MIA, Min-k) query with the first half
#: and score the second, and MBA masks M=10 words; below ~20 words too little
#: text is left to carry signal, so a verdict would be noise. Each method
#: still enforces its own minimum; this is the default of the upload check.
MIN_WORDS = 20

#: The most words a document may have. MBA and the half-document methods send
#: the whole document in one query; 2,000 words (about 2,700 tokens) fit the
#: context of current chat models beside the retrieved documents, and a RAG
#: service splits longer documents into chunks anyway, so a part of that size
#: is what it would retrieve. A longer text is refused with that advice rather
#: than sent in queries no model can read (and billed for).
MAX_WORDS = 2000

RowStatusName = Literal["usable", "empty", "too_short", "too_long", "duplicate"]
ROW_STATUSES: tuple[str, ...] = ("usable", "empty", "too_short", "too_long", "duplicate")

#: A one-column file whose first line has this many words or more has no header: that line is a
#: document (a column name is a word or three; a text to audit has at least MIN_WORDS words)
HEADER_MAX_WORDS = 8

#: Delimiters a user's CSV may use (Excel in many European locales writes ';').
CSV_DELIMITERS = ",;\t|"

# Magic numbers of files people upload by mistake instead of a CSV.
_BINARY_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"%PDF-", "a PDF file"),
    (b"PK\x03\x04", "a ZIP archive (an .xlsx/.docx/.odt file is one)"),
    (b"PK\x05\x06", "an empty ZIP archive"),
    (b"\x1f\x8b", "a gzip-compressed file"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "a legacy Office file (.xls/.doc)"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"Rar!\x1a\x07", "a RAR archive"),
    (b"SQLite format 3\x00", "a SQLite database"),
)

_ID_COLUMN_NAMES = ("id", "doc_id", "docid", "document_id", "documentid", "doc", "identifier", "key", "uid", "uuid")


class DocumentInputError(ValueError):
    """The user's input cannot be read as documents; the message says why and what to do."""


@dataclass(frozen=True)
class RowStatus:
    """What happened to one input row (CSV data row or pasted block).

    ``row`` is 1-based among data rows (the CSV header is not counted) or among
    pasted blocks; ``id`` is the document id for usable rows, else None.
    """

    row: int
    status: RowStatusName
    message: str
    id: str | None = None
    #: the id the row asked for, where it was taken and the document got another (``id``)
    renamed_from: str | None = None


@dataclass
class DocumentBatch:
    """Usable documents plus a per-row account of everything that was dropped."""

    documents: list[Document]
    rows: list[RowStatus]

    def counts(self) -> dict[str, int]:
        """Number of rows per status; every status is present, zero included."""
        out = {s: 0 for s in ROW_STATUSES}
        for r in self.rows:
            out[r.status] += 1
        return out

    def problems(self) -> list[RowStatus]:
        """Rows that did not become a document, in input order."""
        return [r for r in self.rows if r.status != "usable"]

    def renamed(self) -> list[RowStatus]:
        """Usable rows whose id was already taken and got a suffix ("a" -> "a-2"): the owner must hear of it,
        or the results no longer match their ids."""
        return [r for r in self.rows if r.renamed_from is not None]


def normalize_whitespace(text: str) -> str:
    """Collapse every run of whitespace (newlines, tabs, NBSP...) into one space.

    Knowledge bases are normally indexed with normalised whitespace, and the
    membership methods compare words, so layout carries no information.
    """
    return " ".join(text.split())


def _decode(data: bytes) -> str:
    """Decode bytes as UTF-16 (with BOM), UTF-8 (with or without BOM), then cp1252, then Latin-1.

    cp1252 comes before Latin-1 because Windows tools write it and it agrees
    with Latin-1 on every printable Latin-1 character; Latin-1 is last since
    it accepts any byte sequence.
    """
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise DocumentInputError("The file starts like UTF-16 text but is not valid UTF-16.") from exc
    if data.startswith(b"\xef\xbb\xbf"):
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise DocumentInputError(
                "The file starts with a UTF-8 marker but is not valid UTF-8; save it again as 'CSV UTF-8'."
            ) from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        _refuse_damaged_utf8(data, exc)
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _refuse_damaged_utf8(data: bytes, exc: UnicodeDecodeError) -> None:
    """Refuse a UTF-8 file with a few bytes that are not UTF-8, rather than read all of it as cp1252.

    Read as cp1252, every accented letter of such a file would be garbled
    ("mère" becomes "mÃ¨re") without a word; the owner can save it again instead.
    A cp1252 file seldom holds valid UTF-8 sequences, so their share tells the two apart.
    """
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    good = sum(1 for ch in text if ord(ch) > 0x7F and ch != "\ufffd")
    if good >= 2 and good >= 2 * bad:
        line = data[:exc.start].count(b"\n") + 1
        raise DocumentInputError(
            f"The file is UTF-8 text except for {bad} byte(s) that are not (the first on line {line}), so its "
            "accented letters cannot be read with certainty. Save it again as 'CSV UTF-8' (or fix that line) "
            "and upload it again.") from exc


def _check_not_binary(data: bytes) -> None:
    for magic, kind in _BINARY_SIGNATURES:
        if data.startswith(magic):
            raise DocumentInputError(f"This file is {kind}, not a CSV. Export your table as CSV (comma or semicolon separated).")
    if b"\x00" in data[:65536] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DocumentInputError("This file contains binary data (NUL bytes), not CSV text. Export your table as CSV.")


_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _check_text_like(text: str) -> None:
    """Reject decoded content dominated by control characters (binary without NULs)."""
    sample = text[:65536]
    controls = len(_CONTROL_RE.findall(sample))
    if sample and controls / len(sample) > 0.01:
        raise DocumentInputError("This file does not look like text (many control characters); upload a CSV file.")


def _records(sample: str, delimiter: str, limit: int = 200) -> list[list[str]]:
    """Up to ``limit`` non-blank records of ``sample`` parsed with ``delimiter``."""
    reader = csv.reader(io.StringIO(sample), delimiter=delimiter, quotechar='"', doublequote=True, strict=False)
    out: list[list[str]] = []
    try:
        for rec in reader:
            if rec:
                out.append(rec)
                if len(out) >= limit:
                    break
    except csv.Error:
        pass
    return out


def _consistency(records: list[list[str]]) -> tuple[float, int]:
    """(fraction of records with as many fields as the header, header width)."""
    if not records:
        return 0.0, 0
    width = len(records[0])
    return sum(len(r) == width for r in records) / len(records), width


def _detect_delimiter(text: str) -> str:
    """The delimiter of a CSV text, or '' for a single-column file.

    csv.Sniffer is tried first; its answer is kept only if the header has at
    least two fields and every sampled row has the header's width. Otherwise
    the candidate whose parse is most consistent wins (ties: wider header).
    A header with one field under every candidate means a one-column file.
    """
    sample = text[:32768]
    if len(text) > len(sample) and "\n" in sample:
        sample = sample[: sample.rfind("\n") + 1]  # whole lines only
    try:
        sniffed: str | None = csv.Sniffer().sniff(sample, delimiters=CSV_DELIMITERS).delimiter
    except csv.Error:
        sniffed = None
    scored = {d: _consistency(_records(sample, d)) for d in CSV_DELIMITERS}
    if sniffed in scored and scored[sniffed][1] >= 2 and scored[sniffed][0] == 1.0:
        return sniffed
    candidates = [(c, w, d) for d, (c, w) in scored.items() if w >= 2]
    if not candidates:
        return ""
    best = max(candidates, key=lambda t: (t[0], t[1]))
    return best[2]


def _unused_delimiter(text: str) -> str:
    for d in ("\x1f", "\x1e", "\x1d", "\x1c"):
        if d not in text:
            return d
    raise DocumentInputError("This file contains unusual control characters; save it again as plain CSV.")


def read_csv_bytes(data: bytes) -> pd.DataFrame:
    """Parse an uploaded CSV into a DataFrame of strings (empty cells are "").

    Encoding and delimiter are detected because users export from Excel,
    LibreOffice or scripts with every combination of UTF-8/BOM/cp1252 and
    ',' ';' tab '|'. Nothing is coerced: "NA", "0012" and "1e5" stay text.
    Raises DocumentInputError for empty, binary or unparseable input.
    """
    return _csv_table(upload_text(data))


def upload_text(data: bytes) -> str:
    """An upload's text: not empty, not binary, decoded (``_decode``), without a byte-order mark.

    Every reader of a user's file goes through it (documents, controls, a public corpus), so a file saved
    by Excel on Windows or with a byte-order mark reads the same everywhere."""
    if not data or not data.strip():
        raise DocumentInputError("The file is empty.")
    _check_not_binary(data)
    text = _decode(data)
    _check_text_like(text)
    text = text.lstrip("\ufeff")
    if not text.strip():
        raise DocumentInputError("The file is empty.")
    return text


def _csv_table(text: str) -> pd.DataFrame:
    """``read_csv_bytes`` on decoded text."""
    if "\r" in text and "\n" not in text:  # Excel's "CSV (Macintosh)" ends lines with CR alone: one line to csv
        text = text.replace("\r", "\n")
    delimiter = _detect_delimiter(text)
    headerless = False
    if not delimiter:
        delimiter = _unused_delimiter(text)  # one column: every line is one field
        first = next((line for line in text.splitlines() if line.strip()), "")
        # a one-column file whose first line is a text, not a column name: that line is a document too
        headerless = len(first.split()) >= HEADER_MAX_WORDS
    try:
        df = _read_csv(text, delimiter, ["text"] if headerless else None)
        if not headerless and any(len(str(c).split()) >= HEADER_MAX_WORDS for c in df.columns):
            # a "column name" of a sentence: the file has no header and its first row is a document
            df = _read_csv(text, delimiter, [f"column {i + 1}" for i in range(len(df.columns))])
    except pd.errors.EmptyDataError as exc:
        raise DocumentInputError("The file has no header row and no data.") from exc
    except (pd.errors.ParserError, pd.errors.ParserWarning) as exc:
        shown = {"\t": "tab", "\x1f": "none"}.get(delimiter, repr(delimiter))
        raise DocumentInputError(
            f"The file could not be read as a table (delimiter {shown}): a row has more fields than the header "
            f"({str(exc).strip()}). Texts containing the delimiter or line breaks must be in double quotes."
        ) from exc
    df = df.fillna("").astype(str)
    df.columns = [str(c).strip() for c in df.columns]
    twice = sorted({c for c in df.columns if list(df.columns).count(c) > 1})
    if twice:  # " text" and "text" are one name once trimmed: which of them holds the documents is anyone's guess
        raise DocumentInputError(f"Two columns are named {twice[0]!r} (spaces around a name are ignored); "
                                 "rename one and upload the file again.")
    if len(df) == 0:
        # a header alone: guessing a text column from no cells would pick the first one ("id")
        shown = ", ".join(repr(c) for c in df.columns[:8]) + (", ..." if len(df.columns) > 8 else "")
        raise DocumentInputError(
            f"The file has a header row ({shown}) but no data rows. Add one row per document, with its "
            "text in one column (e.g. 'text') and, if you like, a name in another (e.g. 'id').")
    return df


def _read_csv(text: str, delimiter: str, names: list[str] | None) -> pd.DataFrame:
    """The table as strings; ``names``: the file has no header row and its columns get these names."""
    with warnings.catch_warnings():
        # pandas only warns when a row has more fields than the header and
        # drops the extra ones: that is data loss, so it is an error here
        warnings.simplefilter("error", pd.errors.ParserWarning)
        return pd.read_csv(
            io.StringIO(text),
            sep=delimiter,
            quotechar='"',
            doublequote=True,
            dtype=str,
            index_col=False,  # never turn a first column into the index
            keep_default_na=False,
            na_filter=False,
            skip_blank_lines=True,
            engine="c",
            header=None if names else "infer",
            names=names,
        )


def _looks_like_jsonl(text: str) -> bool:
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if not first.startswith("{"):
        return False
    try:
        return isinstance(json.loads(first), dict)
    except ValueError:
        return False


def _jsonl_table(text: str) -> pd.DataFrame:
    """One JSON object per line -> a table of strings, its columns the keys in order of first use."""
    records: list[dict[str, str]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise DocumentInputError(f"Line {n} of this JSONL file is not valid JSON ({exc.msg}).") from None
        if not isinstance(obj, dict):
            raise DocumentInputError(f"Line {n} of this JSONL file is not a JSON object ({{\"text\": ...}}).")
        records.append({str(k): "" if v is None else v if isinstance(v, str) else json.dumps(v)
                        for k, v in obj.items()})
    columns = list(dict.fromkeys(k for r in records for k in r))
    return pd.DataFrame([[r.get(c, "") for c in columns] for r in records], columns=columns, dtype=str)


def read_table_bytes(data: bytes, name: str = "") -> pd.DataFrame:
    """An uploaded table: JSONL (one object per line, as the canary kit's audit files) or any CSV.

    JSONL is told by its name (.jsonl, .ndjson) or by a first line that is a JSON
    object; everything else is read by ``read_csv_bytes``.
    """
    text = upload_text(data)  # decoded once, for either reader
    if name.lower().endswith((".jsonl", ".ndjson")) or _looks_like_jsonl(text):
        df = _jsonl_table(text)
        if df.empty:
            raise DocumentInputError("The JSONL file has no records.")
        return df
    return _csv_table(text)


def guess_text_column(df: pd.DataFrame) -> str:
    """The column whose cells are longest on average: documents are the long cells."""
    if len(df.columns) == 0:
        raise DocumentInputError("The table has no columns.")
    best, best_len = str(df.columns[0]), -1.0
    for col in df.columns:
        values = df[col].astype(str)
        mean_len = float(values.str.len().mean()) if len(values) else 0.0
        if mean_len > best_len:
            best, best_len = str(col), mean_len
    return best


def guess_id_column(df: pd.DataFrame, text_column: str | None = None) -> str | None:
    """A column that names the documents, or None when none looks like one.

    A column named like an id (id, doc_id, key, ...) wins; otherwise the first
    other column whose values are non-empty, unique and short (no spaces,
    at most 64 characters). Never the text column.
    """
    text_column = text_column if text_column is not None else (guess_text_column(df) if len(df.columns) else None)
    others = [str(c) for c in df.columns if str(c) != text_column]
    for col in others:
        if re.sub(r"[\s\-]", "_", col.strip().lower()) in _ID_COLUMN_NAMES:
            return col
    for col in others:
        values = df[col].astype(str).str.strip()
        if len(values) == 0 or (values == "").any() or not values.is_unique:
            continue
        if values.str.len().max() <= 64 and not values.str.contains(r"\s").any():
            return col
    return None


def _unique_id(wanted: str, used: set[str]) -> str:
    if wanted not in used:
        return wanted
    k = 2
    while f"{wanted}-{k}" in used:
        k += 1
    return f"{wanted}-{k}"


#: letters of scripts written without spaces between words: Chinese and Japanese (Korean is spaced),
#: Thai, Lao, Myanmar, Khmer
_UNSPACED_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff]")


def _unspaced_script(text: str) -> bool:
    """Whether most of ``text``'s letters are of a script written without spaces between words."""
    letters = sum(ch.isalpha() for ch in text)
    return letters >= 20 and len(_UNSPACED_RE.findall(text)) >= letters / 2


def _build_batch(texts: list[str], ids: list[str] | None, min_words: int, unit: str,
                 numbers: list[int] | None = None) -> DocumentBatch:
    """Classify each raw text (empty / too_short / too_long / duplicate / usable) and build documents.

    ``numbers``: each text's row number in the owner's file (default 1, 2, ...), so that a table
    with some rows taken out (the control rows) still names rows as the file does.
    """
    documents: list[Document] = []
    rows: list[RowStatus] = []
    seen: dict[str, tuple[int, str]] = {}  # normalised text -> (row, id) of its first usable occurrence
    used_ids: set[str] = set()
    for i, raw in enumerate(texts):
        row = numbers[i] if numbers is not None else i + 1
        text = normalize_whitespace(raw)
        if not text:
            rows.append(RowStatus(row, "empty", f"{unit} {row} has no text."))
            continue
        n = len(text.split())
        if n < min_words:
            why = f"{unit} {row} has {n} words; at least {min_words} are needed."
            if _unspaced_script(text):
                why += (" It looks written in a script without spaces between words (Chinese, Japanese, Thai...): "
                        "the audit's methods count and probe words by spaces, so such texts cannot be audited yet.")
            rows.append(RowStatus(row, "too_short", why))
            continue
        if n > MAX_WORDS:
            rows.append(RowStatus(row, "too_long", f"{unit} {row} has {n:,} words; at most {MAX_WORDS:,} are "
                                  "audited as one document. Split it into parts of a few hundred words (a RAG "
                                  "service splits long documents into chunks too) and give each part as a "
                                  f"{unit.lower()} of its own."))
            continue
        if text in seen:
            first_row, first_id = seen[text]
            rows.append(RowStatus(row, "duplicate", f"{unit} {row} repeats the text of {unit.lower()} {first_row} (id {first_id})."))
            continue
        wanted = ids[i].strip() if ids is not None else ""
        doc_id = _unique_id(wanted or f"doc-{row}", used_ids)
        used_ids.add(doc_id)
        seen[text] = (row, doc_id)
        documents.append(Document(doc_id, text))
        renamed = wanted if wanted and doc_id != wanted else None
        note = f" (id {wanted!r} was already used)" if renamed else ""
        rows.append(RowStatus(row, "usable", f"{unit} {row} is usable{note}.", doc_id, renamed))
    return DocumentBatch(documents, rows)


def documents_from_table(
    df: pd.DataFrame, text_column: str, id_column: str | None = None, min_words: int = MIN_WORDS
) -> DocumentBatch:
    """Documents from one column of a table, with a status for every row.

    Ids come from ``id_column`` (stringified, stripped; repeated ids get a
    "-2", "-3" suffix) or are "doc-<row>". Only the first of identical texts
    (after whitespace normalisation) is kept: auditing it twice would only
    double the cost of the audit.
    """
    columns = [str(c) for c in df.columns]
    for name, label in ((text_column, "Text"), (id_column, "Id")):
        if name is not None and name not in columns:
            raise DocumentInputError(f"{label} column {name!r} not found; the columns are: {', '.join(map(repr, columns))}.")
    texts = ["" if v is None or (isinstance(v, float) and v != v) else str(v) for v in df[text_column].tolist()]
    ids = None
    if id_column is not None:
        ids = ["" if v is None or (isinstance(v, float) and v != v) else str(v) for v in df[id_column].tolist()]
    # the rows of read_csv_bytes's table are numbered 0, 1, ...; a part of it keeps its rows' numbers
    numbers = ([int(i) + 1 for i in df.index] if pd.api.types.is_integer_dtype(df.index) else None)
    return _build_batch(texts, ids, min_words, "Row", numbers)


#: values of a ``control`` column that mark a row as a control (a text the owner never published)
CONTROL_COLUMN = "control"
_CONTROL_TRUE = {"1", "true", "yes", "y", "x"}


def split_control_rows(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Split a table on its ``control`` column (any case): (the documents, the control rows or None).

    A control is a text of the owner's that was never published, so it cannot
    be in anyone's knowledge base; the collection test compares the documents
    against them (audit_core.evidence.collection). The column itself is dropped
    from both parts, so it is never guessed as the text or id column.
    """
    flag = next((c for c in df.columns if str(c).strip().lower() == CONTROL_COLUMN), None)
    if flag is None:
        return df, None
    is_control = df[flag].astype(str).str.strip().str.lower().isin(_CONTROL_TRUE)
    return df[~is_control].drop(columns=[flag]), df[is_control].drop(columns=[flag])


def as_controls(documents: Sequence[Document]) -> list[Document]:
    """Controls with ids of their own ("control-<id>"), so no control shares an id with a document."""
    return [Document(f"control-{d.id}", d.text) for d in documents]


def controls_apart(controls: Sequence[Document], documents: Sequence[Document]) -> tuple[list[Document], int]:
    """The controls whose text is not also one of the audited documents, and how many were left out.

    A text on both sides of the collection test would be compared with itself:
    it stays a document (it is audited) and is not used as a control.
    Controls merged from two sources (a ``control`` column and a second upload,
    both without an id column) can share ids; each keeps its text and gets an
    id of its own, since results are kept by id.
    """
    audited = {normalize_whitespace(d.text) for d in documents}
    used = {d.id for d in documents}
    kept = []
    for c in controls:
        if normalize_whitespace(c.text) in audited:
            continue
        cid = _unique_id(c.id, used)
        used.add(cid)
        kept.append(c if cid == c.id else Document(cid, c.text))
    return kept, len(controls) - len(kept)


def controls_apart_note(n: int) -> str:
    """What the owner is told of the controls ``controls_apart`` left out."""
    return (f"{n} control(s) have the same text as a document you audit: a text cannot be its own control, "
            "so they are audited as documents only.")


#: a line holding nothing visible: any Unicode space (an ideographic or em space from a word processor) or a
#: zero-width character between two line breaks
_BLANK_LINE_RE = re.compile(r"\n(?:[^\S\n]|[\u200b-\u200d\u2060\ufeff])*\n")
#: the other ways a text breaks a line: vertical tab, form feed, NEL, Unicode's line and paragraph separators
_LINE_BREAKS = str.maketrans({c: "\n" for c in "\x0b\x0c\x85\u2028\u2029"})


def documents_from_text(pasted: str, min_words: int = MIN_WORDS) -> DocumentBatch:
    """Documents from pasted text: blocks separated by one or more blank lines.

    Text without a blank line is one document. Ids are "doc-<block>".
    Raises DocumentInputError when nothing but whitespace was pasted.
    """
    if not pasted or not pasted.strip():
        raise DocumentInputError("No text was pasted.")
    text = pasted.replace("\r\n", "\n").replace("\r", "\n").translate(_LINE_BREAKS)
    blocks = [b for b in _BLANK_LINE_RE.split(text) if b.strip()]
    return _build_batch(blocks, None, min_words, "Block")
