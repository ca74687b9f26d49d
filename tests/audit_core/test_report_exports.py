"""What the exports (``audit_core.report``) keep of the owner's own: document ids, texts and their hashes; and
that a target's name or a document id of any shape still gives every export."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import re

import pytest

from audit_core import report
from tests.audit_core.test_report import SECRET, _pages, make_result

KEY_LIKE = ("sk-letter-0001", "sk-letter-0002")


def _renamed(result: dict, names: dict[str, str]) -> dict:
    """``result`` with document ids renamed everywhere (keys, fields, lists)."""
    blob = json.dumps(result, ensure_ascii=False)
    for old, new in names.items():
        blob = blob.replace(json.dumps(old), json.dumps(new, ensure_ascii=False))
    return json.loads(blob)


def _key_like_ids() -> dict:
    r = _renamed(make_result(), {"doc-1": KEY_LIKE[0], "doc-2": KEY_LIKE[1]})
    r["failures"] = {"inconclusive": {KEY_LIKE[1]: {"srag": "no decision"}},
                     "documents_without_decision": [KEY_LIKE[1]],
                     "note": f"the server echoed {SECRET}"}
    return r


@pytest.mark.parametrize("redact", [False, True])
def test_ids_that_look_like_keys_are_the_owners_names_and_kept_in_json_and_csv(redact):
    """Ids sk-letter-0001 and sk-letter-0002 were both masked "[removed]": one document's results overwrote the
    other's in the JSON, and the CSV's rows had no id."""
    r = _key_like_ids()
    blob = report.results_json(r, redact=redact)
    data = json.loads(blob)
    assert [v["doc_id"] for v in data["verdicts"]][:2] == list(KEY_LIKE)
    assert list(data["results"])[:2] == list(KEY_LIKE)
    assert data["results"][KEY_LIKE[0]]["srag"]["score"] == 0.91 and data["results"][KEY_LIKE[1]]["srag"]["score"] == 0.08
    assert [d["id"] for d in data["documents"]][:2] == list(KEY_LIKE)
    assert list(data["failures"]["inconclusive"]) == [KEY_LIKE[1]]
    assert data["failures"]["documents_without_decision"] == [KEY_LIKE[1]]
    assert SECRET.encode() not in blob and b"SECRETPLANTED" not in blob  # a real key is still masked
    rows = list(csv.reader(io.StringIO(report.results_csv(r, redact=redact))))
    assert [row[0] for row in rows[1:3]] == list(KEY_LIKE)
    scores = report.scores_csv(r, redact=redact)
    assert all(f"document,{i}," in scores for i in KEY_LIKE)


def test_ids_that_look_like_keys_are_shown_in_the_pdf():
    text = " ".join(_pages(report.pdf_report(_key_like_ids())))
    assert text.count(KEY_LIKE[0]) >= 3 and text.count(KEY_LIKE[1]) >= 3  # tables, evidence, hashes
    assert SECRET not in text


def test_scrub_keeps_a_document_id_but_not_a_key_beside_it():
    out = report.scrub({"results": {"sk-letter-0001": {"reason": "x"}},
                        "verdicts": [{"doc_id": "sk-letter-0001", "reason": "sk-proj-AbCdEf0123456789"}]})
    assert out["results"] == {"sk-letter-0001": {"reason": "x"}}
    assert out["verdicts"][0]["doc_id"] == "sk-letter-0001" and "AbCdEf" not in out["verdicts"][0]["reason"]


LINK = "https://portal.example.org/claims?token=A1B2C3"
TEXT = f"My complaint letter: the portal link {LINK} never worked and support ignored me for weeks. " * 2
PASTED = "sk-proj-AbCdEf0123456789 is the key I pasted here by mistake, and then the letter goes on. " * 2


def _with_texts() -> dict:
    r = make_result()
    r["documents"][0]["text"] = TEXT
    r["documents"][1]["text"] = PASTED
    # the target's answer, which could echo a key: scrubbed in every export
    r["results"]["doc-1"]["verbatim"] = {"method": "verbatim", "doc_id": "doc-1", "score": 0.4, "decision": None,
                                         "reason": None, "evidence": {"probes": [{"answer": f"ok {SECRET}"}]}}
    return r


def test_the_owners_export_keeps_the_texts_as_audited_and_every_hash_is_of_them():
    """A text with ?token=A1B2C3 in a link was exported as ?token=[removed], and the SHA-256 printed for a third
    party to check was of that altered text."""
    r = _with_texts()
    full = report.results_json(r, redact=False)
    docs = json.loads(full)["documents"]
    assert docs[0]["text"] == TEXT and docs[1]["text"] == PASTED
    assert SECRET.encode() not in full  # the target's answer is still scrubbed
    for redact in (False, True):
        view = report.shared_view(r, redact=redact)
        assert [d["sha256"] for d in view["documents"][:2]] == [hashlib.sha256(t.encode()).hexdigest()
                                                              for t in (TEXT, PASTED)]
        assert (view["documents"][0]["text"] == TEXT) is not redact
        assert SECRET not in json.dumps(view)
    shared = json.loads(report.results_json(r, redact=True))["documents"]
    assert hashlib.sha256(TEXT.encode()).hexdigest() in shared[0]["text"]
    assert "AbCdEf" not in shared[1]["text"] and "begins: [removed] is the key" in shared[1]["text"]
    flat = " ".join(_pages(report.pdf_report(r))).replace(" ", "")
    assert hashlib.sha256(TEXT.encode()).hexdigest() in flat


@pytest.mark.parametrize("target", [
    'http://localhost:8000/v1 · m (sources $.choices[0].message["context"]["citations"])',
    'Acme "Support" bot',
    "http://localhost:8000/v1 · team\\bot v2",
])
def test_a_target_name_with_quotes_or_backslashes_gives_every_shared_export(target):
    """The target's name was replaced by its label inside the serialised JSON, escaped against unescaped: a
    double quote in it made invalid JSON, and no report was written."""
    r = make_result()
    r["target"] = target
    r["verdicts"][0]["reason"] = f"asked {target} six times"
    data = json.loads(report.results_json(r, redact=True))
    assert data["target"] == target and data["verdicts"][0]["reason"] == f"asked {target} six times"
    assert list(csv.reader(io.StringIO(report.results_csv(r, redact=True))))[1][0] == "doc-1"
    assert target in " ".join(_pages(report.pdf_report(r)))


HINDI_ID = ("घुटने के दर्द के बारे में मेरी डायरी का पहला भाग जो मैंने पिछले साल लिखा था और अस्पताल के डॉक्टर "
            "को दिखाया था")


@pytest.mark.filterwarnings("ignore:Glyph")
def test_an_id_in_a_script_the_font_lacks_fits_a_table_row():
    """A Hindi id of 105 characters was cut to 120 before each character was named ("[devanagari letter na]"):
    1,654 characters made a row taller than a page, and no PDF was made."""
    cell = report.cell_id(HINDI_ID)
    assert len(cell) <= report.CELL_ID_CHARS + 1 and cell.endswith("\u2026")
    assert cell.count("[") == cell.count("]")  # whole characters, no name cut in half
    assert report.cell_id("doc-1") == "doc-1" and report.cell_id("A&B <x>") == "A&amp;B &lt;x&gt;"
    r = _renamed(make_result(), {"doc-1": HINDI_ID})
    for redact in (True, False):
        assert report.pdf_report(r, redact=redact).startswith(b"%PDF")


def test_the_pdf_names_a_target_without_a_path_of_this_machine():
    r = make_result()
    r["target"] = "http://localhost:8080/v1 · C:\\models\\llama-3-8b.gguf"
    text = " ".join(_pages(report.pdf_report(r)))
    assert "llama-3-8b.gguf" in text and not re.search(r"C:\\\\?models", text)
