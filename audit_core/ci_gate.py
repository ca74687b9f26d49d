"""What a scheduled job reads from an audit: a pass / fail gate and a JUnit XML report.

An owner who watches a service over time runs the CLI on a schedule (a CI
pipeline, a cron job) and wants the job to fail when evidence appears that
their documents are in the service's knowledge base, with each document's
outcome in the CI system's own test view. JUnit XML is the report format CI
systems read for that (GitLab, Jenkins, and GitHub through its reporters).

How verdicts map to test outcomes, and why:

* **member**: a failed test case, with the deciding reason: evidence of use.
* **inconclusive**: a skipped case with its reason. It is evidence of nothing,
  so it must neither fail the job (unless the owner asks, ``FAIL_ON``) nor pass
  it: a pass would read as "cleared".
* **not found**: a passing case whose output says that "not found" is not proof
  of absence (the verdict's own reason says what it rests on).
* **the collection-level test**, when the audit had controls: one more case,
  failed when its p-value is at most its level, skipped when there is no test.
* **an audit that stopped** (a fatal target error) or was cancelled: one case
  in error, since the documents it did not reach have no case of their own.

Only identifiers, verdicts, reasons and scores are written, never a document's
text (a CI log is read by more people than the owner), and the whole result is
scrubbed of secrets as every export is (``report.scrub``).
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from typing import Any

from audit_core.methods import method_label
from audit_core.verdict import INCONCLUSIVE, MEMBER

#: the gate's levels: fail on evidence of membership only, or also on every document the audit
#: could not decide (an owner who wants each document positively cleared); or on the collection-level
#: test alone, the one finding whose false-alarm rate holds for the whole audit. Each document is called a
#: member at the audit's rate (5% by default), so on a service that holds none of N documents "member"
#: fails with a chance of up to 1 - (1 - rate)^N: 64% for 20 documents at 5% (``false_alarm_bound``)
FAIL_ON = ("member", "inconclusive", "collection")
#: the name of the collection-level case, beside the documents' ids
COLLECTION_CASE = "collection-level test"
#: the case that records an audit which stopped (or was cancelled) before its last document
COMPLETION_CASE = "audit completed"


def collection_rejects(collection: dict | None) -> bool:
    """True when the collection-level test found member evidence at its own level."""
    if not collection or collection.get("p_value") is None:
        return False
    return float(collection["p_value"]) <= float(collection.get("alpha") or 0.05)


def false_alarm_bound(n_documents: int, rate: float) -> float:
    """The most a per-document gate ("member") fails on a service that holds none of ``n_documents``, each
    called at ``rate``: 1 - (1 - rate)^n, reached when the calls are independent."""
    return 1.0 - (1.0 - rate) ** max(n_documents, 0)


def gate_failures(result: dict, fail_on: str) -> list[str]:
    """Why a gate at level ``fail_on`` (``FAIL_ON``) fails this audit: one line per cause; [] when it passes.

    ``collection`` with no test made (no controls, too few scored documents) fails with that reason: a gate
    that cannot fail would pass every run in silence, which reads as "cleared".
    """
    if fail_on not in FAIL_ON:
        raise ValueError(f"--fail-on must be one of {', '.join(FAIL_ON)}, not {fail_on!r}")
    failing = {"member": {MEMBER}, "inconclusive": {MEMBER, INCONCLUSIVE}, "collection": set()}[fail_on]
    causes = [f"{v.get('doc_id')}: {v.get('verdict')}" for v in result.get("verdicts") or []
              if v.get("verdict") in failing]
    collection = result.get("collection")
    if collection_rejects(collection):
        causes.append(f"{COLLECTION_CASE}: member evidence, p = {collection['p_value']:.2g} "
                      f"<= {collection.get('alpha') or 0.05:g}")
    elif fail_on == "collection" and (not collection or collection.get("p_value") is None):
        why = (collection or {}).get("note") or "the audit had no controls"
        causes.append(f"{COLLECTION_CASE}: no test was made ({why}), so the gate on it cannot pass")
    return causes


def _score(x: Any) -> str:
    return f"{x:.3f}" if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else "-"


def _method_lines(verdict: dict) -> str:
    """Each method's score, decision and reason under a verdict, one per line."""
    decided = {True: "member", False: "not found", None: "no decision"}
    lines = []
    for name, info in (verdict.get("methods") or {}).items():
        info = info or {}
        line = f"{method_label(name)}: score {_score(info.get('score'))}, {decided.get(info.get('decision'), 'no decision')}"
        if info.get("reason"):
            line += f" ({info['reason']})"
        lines.append(line)
    return "\n".join(lines)


def _xml_safe(obj: Any) -> Any:
    """``obj`` without the control characters XML 1.0 cannot hold (an id with a vertical tab, a server's
    message with an escape sequence): written as they are, the CI could not read its own report."""
    from audit_core.report import _CONTROL

    if isinstance(obj, dict):
        return {_xml_safe(k): _xml_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_xml_safe(v) for v in obj]
    return _CONTROL.sub("", obj) if isinstance(obj, str) else obj


def junit_xml(result: dict) -> bytes:
    """The audit as a JUnit XML test suite: one case per document, and one for the collection test."""
    from audit_core.evidence.statement import collection_sentence
    from audit_core.report import scrub, target_label

    clean = _xml_safe(scrub(result))
    suite_name = f"RAG provenance audit: {target_label(clean)}"
    suite = ET.Element("testsuite", name=suite_name, timestamp=str(clean.get("created") or ""))
    counts = {"tests": 0, "failures": 0, "skipped": 0}
    for v in clean.get("verdicts") or []:
        case = ET.SubElement(suite, "testcase", classname="document", name=str(v.get("doc_id")))
        reason = str(v.get("reason") or "")
        details = _method_lines(v)
        counts["tests"] += 1
        if v.get("verdict") == MEMBER:
            counts["failures"] += 1
            fail = ET.SubElement(case, "failure", type="member", message=f"member (score {_score(v.get('score'))}): "
                                                                         f"{reason}")
            fail.text = details
        elif v.get("verdict") == INCONCLUSIVE:
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", message=f"inconclusive: {reason}")
            ET.SubElement(case, "system-out").text = details
        else:
            ET.SubElement(case, "system-out").text = (
                f"{v.get('verdict')}: {reason}\n\"not found\" is not proof of absence: a knowledge base can hold a "
                f"document that these probes did not retrieve.\n{details}")
    collection = clean.get("collection")
    if collection:
        case = ET.SubElement(suite, "testcase", classname="collection", name=COLLECTION_CASE)
        counts["tests"] += 1
        line = collection_sentence(collection) or ""
        if collection.get("p_value") is None:
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", message=line)
        elif collection_rejects(collection):
            counts["failures"] += 1
            ET.SubElement(case, "failure", type="member evidence", message=line)
        else:
            ET.SubElement(case, "system-out").text = line
    errors = 0
    stopped = (clean.get("failures") or {}).get("stopped")
    if stopped or clean.get("cancelled"):  # the documents it did not reach have no case: say so in one
        case = ET.SubElement(suite, "testcase", classname="audit", name=COMPLETION_CASE)
        counts["tests"] += 1
        errors = 1
        ET.SubElement(case, "error", type="stopped" if stopped else "cancelled",
                      message=f"the audit stopped before the end: {stopped}" if stopped else
                      "the audit was cancelled before the end; the same command run again resumes it")
    for k, n in counts.items():
        suite.set(k, str(n))
    suite.set("errors", str(errors))
    root = ET.Element("testsuites", name="rag-provenance-auditor")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
