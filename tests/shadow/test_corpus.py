"""Corpora: loading, splits, hashing, and the shipped assets."""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from audit_core.documents import Document, documents_from_table, read_csv_bytes
from shadow.corpus import (
    CorpusError,
    content_id,
    corpus_hash,
    filter_by_words,
    load_corpus,
    split_members,
    write_jsonl,
)

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "assets"


def _docs(n: int) -> list[Document]:
    return [Document(f"d{i:03d}", f"text number {i} " + "word " * (i % 7)) for i in range(n)]


# --- load_corpus ----------------------------------------------------------------------

def test_jsonl_round_trip_skips_empty_and_duplicates(tmp_path):
    docs = _docs(5)
    path = tmp_path / "c.jsonl"
    write_jsonl(docs, path, source="unit")
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": "empty", "text": "  "}) + "\n\n")
        fh.write(json.dumps({"id": "dup", "text": docs[2].text}) + "\n")
        fh.write(json.dumps({"text": "no id here \u00e9"}) + "\n")
    loaded = load_corpus(path)
    assert loaded[:5] == docs
    assert len(loaded) == 6
    assert loaded[5] == Document(content_id("no id here \u00e9"), "no id here \u00e9")
    assert json.loads(path.read_text(encoding="utf-8").splitlines()[0])["source"] == "unit"


def test_csv_round_trip_with_and_without_ids(tmp_path):
    docs = _docs(4)
    with_ids = tmp_path / "with.csv"
    with with_ids.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, delimiter=";")
        w.writerow(["id", "body"])
        w.writerows([d.id, d.text] for d in docs)
        w.writerow(["x", ""])
    assert load_corpus(with_ids, text_field="body") == docs

    no_ids = tmp_path / "no.csv"
    no_ids.write_text("text\n" + "\n".join(d.text for d in docs) + "\n", encoding="utf-8")
    first = load_corpus(no_ids)
    assert [d.text for d in first] == [d.text for d in docs]
    assert [d.id for d in first] == [content_id(d.text) for d in docs]
    assert load_corpus(no_ids) == first  # content-derived ids are stable


def test_shared_id_for_different_texts_is_disambiguated_order_independently(tmp_path):
    lines = [{"id": "q1", "text": "alpha"}, {"id": "q1", "text": "beta"}, {"id": "q2", "text": "gamma"}]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    b.write_text("".join(json.dumps(x) + "\n" for x in reversed(lines)), encoding="utf-8")
    da, db = load_corpus(a), load_corpus(b)
    assert {d.id: d.text for d in da} == {d.id: d.text for d in db}
    assert len({d.id for d in da}) == 3 and "q2" in {d.id for d in da}
    assert all(d.id.startswith("q1~") for d in da if d.text != "gamma")


@pytest.mark.parametrize(
    "content, fragment",
    [('{"id": "a", "text": "x"}\nnot json\n', ":2: not valid JSON"), ('{"id": "a", "body": "x"}\n', "no 'text' field")],
)
def test_malformed_jsonl_names_the_line(tmp_path, content, fragment):
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CorpusError, match=fragment):
        load_corpus(path)


def test_unsupported_format(tmp_path):
    (tmp_path / "c.parquet").write_bytes(b"x")
    with pytest.raises(CorpusError, match="unsupported"):
        load_corpus(tmp_path / "c.parquet")


def test_filter_by_words_bounds_are_inclusive():
    docs = [Document(str(n), " ".join(["w"] * n)) for n in range(1, 8)]
    assert [d.n_words for d in filter_by_words(docs, 3, 5)] == [3, 4, 5]
    assert [d.n_words for d in filter_by_words(docs, 6)] == [6, 7]


# --- split_members ----------------------------------------------------------------------

def test_split_is_deterministic_disjoint_and_seed_dependent():
    docs = _docs(100)
    m1, n1 = split_members(docs, 30, 20, seed=7)
    m2, n2 = split_members(list(reversed(docs)), 30, 20, seed=7)  # order of input does not matter
    assert (m1, n1) == (m2, n2)
    assert len(m1) == 30 and len(n1) == 20
    assert not {d.id for d in m1} & {d.id for d in n1}
    m3, _ = split_members(docs, 30, 20, seed=8)
    assert {d.id for d in m3} != {d.id for d in m1}


def test_split_errors():
    docs = _docs(10)
    with pytest.raises(CorpusError, match="10 documents but the split needs 11"):
        split_members(docs, 6, 5, seed=0)
    with pytest.raises(CorpusError, match=">= 0"):
        split_members(docs, -1, 5, seed=0)
    with pytest.raises(CorpusError, match="repeated"):
        split_members(docs + [Document("other", docs[0].text)], 2, 2, seed=0)
    m, n = split_members(docs, 10, 0, seed=0)
    assert len(m) == 10 and n == []


# --- corpus_hash ------------------------------------------------------------------------

def test_corpus_hash_is_order_independent_and_content_sensitive():
    docs = _docs(20)
    h = corpus_hash(docs)
    assert h == corpus_hash(list(reversed(docs)))
    assert h != corpus_hash(docs[:-1])
    assert h != corpus_hash(docs[:-1] + [Document(docs[-1].id, docs[-1].text + ".")])
    assert corpus_hash([Document("ab", "c")]) != corpus_hash([Document("a", "bc")])


# --- shipped assets (read from assets/, never from ../shared) ---------------------------

def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (ASSETS / name).read_text(encoding="utf-8").splitlines()]


def _csv_rows(name: str) -> list[dict[str, str]]:
    with (ASSETS / name).open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("name, size, lo, hi", [("aux_medquad.jsonl", 1200, 60, 300), ("demo_kb.jsonl", 300, 40, 200)])
def test_asset_corpora_sizes_and_lengths(name, size, lo, hi):
    rows = _jsonl(name)
    assert len(rows) == size
    docs = load_corpus(ASSETS / name)
    assert len(docs) == size  # no empty texts, no duplicates, ids unique
    assert all(lo <= d.n_words <= hi for d in docs)
    assert all(set(r) == {"id", "text", "source"} for r in rows)


def test_asset_licenses_and_readme():
    aux = (ASSETS / "aux_medquad.LICENSE.md").read_text(encoding="utf-8")
    attribution = 'Ben Abacha & Demner-Fushman, "A Question-Entailment Approach to Question Answering", BMC Bioinformatics 2019'
    for must in ("CC BY 4.0", attribution, "abachaa/MedQuAD", "Sampled subset"):
        assert must in aux
    demo = (ASSETS / "demo_kb.LICENSE.md").read_text(encoding="utf-8")
    for must in ("Kent0n-Li/ChatDoctor", "GenMedGPT-5k", "Apache License 2.0", "research use only",
                 "not for clinical use", "synthetic", "sample_documents.csv"):
        assert must in demo
    readme = (ASSETS / "README.md").read_text(encoding="utf-8")
    for name in ("aux_medquad.jsonl", "demo_kb.jsonl", "sample_documents.csv", "sample_documents_truth.csv",
                 "scripts/build_assets.py", "CC BY 4.0", "Apache-2.0"):
        assert name in readme


def test_sample_documents_and_answer_key():
    sample_bytes = (ASSETS / "sample_documents.csv").read_bytes()
    df = read_csv_bytes(sample_bytes)
    assert list(df.columns) == ["id", "text"]  # the upload does not carry the answer
    batch = documents_from_table(df, "text", "id")
    assert batch.counts()["usable"] == 20
    truth = {r["id"]: r["truth"] for r in _csv_rows("sample_documents_truth.csv")}
    assert set(truth) == set(df["id"])
    assert sorted(truth.values()).count("member") == 10 and sorted(truth.values()).count("non-member") == 10

    kb_texts = {d.text for d in load_corpus(ASSETS / "demo_kb.jsonl")}
    kb_keys = {" ".join(t.lower().split()) for t in kb_texts}
    for doc in batch.documents:
        if truth[doc.id] == "member":
            assert doc.text in kb_texts
        else:
            assert doc.text not in kb_texts
            assert " ".join(doc.text.lower().split()) not in kb_keys
    labels = [truth[i] for i in df["id"]]
    assert labels != sorted(labels) and labels != sorted(labels, reverse=True)  # shuffled


def test_assets_rebuild_identically(shared_data, tmp_path, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_assets", ROOT / "scripts" / "build_assets.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "build_assets", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    module.build(shared_data, tmp_path)
    # folders hold what other scripts and people write (target files, the shipped preparation)
    built_here = sorted(p for p in ASSETS.iterdir() if p.is_file())
    for path in built_here:
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), path.name
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in built_here]
