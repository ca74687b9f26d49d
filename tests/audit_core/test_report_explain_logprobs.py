"""``explain_verdict`` says the target returns no token probabilities only where the capability probe found
none: a reason that names logprobs about a method (S-RAG without logprobs) is no statement about the target,
and the PDF's paragraph had contradicted its own "Target capabilities: logprobs returned" line."""
from __future__ import annotations

import io

from audit_core import report
from audit_core.report import NO_LOGPROBS_HINT, explain_verdict

SAMPLED = "S-RAG (text only): not cleared: S-RAG without logprobs says no 'not found' on its own"
CANNOT = "MBA: no logprobs: the target returned no logprobs, which this method needs"


def _undecided(reason: str) -> dict:
    return {"doc_id": "a", "verdict": "inconclusive", "reason": reason, "rule": "R1", "methods": {}}


def test_the_hint_follows_the_capability_probe_not_the_words_of_the_reason():
    assert NO_LOGPROBS_HINT not in explain_verdict(_undecided(SAMPLED), logprobs=True)
    assert NO_LOGPROBS_HINT not in explain_verdict(_undecided(CANNOT), logprobs=True)
    assert NO_LOGPROBS_HINT in explain_verdict(_undecided(SAMPLED), logprobs=False)
    # no probe stored (an older audit): only a reason that says the target returned none
    assert NO_LOGPROBS_HINT in explain_verdict(_undecided(CANNOT))
    assert NO_LOGPROBS_HINT not in explain_verdict(_undecided(SAMPLED))


def test_the_pdf_paragraph_agrees_with_its_capabilities_line():
    from pypdf import PdfReader

    from tests.audit_core.test_report import make_result

    r = make_result()
    r["verdicts"][0] = {**r["verdicts"][0], "verdict": "inconclusive", "rule": "R1", "reason": SAMPLED}
    for logprobs in (True, False):
        r["capabilities"] = {**r["capabilities"], "logprobs": logprobs}
        pdf = report.pdf_report(r)
        text = " ".join(" ".join(p.extract_text() for p in PdfReader(io.BytesIO(pdf)).pages).split())
        assert ("Target capabilities: logprobs returned" in text) is logprobs
        assert ("does not return the token probabilities" in text) is (not logprobs)
