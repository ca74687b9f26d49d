"""Figures and exports of an audit, from a hand-built audit dict (no real audit is run)."""
from __future__ import annotations

import copy
import csv
import io
import json
import math

import numpy as np
import pytest

from audit_core import plots, report
from audit_core.methods.base import MethodResult
from audit_core.verdict import VerdictConfig, decide

SECRET = "sk-test-SECRETPLANTED0123456789"
MODEL = "acme-rag-model-7b"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _srag_evidence(probs: list[float], bins: int = 10, auc: float = 0.84) -> dict:
    counts = [0.0] * bins
    for p in probs:
        counts[min(int(math.floor(bins * p)), bins - 1)] += 1
    words = [{"word": f"w{i}", "prob": p, "below_top_k": p == 0.0, "first_token": " x" if p == 0 else f" w{i}",
              "error": None} for i, p in enumerate(probs)]
    return {"words": words, "shadow_auc": auc, "histogram": counts,
            "below_topk_share": sum(p == 0 for p in probs) / len(probs)}


def _mba_evidence(right: int, total: int = 10) -> dict:
    rows = [{"mask": f"[MASK_{i}]", "expected": [f"word{i}", f"wrod{i}"] if i == 0 else f"word{i}",
             "predicted": f"word{i}" if i < right else "other", "correct": i < right} for i in range(total)]
    return {"masked_text": "The patient took [MASK_0] for three days & felt <better>.", "rows": rows}


def make_result() -> dict:
    """A realistic audit dict: 4 documents (member, not found, disagreement, too short), S-RAG + MBA, one
    method that could not run, and secrets planted where none should survive."""
    rng = np.random.default_rng(0)
    mem = [float(x) for x in np.clip(rng.beta(5, 2, 40), 0, 1)]
    non = [float(x) for x in np.clip(rng.beta(2, 5, 40), 0, 1)]
    mba_mem = [float(x) for x in rng.integers(4, 11, 30) / 10]
    mba_non = [float(x) for x in rng.integers(0, 6, 30) / 10]
    nr_reason = "the target returns no logprobs, which this method needs"
    docs = [
        {"id": "doc-1", "text": "Amoxicillin 500mg was prescribed to the patient for a sinus infection. " * 3},
        {"id": "doc-2", "text": "A completely unrelated note about gardening and tomatoes in July. " * 3},
        {"id": "A&B <x>", "text": "Text with markup <b>bold</b> & ampersands that must be escaped. " * 3},
        {"id": "=cmd", "text": "Too short."},
    ]
    results = {
        "doc-1": [MethodResult("srag", "doc-1", 0.91, True, None, {**_srag_evidence([0.95, 0.9, 0.8, 0.99, 0.7, 0.85]),
                                                                    "reproduced_share": 0.375}),
                  MethodResult("mba", "doc-1", 0.8, True, None, _mba_evidence(8))],
        "doc-2": [MethodResult("srag", "doc-2", 0.08, False, None, _srag_evidence([0.0, 0.0, 0.05, 0.12, 0.3, 0.0])),
                  MethodResult("mba", "doc-2", 0.1, False, None, _mba_evidence(1))],
        "A&B <x>": [MethodResult("srag", "A&B <x>", 0.45, False, None, _srag_evidence([0.5, 0.6, 0.0, 0.4, 0.7])),
                    MethodResult("mba", "A&B <x>", 0.8, True, None, _mba_evidence(2))],
        "=cmd": [MethodResult("srag", "=cmd", None, None,
                              "too short: S-RAG needs at least 12 words (this document has 2)",
                              {"words": [], "shadow_auc": 0.84}),
                 MethodResult("mba", "=cmd", None, None, "too short: MBA needs at least 5 masks", {})],
    }
    for rs in results.values():
        rs.append(MethodResult("mink", rs[0].doc_id, None, None, reason=nr_reason))
    # a target known to retrieve with queries as sent: "not found" may stand (verdict rule R5)
    verdicts = [decide(d, rs, VerdictConfig(retrieval_as_sent=True)).to_json() for d, rs in results.items()]
    return {
        # a base URL with credentials in it, as a user might paste one
        "target": f"http://user:{SECRET}@127.0.0.1:8000/v1 · {MODEL}",
        "created": "2025-05-01T10:00:00+00:00",
        "config": {"methods": ["srag", "mba", "mink"], "api_key": SECRET,
                   "method_params": {"srag": {"bins": 10}, "mba": {"n_masks": 10}},
                   "shadow": {"corpus": "genmedgpt5k", "n_members": 40, "seed": 0, "api_key": SECRET},
                   "verdict": {"confident_low": 0.2, "confident_high": 0.8, "primary": "srag", "second": "mba",
                               "retrieval_as_sent": True},
                   "target_style": "chat", "target_style_source": "found by the capability probe: it restated"},
        "capabilities": {"reachable": True, "logprobs": True, "max_top_logprobs": 20,
                         "detail": f"probe ok (Authorization: Bearer {SECRET})"},
        "verdicts": verdicts,
        "results": {d: {r.method: r.to_json() for r in rs} for d, rs in results.items()},
        "observations": {"doc-1": {"srag": {"method": "srag", "doc_id": "doc-1", "requests": [
            {"messages": [{"role": "user", "content": "Complete: Amoxicillin"}], "max_tokens": 1,
             "headers": {"Authorization": f"Bearer {SECRET}"}}],
            "responses": [None], "errors": [f"unreachable: http://u:{SECRET}@host/v1?api_key={SECRET} refused"],
            "data": {}, "skipped": None}}},
        "calibrations": {
            "srag": {"method": "srag", "threshold": 0.5, "member_scores": mem, "nonmember_scores": non,
                     "shadow_auc": 0.84, "params": {
                         "config": {"bins": 10, "segment_factor": 10, "proxy_model": "smollm2-135m-instruct"},
                         "member_hist_mean": [0.05, 0.02, 0.03, 0.05, 0.05, 0.1, 0.1, 0.15, 0.2, 0.25],
                         "nonmember_hist_mean": [0.4, 0.15, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.03, 0.02],
                         "validation_scores": [0.1, 0.9], "validation_labels": [0, 1]}},
            "mba": {"method": "mba", "threshold": 0.45, "member_scores": mba_mem, "nonmember_scores": mba_non,
                    "shadow_auc": 0.66, "params": {"config": {"n_masks": 10, "gamma": 0.5}}},
        },
        "not_run": {"mink": nr_reason},
        "account": {"queries": 62, "failures": 1, "retries": 2, "prompt_tokens": 12345, "completion_tokens": 321},
        "documents": docs,
        "cancelled": False,
    }


@pytest.fixture(scope="module")
def result() -> dict:
    return make_result()


PROGRESS: list[int] = []


@pytest.fixture(scope="module")
def pdf_text(result) -> str:
    from pypdf import PdfReader

    pdf = report.pdf_report(result, progress=PROGRESS.append)
    assert pdf.startswith(b"%PDF")
    return "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf)).pages)


def _flat(text: str) -> str:
    return " ".join(text.split())


# --------------------------------------------------------------------------- PDF


def test_pdf_contains_the_audit(pdf_text, result):
    flat = _flat(pdf_text)
    for heading in ("What was sent", "Verdicts", "Limitations", "Evidence per document", "Methods that could not run"):
        assert heading in flat
    assert MODEL in flat
    for doc_id in ("doc-1", "doc-2", "A&B <x>"):  # markup characters come back as text, not as markup
        assert doc_id in flat
    kinds = {v["verdict"] for v in result["verdicts"]}
    assert kinds == {"member", "not found", "inconclusive"}
    for kind in kinds:
        assert kind in flat
    assert "tokens used: 12345 prompt +" in flat and "62 queries" in flat
    assert "Answer style: chat (found by the capability probe: it restated)" in flat
    assert "8/10 right" in flat and "0.91" in flat  # MBA accuracy and S-RAG probability in the table
    assert "✓ right" in flat and "✗ wrong" in flat
    assert "weak" in flat  # MBA's shadow AUC 0.66 is read as weak evidence
    assert "not proof of absence" in flat


def test_pdf_shows_what_a_chat_target_reproduced_beyond_the_probes(pdf_text):
    flat = _flat(pdf_text)
    assert flat.count("no probe sent and the target's answers reproduced") == 1  # doc-1 only (chat-style S-RAG)
    assert "reproduced: 0.375" in flat or "reproduced: 0.38" in flat


def test_pdf_never_contains_the_key(pdf_text):
    assert "SECRETPLANTED" not in pdf_text
    assert "sk-test" not in pdf_text
    flat = _flat(pdf_text)
    assert "127.0.0.1:8000/v1" in flat and "n_members=40" in flat  # the places the key was planted are shown


def test_pdf_for_degenerate_audit():
    """One document, no calibrations, only an inconclusive S-RAG result, no MBA: still a complete report."""
    from pypdf import PdfReader

    r = {"target": f"https://api.example.com/v1 · {MODEL}", "created": "2025-05-02T00:00:00+00:00",
         "config": {"methods": ["srag"]}, "capabilities": {}, "calibrations": {}, "not_run": {},
         "verdicts": [{"doc_id": "only", "verdict": "inconclusive", "reason": "srag: 3 of 6 target calls failed",
                       "score": None, "methods": {"srag": {"score": None, "decision": None,
                                                           "reason": "3 of 6 target calls failed"}}}],
         "results": {"only": {"srag": {"method": "srag", "doc_id": "only", "score": None, "decision": None,
                                       "reason": "3 of 6 target calls failed", "evidence": {"words": [
                                           {"word": "x", "prob": None, "below_top_k": False, "first_token": "",
                                            "error": "timeout: no answer in 30 s"}]}}}},
         "account": {}, "documents": [{"id": "only", "text": "short text"}], "cancelled": True}
    text = _flat("\n".join(p.extract_text() for p in PdfReader(io.BytesIO(report.pdf_report(r))).pages))
    assert "Limitations" in text and "only" in text and "cancelled" in text
    assert "call failed: timeout" in text


def test_pdf_progress_counts_documents(pdf_text, result):
    assert sum(PROGRESS) == len(result["verdicts"])


# --------------------------------------------------------------------------- JSON / CSV


def test_results_json_round_trip_without_secrets(result):
    blob = report.results_json(result)
    assert SECRET.encode() not in blob and b"SECRETPLANTED" not in blob
    back = json.loads(blob)
    assert back == report.scrub(result)
    assert back["config"]["api_key"] == report.REDACTED
    assert back["verdicts"] == result["verdicts"]  # nothing else is lost
    assert back["documents"] == result["documents"]
    assert back["calibrations"]["srag"]["member_scores"] == result["calibrations"]["srag"]["member_scores"]
    assert "Bearer [removed]" in back["capabilities"]["detail"]


def test_results_json_non_finite_numbers_become_null():
    back = json.loads(report.results_json({"calibrations": {"srag": {"shadow_auc": float("nan")}}}))
    assert back["calibrations"]["srag"]["shadow_auc"] is None


def test_results_csv_round_trip(result):
    rows = list(csv.DictReader(io.StringIO(report.results_csv(result))))
    assert len(rows) == len(result["verdicts"])
    for row, v in zip(rows, result["verdicts"]):
        assert row["doc_id"] == ("'=cmd" if v["doc_id"] == "=cmd" else v["doc_id"])  # formula neutralised
        assert row["verdict"] == v["verdict"]
        assert row["reason"] == v["reason"]
        assert (row["score"] == "") if v["score"] is None else float(row["score"]) == v["score"]
        for m in ("srag", "mba", "mink"):
            info = v["methods"][m]
            assert (row[f"{m}_score"] == "") if info["score"] is None else float(row[f"{m}_score"]) == info["score"]
            assert row[f"{m}_decision"] == report.decision_text(info["decision"])
    assert rows[0]["srag_decision"] == "member" and rows[1]["srag_decision"] == "not found"
    assert rows[0]["mink_decision"] == "inconclusive" and "logprobs" in rows[0]["mink_reason"]


def test_raw_scores_csv(result):
    rows = list(csv.DictReader(io.StringIO(plots.raw_scores_csv(result, "srag"))))
    groups = {g: [r for r in rows if r["group"] == g] for g in ("shadow_member", "shadow_nonmember", "document")}
    cal = result["calibrations"]["srag"]
    assert [float(r["calibrated_score"]) for r in groups["shadow_member"]] == cal["member_scores"]
    assert [float(r["calibrated_score"]) for r in groups["shadow_nonmember"]] == cal["nonmember_scores"]
    docs = {r["id"]: r for r in groups["document"]}
    assert float(docs["doc-1"]["calibrated_score"]) == 0.91
    assert docs["'=cmd"]["calibrated_score"] == "" and "too short" in docs["'=cmd"]["reason"]


# --------------------------------------------------------------------------- figures


def test_kde_normal(result):
    d = plots.kde_data(result, "srag")
    assert d.mode == "kde" and d.notes == ["1 document(s) without a score from S-RAG are not shown."]
    # each density integrates to about 1 over the grid (Gaussian tails leak a little outside [0, 1])
    for dens in (d.member_density, d.nonmember_density):
        assert 0.85 < np.trapezoid(dens, d.grid) <= 1.0 + 1e-6
    # the member KDE (beta(5, 2)) peaks to the right of the non-member KDE (beta(2, 5))
    assert d.grid[np.argmax(d.member_density)] > d.grid[np.argmax(d.nonmember_density)]
    assert sorted(doc for doc, _ in d.documents) == sorted(["doc-1", "doc-2", "A&B <x>"])
    fig = plots.kde_figure_plotly(result, "srag")
    names = [t.name for t in fig.data]
    assert any(n.startswith("shadow members") for n in names) and "your documents" in names
    marks = next(t for t in fig.data if t.name == "your documents")
    assert dict(zip(marks.text, marks.x))["doc-1"] == pytest.approx(0.91)
    assert plots.kde_png(result, "srag").startswith(PNG_MAGIC)


def test_kde_marks_where_not_found_begins_only_for_a_method_that_can_clear():
    from audit_core.evidence import calibration as C
    from audit_core.methods.base import Calibration

    r = make_result()
    rng = np.random.default_rng(1)
    for name, members in (("srag", rng.normal(3, 1, 60)), ("mba", np.r_[np.zeros(20), rng.normal(3, 1, 40)])):
        nonmembers = np.clip(rng.normal(0, 1, 60), 0, None)  # scores with a floor, as a share has
        cal = C.apply_evidence(Calibration(name), C.fit_evidence(members.tolist(), nonmembers.tolist(), source="t"))
        r["calibrations"][name] = cal.to_json()
    clear = plots.kde_data(r, "srag").clear_threshold
    assert clear is not None and clear < plots.kde_data(r, "srag").threshold
    assert any(a.text == "not found below" for a in plots.kde_figure_plotly(r, "srag").layout.annotations)
    assert plots.kde_data(r, "mba").clear_threshold is None  # a third of its members score the floor
    assert not any(a.text == "not found below" for a in plots.kde_figure_plotly(r, "mba").layout.annotations)
    assert plots.kde_png(r, "srag").startswith(PNG_MAGIC)


def test_kde_degenerate_inputs(result):
    r = copy.deepcopy(result)
    r["calibrations"]["srag"]["member_scores"] = [0.9, 0.9, 0.9]  # one distinct value: no KDE possible
    d = plots.kde_data(r, "srag")
    assert d.mode == "histogram" and "histograms are shown" in d.note
    assert np.sum(d.member_density * np.diff(d.edges)) == pytest.approx(1.0)
    assert plots.kde_png(r, "srag").startswith(PNG_MAGIC)
    assert len(plots.kde_figure_plotly(r, "srag").data) >= 2

    r["calibrations"]["srag"]["member_scores"] = []
    r["calibrations"]["srag"]["nonmember_scores"] = []
    d = plots.kde_data(r, "srag")
    assert d.mode == "none" and "no S-RAG scores" in d.note
    assert plots.kde_png(r, "srag").startswith(PNG_MAGIC)

    d = plots.kde_data(result, "rag_mia")  # a method missing everywhere
    assert d.mode == "none" and "No shadow calibration" in d.note and "No document" in d.note
    plots.kde_figure_plotly(result, "rag_mia")
    assert plots.kde_png(result, "rag_mia").startswith(PNG_MAGIC)

    one = copy.deepcopy(result)
    one["verdicts"] = one["verdicts"][:1]
    one["results"] = {"doc-1": one["results"]["doc-1"]}
    d = plots.kde_data(one, "mba")
    assert d.documents == [("doc-1", 0.8)] and d.mode == "kde"
    assert plots.kde_png(one, "mba").startswith(PNG_MAGIC)


def test_srag_histogram(result):
    h = plots.srag_histogram_data(result, "doc-1")
    assert len(h.labels) == 10 and h.labels[-1] == "[0.9, 1]" and h.labels[0] == "[0, 0.1)"
    assert sum(h.document) == pytest.approx(1.0) and h.n_probes == 6
    assert h.document[9] == pytest.approx(3 / 6)  # 0.95, 0.99 and 0.9 fall in the last bin
    assert h.members == result["calibrations"]["srag"]["params"]["member_hist_mean"]
    fig = plots.srag_histogram_figure_plotly(result, "doc-1")
    assert [t.name for t in fig.data] == ["this document", "shadow members (mean)", "shadow non-members (mean)"]
    assert plots.srag_histogram_png(result, "doc-1").startswith(PNG_MAGIC)

    short = plots.srag_histogram_data(result, "=cmd")  # too short: no histogram, the reason is shown
    assert short.document is None and "too short" in short.note
    assert plots.srag_histogram_png(result, "=cmd").startswith(PNG_MAGIC)
    assert len(plots.srag_histogram_figure_plotly(result, "=cmd").data) == 2

    r = copy.deepcopy(result)
    r["calibrations"]["srag"]["params"]["member_hist_mean"] = [0.5, 0.5]  # wrong number of bins
    h = plots.srag_histogram_data(r, "doc-1")
    assert h.members is None and "2 bins" in h.note and h.nonmembers is not None
    missing = plots.srag_histogram_data(result, "no-such-doc")
    assert missing.document is None and "not run" in missing.note


# --------------------------------------------------------------------------- plain language and scrubbing


def test_explain_verdict_each_kind(result):
    by_kind = {v["verdict"]: v for v in result["verdicts"]}
    member = report.explain_verdict(by_kind["member"])
    assert "found evidence" in member and "not proof" in member and "0.91" in member
    assert "shadow RAG reacts" in member and "controls" not in member
    # a member call against the owner's controls (rule R0) says where its rate was set
    led = report.explain_verdict({**by_kind["member"], "reason": "S-RAG calls it a member at a 5% false-positive "
                                                                 "rate against your 20 controls"})
    assert "never-published controls" in led and "shadow RAG reacts" not in led and "not proof" in led
    # the method's sentence says its call against the controls, not "on its own" (its shadow may not decide)
    r0 = {**by_kind["member"], "methods": {"rag_mia": {"score": 0.69, "decision": True,
                                                       "reason": "p = 0.048 against your 20 controls (at most 5%)"}}}
    said = report.explain_verdict(r0)
    assert "against your controls it says “member” (p = 0.048" in said and "on its own" not in said
    not_found = report.explain_verdict(by_kind["not found"])
    assert "no evidence" in not_found and "not proof of absence" in not_found
    disagree = report.explain_verdict(next(v for v in result["verdicts"] if v["doc_id"] == "A&B <x>"))
    assert "could not decide" in disagree and "different directions" in disagree
    short = report.explain_verdict(next(v for v in result["verdicts"] if v["doc_id"] == "=cmd"))
    assert "too short" in short and "logprobs" in short
    with pytest.raises(ValueError):
        report.explain_verdict({"doc_id": "x", "verdict": "probably"})


def test_scrub_masks_credentials_and_keeps_the_rest():
    obj = {"Authorization": "Bearer abcdef123456", "headers": {"X-Api-Key": "plain-value"},
           "prompt_tokens": 12, "first_token": " risk-assessment", "password": None,
           "url": "https://user:hunter2@host/v1?api_key=abc123&model=m",
           "note": "key sk-proj-AbCdEf0123456789 and hf_abcdefghijklmnopqrstu and Bearer xyz987654321"}
    out = report.scrub(obj)
    assert out["Authorization"] == report.REDACTED and out["headers"]["X-Api-Key"] == report.REDACTED
    assert out["prompt_tokens"] == 12 and out["first_token"] == " risk-assessment" and out["password"] is None
    assert "hunter2" not in out["url"] and "abc123" not in out["url"] and "model=m" in out["url"]
    assert "AbCdEf" not in out["note"] and "hf_abc" not in out["note"] and "xyz987" not in out["note"]
    assert obj["Authorization"] == "Bearer abcdef123456"  # the input is not modified


def test_auc_reading():
    assert "weak" in report.auc_reading(0.65)
    assert "chance" in report.auc_reading(0.52)
    assert "strong" in report.auc_reading(0.95)
    assert "not measured" in report.auc_reading(None) and "not measured" in report.auc_reading(float("nan"))


# --------------------------------------------------------------------------- a report to hand on (issue 20, 8-11)

LOCAL_BITS = ("/home/", "/tmp/", "/work/", ".cache", "rpa_cache", "site-packages", "rag:gemma")


def _shared_result() -> dict:
    """An audit of the demo target as the app records it: internal target id, local paths in the config."""
    r = make_result()
    r["target"] = "rag:gemma-3-270m:none:0123456789ab"
    r["config"]["shadow"]["aux_corpus"] = "/home/ann/.cache/rpa_cache/uploads/4f2a9c.jsonl"
    r["calibrations"]["srag"]["params"]["config"]["proxy_model"] = "/work/main/.venv/lib/site-packages/llm/smollm2.gguf"
    r["capabilities"]["detail"] = "loaded from /tmp/rpa_cache/models/gemma-3-270m"
    r["finished"] = "2025-05-01T10:12:05+00:00"
    r["no_signal"] = {"mba": "no signal: on the shadow RAG this method separated members from non-members no "
                             "better than chance (validation AUC 0.52)"}
    return r


def _pages(pdf: bytes) -> list[str]:
    from pypdf import PdfReader

    return [_flat(p.extract_text()) for p in PdfReader(io.BytesIO(pdf)).pages]


def test_shared_pdf_has_no_local_path_and_no_internal_target_id():
    r = _shared_result()
    pdf = report.pdf_report(r)
    text = " ".join(_pages(pdf))
    for bit in LOCAL_BITS:
        assert bit not in text, bit
    assert "demo target" in text and "4f2a9c.jsonl" in text  # the corpus is named by its file only
    raw = report.results_json(r, redact=True).decode()
    for bit in LOCAL_BITS:
        assert bit not in raw, bit
    assert report.export_name(r, "pdf") == "audit-2025-05-01-demo-target.pdf"
    assert report.export_name(make_result(), "csv") == "audit-2025-05-01-127-0-0-1-8000-v1-acme-rag-model-7b.csv"


def test_first_page_is_the_summary_with_hashes_and_version():
    import hashlib

    from audit_core import __version__

    r = _shared_result()
    pages = _pages(report.pdf_report(r))
    first = pages[0]
    for needed in ("What was audited", "4 document(s)", "started 2025-05-01T10:00:00+00:00",
                   "duration 12 min 5 s", "1 member, 1 not found, 2 inconclusive", "What this shows",
                   "What it does not prove", f"RAG Provenance Auditor {__version__}", "Per document", "doc-2",
                   "No collection test: not computed", "Answer freshness: not computed", "MBA: no signal",
                   "Retrieval known (demo target) or stated by the operator"):
        assert needed in first, needed
    unknown = {**r, "config": {**r["config"], "verdict": {}}}  # an endpoint nobody vouched for
    assert "Retrieval not known" in _pages(report.pdf_report(unknown))[0]
    json_sha = hashlib.sha256(report.results_json(r, redact=True)).hexdigest()
    assert json_sha in first.replace(" ", "")
    # every document's hash, where a third party can find it
    text = "".join(pages).replace(" ", "")
    for d in r["documents"]:
        assert hashlib.sha256(d["text"].encode()).hexdigest() in text
    # the details follow the summary without a nearly blank page
    assert len(pages[1]) > 1000


def test_collection_and_freshness_blocks_are_shown_when_computed():
    r = _shared_result()
    r["collection"] = {"p_value": 0.0012, "n_documents": 4, "n_controls": 20, "power": 0.8, "effect_size": 1.3,
                       "controls_kind": "declared", "method": "srag",
                       "note": "one-sided test against the control documents"}
    r["freshness"] = {"policy_days": 30, "reused": 12, "sent": 3, "oldest_reused": "2025-04-20",
                      "newest_reused": "2025-04-30"}
    first = _pages(report.pdf_report(r))[0]
    assert "p = 0.0012, from 4 documents against 20 controls" in first and "One-sided test" in first
    assert "Answers reused from earlier requests: 12" in first and "sent during this audit: 3" in first
    assert "30 day(s)" in first


def test_redaction_keeps_hash_and_first_words_only():
    r = _shared_result()
    secret_part = "for a sinus infection"
    redacted = " ".join(_pages(report.pdf_report(r, redact=True)))
    assert secret_part not in redacted and "Amoxicillin 500mg was prescribed" in redacted
    assert "three days" not in redacted  # MBA's masked text quotes the document
    data = json.loads(report.results_json(r, redact=True))
    assert "observations" not in data and all(secret_part not in d["text"] for d in data["documents"])
    full = " ".join(_pages(report.pdf_report(r, redact=False)))
    assert secret_part in full


def test_kde_marks_are_numbered_and_keyed():
    r = _shared_result()
    key = plots.kde_key(r, "srag")
    assert [n for n, _, _ in key] == [1, 2, 3] and {d for _, d, _ in key} == {"doc-1", "doc-2", "A&B <x>"}
    text = " ".join(_pages(report.pdf_report(r)))
    assert "Marks: 1 doc-1 (0.910)" in text
    fig = plots.kde_figure_plotly(r, "srag")
    assert [a.text for a in fig.layout.annotations if a.hovertext] == ["1", "2", "3"]


def test_the_report_says_how_the_shadow_mirrored_the_target():
    """Issue 19: S-RAG's calibration transfers only when the shadow answers in the target's style."""
    from pypdf import PdfReader

    def cal(style, shadow_style):
        note = {"target_style": style, "shadow_style": shadow_style, "shadow_generator": "smollm2-135m-instruct",
                "top_logprobs": 5, "mirrors": style == shadow_style}
        if style != shadow_style:
            note["note"] = "the calibration may not transfer"
        return {"method": "srag", "threshold": 0.5, "shadow_auc": 0.9, "params": {"mirror": note}}

    same = report.mirror_sentences({"calibrations": {"srag": cal("chat", "chat"), "mba": {"params": {}}}})
    assert len(same) == 1 and "shadow mirrors the target's style" in same[0] and "5 alternatives" in same[0]
    differ = report.mirror_sentences({"calibrations": {"srag": cal("chat", "completion")}})
    assert "Warning: the calibration may not transfer" in differ[0] and "completion style" in differ[0]
    r = {"target": "demo target", "created": "2025-05-02T00:00:00+00:00", "config": {"methods": ["srag"]},
         "capabilities": {}, "calibrations": {"srag": cal("chat", "completion")}, "not_run": {}, "verdicts": [],
         "results": {}, "account": {}, "documents": []}
    text = _flat("\n".join(p.extract_text() for p in PdfReader(io.BytesIO(report.pdf_report(r))).pages))
    assert "may not transfer" in text and "read in chat style" in text


def test_verbatim_reproduction_shows_the_run_the_target_copied():
    ev = {"longest_reproduction": "rest the knee put ice on it", "reproduced_share": 0.45, "reproduced_ngrams": 5,
          "probes": [{"template": "quote", "share": 0.45, "ngrams": 5, "longest_words": 7, "non_answer": None},
                     {"template": "repeat", "non_answer": "refusal"}]}
    result = {"results": {"d1": {"verbatim": {"score": 0.9, "decision": True, "evidence": ev}},
                          "d2": {"mba": {"score": 0.1, "decision": False, "evidence": {}}}}}
    got = report.verbatim_reproduction(result, "d1")
    assert got["longest"] == "rest the knee put ice on it" and got["share"] == 0.45 and got["similarity"] is None
    assert [p["request"] for p in got["probes"]] == ["quote", "repeat"]
    assert got["probes"][1]["non-answer"] == "refusal" and got["probes"][0]["longest run (words)"] == 7
    assert got["ngrams"] == 5 and got["probes"][0]["word runs copied"] == 5
    assert got["probes"][1]["word runs copied"] is None
    assert report.verbatim_reproduction(result, "d2") is None


def _verbatim_result() -> dict:
    """An audit whose doc-1 carries Verbatim continuation's evidence, as the method records it."""
    r = _shared_result()
    run = "put ice on the swollen knee twice a day"
    r["documents"][0]["text"] += " The doctor said to " + run + " and rest."
    ev = {"longest_reproduction": run, "reproduced_share": 0.42, "reproduced_ngrams": 6,
          "probes": [{"template": "continue", "answer": "Sure: " + run + ".", "non_answer": None, "share": 0.42,
                      "ngrams": 6, "longest": run, "longest_words": 9, "fresh_ngrams": 12, "shared_ngrams": 0},
                     {"template": "quote", "answer": "I cannot share documents.", "non_answer": "refusal"}]}
    r["results"]["doc-1"]["verbatim"] = {"method": "verbatim", "score": 0.42, "decision": True, "evidence": ev}
    return r, run


def test_the_pdf_shows_verbatim_evidence_per_document_and_redacts_the_run():
    r, run = _verbatim_result()
    full = " ".join(_pages(report.pdf_report(r, redact=False)))
    details = full[full.index("Evidence per document"):]
    assert "Verbatim continuation: what the target quoted" in details
    assert "The longest run the target reproduced: " + run in details  # quoted on its own, after its label
    assert "score 0.42; on its shadow's threshold it says “member”" in details
    assert "continue 6 0.42 9" in details and "quote n/a n/a n/a refusal" in details  # one row per probe
    assert "the best answer reproduced: 6" in details

    shared = " ".join(_pages(report.pdf_report(r, redact=True)))
    assert "Verbatim continuation: what the target quoted" in shared and "continue 6 0.42 9" in shared
    assert "swollen knee" not in shared  # the run is the document's text: redacted with it
    import hashlib
    assert hashlib.sha256(run.encode()).hexdigest() in shared.replace(" ", "")
    assert "reproduced run redacted with the document text: 9 words" in shared
    data = report.results_json(r, redact=True).decode()
    assert "swollen knee" not in data and "Sure:" not in data  # the target's answer quotes it too
    assert json.loads(data)["results"]["doc-1"]["verbatim"]["evidence"]["reproduced_share"] == 0.42


def test_the_pdf_says_when_verbatim_found_no_run():
    r, _ = _verbatim_result()
    ev = r["results"]["doc-1"]["verbatim"]["evidence"]
    ev["longest_reproduction"] = ""
    ev["probes"][0].update(longest="", longest_words=0, share=0.0)
    text = " ".join(_pages(report.pdf_report(r, redact=False)))
    assert "reproduced no run of four words or more" in text
    assert "Closest an answer came" not in text  # evidence recorded before the tie-break: no line
    ev["similarity_to_remainder"] = 0.613
    text = " ".join(_pages(report.pdf_report(r, redact=False)))
    assert "Closest an answer came in meaning to the unseen part: 0.61 (cosine)" in text
    assert "not evidence on its own" in text


def test_redaction_hides_probed_and_masked_words_and_the_answers_to_them():
    """Found in the browser walk: a redacted report still listed S-RAG's probed words and MBA's masked
    words with the target's answers ("osteochondroma", "pelvic", ...), the document's own words."""
    r = _shared_result()
    r["results"]["doc-1"]["srag"]["evidence"]["words"][0].update(word="osteochondroma.", first_token=" osteo")
    r["results"]["doc-1"]["mba"]["evidence"]["rows"][1].update(expected="pelvic", predicted="pelvic")
    r["results"]["doc-1"]["mba"]["evidence"]["rows"][9].update(expected="imaging", predicted="trouble")
    secret = ("osteochondroma", "osteo", "pelvic", "imaging", "trouble")

    shared = " ".join(_pages(report.pdf_report(r, redact=True)))
    for word in secret:
        assert word not in shared, word
    # the evidence stays readable: probabilities and right / wrong marks
    details = shared[shared.index("Document doc-1"):]
    assert "the words are redacted with the document text" in details and "0.950" in details
    assert "8 of 10 answered masked words filled in correctly" in details and "✓ right" in details and "✗ wrong" in details
    data = report.results_json(r, redact=True).decode()
    for word in secret:
        assert word not in data, word
    ev = json.loads(data)["results"]["doc-1"]
    assert [w["prob"] for w in ev["srag"]["evidence"]["words"]][:2] == [0.95, 0.9]
    assert [row["correct"] for row in ev["mba"]["evidence"]["rows"]].count(True) == 8

    full = " ".join(_pages(report.pdf_report(r, redact=False)))
    for word in secret:
        assert word in full, word
    assert r["results"]["doc-1"]["mba"]["evidence"]["rows"][1]["expected"] == "pelvic"  # the audit itself is kept


def test_freshness_without_a_reuse_policy_does_not_claim_the_audit_was_resumed():
    got = report.freshness_sentence({"freshness": {"policy_days": None, "reused": 2, "sent": 40}})
    assert "Answers reused from earlier requests: 2" in got and "requests sent during this audit: 40" in got
    assert "only answers given during this audit" in got and "a request repeated within it" in got
    assert not got.rstrip(".").endswith("(an interrupted audit resumed)")


def test_pdf_states_each_methods_power_and_what_its_not_found_calls_are_worth():
    """With FPR control the reliability table gives power and the share a method may clear."""
    from pypdf import PdfReader

    r = make_result()
    r["method_power"] = {
        "srag": {"fpr": 0.05, "power": 0.62, "cleared": 0.81, "miss_rate": 0.05, "shadow_auc": 0.93,
                 "shadow_auc_ci": [0.9, 0.96], "decides": True, "reason": None},
        "mba": {"fpr": 0.05, "power": 0.4, "cleared": None, "miss_rate": 0.05, "shadow_auc": 0.76,
                "shadow_auc_ci": [0.65, 0.86], "decides": True, "reason": None},
    }
    flat = _flat("\n".join(p.extract_text() for p in PdfReader(io.BytesIO(report.pdf_report(r))).pages))
    assert "Power (shadow TPR)" in flat and "0.62" in flat and "0.81 (members missed at most 5%)" in flat
    assert "none (its members score too low too often to clear at a 5% miss rate)" in flat


def test_the_collection_note_is_a_sentence_of_its_own():
    """The PDF sets the lines one after the other: a note without a full stop ran into the next sentence."""
    c = {"p_value": 0.2, "n_documents": 20, "n_controls": 20, "power": 0.5,
         "note": "even 100 controls would not find a quarter-member collection: the separation limits it"}
    lines = report.collection_lines({"collection": c})
    assert lines[1].endswith("limits it.") and report.collection_lines(
        {"collection": {**c, "note": "ends well."}})[1] == "Ends well."


def test_the_summary_states_the_false_positive_rate_of_the_calls_with_or_without_controls():
    r = _shared_result()
    r["config"] = {**r["config"], "fpr": 0.01}
    first = _pages(report.pdf_report(r))[0]
    assert "made at a 1% false-positive rate" in first.replace("\n", " ")
    assert "rule R0" not in report.calls_line(r)
    led = {**r, "collection": {"leads_verdicts": True}}
    assert "your controls lead (rule R0)" in report.calls_line(led)
    old = {**r, "config": {k: v for k, v in r["config"].items() if k != "fpr"}}
    assert "before false-positive control" in report.calls_line(old)


def test_the_answer_style_line_names_s_rag_only_when_it_ran():
    r = _shared_result()
    r["config"] = {**r["config"], "target_style": "chat", "target_style_source": "chosen by the user"}
    text = " ".join(_pages(report.pdf_report(r))).replace("\n", " ")
    assert ("S-RAG read the target" in text) == ("srag" in r["config"]["methods"] and "srag" not in r.get("not_run", {}))
    r["config"]["methods"] = ["verbatim"]
    text = " ".join(_pages(report.pdf_report(r))).replace("\n", " ")
    assert "The shadow RAG answered in this style" in text and "S-RAG read the target" not in text


def test_a_redacted_export_keeps_no_text_of_any_methods_evidence():
    """S2MIA's second half, Extraction's e-mail address, Interrogation's answers and Perturbation's edits were
    left in the redacted JSON: only S-RAG's, MBA's and Verbatim's evidence had specific redactions."""
    r = _shared_result()
    secret = "alice.moreau@example.org takes hydrocortisone for her left forearm"
    r["results"]["doc-1"].update({
        "s2mia_t": {"method": "s2mia_t", "score": 0.7, "decision": None,
                    "evidence": {"answer": secret, "second_half": secret, "similarity": 0.61}},
        "extraction": {"method": "extraction", "score": 0.0, "decision": None,
                       "evidence": {"items": [{"kind": "email", "value": secret, "reproduced": False}]}},
        "interrogation": {"method": "interrogation", "score": 0.4, "decision": None,
                          "evidence": {"answers": [{"question": secret, "expected": "yes", "answer": secret,
                                                    "read_as": "yes"}], "correct_share": 1.0}},
        "perturbation": {"method": "perturbation", "score": 0.5, "decision": None,
                         "evidence": {"edits": [{"old": secret, "new": "x"}], "read": ["text", "text"]}}})
    data = report.results_json(r, redact=True).decode()
    assert "alice.moreau" not in data and "hydrocortisone" not in data
    ev = json.loads(data)["results"]["doc-1"]
    assert ev["s2mia_t"]["evidence"]["similarity"] == 0.61 and ev["extraction"]["evidence"]["items"][0]["kind"] == "email"
    assert ev["interrogation"]["evidence"]["answers"][0]["read_as"] == "yes"
    assert "alice.moreau" in report.results_json(r, redact=False).decode()  # the owner's own export keeps it


def test_path_like_ids_stay_two_documents_and_a_score_that_decides_nothing_is_no_non_answer():
    """Ids /srv/docs/2023/report.txt and /srv/docs/2024/report.txt were shortened alike, and the PDF showed the
    member's verdict as the other's; an S-RAG probability of 0.41 that decided nothing read "gave no answer"."""
    r = _shared_result()
    view = report.shared_view({**r, "verdicts": [{**v, "doc_id": f"/srv/docs/{i}/report.txt"}
                                                 for i, v in enumerate(r["verdicts"])]}, redact=True)
    ids = [v["doc_id"] for v in view["verdicts"]]
    assert len(set(ids)) == len(ids) and ids[0] == "/srv/docs/0/report.txt"
    said = report._method_sentence("srag", {"score": 0.41, "decision": None, "reason": "not cleared: 13% ..."})
    assert said.startswith("S-RAG gave a calibrated score of 0.41 but decides nothing (not cleared")
    assert report._method_sentence("mba", {"score": None, "decision": None, "reason": "too many non-answers"}) \
        == "MBA gave no answer (too many non-answers)."


def test_a_reason_under_a_method_says_whether_it_answered_decided_nothing_or_decided():
    """The Results tab put "MBA gave no answer:" before the reason of every MBA score that did not decide
    (an 8 of 10 fill-in with "not cleared: ..."), though MBA had answered; the PDF said so too for a call
    against the owner's controls."""
    assert report.reason_note("mba", {"score": 0.89, "decision": None, "reason": "not cleared: 30%"}) \
        == "MBA decides nothing: not cleared: 30%"
    assert report.reason_note("mba", {"score": None, "decision": None, "reason": "too many non-answers"}) \
        == "MBA gave no answer: too many non-answers"
    assert report.reason_note("mba", {"score": 0.9, "decision": True, "reason": "against your 20 controls"}) \
        == "MBA says “member”: against your 20 controls"
    assert report.reason_note("mba", {"score": 0.9, "decision": True, "reason": None}) is None


def test_the_pdf_states_what_the_audit_can_and_cannot_show():
    from audit_core.evidence.statement import what_this_shows

    r = _shared_result()
    r["what_this_shows"] = what_this_shows(0.05, None)
    text = " ".join(_pages(report.pdf_report(r, redact=True)))
    assert "Membership inference cannot by itself prove" in text.replace("\n", " ")
    assert "is otherwise inconclusive" in r["what_this_shows"] and "says how often" not in r["what_this_shows"]


def test_the_summary_says_rule_r5s_evidence_once_not_in_every_row():
    """25 R5 rows repeated seven lines each, and the one-page summary ran to four pages."""
    from audit_core.verdict import REWRITING_EVIDENCE

    r = _shared_result()
    r5 = f"not cleared: S-RAG did not find it, but nobody stated that the target retrieves with queries as sent, " \
         f"and {REWRITING_EVIDENCE}"
    r["verdicts"] = [{**r["verdicts"][0], "doc_id": f"d{i}", "verdict": "inconclusive", "reason": r5, "rule": "R5"}
                     for i in range(25)]
    pages = _pages(report.pdf_report(r, redact=True))
    first = pages[0] + pages[1]
    assert first.count("(rule R5, below)") >= 20 and first.replace("\n", " ").count("74%") <= 2


def test_pdf_shows_chinese_japanese_and_korean_ids_and_texts():
    """DejaVu Sans has no CJK glyph: such ids and texts were drawn as empty boxes, unreadable to their owner."""
    from pypdf import PdfReader

    r = json.loads(json.dumps(make_result(), ensure_ascii=False).replace("doc-1", "膝の痛み").replace(
        "doc-2", "病人的问题").replace("A&B <x>", "무릎 통증"))
    text = "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(report.pdf_report(r))).pages)
    assert "膝の痛み" in text and "病人的问题" in text and "무릎" in text
    assert report.esc("a <b> 膝") == 'a &lt;b&gt; <font name="STSong-Light">膝</font>'


#: an Arabic and a Hebrew sentence, each long enough to take several lines of the report's text box
ARABIC = "أعاني من ألم في الركبة اليسرى منذ ثلاثة أسابيع بعد الجري، وطبيبي وصف لي دواء مضادا للالتهاب. "
HEBREW = "יש לי כאב בברך השמאלית כבר שלושה שבועות אחרי ריצה, והרופא שלי רשם לי תרופה נגד דלקת. "


def test_pdf_draws_hebrew_and_arabic_right_to_left_with_joined_letters():
    """reportlab draws glyphs left to right as given: an Arabic word came out as separate letters and every
    right-to-left word backwards. pypdf reads right-to-left runs back into logical order, so a text drawn
    readably reads back as written, and one drawn backwards reads back reversed."""
    import arabic_reshaper
    from pypdf import PdfReader

    assert report.esc("שלום עולם (2)") == "(2) םלוע םולש"  # drawing order, brackets mirrored
    assert report.esc("سلام") == "\ufee1\ufefc\ufeb3"  # joined: final meem, lam-alef, initial seen
    assert report.esc("knee <pain>") == "knee &lt;pain&gt;" and report.esc("膝") == '<font name="STSong-Light">膝</font>'

    last = "وهذا هو السطر الأخير من النص."
    r = json.loads(json.dumps(make_result(), ensure_ascii=False).replace("doc-2", "שאלה על הברך"))
    r["documents"] = [{**d, "text": ARABIC * 2 + last} if d["id"] == "doc-1" else
                      {**d, "text": HEBREW * 3} if d["id"] == "שאלה על הברך" else d for d in r["documents"]]
    text = "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(report.pdf_report(r, redact=False))).pages)
    assert "שאלה על הברך" in text and "יש לי כאב בברך" in text
    first, end = (text.find(arabic_reshaper.reshape(s)) for s in ("أعاني من ألم", "السطر الأخير"))
    # the text's first words on the first line it draws (a text reordered whole before wrapping showed its
    # last line first)
    assert 0 <= first < end


def test_pdf_names_characters_no_font_has_instead_of_drawing_empty_boxes():
    """An emoji DejaVu Sans lacks ("\U0001F44D") was an empty box: the owner could not tell which id it was."""
    from pypdf import PdfReader

    r = json.loads(json.dumps(make_result(), ensure_ascii=False).replace("doc-1", "knee \U0001F44D\U0001F3FD"))
    text = "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(report.pdf_report(r))).pages)
    assert "knee [thumbs up sign]" in text
    assert report.esc("\U0001F600 é \U0001F44D") == "\U0001F600 é [thumbs up sign]"  # drawn where the font has it


def test_a_redacted_export_hides_answers_that_begin_with_a_bracket():
    """MBA's answers read "[Mask_1]: Amoxicillin": every text starting with "[" was kept as if a placeholder."""
    r = _shared_result()
    r["results"]["doc-1"]["mba"]["evidence"]["raw_answer"] = "[Mask_1]: cefalexin\n[Mask_2]: 250mg"
    r["results"]["doc-1"]["mba"]["evidence"]["cited"] = "[1] hydrocortisone for the left forearm"
    data = report.results_json(r, redact=True).decode()
    assert "cefalexin" not in data and "hydrocortisone" not in data
    assert "[text redacted; SHA-256" in data  # the placeholders redaction writes are kept


def test_a_document_id_that_names_a_secret_is_a_document_not_a_secret():
    """"password-reset-policy" as an id: its results were replaced by "[removed]" and the PDF failed."""
    from pypdf import PdfReader

    r = json.loads(json.dumps(make_result()).replace("doc-1", "password-reset-policy"))
    data = json.loads(report.results_json(r, redact=False))
    assert isinstance(data["results"]["password-reset-policy"], dict)
    text = "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(report.pdf_report(r))).pages)
    assert "password-reset-policy" in text
    assert json.loads(report.results_json({"config": {"api_key": "sk-abcdef123456"}}))["config"]["api_key"] == "[removed]"


def test_a_document_id_thousands_of_characters_long_still_makes_a_pdf():
    """A row taller than a page raised reportlab's LayoutError: no PDF, and in the app no export at all."""
    from pypdf import PdfReader

    long_id = "https://forum.example.org/t/" + "knee-pain-after-running-" * 200
    r = json.loads(json.dumps(make_result()).replace("doc-1", long_id))
    text = "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(report.pdf_report(r))).pages)
    assert long_id[:60] in text.replace("\n", "")


def test_mbas_accuracy_is_shown_out_of_the_masks_answered_as_mba_decides():
    """10 masks, 5 not answered, 3 right: MBA decided on 3/5, the report said 3/10."""
    r = make_result()
    ev = r["results"]["doc-1"]["mba"]["evidence"]
    for i, row in enumerate(ev["rows"]):
        row["correct"] = i < 3
        if i >= 5:
            row["predicted"] = None
    ev["answered"] = 5
    assert report.mba_accuracy(r, "doc-1") == (3, 5)
    assert report.mba_unanswered(r, "doc-1") == " (5 of 10 masks not answered)"
    from pypdf import PdfReader

    text = " ".join("\n".join(p.extract_text() for p in PdfReader(io.BytesIO(report.pdf_report(r))).pages).split())
    assert "3/5 right" in text and "3 of 5 answered masked words filled in correctly (5 of 10 masks not" in text


@pytest.mark.parametrize("text, neutralised", [
    ("=cmd", True), (" =cmd", True), ("\n\t@SUM(A1)", True), ("\u00a0+1", True), ("\tx", True),
    ("\u3000=cmd", True), ("\u2003-1", True), ("\x1c=cmd", True),
    ("plain id", False), ("a=b", False), ("", False), ("  spaced", False),
])
def test_csv_cell_looks_through_leading_spaces(text, neutralised):
    """A spreadsheet that trims cells on import would run `` =cmd``: it gets the apostrophe too."""
    assert report.csv_cell(text) == ("'" + text if neutralised else text)


def _text_only_result(methods: list[str]) -> dict:
    """A text-only audit of two documents with ``methods``, each scoring 0.7x on doc "a" and giving no answer on "b"."""
    scores = {m: round(0.71 + i / 100, 2) for i, m in enumerate(methods)}
    res = {"a": {m: {"method": m, "doc_id": "a", "score": s, "decision": True, "reason": None, "evidence": {}}
                 for m, s in scores.items()},
           "b": {m: {"method": m, "doc_id": "b", "score": None, "decision": None, "reason": "refused", "evidence": {}}
                 for m in methods}}
    verdicts = [{"doc_id": d, "verdict": "member" if d == "a" else "inconclusive", "reason": "r", "score": None,
                 "methods": {m: {k: v[k] for k in ("score", "decision", "reason")} for m, v in rs.items()}}
                for d, rs in res.items()]
    return {"target": "https://api.example.com/v1 · m", "created": "2025-05-02T00:00:00+00:00",
            "config": {"methods": ["srag", *methods]}, "not_run": {"srag": "the target returns no logprobs"},
            "calibrations": {}, "verdicts": verdicts, "results": res, "account": {},
            "documents": [{"id": "a", "text": "one text"}, {"id": "b", "text": "another text"}]}


def _verdicts_section(pdf: bytes) -> str:
    text = " ".join(_pages(pdf))
    return text[text.index("Verdicts "):text.index("How reliable each method was")]


def test_the_pdfs_verdict_table_has_a_column_for_each_method_that_ran():
    """It had two, S-RAG's and MBA's, whatever ran: a text-only audit showed "— —" in every row."""
    r = _text_only_result(["cited_sources", "verbatim"])
    table, left_out = report.verdict_table(r, report.PDF_SCORE_COLUMNS)
    assert table[0] == ["Document", "Verdict", "Reason", "Cited sources", "Verbatim continuation"] and not left_out
    assert table[1][3:] == ["0.71", "0.72"] and table[2][3:] == ["n/a", "n/a"]
    section = _verdicts_section(report.pdf_report(r))
    assert "Cited sources" in section and "Verbatim continuation" in section and "0.71 0.72" in section
    assert "S-RAG" not in section and "MBA" not in section and "—" not in section
    # S-RAG and MBA keep the cells that say what they read
    assert report.verdict_table(make_result())[0][0][3:] == ["S-RAG", "MBA accuracy"]


def test_methods_beyond_the_pdfs_score_columns_are_named_under_the_table_and_the_table_fits_the_page():
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.units import cm

    many = ["cited_sources", "verbatim", "rag_mia", "interrogation", "entailment"]
    r = _text_only_result(many)
    table, left_out = report.verdict_table(r, report.PDF_SCORE_COLUMNS)
    assert len(table[0]) == 3 + report.PDF_SCORE_COLUMNS and left_out == many[report.PDF_SCORE_COLUMNS:]
    section = _verdicts_section(report.pdf_report(r))
    assert "Scores of Interrogation (IA), Entailment (MEntA): in each document's evidence below" in section
    assert len(report.verdict_table(r)[0][0]) == 3 + len(many)  # without a limit (the app): every method
    # the widest headings the registry has, as many as the table takes, still leave room for the reasons
    from audit_core.methods import METHODS

    width = A4[0] - 2 * 1.8 * cm  # the report's frame
    headings = [report.score_column(m) for m in METHODS]
    widest = sorted(headings, key=lambda h: report.verdict_column_widths(width, [h])[3])[-report.PDF_SCORE_COLUMNS:]
    for n in range(report.PDF_SCORE_COLUMNS + 1):
        widths = report.verdict_column_widths(width, widest[:n])
        assert len(widths) == 3 + n and math.isclose(sum(widths), width) and widths[2] >= 4.5 * cm


# --------------------------------------------------------------------------- review of the exports (issue 28)


def _all_methods_abstain_result() -> dict:
    """Every registered method chosen on a chat target without logprobs: each abstains with its own reason, and
    rule R1 joins them into one reason of thousands of characters."""
    from audit_core.methods import METHODS
    from audit_core.verdict import decide

    why = ("no signal: on the shadow RAG this method separated members from non-members no better than chance "
           "(validation AUC 0.52); none of its queries were sent; a missing answer is not evidence")
    rs = [MethodResult(m, "a", None, None, why) for m in METHODS]
    v = decide("a", rs, VerdictConfig()).to_json()
    # as an audit stored before R1 gave the other methods' reasons in brief (``verdict.undecided_reason``) has it
    v["reason"] = "; ".join(f"{m}: {why}" for m in METHODS) + "; THE-END-OF-THE-REASON"
    assert len(v["reason"]) > 2500
    return {"target": "https://api.example.com/v1 · m", "created": "2025-05-02T00:00:00+00:00",
            "config": {"methods": list(METHODS)}, "calibrations": {}, "verdicts": [v],
            "results": {"a": {r.method: r.to_json() for r in rs}}, "account": {},
            "documents": [{"id": "a", "text": "one text"}]}


def test_a_reason_thousands_of_characters_long_is_cut_in_the_tables_and_whole_in_the_evidence():
    """Fourteen methods' reasons joined (R1) made a verdict-table row taller than a page: LayoutError, no PDF."""
    r = _all_methods_abstain_result()
    text = " ".join(_pages(report.pdf_report(r)))
    evidence = text[text.index("Evidence per document"):]
    assert "THE-END-OF-THE-REASON" in evidence and "THE-END-OF-THE-REASON" not in text[:text.index("Evidence per")]
    assert text.count("(whole under Evidence per document)") == 2  # the summary's row and the verdict table's
    assert report.cell_reason("x" * 301) == "x" * report.CELL_REASON_CHARS + "… (whole under Evidence per document)"
    assert report.cell_reason("a < b") == "a &lt; b"


def _quoting_result() -> tuple[dict, str]:
    """An audit whose target's error bodies echo the prompt (a document's text) into an error, the methods'
    reasons, the verdict's reason and the failures."""
    r = make_result()
    word = "Zentrovaxine"
    r["documents"][0]["text"] = ("Amoxicillin 500mg was prescribed to the patient; later " + word
                                 + " tablets were stopped. ") * 3
    echo = f'server error (HTTP 400): {{"error": "prompt too long: later {word} tablets were stopped"}}'
    r["results"]["doc-1"]["srag"]["evidence"]["words"][0]["error"] = echo
    r["results"]["doc-1"]["mba"]["reason"] = echo
    r["verdicts"][0]["reason"] += "; " + echo
    r["verdicts"][0]["methods"]["mba"]["reason"] = echo
    r["failures"] = {"documents": 4, "documents_audited": 4, "inconclusive": {"doc-1": {"mba": echo}},
                     "target_errors": {"server_error": 1}, "stopped": f"{echo} -- 3 document(s) not audited"}
    return r, word


def test_a_redacted_export_hides_the_document_runs_that_errors_reasons_and_failures_quote():
    """A connector quotes up to 300 characters of a server's error body, which can echo the prompt: a document's
    word survived in the redacted JSON (an "error" was a safe field; reasons and failures were never redacted)."""
    r, word = _quoting_result()
    data = report.results_json(r, redact=True).decode()
    assert word not in data and word.lower() not in data.lower()
    shared = json.loads(data)
    assert shared["failures"]["stopped"].startswith("server error (HTTP 400)")  # the auditor's own words stay
    assert "3 document(s) not audited" in shared["failures"]["stopped"]
    assert shared["failures"]["target_errors"] == {"server_error": 1} and "doc-1" in shared["failures"]["inconclusive"]
    # the documented choice stands: a redacted text keeps its SHA-256 and first words
    assert shared["documents"][0]["text"].startswith("[text redacted; SHA-256 ")
    assert "begins: Amoxicillin 500mg was prescribed" in shared["documents"][0]["text"]
    assert word not in report.results_csv(r, redact=True) and word not in report.scores_csv(r, redact=True)
    assert word not in " ".join(_pages(report.pdf_report(r, redact=True)))
    # the owner's own export keeps everything
    assert word in report.results_json(r, redact=False).decode() and word in report.results_csv(r)
    runs = report.document_runs(["A positive test: her heart rate was a member of the set. Later Zentrovaxine "
                                 "tablets were stopped."])
    # a quoted run of three words or more goes; the auditor's words that a document shares one by one stay
    assert report.redact_quoted_runs("HTTP 400: echo 'later ZENTROVAXINE tablets, were' end", runs) == \
        "HTTP 400: echo '[redacted] [redacted] [redacted], [redacted]' end"
    reason = "S-RAG calls it a member at a 5% false-positive rate; MBA agrees"
    assert report.redact_quoted_runs(reason, runs) == reason
    assert report.redact_quoted_runs("so it was a member of the set", runs) == "so it " + " ".join(["[redacted]"] * 6)
    assert report.document_runs(["out of the in the"]) == frozenset()  # common words alone quote nothing


def test_the_summary_opens_with_the_collection_sentence_and_states_the_power_once():
    """The PDF's collection line was its fourth row, worded apart from the app, the CLI and the JSON
    ("Collection-level test: p-value ..."), said the power twice, and without a test gave "0 control documents"."""
    from audit_core.evidence.statement import collection_sentence

    r = _shared_result()
    r["collection"] = {"p_value": 0.0302, "n_documents": 4, "n_controls": 20, "power": 1.0,
                       "power_quarter_members": 0.64, "alpha": 0.05, "effect_size": 0.69,
                       "controls_kind": "declared", "method": "srag",
                       "note": "one-sided permutation test; controls: documents you declared were never published; "
                               "power at p <= 0.05 from the shadow's out-of-fold scores: 1.00 if every document "
                               "were a member, 0.64 if a quarter were; even 100 controls would not do"}
    first = _pages(report.pdf_report(r))[0]
    after_title = first[first.index("RAG provenance audit report") + len("RAG provenance audit report"):]
    assert after_title.startswith(" Collection " + collection_sentence(r["collection"]))
    assert first.count("if a quarter were") == 1 and "One-sided permutation test; controls: documents you" in first
    assert "even 100 controls would not do." in first
    r["collection"] = {"p_value": None, "n_documents": 4, "n_controls": 0, "power": None, "controls_kind": None,
                       "method": "srag", "note": "no controls were given: add documents you never published"}
    first = _pages(report.pdf_report(r))[0]
    assert "Collection No collection test: no controls were given: add documents you never published." in first
    assert "0 control" not in first and "4 document" not in first.split("What was audited")[0]


def _r0_result() -> dict:
    """One document called a member against the owner's controls (rule R0) with S-RAG's calibrated score 0.40."""
    r = _shared_result()
    v = r["verdicts"][0]
    v.update(reason="S-RAG calls it a member at a 5% false-positive rate against your 20 controls; MBA agrees",
             score=0.4, rule="R2")
    v["methods"]["srag"] = {"score": 0.4, "decision": True, "reason": "p = 0.048 against your 20 controls (at most 5%)"}
    r["collection"] = {"p_value": 0.004, "n_documents": 4, "n_controls": 20, "controls_kind": "declared",
                       "method": "srag", "leads_verdicts": True, "called_members": 1, "fpr": 0.05,
                       "document_p_values": {"doc-1": 0.048}}
    r["config"] = {**r["config"], "fpr": 0.05}
    return r


def test_a_call_against_the_controls_shows_its_p_value_and_no_score_is_called_a_probability():
    """S-RAG's Platt score was a "membership probability" (issue 17 objected to the name), and an R0 verdict's
    paragraph gave it as the deciding number though the call rested on p = 0.048 against the controls."""
    r = _r0_result()
    said = report.explain_verdict(r["verdicts"][0])
    assert said.startswith("The audit found evidence that “doc-1” is in the target's knowledge base (S-RAG: p = 0.048 "
                           "against your 20 controls") and "score 0.40 from the method that decided" not in said
    assert report.score_cell(r, r["verdicts"][0], "srag").startswith("p = 0.048 against your 20 controls")
    text = " ".join(_pages(report.pdf_report(r)))
    assert "probability of" not in text and "S-RAG probability" not in text
    assert text.count("Every score in this report is a calibrated score") == 1
    assert "calibrated score of 0.40 on its shadow, which did not decide" in text
    assert report.score_column("srag") == "S-RAG"


def test_under_rule_r0_the_calls_line_does_not_claim_a_per_document_power_against_the_controls():
    """It said "each method's power at that rate is in the table of methods": the table gives the shadow's TPR."""
    line = report.calls_line(_r0_result())
    assert "each method's power at that rate is in the table" not in line
    assert "power of a document's call against your controls is not estimated" in line
    assert "collection test's power" in line
    shadow_only = {**_shared_result(), "config": {"fpr": 0.05}}
    assert "each method's power at that rate is in the table of methods" in report.calls_line(shadow_only)


def test_a_method_that_sent_nothing_for_want_of_signal_has_no_column_and_no_plot():
    """MBA, without signal and not run anyway, took a score column and a KDE section ("No document received a
    score") while a method that ran was pushed out of the table."""
    r = _shared_result()  # MBA has no signal there
    skipped = "no signal: chance on the shadow; none of its queries were sent"
    for d, rs in r["results"].items():
        rs["mba"] = {"method": "mba", "doc_id": d, "score": None, "decision": None, "reason": skipped, "evidence": {}}
    for v in r["verdicts"]:
        v["methods"]["mba"] = {"score": None, "decision": None, "reason": skipped}
    text = " ".join(_pages(report.pdf_report(r)))
    assert "No document received a score from MBA" not in text and "It sent no query, so it has no result" in text
    assert "Not in the table, having sent no query: MBA (no signal: on the shadow RAG" in text
    assert report.silent_methods(r) == {"mba": r["no_signal"]["mba"]} and report.scored_methods(r) == ["srag"]
    assert report.verdict_table(r)[0][0][3:] == ["S-RAG"]
    anyway = {**r, "config": {**r["config"], "run_without_signal": ["mba"]}}
    assert report.silent_methods(anyway) == {} and report.scored_methods(anyway) == ["srag", "mba"]


def test_a_cancelled_audit_says_how_many_documents_were_submitted():
    r = _shared_result()
    r["cancelled"] = True
    r["failures"] = {"documents": 9, "documents_audited": 4}
    first = _pages(report.pdf_report(r))[0]
    assert "out of 4 document(s) audited (cancelled before the end: 4 of 9 submitted, 5 not audited)" in first


def test_the_scores_behind_the_plots_are_exported_with_their_raw_scores_and_the_pdf_says_where():
    """The PDF said the raw scores were "available as a CSV export": no export had them, and the CSV beside a plot
    held the calibrated scores it draws under the name "score"."""
    r = make_result()
    cal = r["calibrations"]["srag"]
    cal["params"]["evidence"] = {"member_raw": [x * 10 for x in cal["member_scores"]],
                                 "nonmember_raw": [x * 10 for x in cal["nonmember_scores"]]}
    r["results"]["doc-1"]["srag"]["evidence"]["raw_score"] = 3.25
    text = " ".join(_pages(report.pdf_report(r)))
    assert "available as a CSV export" not in text
    assert f"are in {report.export_name(r, report.SCORES_EXT)}, exported beside this report" in text
    rows = list(csv.DictReader(io.StringIO(report.scores_csv(r))))
    assert tuple(rows[0]) == plots.SCORES_HEADER
    members = [x for x in rows if x["method"] == "srag" and x["group"] == "shadow_member"]
    assert [float(x["raw_score"]) for x in members] == [x * 10 for x in cal["member_scores"]]
    assert [float(x["calibrated_score"]) for x in members] == cal["member_scores"]
    doc = next(x for x in rows if x["id"] == "doc-1" and x["method"] == "srag")
    assert (float(doc["calibrated_score"]), float(doc["raw_score"])) == (0.91, 3.25)
    assert {x["method"] for x in rows} == set(report.plotted_methods(r)) == {"srag", "mba"}
    assert all(x["raw_score"] == "" for x in rows if x["method"] == "mba")  # not kept: empty, never made up


def test_table_headings_break_at_spaces_only_and_a_summary_over_page_one_leaves_no_empty_page():
    """"False-positive rate" broke mid-word in its 2.5 cm column; a summary one line over page 1 was followed
    by a page break, and page 2 held that line only."""
    from reportlab.lib.units import cm

    r = make_result()
    r["method_power"] = {"srag": {"fpr": 0.05, "power": 0.62, "cleared": 0.81, "miss_rate": 0.05, "shadow_auc": 0.93,
                                  "decides": True, "reason": None}}
    assert "False-positive rate Power (shadow TPR)" in " ".join(_pages(report.pdf_report(r)))
    headings = report.method_power_rows({"method_power": {"srag": {}}})[0]
    widths = report.fitted_widths(17.4 * cm, headings, [2.6 * cm, 2.5 * cm, 2.0 * cm, 3.4 * cm, 2.5 * cm])
    assert widths[1] >= report.heading_width("False-positive rate") > 2.5 * cm
    assert math.isclose(sum(widths), 17.4 * cm)
    # a summary that runs over page 1: the details go on beneath its last lines
    r = _text_only_result(["verbatim"])
    for n in range(8, 60):
        r["verdicts"] = [{**r["verdicts"][0], "doc_id": f"d{i}"} for i in range(n)]
        pages = _pages(report.pdf_report(r))
        if "SHA-256 of this report's data" in pages[1]:
            break
    assert pages[1].index("SHA-256 of this report's data") < 600  # a few lines over, as in the review
    assert "What was sent" in pages[1]


def test_a_large_audits_pdf_gives_evidence_sections_to_the_members_first_and_says_what_it_left_out(result):
    """1,000 documents made 1,700 pages in 4 minutes, 4,000 made 6,700 pages (152 MB) in 16 minutes (session 55):
    beyond ``evidence_documents`` the members come first, then the inconclusive ones; the bar still ends."""
    from pypdf import PdfReader

    assert report.evidence_documents(["a", "b", "c"], {}, 5) == ["a", "b", "c"]
    verdicts = {str(v["doc_id"]): v for v in result["verdicts"]}
    ids = [str(v["doc_id"]) for v in result["verdicts"]]  # member, not found, inconclusive, inconclusive
    assert report.evidence_documents(ids, verdicts, 2) == ["doc-1", "A&B <x>"]
    assert report.evidence_documents(ids, verdicts, 3) == ["doc-1", "A&B <x>", "=cmd"]  # audit order kept
    steps: list[int] = []
    pdf = report.pdf_report(result, progress=steps.append, options=report.ReportOptions(evidence_documents=2))
    flat = _flat("\n".join(p.extract_text() for p in PdfReader(io.BytesIO(pdf)).pages))
    assert "Document doc-1" in flat and "Document A&B <x>" in flat
    assert "Document doc-2" not in flat and "Document =cmd" not in flat
    assert "This section shows 2 of the 4 documents audited (the one called a member, then the inconclusive" in flat
    assert report.export_name(result, "json") in flat
    assert sum(steps) == len(ids)
    whole = report.pdf_report(result)
    assert "This section shows" not in _flat("\n".join(p.extract_text() for p in PdfReader(io.BytesIO(whole)).pages))


def test_a_redacted_reports_exports_walk_the_result_once_and_read_as_before(result, monkeypatch):
    """JSON, CSV, scores and PDF each made the shared view again, and the PDF twice: five walks of the whole
    result, 15 s apiece for 4,000 documents (session 55). One view made by the caller serves them all."""
    import hashlib

    before = [report.results_json(result, redact=True), report.results_csv(result, redact=True),
              report.scores_csv(result, redact=True)]
    walks: list[int] = []
    real = report.shared_view
    monkeypatch.setattr(report, "shared_view", lambda res, redact=True: walks.append(1) or real(res, redact))
    view = report.export_view(result, True)
    after = [report.results_json(result, redact=True, view=view), report.results_csv(result, redact=True, view=view),
             report.scores_csv(result, redact=True, view=view)]
    pdf = report.pdf_report(result, redact=True, view=view)
    assert walks == [1] and after == before
    from pypdf import PdfReader

    flat = _flat("\n".join(p.extract_text() for p in PdfReader(io.BytesIO(pdf)).pages))
    assert hashlib.sha256(before[0]).hexdigest()[:16] in flat.replace(" ", "")  # the JSON's hash, as exported


#: a French note and a Chinese one with a name, an address and a telephone number (made up)
FRENCH = "Le patient Jérôme Dupré a reçu de l'amoxicilline à l'hôpital Saint-Étienne pour une sinusite aiguë. "
CHINESE = "患者张三住在北京市朝阳区幸福路十二号，阿莫西林五百毫克用于治疗鼻窦感染，电话一三八零零一三八零零零。"


def test_a_redacted_export_shows_a_few_words_of_a_text_written_without_spaces_and_of_a_long_url():
    """"First words" were the first six space-separated ones: a Chinese or Thai document is one such word, and
    the redacted JSON and PDF showed it whole (a review of the exports, session 61)."""
    zh = report.redacted_text(CHINESE * 2)
    assert "begins: 患者张三住在 …]" in zh and "北京" not in zh
    url = report.redacted_text("https://example.org/patient/records?name=Jerome-Dupre&dob=1971-02-03 was my page")
    assert "Jerome-Dupre" not in url and "begins: https://example.org/patient/records?name …]" in url
    assert report.redacted_text("Amoxicillin 500mg was given to the patient").endswith(
        "begins: Amoxicillin 500mg was given to the …]")


def test_a_redacted_export_hides_document_quotes_however_a_server_escaped_or_spaced_them():
    """A key-like start made an answer quoting the document "[removed] <document>", kept as a placeholder; a
    server that escapes non-ASCII ("J\\u00e9r\\u00f4me") or writes without spaces echoed the document past the
    three-word check, and a telephone number (numbers only) was never hidden."""
    r = make_result()
    r["documents"][0]["text"] = FRENCH * 2 + "Rappeler au 0171 555 0199."
    r["documents"][1]["text"] = CHINESE * 2
    echo = "HTTP 500: " + json.dumps({"detail": "cannot parse prompt: " + FRENCH + " call 0171 555 0199"})
    r["results"]["doc-1"]["srag"]["evidence"]["words"][0]["error"] = echo
    r["results"]["doc-2"]["srag"]["evidence"]["words"][0]["error"] = "server_error: HTTP 400: 无法处理：" + CHINESE
    r["results"]["doc-1"]["mba"]["evidence"]["answer"] = "sk-proj-abcdefgh123456 " + FRENCH
    data = report.results_json(r, redact=True).decode()
    for quoted in ("hôpital Saint", "h\\u00f4pital", "sinusite", "0171 555 0199", "阿莫西林五百毫克", "北京市朝阳区"):
        assert quoted not in data, quoted
    assert "cannot parse prompt: [redacted]" in data  # the server's own words stay


def test_backup_scrubbing_masks_the_credentials_of_headers_query_strings_and_user_info():
    for text, kept in [("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: "),
                       ("x-api-key: 3f9a8b7c6d5e", "x-api-key: "), ('{"api_key": "3f9a8b7c6d"}', '{"api_key": "'),
                       ("https://h/v1?auth_token=TOPSECRET123&page=2", "&page=2"),
                       ("https://h/v1?client_secret=abc;x-amz-signature=9f8e", "https://h/v1?client_secret="),
                       ("http://:TOPSECRET@host/v1", "@host/v1"), ("http://user:p@ssTOPSECRET@host/v1", "@host/v1"),
                       ("key AKIAABCDEFGHIJKLMNOP here", "key "), ("glpat-abcdefghijklmnopqrst", ""),
                       ("password: TOPSECRET", "password: ")]:
        out = report.scrub_text(text)
        assert "[removed]" in out and kept in out and "TOPSECRET" not in out and "dXNlcjpw" not in out, (text, out)
    for prose in ("authorization of the treatment was given", "a basic understanding of the key issue",
                  "The password reset went fine"):
        assert report.scrub_text(prose) == prose
    assert report.target_label({"target": "http://user:p@ss@host/v1 · m"}) == "http://host/v1 · m"
    cleaned = report.scrub({"passwords": ["a1", "b2"], "headers": [["Authorization", "Basic abcdefgh"]],
                            "auth": {"user": "u", "pass": "hunter2"}, "tokens": [{"token": " the"}]})
    assert cleaned["passwords"] == "[removed]" and cleaned["headers"] == [["Authorization", "[removed]"]]
    assert cleaned["auth"]["pass"] == "[removed]" and cleaned["tokens"] == [{"token": " the"}]  # logprobs kept


@pytest.mark.parametrize("damage", [
    lambda r: r.update(method_power={"srag": {"fpr": 0.05, "power": 0.5, "shadow_auc": 0.8,
                                              "shadow_auc_ci": [float("nan"), 0.9], "decides": True}}),
    lambda r: r.update(method_power={"srag": None, "mba": {"fpr": "0.05", "shadow_auc": "0.8", "miss_rate": "x"}}),
    lambda r: r.update(freshness={"policy_days": 1, "reused": 3, "sent": 4, "oldest_reused": "2025-01-01T00:00:00"}),
    lambda r: r["verdicts"].append("garbage"),
    lambda r: r["verdicts"][0].update(verdict="error"),
])
def test_every_export_of_an_audit_with_odd_fields_is_made(damage):
    """NaN in the power table's interval, a missing newest reuse date, a verdict that is not a dict and a verdict
    kind this version does not know each failed the PDF (and a non-dict verdict the CSVs): no export at all."""
    r = make_result()
    damage(r)
    for redact in (True, False):
        assert report.results_csv(r, redact=redact) and report.scores_csv(r, redact=redact)
        assert report.pdf_report(r, redact=redact)[:4] == b"%PDF"
