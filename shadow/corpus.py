"""Corpora for shadow RAG systems and benchmarks: loading, filtering, splitting, hashing.

A corpus is a list of ``Document`` with unique ids and unique texts. Member /
non-member splits are seeded and depend only on the *set* of documents (they
are drawn from the documents sorted by id), so reordering a file does not
change an experiment.
"""
from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

from audit_core.documents import Document, DocumentInputError, read_csv_bytes, upload_text


class CorpusError(ValueError):
    """A corpus file or a requested split is invalid; the message says where."""


def content_id(text: str, prefix: str = "doc") -> str:
    """A stable id derived from a text, for corpora that carry no ids."""
    return f"{prefix}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:16]}"


def _jsonl_records(path: Path, text_field: str, id_field: str) -> list[tuple[str | None, str]]:
    try:  # decoded as every upload is: a BOM or a Windows encoding was refused with "Unexpected UTF-8 BOM"
        lines = upload_text(path.read_bytes()).replace("\r\n", "\n").split("\n")  # as a file reads: not at U+2028
    except DocumentInputError as exc:
        raise CorpusError(f"{path}: {exc}") from exc
    out: list[tuple[str | None, str]] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
        if not isinstance(obj, dict) or text_field not in obj:
            raise CorpusError(f"{path}:{lineno}: no {text_field!r} field")
        text = obj[text_field]
        if text is None:
            text = ""
        if not isinstance(text, str):
            raise CorpusError(f"{path}:{lineno}: {text_field!r} is {type(text).__name__}, not a string")
        raw_id = obj.get(id_field)
        out.append((None if raw_id in (None, "") else str(raw_id), text))
    return out


def _csv_records(path: Path, text_field: str, id_field: str) -> list[tuple[str | None, str]]:
    try:
        df = read_csv_bytes(path.read_bytes())
    except DocumentInputError as exc:
        raise CorpusError(f"{path}: {exc}") from exc
    if text_field not in df.columns:
        raise CorpusError(f"{path}: no {text_field!r} column; the columns are {list(df.columns)}")
    ids = df[id_field].tolist() if id_field in df.columns else [""] * len(df)
    return [(i.strip() or None, t) for i, t in zip(ids, df[text_field].tolist())]


def load_corpus(path: str | Path, text_field: str = "text", id_field: str = "id") -> list[Document]:
    """Read a JSONL (one object per line) or CSV corpus into documents, in file order.

    Empty texts are skipped and exact duplicate texts are kept once (the first),
    since a text present twice could end up both a member and a non-member.
    Missing ids are replaced by ``content_id(text)``; an id used for several
    different texts becomes "<id>~<8 hex of the text's sha256>" for each of
    them. Texts are not altered. Raises CorpusError on malformed lines or a
    missing text field.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        records = _jsonl_records(path, text_field, id_field)
    elif suffix in (".csv", ".tsv"):
        records = _csv_records(path, text_field, id_field)
    else:
        raise CorpusError(f"{path}: unsupported corpus format {suffix!r} (use .jsonl or .csv)")
    kept: list[tuple[str, str]] = []
    seen_texts: set[str] = set()
    for raw_id, text in records:
        if not text.strip() or text in seen_texts:
            continue
        seen_texts.add(text)
        kept.append((raw_id if raw_id is not None else content_id(text), text))
    uses = Counter(doc_id for doc_id, _ in kept)
    # an id shared by different texts (MedQuAD has such ids) gets a content suffix on
    # every use, so the resulting ids do not depend on the order of the file
    docs = [Document(f"{i}~{content_id(t, '')[1:9]}" if uses[i] > 1 else i, t) for i, t in kept]
    if len({d.id for d in docs}) != len(docs):
        raise CorpusError(f"{path}: ids are not unique even after disambiguation")
    return docs


def write_jsonl(docs: Iterable[Document], path: str | Path, source: str | None = None) -> None:
    """Write documents as JSONL lines {"id", "text"[, "source"]}, readable by ``load_corpus``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for d in docs:
            obj = {"id": d.id, "text": d.text}
            if source is not None:
                obj["source"] = source
            fh.write(json.dumps(obj, ensure_ascii=False) + "\n")


def filter_by_words(docs: Iterable[Document], min_words: int = 0, max_words: int | None = None) -> list[Document]:
    """Documents with ``min_words <= n_words <= max_words`` (both inclusive; None: no upper bound)."""
    return [d for d in docs if d.n_words >= min_words and (max_words is None or d.n_words <= max_words)]


def split_members(
    docs: Sequence[Document], n_members: int, n_nonmembers: int, seed: int
) -> tuple[list[Document], list[Document]]:
    """Draw disjoint member and non-member sets with ``random.Random(seed)``.

    The draw is from the documents sorted by id, so it depends on the set of
    documents and the seed only. Members are the ones put into a RAG's
    knowledge base; non-members come from the same distribution but are kept
    out. Raises CorpusError if the corpus is too small or has repeated ids or
    texts (which would make the two sets overlap).
    """
    if n_members < 0 or n_nonmembers < 0:
        raise CorpusError(f"split sizes must be >= 0, got {n_members} members and {n_nonmembers} non-members")
    need = n_members + n_nonmembers
    if need > len(docs):
        raise CorpusError(
            f"the corpus has {len(docs)} documents but the split needs {need} "
            f"({n_members} members + {n_nonmembers} non-members)"
        )
    if len({d.id for d in docs}) != len(docs) or len({d.text for d in docs}) != len(docs):
        raise CorpusError("the corpus has repeated ids or texts; load it with load_corpus to deduplicate")
    ordered = sorted(docs, key=lambda d: d.id)
    picked = random.Random(seed).sample(ordered, need)
    return picked[:n_members], picked[n_members:]


def corpus_hash(docs: Iterable[Document]) -> str:
    """SHA-256 of a corpus, independent of document order.

    Used as a cache key for shadow preparation, which depends on the set of
    documents only (splits sort by id). Each (id, text) pair is hashed with
    length prefixes so that no two different corpora can collide by moving
    characters between fields or documents.
    """
    h = hashlib.sha256()
    for doc_id, text in sorted((d.id, d.text) for d in docs):
        for part in (doc_id, text):
            b = part.encode("utf-8")
            h.update(len(b).to_bytes(8, "big"))
            h.update(b)
    return h.hexdigest()
