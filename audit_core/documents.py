"""The unit of an audit: a document with a stable id."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import warnings
from dataclasses import dataclass, field
from typing import Literal, Sequence

import pandas as pd
from charset_normalizer import from_bytes


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
    #: what the owner must be told about the file as a whole, beside the rows: the encoding that was assumed
    #: for it, a quote left open... (``read_table_bytes`` keeps them in the table's ``attrs``, under ``NOTES``)
    notes: list[str] = field(default_factory=list)

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


#: Byte-order marks of the UTF-16 and UTF-32 files Excel ("Unicode Text") and other tools write; the
#: UTF-32 ones first, since they begin with the UTF-16 ones.
_BOMS: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"), (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"),
)

#: The encodings a spreadsheet program or an older tool saves text in when not told to use UTF-8, with the
#: names people know them by. When several fit a file equally well the first listed is taken: Western
#: European first, as it was this reader's only guess before, then the other Windows code pages by how
#: many people write in them.
_LEGACY_ENCODINGS: dict[str, str] = {
    "cp1252": "Windows-1252 (Western European)",
    "cp1250": "Windows-1250 (Central European)",
    "cp1251": "Windows-1251 (Cyrillic)",
    "gb18030": "GBK (simplified Chinese)",
    "cp932": "Shift-JIS (Japanese)",
    "cp949": "CP949/EUC-KR (Korean)",
    "big5": "Big5 (traditional Chinese)",
    "cp1253": "Windows-1253 (Greek)",
    "cp1254": "Windows-1254 (Turkish)",
    "cp1257": "Windows-1257 (Baltic)",
    "cp1255": "Windows-1255 (Hebrew)",
    "cp1256": "Windows-1256 (Arabic)",
    "cp1258": "Windows-1258 (Vietnamese)",
    "cp874": "Windows-874 (Thai)",
    "mac_roman": "Mac Roman (Excel's 'CSV (Macintosh)')",
}

#: Bytes that mean nothing in Windows-1252: a file in it with one of them cannot be decoded strictly.
_CP1252_UNDEFINED = re.compile(rb"[\x81\x8d\x8f\x90\x9d]")

#: charset_normalizer's "chaos" (share of odd character sequences, 0-1) within which two readings of a file
#: are as clean as each other, its language "coherence" (0-1) within which they read as well as each other,
#: and the chaos above which a reading is garbled whatever it is (charset_normalizer's own default limit).
_CHAOS_TIE, _COHERENCE_TIE, _CHAOS_GARBLED = 0.02, 0.05, 0.2


@dataclass(frozen=True)
class _Reading:
    """One way of decoding a file that is not UTF-8, as charset_normalizer scored it."""

    codec: str
    text: str
    chaos: float
    coherence: float


def _decode(data: bytes) -> tuple[str, list[str]]:
    """The text of an upload, and what the owner must be told about how it was read.

    UTF-32/UTF-16 with a byte-order mark, UTF-16 without one, and UTF-8 (with or without
    a mark) are certain; anything else is a legacy encoding ``_decode_legacy`` detects.
    """
    for bom, codec in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(codec), []
            except UnicodeDecodeError as exc:
                raise DocumentInputError(f"The file starts like {codec.upper()} text but is not valid "
                                         f"{codec.upper()}.") from exc
    codec = _utf16_without_bom(data)
    if codec:
        return data.decode(codec), []
    if data.startswith(b"\xef\xbb\xbf"):
        try:
            return data.decode("utf-8-sig"), []
        except UnicodeDecodeError as exc:
            raise DocumentInputError(
                "The file starts with a UTF-8 marker but is not valid UTF-8; save it again as 'CSV UTF-8'."
            ) from exc
    try:
        return data.decode("utf-8"), []
    except UnicodeDecodeError as exc:
        _refuse_damaged_utf8(data, exc)
    return _decode_legacy(data)


def _utf16_without_bom(data: bytes) -> str | None:
    """"utf-16-le" or "utf-16-be" for UTF-16 text saved without a byte-order mark, else None.

    In UTF-16 every character of the ASCII range (digits, delimiters, line breaks, Latin letters) has a NUL
    as its high byte, so such text has NULs in one byte position of each pair and (nearly) none in the other;
    binary data with NULs has them in both. It is told here, before NUL bytes make the file refused as binary.
    """
    sample = data[:65536]
    if len(data) % 2 or len(sample) < 4:
        return None
    nuls_first, nuls_second = (part.count(0) / (len(sample) // 2) for part in (sample[0::2], sample[1::2]))
    for codec, nuls_high, nuls_low in (("utf-16-le", nuls_second, nuls_first), ("utf-16-be", nuls_first, nuls_second)):
        if nuls_high >= 0.2 and nuls_low <= nuls_high / 20:
            try:
                data.decode(codec)
            except UnicodeDecodeError:
                continue
            return codec
    return None


def _decode_legacy(data: bytes) -> tuple[str, list[str]]:
    """Decode a file that is not UTF-8, in Windows-1252 unless it reads as another language's text, and say so
    where the choice is unsure.

    Every byte sequence decodes in one single-byte code page or another, so a Russian (cp1251) or Chinese
    (GBK) file read as Windows-1252 raises no error: it becomes mojibake, audited as garbage and reported
    "not found". Windows-1252 stays the reading of a file it reads as Western text (``_foreign_in_western``
    finds no trace of another script), as it was this reader's only guess before: charset_normalizer cannot
    tell a short Western text from one in another Latin code page, nor any text from random letters. Otherwise
    charset_normalizer decides among ``_LEGACY_ENCODINGS`` by how garbled each reading looks ("chaos") and how
    well it reads as a language ("coherence"). Either way, when another encoding fits as well the owner is told
    which one was assumed, so that a wrong guess does not pass unseen.
    """
    readings: list[_Reading] = []
    for match in from_bytes(data, cp_isolation=list(_LEGACY_ENCODINGS), threshold=1.0):
        text = str(match)
        readings += [_Reading(codec, text, match.chaos, match.coherence)
                     for codec in match.could_be_from_charset if codec in _LEGACY_ENCODINGS]
    undefined = list(_CP1252_UNDEFINED.finditer(data))
    western = next((r for r in readings if r.codec == "cp1252"), None)
    if western is None:
        # Windows-1252 with bytes it leaves undefined (a stray control code), or so garbled charset_normalizer
        # dropped it: scored as if those bytes were not there; they are read as U+FFFD and said below
        match = from_bytes(_CP1252_UNDEFINED.sub(b"?", data), cp_isolation=["cp1252"], threshold=1.0).best()
        western = _Reading("cp1252", data.decode("cp1252", errors="replace"),
                           match.chaos if match else 1.0, match.coherence if match else 0.0)
        readings.append(western)
    least = min(r.chaos for r in readings)
    clean = [r for r in readings if r.chaos <= least + _CHAOS_TIE]
    best = max(r.coherence for r in clean)
    likely = [r for r in clean if r.coherence >= best - _COHERENCE_TIE]
    order = list(_LEGACY_ENCODINGS)
    chosen = min(likely, key=lambda r: order.index(r.codec)) if _foreign_in_western(western.text) else western
    label = _LEGACY_ENCODINGS[chosen.codec]
    rivals = sorted({r.codec for r in likely if r.text != chosen.text}, key=order.index)
    notes: list[str] = []
    if chosen.chaos > _CHAOS_GARBLED and chosen is not western:
        notes.append(f"This file is not UTF-8, and it reads garbled in every encoding tried; it was read as {label}. "
                     "If its letters look wrong in the preview, save it again as 'CSV UTF-8' and upload it again.")
    elif rivals:
        others = " or ".join(_LEGACY_ENCODINGS[c] for c in rivals[:3]) + (
            f" (or {len(rivals) - 3} more)" if len(rivals) > 3 else "")
        notes.append(f"This file is not UTF-8; it was read as {label}, though it could also be {others}. If "
                     "letters look wrong in the preview, save it again as 'CSV UTF-8' and upload it again.")
    if chosen is western and undefined:
        line = data[:undefined[0].start()].count(b"\n") + 1
        notes.append(f"{len(undefined)} byte(s) of this file mean nothing in {label} (the first on line {line}); "
                     "each was read as '\ufffd'. Check that line, or save the file as 'CSV UTF-8'.")
    return chosen.text, notes


#: what may stand between two letters in Western text ("don’t", "Paris–Berlin", Catalan "col·lecció"), and
#: × and ÷: cp1251's Ч and ч, so Cyrillic shows in whole accented words rather than as symbols inside words
_WESTERN_JOINERS = frozenset("’‘‚–—·…×÷")


def _foreign_in_western(text: str) -> bool:
    """Whether a Windows-1252 reading shows the traces another encoding leaves when read that way.

    A Polish (cp1250) or Chinese (GBK) text read as cp1252 has symbols inside words ("ka¿dego", "pisa³a",
    "ÎÒµÄ×æ"); a Cyrillic, Greek, Hebrew or Arabic one has whole words of accented letters ("Ìîÿ áàáóøêà"),
    which Western languages have only among unaccented ones. Random letters have neither in number.
    """
    sample = text[:65536]
    glued = sum(1 for i in range(1, len(sample) - 1)
                if ord(sample[i]) > 0x7F and not sample[i].isalpha() and sample[i] not in _WESTERN_JOINERS
                and sample[i - 1].isalpha() and sample[i + 1].isalpha())
    if glued >= 2:
        return True
    words = set(re.findall(r"[^\W\d_]{2,}", sample))
    accented = sum(1 for w in words if len(w) >= 3 and all(ord(c) > 0x7F for c in w))
    mixed = sum(1 for w in words if any(ord(c) > 0x7F for c in w) and any(ord(c) <= 0x7F for c in w))
    return accented >= 5 and accented >= 5 * mixed


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
    unicode = data.startswith(tuple(bom for bom, _ in _BOMS)) or _utf16_without_bom(data) is not None
    if b"\x00" in data[:65536] and not unicode:
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


#: the key of a table's ``attrs`` under which ``read_table_bytes`` keeps what the owner must be told about
#: the file as a whole (``DocumentBatch.notes``)
NOTES = "notes"


def read_csv_bytes(data: bytes) -> pd.DataFrame:
    """Parse an uploaded CSV into a DataFrame of strings (empty cells are "").

    Encoding and delimiter are detected because users export from Excel,
    LibreOffice or scripts with every combination of UTF-8/BOM/legacy code page and
    ',' ';' tab '|'. Nothing is coerced: "NA", "0012" and "1e5" stay text.
    What the owner must be told of how it was read is in ``df.attrs[NOTES]``.
    Raises DocumentInputError for empty, binary or unparseable input.
    """
    text, notes = _upload(data)
    return _with_notes(_csv_table(text), notes)


def upload_text(data: bytes) -> str:
    """An upload's text: not empty, not binary, decoded (``_decode``), without a byte-order mark.

    Every reader of a user's file goes through it (documents, controls, a public corpus), so a file saved
    by Excel on Windows or with a byte-order mark reads the same everywhere."""
    return _upload(data)[0]


def _upload(data: bytes) -> tuple[str, list[str]]:
    """``upload_text``, and the notes of ``_decode`` on how the file was read."""
    if not data or not data.strip():
        raise DocumentInputError("The file is empty.")
    _check_not_binary(data)
    text, notes = _decode(data)
    _check_text_like(text)
    text = text.lstrip("\ufeff")
    if not text.strip():
        raise DocumentInputError("The file is empty.")
    return text, notes


def _with_notes(df: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """``df`` with ``notes`` first among its ``attrs[NOTES]``; pandas carries ``attrs`` to a part of the table
    (``split_control_rows``), so the notes reach ``documents_from_table`` with it."""
    df.attrs[NOTES] = notes + list(df.attrs.get(NOTES, []))
    return df


#: Excel's first line that declares the delimiter ("sep=;"), which it writes and reads in every locale
_SEP_LINE_RE = re.compile(r'"?sep=([^\r\n"])"?[^\S\r\n]*\r?\n', re.IGNORECASE)


def _csv_table(text: str) -> pd.DataFrame:
    """``read_csv_bytes`` on decoded text; what the owner must be told of how it was split is in ``attrs[NOTES]``."""
    if "\r" in text and "\n" not in text:  # Excel's "CSV (Macintosh)" ends lines with CR alone: one line to csv
        text = text.replace("\r", "\n")
    declared = _SEP_LINE_RE.match(text)
    if declared:  # not a header: read as one, it shifted every row number by one
        text, delimiter = text[declared.end():], declared.group(1)
    else:
        delimiter = _detect_delimiter(text)
    notes: list[str] = []
    headerless = False
    if not delimiter:
        delimiter = _unused_delimiter(text)  # one column: every line is one field
        first = next((line for line in text.splitlines() if line.strip()), "")
        # a one-column file whose first line is a text, not a column name: that line is a document too
        headerless = len(first.split()) >= HEADER_MAX_WORDS
    names = ["text"] if headerless else None
    head = [] if headerless else _records(text, delimiter, 1)
    if head and any(len(cell.split()) >= HEADER_MAX_WORDS for cell in head[0]):
        # a "column name" of a sentence: the file has no header and its first row is a document
        if _prose_lines(text, delimiter):
            delimiter, names = _unused_delimiter(text), ["text"]
        else:
            names = [f"column {i + 1}" for i in range(len(head[0]))]
    shown = {"\t": "tab"}.get(delimiter, repr(delimiter))
    try:
        df = _read_csv(text, delimiter, names)
        if names is not None and len(names) > 1:
            notes += _split_texts_note(df, shown)
    except pd.errors.EmptyDataError as exc:
        raise DocumentInputError("The file has no header row and no data.") from exc
    except (pd.errors.ParserError, pd.errors.ParserWarning) as exc:
        shown = "none" if delimiter in "\x1c\x1d\x1e\x1f" else shown
        unclosed = re.search(r"EOF inside string starting at row (\d+)", str(exc))
        if unclosed:
            row = int(unclosed.group(1)) + (1 if headerless else 0)
            raise DocumentInputError(
                f"A double quote opened in row {row} (the header not counted) is never closed, so the rest of the "
                "file would be read as that row's text. Close it, or write each double quote inside a text twice "
                "(\"\"), and upload the file again.") from exc
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
    df.attrs[NOTES] = notes + _swallowed_rows_notes(df, delimiter)
    return df


def _prose_lines(text: str, delimiter: str) -> bool:
    """Whether a file without a header row is one text a line, whose commas (semicolons) are punctuation.

    Split at its commas, such a file gives several columns of fragments and the longest was audited,
    the rest of every text dropped. Punctuation is followed by a space and a delimiter seldom is, and a
    text's first fragment has words where a table's first column has an id.
    """
    if delimiter not in ",;":
        return False
    records = _records(text[:32768], delimiter)
    later = [cell for rec in records for cell in rec[1:] if cell.strip()]
    firsts = [rec[0] for rec in records if rec[0].strip()]
    if not later or not firsts:
        return False
    spaced = sum(cell[0].isspace() for cell in later) / len(later)
    worded = sum(len(cell.split()) >= 2 for cell in firsts) / len(firsts)
    return spaced >= 0.9 and worded >= 0.5


def _split_texts_note(df: pd.DataFrame, shown: str) -> list[str]:
    """The note for a file without a header row split into several columns of text: only one is audited."""
    texty = [str(c) for c in df.columns if df[c].fillna("").astype(str).str.split().str.len().mean() >= 3]
    if len(texty) < 2:
        return []
    listed = ", ".join(map(repr, texty[:4])) + (", ..." if len(texty) > 4 else "")
    return [f"The file has no header row, and its lines were split at {shown} into {len(df.columns)} columns, "
            f"{len(texty)} of which hold text ({listed}): "
            "only the one chosen as the text column is audited. If each line is one text, add a first line "
            "'text' and upload the file again."]


def _id_shape(value: str) -> str:
    """"doc-12" -> "a-9": the form of an id, to tell a line that starts like a row of the file."""
    return re.sub(r"[^\W\d_]+", "a", re.sub(r"\d+", "9", value))


def _swallowed_rows_notes(df: pd.DataFrame, delimiter: str) -> list[str]:
    """Notes on cells whose line breaks are followed by what looks like a row of the file (``<id><delimiter>``).

    A double quote opened and never closed makes the parser read the rows after it as part of that
    cell, up to the next quote: those rows are not lost with an error but merged into one text.
    """
    if len(df.columns) < 2 or delimiter not in CSV_DELIMITERS:
        return []
    ids = df[df.columns[0]]
    if ids.str.contains(r"\s").any():
        return []
    shapes = {_id_shape(v) for v in ids if v}
    start = re.compile(r'[^\S\n]*"?([^\s"' + re.escape(delimiter) + r']{1,64})"?' + re.escape(delimiter))
    notes: list[str] = []
    for col in df.columns:
        for index, cell in df.loc[df[col].str.contains("\n", regex=False), col].items():
            line = next((ln for ln in cell.split("\n")[1:] if (m := start.match(ln))
                         and _id_shape(m.group(1)) in shapes and ln.count(delimiter) >= len(df.columns) - 1), None)
            if line is not None and len(notes) < 3:
                notes.append(f"Row {int(index) + 1}'s {col!r} cell has line breaks followed by what looks like rows "
                             f"of their own (a line starting {line[:30]!r}): a double quote opened in that row is "
                             "probably never closed, so the rows after it were read as part of its text. Close the "
                             "quote (or write each double quote inside a text twice: \"\") and upload the file again.")
    return notes


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
    object; everything else is read by ``read_csv_bytes``. Notes as there, in ``df.attrs[NOTES]``.
    """
    text, notes = _upload(data)  # decoded once, for either reader
    if name.lower().endswith((".jsonl", ".ndjson")) or _looks_like_jsonl(text):
        df = _jsonl_table(text)
        if df.empty:
            raise DocumentInputError("The JSONL file has no records.")
        return _with_notes(df, notes)
    return _with_notes(_csv_table(text), notes)


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
    batch = _build_batch(texts, ids, min_words, "Row", numbers)
    batch.notes = list(df.attrs.get(NOTES, []))
    return batch


#: values of a ``control`` column that mark a row as a control (a text the owner never published), and those
#: that mark it as a document; a number counts as its value (1.0 from a spreadsheet is 1)
CONTROL_COLUMN = "control"
_CONTROL_TRUE = {"1", "true", "yes", "y", "x"}
_CONTROL_FALSE = {"", "0", "false", "no", "n"}
#: how many unrecognised values a refusal names
_SHOWN_VALUES = 5


def _control_flag(value: object) -> bool | None:
    """Whether one cell of the ``control`` column marks a control; None when it is no value we know.

    An empty cell (None, NaN, "") is a document: the column is filled in on the control rows only.
    """
    if value is None or (isinstance(value, float) and value != value):
        return False
    text = str(value).strip().lower()
    if text in _CONTROL_TRUE:
        return True
    if text in _CONTROL_FALSE:
        return False
    try:
        number = float(text)
    except ValueError:
        return None
    return True if number == 1 else False if number == 0 else None


def split_control_rows(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Split a table on its ``control`` column (any case): (the documents, the control rows or None).

    A control is a text of the owner's that was never published, so it cannot
    be in anyone's knowledge base; the collection test compares the documents
    against them (audit_core.evidence.collection). The column itself is dropped
    from both parts, so it is never guessed as the text or id column.

    A value that is neither a known yes nor a known no (a tick mark, "oui") is
    refused rather than guessed: read as "no", the owner's never-published
    controls would be audited as published documents, and the collection test
    would vanish without a word. Raises DocumentInputError naming the values
    and their rows.
    """
    flag = next((c for c in df.columns if str(c).strip().lower() == CONTROL_COLUMN), None)
    if flag is None:
        return df, None
    if len(df.columns) == 1:
        raise DocumentInputError(f"The file's only column is {str(flag).strip()!r}, which marks control rows; it "
                                 "has no column of texts. Add a column that holds your texts, one per row.")
    flags = [_control_flag(v) for v in df[flag].tolist()]
    unknown: dict[str, list[int]] = {}
    rows = [int(i) + 1 for i in df.index] if pd.api.types.is_integer_dtype(df.index) else range(1, len(df) + 1)
    for row, value, known in zip(rows, df[flag].tolist(), flags):
        if known is None:
            unknown.setdefault(str(value).strip(), []).append(row)
    if unknown:
        shown = "; ".join(f"{value!r} (row{'s' if len(at) > 1 else ''} {', '.join(map(str, at[:5]))}"
                          f"{', ...' if len(at) > 5 else ''})" for value, at in list(unknown.items())[:_SHOWN_VALUES])
        more = f"; and {len(unknown) - _SHOWN_VALUES} other value(s)" if len(unknown) > _SHOWN_VALUES else ""
        raise DocumentInputError(
            f"The {str(flag).strip()!r} column holds value(s) that say neither yes nor no: {shown}{more}. "
            "Nothing was guessed, since a control audited as a document changes the results. Write yes "
            "(or 1, x, true) on the rows of texts you never published, and leave the others empty (or no, 0, "
            "false).")
    is_control = pd.Series(flags, index=df.index, dtype=bool)
    return df[~is_control].drop(columns=[flag]), df[is_control].drop(columns=[flag])


def as_controls(documents: Sequence[Document]) -> list[Document]:
    """Controls with ids of their own ("control-<id>"), so no control shares an id with a document."""
    return [Document(f"control-{d.id}", d.text) for d in documents]


def controls_apart(controls: Sequence[Document], documents: Sequence[Document]) -> tuple[list[Document], int, int]:
    """The controls whose text is neither one of the audited documents nor an earlier control's, and how many
    of each were left out: (kept, same as a document, repeated).

    A text on both sides of the collection test would be compared with itself:
    it stays a document (it is audited) and is not used as a control. A text
    given twice as a control (in the ``control`` column and in a second upload)
    is one control: counted twice, the permutation test takes the two copies for
    independent controls, and its p-value falls below the rate it promises
    (about 0.07-0.10 at a nominal 0.05 with every control repeated, a review's
    simulation of session 60). Controls merged from two sources (both without
    an id column) can share ids; each keeps its text and gets an id of its own,
    since results are kept by id.
    """
    audited = {normalize_whitespace(d.text) for d in documents}
    used = {d.id for d in documents}
    seen: set[str] = set()
    kept, same, repeated = [], 0, 0
    for c in controls:
        text = normalize_whitespace(c.text)
        if text in audited:
            same += 1
            continue
        if text in seen:
            repeated += 1
            continue
        seen.add(text)
        cid = _unique_id(c.id, used)
        used.add(cid)
        kept.append(c if cid == c.id else Document(cid, c.text))
    return kept, same, repeated


def controls_apart_note(same: int, repeated: int = 0) -> str:
    """What the owner is told of the controls ``controls_apart`` left out."""
    notes = []
    if same:
        notes.append(f"{same} control(s) have the same text as a document you audit: a text cannot be its own "
                     "control, so they are audited as documents only.")
    if repeated:
        notes.append(f"{repeated} control(s) repeat the text of another control and are used once: the "
                     "collection test counts each control as a separate never-published text.")
    return " ".join(notes)


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
