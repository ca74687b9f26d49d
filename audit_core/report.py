"""Exports of an audit: the PDF report, the JSON record, the CSV table, verdict explanations.

Everything works from the audit's JSON dict (``AuditResult.to_json()``), so an
audit reopened from history exports exactly what a fresh one does.

Secrets: an API key is never part of the dict by design (connectors keep it
to themselves), but a report is a document people forward, so every export is
scrubbed defensively first (``scrub``): fields whose *name* says secret
(api_key, password, authorization...) are replaced, and strings that *look*
like credentials (``sk-...``, ``Bearer ...``, ``?api_key=...``, passwords in
URLs) are masked wherever they appear. Two things of the owner's are kept as
they are: document ids (``sk-letter-0001`` is a name, not a key; masked, two
such ids became one "[removed]" and a document's results were lost) and, in
the owner's unredacted export, the documents' texts (their SHA-256 must be
that of the text audited). A redacted export shows a text's first words only,
and masks credentials there (``redacted_text``); the target's answers, which
could echo a key, are scrubbed in every export.
"""
from __future__ import annotations

import csv
import datetime as _dt
import functools
import hashlib
import io
import itertools
import json
import math
import os
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable
from xml.sax.saxutils import escape as _xml_escape

from audit_core.methods import METHODS
from audit_core.methods.base import NO_SIGNAL_AUC
from audit_core.row_reason import never_clears_notes, row_reason, silent_reasons
from audit_core.verdict import plain_reason

from audit_core.plots import (
    MAX_NUMBERED,
    document_ids,
    kde_data,
    kde_key,
    kde_png,
    method_label,
    method_result,
    scores_csv as _plot_scores_csv,
    srag_histogram_png,
)

REDACTED = "[removed]"

#: dict keys whose value is a secret whatever it looks like
_SECRET_NAME = re.compile(
    r"(?i)(api[_-]?key|apikey|secret|passw(or)?d|(?:^|[_-])pass(?:$|[_-])|authori[sz]ation|bearer|credential|cookie|"
    r"(access|auth|refresh|session|bearer|api)[_-]?token|private[_-]?key)"
)
#: names a credential goes by in a header, a query string or a "name: value" / "name=value" pair
_SECRET_FIELD = (r"(?:x[-_])?(?:api[-_]?key|apikey|auth[-_]?token|access[-_]?token|refresh[-_]?token|"
                 r"security[-_]?token|client[-_]?secret|secret[-_]?key|subscription[-_]?key|password|passwd|pwd)")
#: substrings that look like credentials, with what replaces them
_SECRET_PATTERNS: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]{6,}"), f"Bearer {REDACTED}"),
    (re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_\-]{6,}"), REDACTED),  # OpenAI-style keys, sk-proj-, sk-ant-
    (re.compile(r"(?<![A-Za-z0-9])(?:hf|gsk|ghp|gho|ghs|ghu|ghr|github_pat|glpat|xai|pplx|nvapi|tvly|r8)[_-]"
                r"[A-Za-z0-9_\-]{16,}"), REDACTED),
    (re.compile(r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_\-]{30,}"), REDACTED),  # Google API keys
    (re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])"), REDACTED),  # AWS access key ids
    # an Authorization header's value, whatever its scheme (Basic, Digest, a bare token)
    (re.compile(r"(?i)(\bauthori[sz]ation[\"']?\s*[:=]\s*[\"']?)(?!\[removed\]|bearer )[^\s\"',;]+(?:\s+[^\s\"',;]+)?"),
     r"\1" + REDACTED),
    (re.compile(rf"(?i)(\b{_SECRET_FIELD}[\"']?\s*[:=]\s*[\"']?)(?!\[removed\])[^\s\"',;&}}]+"), r"\1" + REDACTED),
    (re.compile(r"(?i)([?&;](?:api[_-]?key|key|token|access[_-]?token|auth[_-]?token|auth|sig|signature|"
                r"client[_-]?secret|secret|password|passwd|pwd|subscription[_-]?key|x-amz-signature|"
                r"x-amz-credential|x-amz-security-token|x-goog-signature|x-goog-credential)=)[^&;#\s]+"),
     r"\1" + REDACTED),
    (re.compile(r"(://)[^/\s]*@"), r"\1" + REDACTED + "@"),  # user:password@host, to the last @ before the path
)


def scrub_text(text: str) -> str:
    """``text`` with every credential-looking substring masked."""
    for pattern, repl in _SECRET_PATTERNS:
        text = pattern.sub(repl, text)
    return text


#: fields whose value names a document (a lone verdict's or document's id for ``audit_ids``)
_ID_KEYS = frozenset({"doc_id", "id"})


def audit_ids(result: Any) -> frozenset[str]:
    """The document ids an audit dict names: its documents', its verdicts', the keys of its results and
    observations (and a lone verdict's or document's own id)."""
    if not isinstance(result, dict):
        return frozenset()
    ids = set(document_ids(result)) if isinstance(result.get("results") or {}, dict) else set()
    ids.update(str(d["id"]) for d in result.get("documents") or [] if isinstance(d, dict) and d.get("id") is not None)
    if isinstance(result.get("observations"), dict):
        ids.update(str(k) for k in result["observations"])
    ids.update(str(result[k]) for k in _ID_KEYS if isinstance(result.get(k), str))
    return frozenset(ids)


def scrub(obj: Any, ids: frozenset[str] | None = None) -> Any:
    """A deep copy of ``obj`` with secrets removed (see the module docstring).

    A text equal to a document id of ``obj`` (``ids``; by default ``audit_ids(obj)``) is kept wherever it is,
    as a key or a value: ids are keys of results, observations and failures, and masking them merged
    documents and lost their evidence. Non-finite floats become None, so the result is also valid strict JSON.
    """
    return _scrub(obj, audit_ids(obj) if ids is None else ids)


def _scrub(obj: Any, ids: frozenset[str]) -> Any:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            # a text under a secret's name; not a document whose id says "password-reset-policy"
            if isinstance(k, str) and _SECRET_NAME.search(k) and k not in ids and isinstance(v, (str, list, dict)) and v:
                out[k] = REDACTED  # a list of passwords or a dict of cookies as much as one string
            else:
                out[_scrub(k, ids) if isinstance(k, str) else k] = _scrub(v, ids)
        return out
    if isinstance(obj, (list, tuple)):
        if (len(obj) == 2 and all(isinstance(v, str) for v in obj) and _SECRET_NAME.search(obj[0])
                and obj[0] not in ids and obj[1]):
            return [obj[0], REDACTED]  # a header as a (name, value) pair
        return [_scrub(v, ids) for v in obj]
    if isinstance(obj, str):
        return obj if obj in ids else scrub_text(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def scrub_audit(result: dict) -> dict:
    """``scrub`` of an audit dict for its owner: the documents' texts kept whole (they are the owner's own,
    and their SHA-256 must be that of the text audited); every other text, the target's answers included,
    scrubbed."""
    out = scrub(result)
    docs = result.get("documents")
    if isinstance(docs, (list, tuple)):
        out["documents"] = [{**o, "text": d["text"]} if isinstance(d, dict) and "text" in d else o
                            for o, d in zip(out["documents"], docs)]
    return out


# --------------------------------------------------------------------------- what a shared report may carry

#: how many words of a redacted document stay readable
REDACTED_WORDS = 6
#: and at most this many characters of them: one "word" can be a whole URL with a name in it
REDACTED_CHARS = 40
#: a letter of a script written without spaces between words (Thai, Lao, Myanmar, Khmer, Japanese kana,
#: Chinese characters): each counts as a word, or a Chinese document was one "word", shown whole
_UNSPACED = r"\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
#: a word as redaction counts them (``redacted_text``, ``document_runs``): one such letter, or a run of others
_TOKEN = re.compile(rf"[{_UNSPACED}]|(?:(?![{_UNSPACED}])\w)+")
_HEAD_UNIT = re.compile(rf"[{_UNSPACED}]|[^\s{_UNSPACED}]+")
#: absolute paths of this machine (POSIX, home-relative, Windows); a URL's path is not matched
_LOCAL_PATH = re.compile(r"(?<![\w:/.~])(?:~|/(?=[\w.\-+~]+/))(?:/?[\w.\-+~ ]*?/)+(?P<name>[\w.\-+~]+)"
                         r"|\b[A-Za-z]:\\(?:[^\\\s]+\\)+(?P<wname>[^\\\s]+)")


def document_sha256(text: str) -> str:
    """SHA-256 of a document's text (UTF-8), so a third party holding it can check it was the one audited."""
    return hashlib.sha256((text or "").encode("utf-8")).hexdigest()


def target_label(result: dict) -> str:
    """The target as the user named it: the base URL and model they gave, or "demo target".

    The in-process demo's internal id (``rag:<model>:<defense>:<hash>``) means
    nothing to a reader; a defense it simulates is named.
    """
    name = str(result.get("target") or "")
    if name.startswith("rag:"):
        parts = name.split(":")
        defense = parts[2] if len(parts) > 2 else "none"
        return "demo target" + ("" if defense in ("", "none") else f" (simulated defense: {defense})")
    return scrub_text(re.sub(r"(://)[^/\s]*@", r"\1", name)) or "unknown target"  # no user:password@


def strip_local_paths(text: str) -> str:
    """``text`` with every absolute path of this machine cut to its last part ("…/aux_medquad.jsonl")."""
    return _LOCAL_PATH.sub(lambda m: "…/" + (m.group("name") or m.group("wname")), text)


def _strip_paths(obj: Any, ids: frozenset[str], key: str | None = None) -> Any:
    """``obj`` through ``strip_local_paths``, document ids kept even when they look like a path (two ids
    /a/report.txt and /b/report.txt shortened alike became one document in the PDF)."""
    if isinstance(obj, dict):
        return {k: _strip_paths(v, ids, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_strip_paths(v, ids, key) for v in obj]
    return strip_local_paths(obj) if isinstance(obj, str) and key not in _ID_KEYS and obj not in ids else obj


def redacted_text(text: str) -> str:
    """A document reduced to its hash and first words (``REDACTED_WORDS``, at most ``REDACTED_CHARS``).

    The hash is of the text as audited; the first words are scrubbed (``scrub_text``): a report to share
    should not carry a key the owner pasted into a document.
    """
    units = list(itertools.islice(_HEAD_UNIT.finditer(text or ""), REDACTED_WORDS + 1))
    end = units[min(len(units), REDACTED_WORDS) - 1].end() if units else 0
    head = scrub_text(" ".join((text or "")[:end].split()))
    more = len(units) > REDACTED_WORDS or len(head) > REDACTED_CHARS
    head = head[:REDACTED_CHARS] + (" …" if more else "")
    return f"[text redacted; SHA-256 {document_sha256(text)}; begins: {head}]"


def redacted_run(run: str) -> str:
    """A run of words the target reproduced from a document, reduced to its length and hash.

    The run is the document's own text (usually from the part after its first
    words), so a redacted report shows none of its words.
    """
    n = len((run or "").split())
    return f"[reproduced run redacted with the document text: {n} words; SHA-256 {document_sha256(run)}]"


#: what a redacted report shows in place of a word of the document (a probed or masked word) or of the
#: target's answer to it
REDACTED_WORD = "[redacted]"


def _redact_words(ev: dict) -> None:
    """S-RAG's probed words and MBA's masked words are the document's own words, and the target's answers
    repeat them when right: a redacted report keeps the probabilities and the right / wrong marks only."""
    for w in ev.get("words") or []:
        if isinstance(w, dict):
            for k in ("word", "first_token"):
                if w.get(k):
                    w[k] = REDACTED_WORD
    for row in ev.get("rows") or []:
        if isinstance(row, dict):
            if row.get("expected"):
                row["expected"] = REDACTED_WORD
            if row.get("predicted"):
                row["predicted"] = REDACTED_WORD


def _redact_answers(ev: dict) -> None:
    """Text-only evidence with the target's answers and the runs it copied from the document redacted."""
    if isinstance(ev.get("longest_reproduction"), str) and ev["longest_reproduction"]:
        ev["longest_reproduction"] = redacted_run(ev["longest_reproduction"])
    for probe in ev.get("probes") or []:
        if not isinstance(probe, dict):
            continue
        if isinstance(probe.get("longest"), str) and probe["longest"]:
            probe["longest"] = redacted_run(probe["longest"])
        if isinstance(probe.get("answer"), str):
            probe["answer"] = "[redacted with the document text]"


#: evidence fields whose text is the method's own words, never the document's or the target's (kept in a
#: redacted export); every other text in a method's evidence can quote the document, directly (a second
#: half, a personal-data item, an altered copy) or through the target's answers, and is redacted
SAFE_EVIDENCE_TEXT = frozenset({
    "reason", "decision_rule", "calibrated_on", "mode", "elicitation", "read_as", "kind", "error", "finish_reason",
    "source", "support_reading", "aligned", "rule", "how", "logprobs_note", "style", "scorer", "weights", "read",
    "skipped", "abstain_reason", "clear_rule", "shadow_defense", "model", "template", "non_answer", "method", "mask",
})


#: the placeholders redaction writes itself, kept as they are when a text is one of them whole: any other text
#: may quote the document (MBA's answers read "[Mask_1]: Amoxicillin"; an answer "sk-... <the document>" read
#: "[removed] <the document>" once its key-like start was masked, and had been kept as a placeholder)
_PLACEHOLDER = re.compile(r"\[redacted\]|\[removed\]|\[redacted with the document text\]"
                          r"|\[text redacted; SHA-256 [0-9a-f]{64}; begins: [^\n]*\]"
                          r"|\[reproduced run redacted with the document text: \d+ words; SHA-256 [0-9a-f]{64}\]")


def _redact_texts(obj: Any, runs: frozenset[tuple[str, ...]], key: str | None = None) -> Any:
    """``obj`` with every text that may quote a document replaced by ``REDACTED_WORD`` (numbers, flags and
    the placeholders set by the specific redactions above kept); a ``SAFE_EVIDENCE_TEXT`` field keeps its own
    words but loses the runs it quotes from a document (``redact_quoted_runs``: an ``error`` quotes the server, which may echo
    the prompt)."""
    if isinstance(obj, dict):
        return {k: _redact_texts(v, runs, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redact_texts(v, runs, key) for v in obj]
    if isinstance(obj, str) and obj and not _PLACEHOLDER.fullmatch(obj):
        return redact_quoted_runs(obj, runs) if key in SAFE_EVIDENCE_TEXT else REDACTED_WORD
    return obj


#: words nearly every English text has: a run of them alone is no quotation of a document (none of them tells
#: a reader what a document says)
_COMMON_WORDS = frozenset("""
a about above after again against all also an and any are as at be because been before being below between
both but by can could did do does doing down during each either even every few for from further had has
have having he her here hers him his how i if in into is it its itself just least less may me might more
most much must my neither no nor not now of off on once one only or other our out over own per same she
should since so some such than that the their them then there these they this those through to too two
under until up upon us very was we were what when where whether which while who whom whose why will with
within without would yet you your
""".split())
#: consecutive words of a document that make a quotation of it
QUOTED_RUN = 3


def document_runs(texts: Any, n: int = QUOTED_RUN) -> frozenset[tuple[str, ...]]:
    """Every run of ``n`` consecutive words (``_TOKEN``, casefolded, NFKC) of ``texts`` that is not made of
    ``_COMMON_WORDS`` and short numbers alone: what a redacted export hides wherever it is quoted. A run of
    numbers with one of three digits or more ("0171 555 0199", a card's groups) is a document's."""
    runs = set()
    for t in texts:
        ws = _TOKEN.findall(unicodedata.normalize("NFKC", str(t or "")).casefold())
        for k in range(len(ws) - n + 1):
            run = tuple(ws[k:k + n])
            if any(w not in _COMMON_WORDS and not w.isdigit() for w in run) or (
                    all(w.isdigit() for w in run) and any(len(w) >= 3 for w in run)):
                runs.add(run)
    return frozenset(runs)


#: a JSON escape in a server's error body, which a connector quotes as sent ("J\u00e9r\u00f4me")
_JSON_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\([nrt\"/\\])")


def _unescaped(text: str) -> str:
    """``text`` with JSON's escapes read (surrogate pairs joined) and NFKC applied: a server that escapes
    non-ASCII in its error body echoes a document in a form its words do not match."""
    def one(m: re.Match) -> str:
        return chr(int(m.group(1), 16)) if m.group(1) else {"n": "\n", "r": "\r", "t": "\t"}.get(m.group(2), m.group(2))

    out = _JSON_ESCAPE.sub(one, text)
    out = out.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return unicodedata.normalize("NFKC", out)


def redact_quoted_runs(text: str, runs: frozenset[tuple[str, ...]]) -> str:
    """``text`` with every word that belongs to a quoted run of a document (``document_runs``) replaced by
    ``REDACTED_WORD``.

    For the texts a redacted export keeps because they are the auditor's own words (reasons, error messages,
    failures) but that can quote a document: a connector quotes up to 300 characters of a server's error body,
    and a server may echo the prompt, i.e. the document. ``scrub_text`` masks credentials only. A single word
    a document shares is kept ("member", "rate", "positive" are in many medical texts and in every reason):
    hiding those had turned reasons into "calls it a [redacted] at a 5% false-[redacted] [redacted]".
    """
    if not runs or not text:
        return text
    n = len(next(iter(runs)))
    read = _unescaped(text)  # what the words say, escaped or not; the text is returned as read only if it quotes
    found = list(_TOKEN.finditer(read))
    words = [m.group().casefold() for m in found]
    hide = set()
    for k in range(len(words) - n + 1):
        if tuple(words[k:k + n]) in runs:
            hide.update(range(k, k + n))
    if not hide:
        return text
    out, pos = [], 0
    for k in sorted(hide):
        m = found[k]
        out.append(read[pos:m.start()] + REDACTED_WORD)
        pos = m.end()
    return "".join(out) + read[pos:]


def _redact_quotes(obj: Any, runs: frozenset[tuple[str, ...]]) -> Any:
    """Every text in ``obj`` through ``redact_quoted_runs``; mapping keys (document ids, reason codes) kept."""
    if isinstance(obj, dict):
        return {k: _redact_quotes(v, runs) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redact_quotes(v, runs) for v in obj]
    return redact_quoted_runs(obj, runs) if isinstance(obj, str) else obj


def _replace_text(obj: Any, old: str, new: str, ids: frozenset[str]) -> Any:
    """``obj`` with ``old`` replaced by ``new`` in every text and key but the document ids ``ids``.

    On the objects, not in their JSON: there ``old`` is escaped and ``new`` was not, and a target named
    ``my "fast" model`` made invalid JSON (no report at all)."""
    if isinstance(obj, dict):
        return {_replace_text(k, old, new, ids): _replace_text(v, old, new, ids) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_replace_text(v, old, new, ids) for v in obj]
    return obj.replace(old, new) if isinstance(obj, str) and obj not in ids else obj


def shared_view(result: dict, redact: bool = True) -> dict:
    """The audit dict as it may leave this machine: scrubbed of secrets, without local paths,
    the target named as the user named it; with ``redact``, document texts replaced by their
    hash and first words, and the target's raw answers and prompts (which quote the texts) dropped
    or redacted: probed and masked words and the target's answers to them become ``REDACTED_WORD``,
    a run the target reproduced is shown by its length and hash only.

    Each document keeps ``sha256`` of its full text either way.
    """
    ids = audit_ids(result)
    r = scrub_audit(result)  # the documents' texts as audited: their hashes are of those
    raw_target = str(r.get("target") or "")
    docs = [d for d in r.pop("documents", None) or [] if isinstance(d, dict)]
    if raw_target:
        r = _replace_text(r, raw_target, target_label(result), ids)
    r = _strip_paths(r, ids)
    out_docs = []
    for d in docs:
        text = str(d.get("text") or "")
        out_docs.append({**d, "sha256": document_sha256(text), "text": redacted_text(text) if redact else text})
    r["documents"] = out_docs
    r["redacted"] = bool(redact)
    if redact:
        r.pop("observations", None)
        runs = document_runs(d.get("text") for d in docs)
        for per_doc in (r.get("results") or {}).values():
            for res in (per_doc or {}).values():
                if not isinstance(res, dict):
                    continue
                if isinstance(res.get("reason"), str):
                    res["reason"] = redact_quoted_runs(res["reason"], runs)
                ev = res.get("evidence")
                if isinstance(ev, dict) and "masked_text" in ev:
                    ev["masked_text"] = "[redacted with the document text]"
                if isinstance(ev, dict):
                    _redact_words(ev)
                    _redact_answers(ev)
                    res["evidence"] = _redact_texts(ev, runs)  # what the specific redactions above do not know of
        # a verdict's reason joins its methods' reasons, and the failures repeat them and the target's errors
        for v in r.get("verdicts") or []:
            if isinstance(v, dict):
                v.update(_redact_quotes({k: v[k] for k in ("reason", "methods") if k in v}, runs))
        if r.get("failures"):
            r["failures"] = _redact_quotes(r["failures"], runs)
    return r


def tool_version() -> str:
    """The auditor's version, as the report records it."""
    from audit_core import __version__

    return __version__


def export_name(result: dict, ext: str) -> str:
    """``audit-<date>-<target>.<ext>``: the audit's start date and the target as the user named it."""
    date = str(result.get("created") or "")[:10] or _dt.date.today().isoformat()
    slug = re.sub(r"[^A-Za-z0-9]+", "-", re.sub(r"^https?://", "", target_label(result))).strip("-").lower()
    return f"audit-{date}-{slug[:60].rstrip('-') or 'target'}.{ext}"


def csv_cell(value: Any) -> str:
    """A text cell that a spreadsheet will not run as a formula.

    Document ids and reasons come from users and targets; a cell starting
    with ``=``, ``+``, ``-``, ``@`` (or a tab / carriage return) is prefixed
    with an apostrophe, the usual neutralisation of CSV injection. Leading
    spaces and line breaks are looked through: a spreadsheet that trims them
    on import (LibreOffice's "trim spaces") would otherwise run `` =cmd``.
    """
    s = "" if value is None else str(value)
    first = s.lstrip()[:1]  # every Unicode space and separator Python strips (a spreadsheet may trim them)
    return "'" + s if s[:1] in ("\t", "\r") or first in ("=", "+", "-", "@") else s


# --------------------------------------------------------------------------- JSON / CSV


def export_view(result: dict, redact: bool, view: dict | None = None) -> dict:
    """What an export reads: with ``redact`` the shared view (``view`` where the caller made it already: one
    walk of the result for all its exports instead of one each, 15 s apiece for 4,000 documents), else the
    full record scrubbed of secrets (``scrub_audit``: the documents' texts whole)."""
    if not redact:
        return scrub_audit(result)
    return view if view is not None else shared_view(result, redact=True)


def results_json(result: dict, redact: bool = False, view: dict | None = None) -> bytes:
    """The audit record as pretty UTF-8 JSON, scrubbed of secrets.

    Without ``redact`` nothing else is dropped (the full record, for the
    owner); with it, the record as it may be shared (``shared_view``; ``view``: ``export_view``).
    """
    data = export_view(result, redact, view)
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False, default=str).encode("utf-8")


def audit_methods(result: dict) -> list[str]:
    """Methods of the audit in a stable order: as configured, then any others found in the results."""
    cfg = result.get("config") or {}
    names = [m for m in cfg.get("methods") or [] if isinstance(m, str)]
    for v in result.get("verdicts") or []:
        for m in ((v.get("methods") or {}) if isinstance(v, dict) else {}):  # an entry not shaped as a verdict
            if m not in names:
                names.append(m)
    for rs in (result.get("results") or {}).values():
        for m in (rs if isinstance(rs, dict) else {}):
            if m not in names:
                names.append(m)
    return names


def decision_text(decision: bool | None) -> str:
    """A method decision in the verdict vocabulary: member / not found / inconclusive."""
    return "member" if decision is True else "not found" if decision is False else "inconclusive"


def results_csv(result: dict, redact: bool = False, view: dict | None = None) -> str:
    """One row per document: id, verdict, reason, the deciding method's score, then score / decision / reason per method.

    Scores are written with full precision (``repr``); an empty cell means
    no score. Method columns are empty when the method was not configured.
    With ``redact`` the reasons lose the documents' words as in the redacted
    JSON (``shared_view``): a reason can quote a server's error that echoed a document.
    """
    clean = export_view(result, redact, view)
    methods = audit_methods(clean)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    header = ["doc_id", "verdict", "reason", "score"]
    for m in methods:
        header += [f"{m}_score", f"{m}_decision", f"{m}_reason"]
    w.writerow(header)
    for v in clean.get("verdicts") or []:
        if not isinstance(v, dict):  # not shaped as a verdict (a damaged or hand-made audit): no row to write
            continue
        row = [csv_cell(v.get("doc_id")), v.get("verdict", ""), csv_cell(v.get("reason")), _num(v.get("score"))]
        ms = v.get("methods") or {}
        for m in methods:
            if m in ms:
                info = ms[m] or {}
                row += [_num(info.get("score")), decision_text(info.get("decision")), csv_cell(info.get("reason"))]
            else:
                row += ["", "", ""]
        w.writerow(row)
    return buf.getvalue()


def scores_csv(result: dict, redact: bool = False, view: dict | None = None) -> str:
    """The scores behind the PDF's plots (``plots.scores_csv`` of ``plotted_methods``: calibrated as drawn, and
    raw), exported beside the PDF, JSON and CSV; with ``redact`` the reasons of unscored documents lose the
    documents' words as in the redacted JSON."""
    data = export_view(result, redact, view)
    return _plot_scores_csv(data, plotted_methods(data))


#: the name of the scores CSV beside the other exports (``export_name``): audit-<date>-<target>.scores.csv
SCORES_EXT = "scores.csv"


def _num(x: Any) -> str:
    return repr(float(x)) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else ""


# --------------------------------------------------------------------------- plain language

#: what each method observes, for readers who do not know the papers
_VERDICT_KINDS = ("member", "not found", "inconclusive")


def auc_reading(auc: float | None) -> str:
    """Plain-language reading of a shadow validation AUC (0.5 = chance, 1 = perfect)."""
    if auc is None or not isinstance(auc, (int, float)) or not math.isfinite(auc):
        return "not measured: treat this method's result with caution"
    if auc < NO_SIGNAL_AUC:
        return "about chance: this method's results are not evidence on this setup"
    if auc < 0.7:
        return "weak: this method's results are weak evidence"
    if auc < 0.8:
        return "moderate: useful evidence, with real error rates"
    if auc < 0.9:
        return "good: the method separated the shadow's members from non-members well"
    return "strong: the method separated the shadow's members from non-members almost perfectly"


def freshness_sentence(result: dict) -> str:
    """How many of the audit's answers were stored ones rather than asked now, and from when.

    One sentence for the PDF, the app and the CLI (``AuditResult.freshness``);
    "" when the audit dict has no freshness account (older audits).
    """
    f = result.get("freshness") or {}
    if not f:
        return ""
    days = f.get("policy_days")
    policy = ("only answers given during this audit could be reused (a request repeated within it, or the "
              "part an interrupted audit had already asked)" if days is None
              else f"answers received within {days} day(s) before the audit could be reused")
    reused, probe = int(f.get("reused") or 0), int(f.get("probe") or 0)
    sent = int(f.get("sent") or 0) + probe  # as the account counts them: the capability probe's requests too
    when = ""
    if reused and f.get("oldest_reused"):
        oldest = str(f["oldest_reused"])[:16].replace("T", " ")
        newest = str(f.get("newest_reused") or f["oldest_reused"])[:16].replace("T", " ")
        when = f", received {oldest} UTC" + ("" if oldest == newest else f" to {newest} UTC")
    of_them = f" ({probe} of them the capability probe, always asked anew)" if probe else ""
    return (f"Answers reused from earlier requests: {reused}{when}; requests sent during this audit: {sent}{of_them}. "
            f"Policy: {policy}.")


def tokens_text(account: dict) -> str:
    """The tokens an audit used, as the target reported them: "N prompt + M completion", "not reported by the
    target", or the counts with how many answers reported none (the CLI, the app and the PDF say it alike)."""
    n = int(account.get("queries", 0) or 0) - int(account.get("failures", 0) or 0)
    unreported = int(account.get("unreported", 0) or 0)
    counts = f"{int(account.get('prompt_tokens', 0) or 0)} prompt + {int(account.get('completion_tokens', 0) or 0)} completion"
    if unreported and unreported >= n:
        return "not reported by the target"
    if unreported:
        return f"{counts} ({unreported} of {n} answers did not report theirs)"
    return counts


def _fmt(x: Any, nd: int = 2) -> str:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return f"{float(x):.{nd}f}" if ok else "n/a"


#: what every score of the report is (``evidence.calibration``, point 5): said once in the PDF, since "probability"
#: alone reads as the chance that the target holds the document, which no score is
CALIBRATED_SCORE_NOTE = (
    "Every score in this report is a calibrated score: the method's raw reading passed through a logistic (Platt) "
    "fit on its shadow RAG, i.e. an estimate of how often a shadow document with that reading was a member, in a "
    "shadow where about half the documents are members. It orders documents as the raw reading does; it is not "
    "the probability that your document is in the target's knowledge base. A verdict decided against your own "
    "controls (rule R0) rests on its p-value against them, not on this score.")


def _method_sentence(name: str, info: dict) -> str:
    label = method_label(name)
    score, decision, reason = info.get("score"), info.get("decision"), plain_reason(info.get("reason"))
    if score is None:
        return f"{label} gave no answer ({reason or 'no reason recorded'})."
    if decision is None:  # a score that decides nothing (not cleared, no signal) is still a score
        return f"{label} gave a calibrated score of {_fmt(score)} but decides nothing ({reason or 'no reason recorded'})."
    if "against your" in str(reason or ""):  # rule R0: the call against the owner's controls, not the shadow's
        return (f"{label} gave a calibrated score of {_fmt(score)} on its shadow, which did not decide; against "
                f"your controls it says “{decision_text(decision)}” ({reason}).")
    return f"{label} gave a calibrated score of {_fmt(score)} and on its own says “{decision_text(decision)}”."


def _deciding_number(verdict: dict) -> str:
    """The number a member or "not found" verdict rests on: the p-value against the owner's controls where the
    deciding call was made against them (rule R0: there the calibrated score on the shadow decided nothing),
    else the deciding method's calibrated score."""
    said = verdict.get("verdict") == "member"
    for m, info in (verdict.get("methods") or {}).items():
        reason = str((info or {}).get("reason") or "")
        if (info or {}).get("decision") is said and "against your" in reason:
            return f"{method_label(m)}: {reason}"
    return f"calibrated score {_fmt(verdict.get('score'))} from the method that decided"


#: ``explain_verdict``'s hint for an undecided verdict on a target that returns no token probabilities
NO_LOGPROBS_HINT = "The target does not return the token probabilities some methods need."


def explain_verdict(verdict: dict, logprobs: bool | None = None) -> str:
    """A plain-language paragraph explaining one verdict (Verdict JSON), for the app and the PDF.

    ``logprobs`` is what the audit's capability probe found (the result's
    ``capabilities``; None where it is unknown). The hint that the target
    returns no token probabilities is given only where that is true: a reason
    can name logprobs about a method that ran without them on a target that
    returns them ("S-RAG without logprobs says no 'not found'"), and the
    paragraph must not contradict the report's own capabilities line. Unknown,
    the hint follows a reason that says the target returned none.
    Raises ValueError for a verdict kind it does not know, rather than
    explaining something it cannot vouch for.
    """
    kind = verdict.get("verdict")
    if kind not in _VERDICT_KINDS:
        raise ValueError(f"unknown verdict {kind!r}; expected one of {_VERDICT_KINDS}")
    doc = verdict.get("doc_id", "this document")
    reason = plain_reason(scrub_text(str(verdict.get("reason") or ""))).strip()
    methods = verdict.get("methods") or {}
    detail = " ".join(_method_sentence(m, info or {}) for m, info in methods.items())
    if kind == "member":
        head = (f"The audit found evidence that “{doc}” is in the target's knowledge base "
                f"({_deciding_number(verdict)}; {reason}).")
        how = ("The target reacts to this text more strongly than to almost all of your never-published "
               "controls (rule R0: the rate is set on your own kind of text)." if "against your" in reason else
               "The target reacts to this text the way our shadow RAG reacts to documents it holds.")
        tail = (how + " This is evidence, not proof. Each document is called at the false-positive rate stated "
                "above, so among many documents a service does not hold a few may be called members by chance "
                "(about one in 20 at 5%): the collection-level test, given documents you never published, weighs "
                "them all at once. A near-copy of the text in the knowledge base, or the text in the model's own training "
                "data, can also produce the same signal.")
    elif kind == "not found":
        head = (f"The audit found no evidence that “{doc}” is in the target's knowledge base "
                f"({_deciding_number(verdict)}; {reason}).")
        tail = ("This is not proof of absence: the target may hold the document yet not retrieve it for our "
                "probes, or a defence may hide it. It means only that the target did not behave as RAG systems "
                "behave with documents they hold.")
    else:
        head = f"The audit could not decide for “{doc}”: {reason or 'no method gave an answer'}."
        low = reason.lower()
        hints = []
        if "disagree" in low:
            hints.append("The methods pointed in different directions, so neither answer is reported as the verdict.")
        if logprobs is False and "logprob" in low or logprobs is None and "no logprobs" in low:
            hints.append(NO_LOGPROBS_HINT)
        if "too short" in low:
            hints.append("The document is too short to probe; longer texts give clearer results.")
        if "fail" in low or "error" in low or "timeout" in low:
            hints.append("Some target calls failed; running the audit again may complete them.")
        tail = " ".join(hints + ["An inconclusive result says nothing either way about membership."])
    return " ".join(p for p in (head, detail, tail) if p)


LIMITATIONS: tuple[str, ...] = (
    "A “member” verdict means the target answered about the document the way RAG systems answer about "
    "documents in their knowledge base. It is statistical evidence, not proof: a very similar text in the "
    "knowledge base, or the text in the underlying model's training data, can produce the same behaviour.",
    "“Not found” is not proof of absence. A RAG system may hold a document and still not retrieve it for our "
    "probes; a defence (prompt rules, query rewriting, detect-and-hide) can mask it: in our benchmark, a "
    "target that had a small instruct model rewrite every query before retrieval got 74% of the documents "
    "it held called “not found” by S-RAG. So a document is called “not found” only when the target is known "
    "to retrieve with each query as sent (the built-in demo, or an operator's statement); otherwise it is "
    "“inconclusive (not cleared)”. A short document gives the methods little to work with.",
    "The thresholds (and S-RAG's classifier, where it scores) were fitted on a shadow RAG system that we built "
    "ourselves. The target "
    "differs from it (its model, its retriever, its prompt, its other documents), so the shadow's validation "
    "quality is an estimate of the method's quality on the target, not a guarantee.",
    "The shadow and the word selection use small local language models, far smaller than those used in the "
    "papers the methods come from; results can be weaker than the papers report.",
    "Each verdict concerns one document. With many documents some errors are expected by chance; look at the "
    "evidence, and at the shadow's validation quality, before acting on a single verdict.",
)


# --------------------------------------------------------------------------- PDF


@dataclass
class ReportOptions:
    """Layout choices of the PDF report."""

    #: characters of each document's text shown in the evidence section
    excerpt_chars: int = 600
    #: characters of MBA's masked text shown (the rest is elided)
    masked_text_chars: int = 1500
    #: resolution of embedded figures
    figure_dpi: int = 110
    #: the most documents given an evidence section of their own (``evidence_documents``): a page or two
    #: each, with figures, took 4 minutes and 1,700 pages for 1,000 documents (session 55); the JSON and
    #: CSV exports keep every document's evidence
    evidence_documents: int = 200


#: reportlab's standard Asian fonts: named in the PDF, not embedded (no font file is needed here); a PDF viewer
#: draws them with its own CJK fonts. DejaVu Sans has no glyph for these scripts.
_CJK_FONTS = {"han": "STSong-Light", "kana": "HeiseiMin-W3", "hangul": "HYSMyeongJo-Medium"}
_CJK_RUN = re.compile(r"[\u3000-\u303f\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
                      r"\uff00-\uffef]+|[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]+")
#: a letter written right to left (Hebrew, Arabic, Syriac, Thaana, N'Ko, Samaritan, Mandaic, the Arabic
#: presentation forms): text with one is drawn through ``pdf_bidi``
RTL = re.compile(r"[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefc]")
_KANA = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uff65-\uff9f]")


@functools.lru_cache(maxsize=1)
def _fonts() -> tuple[str, str]:
    """Register DejaVu Sans (shipped with matplotlib) for Latin, Greek, Cyrillic and ✓ / ✗, and the standard
    Asian fonts for Chinese, Japanese and Korean runs (``esc``); returns (regular, bold)."""
    import matplotlib
    from reportlab.lib.fonts import addMapping
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.cidfonts import UnicodeCIDFont
    from reportlab.pdfbase.ttfonts import TTFont

    for name in _CJK_FONTS.values():
        pdfmetrics.registerFont(UnicodeCIDFont(name))

    ttf = os.path.join(matplotlib.get_data_path(), "fonts", "ttf")
    pdfmetrics.registerFont(TTFont("RpaSans", os.path.join(ttf, "DejaVuSans.ttf")))
    pdfmetrics.registerFont(TTFont("RpaSans-Bold", os.path.join(ttf, "DejaVuSans-Bold.ttf")))
    pdfmetrics.registerFont(TTFont("RpaSans-Oblique", os.path.join(ttf, "DejaVuSans-Oblique.ttf")))
    addMapping("RpaSans", 0, 0, "RpaSans")
    addMapping("RpaSans", 1, 0, "RpaSans-Bold")
    addMapping("RpaSans", 0, 1, "RpaSans-Oblique")
    addMapping("RpaSans", 1, 1, "RpaSans-Bold")
    return "RpaSans", "RpaSans-Bold"


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _cjk_font(run: str) -> str:
    if "\uac00" <= run[0] <= "\ud7af" or "\u1100" <= run[0] <= "\u11ff" or "\u3130" <= run[0] <= "\u318f":
        return _CJK_FONTS["hangul"]
    return _CJK_FONTS["kana"] if _KANA.search(run) else _CJK_FONTS["han"]


@functools.lru_cache(maxsize=1)
def _covered() -> frozenset[int]:
    """The code points the report's regular font draws (DejaVu Sans: about 5,900)."""
    from reportlab.pdfbase import pdfmetrics

    return frozenset(pdfmetrics.getFont(_fonts()[0]).face.charToGlyph)


def _drawable(text: str) -> str:
    """``text`` with each character no font of the report has named instead of drawn as an empty box.

    An emoji in an owner's id or text ("\U0001F44D") becomes "[thumbs up sign]": what it was stays
    readable; invisible joiners and modifiers without a glyph are left out. Chinese, Japanese and
    Korean are drawn (``esc``).
    """
    covered = _covered()
    out = []
    for ch in text:
        if ord(ch) in covered or ch in "\n\t" or _CJK_RUN.match(ch):
            out.append(ch)
        elif unicodedata.category(ch) not in ("Cf", "Mn", "Me", "Sk"):
            out.append(f"[{unicodedata.name(ch, f'U+{ord(ch):04X}').lower()}]")
    return "".join(out)


def _markup(drawn: str) -> str:
    """Drawable text (``_drawable``, in drawing order) as Paragraph markup: escaped, line ends as breaks,
    Chinese, Japanese and Korean runs in a font that has them."""
    s = _xml_escape(drawn).replace("\n", "<br/>")
    return _CJK_RUN.sub(lambda m: f'<font name="{_cjk_font(m.group())}">{m.group()}</font>', s)


def _drawn(text: Any) -> str:
    """``text`` as a string without control characters, each character no font has named (``_drawable``)."""
    return _drawable(_CONTROL.sub("", "" if text is None else str(text)))


def esc(text: Any) -> str:
    """User or target text made safe for a reportlab Paragraph: markup escaped, control characters dropped,
    Chinese, Japanese and Korean runs set in a font that has them, Hebrew and Arabic put in drawing order
    (``pdf_bidi.visual``) and other characters no font has named (``_drawable``): an owner's ids and texts
    are theirs to read."""
    drawn = _drawn(text)
    if RTL.search(drawn):
        from audit_core.pdf_bidi import visual

        drawn = visual(drawn)
    return _markup(drawn)


def text_block(text: Any, style) -> Any:
    """A Paragraph of an owner's or a target's text in ``style``; one with Hebrew or Arabic is wrapped to its
    box before each line is put in drawing order (``pdf_bidi.BidiText``): a long text reordered whole showed
    a right-to-left paragraph's lines last first."""
    from reportlab.platypus import Paragraph

    drawn = _drawn(text)
    if RTL.search(drawn):
        from audit_core.pdf_bidi import BidiText

        return BidiText(drawn, style, _markup)
    return Paragraph(_markup(drawn), style)


#: the most characters of a document id shown in a table cell: a URL of thousands of characters as an id made
#: a row taller than a page, and the PDF (and, in the app, every export) failed; the id is whole in its
#: document's own heading
CELL_ID_CHARS = 120


#: the most characters of a verdict's reason shown in a table cell: every method's reason joined (rule R1, all
#: fourteen methods on a chat target without logprobs: 2,748 characters) made a row taller than a page; the
#: reason is whole in the document's paragraph under "Evidence per document"
CELL_REASON_CHARS = 300


def _cut(text: str, limit: int) -> str:
    """``text`` shortened to ``limit`` characters with an ellipsis (what a table cell has room for)."""
    return text if len(text) <= limit else text[:limit] + "\u2026"


def cell_id(doc_id: Any) -> str:
    """A document id for a table cell (``esc``), shortened to ``CELL_ID_CHARS`` with an ellipsis.

    Cut as drawn, whole characters at a time: ``_drawable`` names each character no font has ("[devanagari
    letter na]", some 20 times longer), and a Hindi id of 105 characters cut first made a row taller than
    a page (no PDF at all).
    """
    drawn, size = [], 0
    for ch in _CONTROL.sub("", "" if doc_id is None else str(doc_id)):
        piece = _drawable(ch)
        if size + len(piece) > CELL_ID_CHARS:
            drawn.append("\u2026")
            break
        drawn.append(piece)
        size += len(piece)
    return esc("".join(drawn))


def cell_reason(reason: Any) -> str:
    """A verdict's reason for a table cell (``esc``), shortened to ``CELL_REASON_CHARS`` with a pointer to the
    whole of it. Machine codes are put in words first (``plain_reason``)."""
    text = plain_reason(reason)
    cut = _cut(text, CELL_REASON_CHARS)
    return esc(cut + (" (whole under Evidence per document)" if cut != text else ""))


def _styles() -> dict:
    from reportlab.lib import colors
    from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet

    regular, bold = _fonts()
    base = getSampleStyleSheet()
    s = {
        "title": ParagraphStyle("t", parent=base["Title"], fontName=bold, fontSize=18),
        "h1": ParagraphStyle("h1", parent=base["Heading1"], fontName=bold, fontSize=14, spaceBefore=10),
        "h2": ParagraphStyle("h2", parent=base["Heading2"], fontName=bold, fontSize=11.5, spaceBefore=8),
        "body": ParagraphStyle("b", parent=base["BodyText"], fontName=regular, fontSize=9.5, leading=12.5),
        "small": ParagraphStyle("s", parent=base["BodyText"], fontName=regular, fontSize=8, leading=10),
        "note": ParagraphStyle("n", parent=base["BodyText"], fontName=regular, fontSize=8, leading=10,
                               textColor=colors.HexColor("#555555")),
        "cell": ParagraphStyle("c", parent=base["BodyText"], fontName=regular, fontSize=8, leading=10),
        "cellb": ParagraphStyle("cb", parent=base["BodyText"], fontName=bold, fontSize=8, leading=10),
        "quote": ParagraphStyle("q", parent=base["BodyText"], fontName=regular, fontSize=8.5, leading=11,
                                leftIndent=10, textColor=colors.HexColor("#333333")),
        # what the target reproduced: set apart from the document's own text (shaded, ruled on the left)
        "reproduced": ParagraphStyle("r", parent=base["BodyText"], fontName=regular, fontSize=8.5, leading=11,
                                     leftIndent=14, textColor=colors.HexColor("#222222"),
                                     backColor=colors.HexColor("#fdf3d0"), borderColor=colors.HexColor("#c9a227"),
                                     borderWidth=0.6, borderPadding=4, spaceBefore=8, spaceAfter=10),
    }
    return s


_VERDICT_COLORS = {"member": "#fbe3df", "not found": "#e2f1e0", "inconclusive": "#eeeeee"}


def _table(rows: list[list], widths: list[float], st: dict, header: bool = True, row_colors: list | None = None):
    from reportlab.lib import colors
    from reportlab.platypus import Paragraph, Table, TableStyle

    cells = [[c if not isinstance(c, str) else Paragraph(c, st["cellb" if header and i == 0 else "cell"])
              for c in row] for i, row in enumerate(rows)]
    t = Table(cells, colWidths=widths, repeatRows=1 if header else 0)
    style = [("GRID", (0, 0), (-1, -1), 0.3, colors.HexColor("#bbbbbb")),
             ("VALIGN", (0, 0), (-1, -1), "TOP"),
             ("TOPPADDING", (0, 0), (-1, -1), 2), ("BOTTOMPADDING", (0, 0), (-1, -1), 2)]
    if header:
        style.append(("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#dde4ee")))
    for i, c in enumerate(row_colors or []):
        if c:
            style.append(("BACKGROUND", (0, i), (-1, i), colors.HexColor(c)))
    t.setStyle(TableStyle(style))
    return t


def _image(png: bytes, width: float):
    from reportlab.lib.utils import ImageReader
    from reportlab.platypus import Image

    iw, ih = ImageReader(io.BytesIO(png)).getSize()
    return Image(io.BytesIO(png), width=width, height=width * ih / iw)


def _scalar_params(d: Any, limit: int = 14) -> str:
    """``k=v; ...`` for the scalar entries of a parameter dict (lists and nested dicts summarised)."""
    if not isinstance(d, dict) or not d:
        return ""
    parts = []
    for k, v in d.items():
        if isinstance(v, (str, int, float, bool)) or v is None:
            parts.append(f"{k}={v}")
        elif isinstance(v, dict):
            inner = _scalar_params(v, limit=6)
            if inner:
                parts.append(f"{k}: {{{inner}}}")
        if len(parts) >= limit:
            parts.append("…")
            break
    return "; ".join(parts)


def mba_accuracy(result: dict, doc_id: str) -> tuple[int, int] | None:
    """(right, answered) from MBA's evidence, or None when the document has no rows.

    Out of the masks the target answered, as MBA decides (a non-answer is not a wrong fill-in); the
    number of masks not answered is ``mba_unanswered``.
    """
    r = method_result(result, doc_id, "mba")
    ev = (r or {}).get("evidence") or {}
    rows = ev.get("rows")
    if not isinstance(rows, list) or not rows:
        return None
    answered = ev.get("answered")
    answered = answered if isinstance(answered, int) and 0 <= answered <= len(rows) else len(rows)
    return sum(1 for x in rows if isinstance(x, dict) and x.get("correct") is True), answered


def mba_unanswered(result: dict, doc_id: str) -> str:
    """" (4 of 10 masks not answered)" when the target left masks unanswered, else ""."""
    r = method_result(result, doc_id, "mba")
    ev = (r or {}).get("evidence") or {}
    rows, answered = ev.get("rows"), ev.get("answered")
    if not isinstance(rows, list) or not isinstance(answered, int) or answered >= len(rows):
        return ""
    return f" ({len(rows) - answered} of {len(rows)} masks not answered)"


def reason_note(name: str, info: dict) -> str | None:
    """The line under a method's evidence that gives its reason, or None when it has none.

    The reason's lead says what the method did: "gave no answer" only when it has no score; a score
    that decides nothing (not cleared, no signal) "decides nothing"; a decision with a reason (a call
    against the owner's controls) says which. The app and the PDF both use it. Machine codes are put in
    words (``plain_reason``: "no_questions: only 2 question(s) ..." reads "only 2 question(s) ...").
    """
    reason = plain_reason(info.get("reason"))
    if not reason:
        return None
    label = method_label(name)
    if info.get("score") is None:
        return f"{label} gave no answer: {reason}"
    if info.get("decision") is None:
        return f"{label} decides nothing: {reason}"
    return f"{label} says “{decision_text(info['decision'])}”: {reason}"


#: how the app and the PDF give Verbatim's count of copied runs (``VerbatimConfig.reading``)
COPIED_NOTE = ("Word runs of the unseen part that the best answer reproduced: {} (four words each, "
               "overlapping).")
#: how the app and the PDF explain Verbatim's tie-break (``VerbatimConfig.tie_break``)
SIMILARITY_NOTE = ("Closest an answer came in meaning to the unseen part: {:.2f} (cosine). It only orders "
                   "documents that reproduced as much; it is not evidence on its own.")


def verbatim_reproduction(result: dict, doc_id: str) -> dict | None:
    """Verbatim continuation's evidence for a document: the longest run reproduced and what each probe copied.

    The run is what an owner should read before trusting a member call: their own
    words, or a stock phrase that any document of that kind would share.
    """
    r = method_result(result, doc_id, "verbatim")
    ev = (r or {}).get("evidence") or {}
    probes = [p for p in ev.get("probes") or [] if isinstance(p, dict)]
    if not probes:
        return None
    return {"longest": ev.get("longest_reproduction") or "",
            "share": ev.get("reproduced_share"),
            "ngrams": ev.get("reproduced_ngrams"),
            "similarity": ev.get("similarity_to_remainder"),
            "probes": [{"request": p.get("template"), "word runs copied": p.get("ngrams"),
                        "reproduced share": p.get("share"),
                        "longest run (words)": p.get("longest_words"),
                        "non-answer": p.get("non_answer") or ""} for p in probes]}


def _no_signal_mark(result: dict, method: str, cell: str) -> str:
    """A method without signal is never read as a vote: its cell says so."""
    if method not in (result.get("no_signal") or {}):
        return cell
    return "no signal" if cell in ("—", "n/a") else f"{cell} (no signal, not counted)"


#: a verdict table's heading of a method's column, where the cell holds something other than its score
SCORE_COLUMNS = {"mba": "MBA accuracy"}
#: score columns the PDF's verdict table (A4 portrait) has room for beside document, verdict and reason
#: (``verdict_column_widths``); the methods beyond them are named under it, their scores being in the evidence
#: per document and the CSV
PDF_SCORE_COLUMNS = 3


def silent_methods(result: dict) -> dict[str, str]:
    """The methods without signal on their shadow that sent no query, with why (``AuditResult.no_signal``).

    Such a method is skipped unless the owner runs it anyway (``run_without_signal``), so it has no score to
    show: a column and a plot of it pushed the methods that ran aside. A method that scored any document
    (run anyway, or an audit from before that choice was recorded) did send.
    """
    anyway = set((result.get("config") or {}).get("run_without_signal") or [])
    scored = {m for rs in (result.get("results") or {}).values() for m, res in (rs or {}).items()
              if isinstance(res, dict) and res.get("score") is not None}
    scored |= {m for v in result.get("verdicts") or [] if isinstance(v, dict)
               for m, info in (v.get("methods") or {}).items() if (info or {}).get("score") is not None}
    return {m: str(why) for m, why in (result.get("no_signal") or {}).items() if m not in anyway | scored}


def scored_methods(result: dict) -> list[str]:
    """The methods with a column in a verdict table: those of the audit that ran, in the audit's order (one
    that could not run, or that sent nothing for want of signal, has nothing to show; a column for it was a
    row of dashes)."""
    left_out = set(result.get("not_run") or {}) | set(silent_methods(result))
    return [m for m in audit_methods(result) if m not in left_out]


def plotted_methods(result: dict) -> list[str]:
    """The methods whose scores the PDF plots against their shadow's (and the scores CSV holds): those with a
    column in the verdict table (``scored_methods``) and a shadow calibration."""
    calibrations = result.get("calibrations") or {}
    return [m for m in scored_methods(result) if m in calibrations]


def score_column(method: str) -> str:
    """A verdict table's heading of ``method``'s column: what its cell holds, else the method's label."""
    return SCORE_COLUMNS.get(method, method_label(method))


def score_cell(result: dict, verdict: dict, method: str) -> str:
    """``method``'s cell in a document's row: for MBA the masks right of those answered, else its score; "n/a"
    where it gave no score, "—" where it has no result for the document. A call made against the owner's
    controls (rule R0) leads with its p-value against them, the number that decided. A method without signal
    says so: its cell is never read as a vote. The app's table and the PDF's both use it."""
    doc_id = verdict.get("doc_id")
    acc = mba_accuracy(result, doc_id) if method == "mba" else None
    info = (verdict.get("methods") or {}).get(method)
    against = str((info or {}).get("reason") or "") if (info or {}).get("decision") is not None else ""
    if acc is not None:
        cell = f"{acc[0]}/{acc[1]} right{mba_unanswered(result, doc_id)}"
    elif info is None:
        cell = "—"
    else:
        cell = _fmt(info.get("score"))
    if "against your" in against:  # rule R0: the p-value against the owner's controls decided, not the score
        cell = f"{against}; calibrated score {cell}"
    return _no_signal_mark(result, method, cell)


def verdict_table(result: dict, max_scores: int | None = None) -> tuple[list[list[str]], list[str]]:
    """The verdict table as text: a header row, then per document its id, verdict, its own reason (``row_reason``:
    what every row shares goes in the notes, ``never_clears_notes``) and a score cell for each method that ran
    (``scored_methods``), at most ``max_scores`` of them; and the methods left out."""
    ran = scored_methods(result)
    shown = ran if max_scores is None else ran[:max_scores]
    silent = silent_reasons(result)
    rows = [["Document", "Verdict", "Reason", *(score_column(m) for m in shown)]]
    for v in result.get("verdicts") or []:
        if isinstance(v, dict):
            rows.append([str(v.get("doc_id")), str(v.get("verdict")), row_reason(v, silent),
                         *(score_cell(result, v, m) for m in shown)])
    return rows, ran[len(shown):]


def verdict_column_widths(width: float, headings: list[str]) -> list[float]:
    """Widths (points) of the PDF's verdict table within ``width``: document, verdict, the reason in what is
    left, and a score column per heading, as wide as its longest word in the heading's font (a narrower one cut
    "continuation" into "c ontinuatio n"), 2 cm at least. ``PDF_SCORE_COLUMNS`` of the widest leave the reason
    4.5 cm of A4."""
    from reportlab.lib.units import cm

    fixed = [3.0 * cm, 2.2 * cm]
    scores = [max(2.0 * cm, heading_width(h)) for h in headings]
    return [*fixed, width - sum(fixed) - sum(scores), *scores]


def heading_width(heading: str) -> float:
    """The narrowest column (points) in which ``heading`` breaks at spaces only: its longest word in the bold
    heading font, with the cell's padding. A narrower one broke words apart ("c ontinuatio n",
    "False-positi ve")."""
    from reportlab.pdfbase.pdfmetrics import stringWidth

    _, bold = _fonts()
    padding = 14  # the table's cell padding on both sides (6 + 6), and a little slack
    return max(stringWidth(w, bold, 8) for w in (heading.split() or [""])) + padding


def fitted_widths(width: float, headings: list[str], least: list[float]) -> list[float]:
    """Column widths within ``width`` for a table with ``headings``: each column but the last at least as wide
    as ``least`` and as its heading needs (``heading_width``), the last taking what is left."""
    head = [max(w, heading_width(h)) for w, h in zip(least, headings[:-1])]
    return [*head, width - sum(head)]


def evidence_scalars(res: dict) -> list[tuple[str, Any]]:
    """The scalar fields of a method's evidence (numbers, flags, short texts): what a method without a view of
    its own shows in the app, the CLI's --evidence and beside its line; lists and mappings stay in the JSON."""
    ev = res.get("evidence") or {}
    return [(k, v) for k, v in ev.items() if v is None or isinstance(v, (str, int, float, bool))] \
        if isinstance(ev, dict) else []


def result_line(res: dict) -> str:
    """One method's result for one document in a line: its score and its own call, or why it has none."""
    if res.get("score") is None:
        return f"no answer ({plain_reason(res.get('reason')) or 'no reason recorded'})"
    return _shadow_call(res)


def _page_decoration(created: str):
    def draw(canvas, doc) -> None:
        regular, _ = _fonts()
        canvas.saveState()
        canvas.setFont(regular, 7.5)
        canvas.setFillGray(0.4)
        canvas.drawString(doc.leftMargin, 12 * 2.835, f"RAG Provenance Auditor · audit of {created}")
        canvas.drawRightString(doc.pagesize[0] - doc.rightMargin, 12 * 2.835, f"page {doc.page}")
        canvas.restoreState()
    return draw


def _duration(start: str | None, end: str | None) -> str:
    """ "12 min 5 s" between two ISO timestamps, or "unknown"."""
    try:
        secs = (_dt.datetime.fromisoformat(str(end)) - _dt.datetime.fromisoformat(str(start))).total_seconds()
    except (TypeError, ValueError):
        return "unknown"
    if secs < 0:
        return "unknown"
    m, s_ = divmod(int(round(secs)), 60)
    h, m = divmod(m, 60)
    return (f"{h} h {m} min" if h else f"{m} min {s_} s" if m else f"{s_} s")


def calls_line(result: dict) -> str:
    """The false-positive rate every per-document "member" call was made at, where it was set, and where its
    power is stated: the table of methods gives each method's power on its shadow; where the owner's controls
    set the rate (rule R0) no per-document power against them is estimated, only the collection test's."""
    fpr = (result.get("config") or {}).get("fpr")
    if fpr is None:
        return "made at each method's balanced threshold on its shadow (an audit from before false-positive control)"
    if (result.get("collection") or {}).get("leads_verdicts"):
        return (f"each 'member' call is made at a {float(fpr):.0%} false-positive rate, set on the shadow's "
                "non-members or, where your controls lead (rule R0), on your controls; the table of methods gives "
                "each method's power on its shadow, but the power of a document's call against your controls is "
                "not estimated: the collection test's power (first line) is the one measured against them")
    return (f"each 'member' call is made at a {float(fpr):.0%} false-positive rate, set on the shadow's "
            f"non-members; each method's power at that rate is in the table of methods")


#: the first words of the collection note's clause on the test's power (``evidence.collection.collection_test``),
#: which ``collection_sentence`` states already
_POWER_CLAUSE = "power at p <="


def collection_lines(result: dict) -> list[str]:
    """The collection-level conclusion (a test over all documents at once), or why there is none.

    With a test, the line the app, the CLI and the JSON give (``statement.collection_sentence``), the
    documents called against the controls, then the test's note without its power (said once, in the
    first line); without one, a plain "No collection test" and why, never counts as if a test had run.
    """
    from audit_core.evidence.statement import collection_sentence

    c = result.get("collection")
    if not isinstance(c, dict) or not c:
        return ["No collection test: not computed for this audit. The per-document verdicts below are the "
                "only conclusions; with many documents, a few wrong verdicts are expected by chance."]
    if c.get("p_value") is None:
        why = str(c.get("note") or "no controls were probed").strip().rstrip(".")
        return [f"No collection test: {why}."]
    first = str(collection_sentence(c))
    called = [d for d, p in (c.get("document_p_values") or {}).items()
              if p is not None and c.get("called_members") is not None and p <= (c.get("fpr") or 0.05)]
    if called:
        more = f" and {len(called) - 20} more" if len(called) > 20 else ""
        first += f" Called: {', '.join(called[:20])}{more}."
    out = [first]
    note = "; ".join(part for part in str(c.get("note") or "").strip().split("; ")
                     if part and not part.startswith(_POWER_CLAUSE))
    if note:  # a sentence of its own: the PDF sets these lines one after the other
        note = note[:1].upper() + note[1:]
        out.append(note if note.endswith((".", "!", "?")) else note + ".")
    return out


def mirror_sentences(result: dict) -> list[str]:
    """How each style-reading method's shadow mirrored the target (shadow.prepare.mirror_note), one line each.

    S-RAG's calibration transfers only if the shadow answers as the target does
    (continuing the text, or a chat model restating it first); the report says
    which style each side had, and warns where they differ.
    """
    out = []
    for m, cal in (result.get("calibrations") or {}).items():
        note = ((cal or {}).get("params") or {}).get("mirror")
        if not isinstance(note, dict):
            continue
        side = (f"the shadow answered in {note.get('shadow_style')} style ({note.get('shadow_generator')}, "
                f"{note.get('top_logprobs')} alternatives per token) and the target was read in "
                f"{note.get('target_style')} style")
        if note.get("mirrors"):
            out.append(f"{method_label(m)}: {side}: the shadow mirrors the target's style.")
        else:
            out.append(f"{method_label(m)}: {side}. Warning: {note.get('note') or 'the styles differ'}.")
    return out


def nothing_could_decide(result: dict) -> list[str] | None:
    """None when some chosen method could decide; otherwise the methods to add and run again: those made for
    chat-style targets where the target answered like a chat model (S-RAG and MBA abstain there), else [].

    Every document "inconclusive" because every method abstained is no finding, and the owner should learn at
    once what to run instead (the CLI and the Results tab say it).
    """
    from audit_core.methods import unchosen_chat_methods

    config = result.get("config") or {}
    chosen = list(config.get("methods") or [])
    silent = set(result.get("no_signal") or {}) | set(result.get("not_run") or {})
    if not chosen or not set(chosen) <= silent:
        return None
    return unchosen_chat_methods(chosen) if config.get("target_style") == "chat" else []


def not_audited(result: dict) -> str:
    """": N of M submitted, K not audited" from the audit's ``failures``, "" where it does not say (a cancelled
    audit's count of documents said only how many were audited, not how many were left out)."""
    f = result.get("failures") or {}
    submitted, audited = f.get("documents"), f.get("documents_audited")
    if not isinstance(submitted, int) or not isinstance(audited, int) or submitted < audited:
        return ""
    return f": {audited} of {submitted} submitted, {submitted - audited} not audited"


def freshness_line(result: dict) -> str:
    """The first page's line on reused answers (``freshness_sentence``), or "not computed"."""
    return freshness_sentence(result) or "Answer freshness: not computed for this audit."


def retrieval_line(result: dict) -> str:
    """What the audit assumed of how the target retrieves, which decides whether "not found" may be said (R5)."""
    if ((result.get("config") or {}).get("verdict") or {}).get("retrieval_as_sent"):
        return ("known (demo target) or stated by the operator: the target retrieves with each query as sent, so "
                "a document whose probes all missed may be called “not found”")
    return ("not known: a target may rewrite queries or withhold documents before its model sees them, so no "
            "document was called “not found”; those that would have been are “inconclusive (not cleared)”")


#: what the first page says a verdict does and does not prove (LIMITATIONS has the detail)
PROVES = ("<b>What this shows:</b> for each document, whether the target answered about it the way RAG systems "
          "answer about documents they hold, calibrated on a shadow RAG we built. <b>What it does not prove:</b> "
          "“member” is strong statistical evidence, not proof (a near-copy of the text, or the text in the model's "
          "training data, gives the same signal); “not found” is not proof of absence (the target may hold the "
          "document and not retrieve it, or a defence may hide it); “inconclusive” says nothing either way.")


#: the details begin on a new page where less than this share of a page is left after the summary: always on
#: page 1 (the summary fills far more than a quarter of it), not where the summary ran a few lines over it
SUMMARY_OVERFLOW = 0.75


def pdf_report(result: dict, progress: Callable[[int], None] | None = None,
               options: ReportOptions | None = None, redact: bool = True, view: dict | None = None) -> bytes:
    """The audit report as PDF bytes (reportlab platypus): a one-page summary, then the details.

    The report is meant to be handed on: it names the target as the user did
    (never an internal id), carries no path of this machine, and with
    ``redact`` (the default) shows each document only by its SHA-256 and
    first words. It records the tool version, the SHA-256 of every document
    and of the report's JSON data (``results_json(result, redact)``, the
    export offered beside it) so a third party can check them.
    ``progress`` is called with 1 after each document's evidence is laid out
    (figures are the slow part of a large audit). ``view``: the shared view
    of a redacted report where the caller made it already (``export_view``).
    """
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.units import cm
    from reportlab.platypus import CondPageBreak, KeepTogether, Paragraph, SimpleDocTemplate, Spacer

    opt = options or ReportOptions()
    r = view if redact and view is not None else shared_view(result, redact=redact)
    st = _styles()
    P = lambda text, style="body": Paragraph(text, st[style])  # noqa: E731 - local shorthand
    buf = io.BytesIO()
    doc = SimpleDocTemplate(buf, pagesize=A4, leftMargin=1.8 * cm, rightMargin=1.8 * cm, topMargin=1.6 * cm,
                            bottomMargin=1.8 * cm, title="RAG provenance audit report", author="RAG Provenance Auditor")
    width = doc.width
    story: list = []
    created = str(r.get("created") or "unknown date")
    target = strip_local_paths(target_label(result))  # as the shared view names it: no path of this machine
    verdicts = [v for v in r.get("verdicts") or [] if isinstance(v, dict)]
    methods = audit_methods(r)
    calibrations = r.get("calibrations") or {}
    not_run = r.get("not_run") or {}
    no_signal = r.get("no_signal") or {}
    json_sha = hashlib.sha256(results_json(result, redact=redact, view=r if redact else None)).hexdigest()

    # -- page 1: summary -------------------------------------------------------
    story.append(P("RAG provenance audit report", "title"))
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    n_docs = len(r.get("documents") or []) or len(verdicts)
    counts = {k: sum(1 for v in verdicts if v.get("verdict") == k) for k in _VERDICT_KINDS}
    facts = [
        ["Collection", esc(" ".join(collection_lines(r)))],
        ["What was audited", esc(f"{n_docs} document(s) of yours, against {target}, with "
                                 + (", ".join(method_label(m) for m in methods) or "no method"))],
        ["When", esc(f"started {created}; "
                     + (f"interrupted and resumed {r['resumed']} ({_duration(r['resumed'], r.get('finished'))} "
                        "from there); " if r.get("resumed") else "")
                     + f"finished {r.get('finished') or 'unknown'} "
                     f"(duration {_duration(r.get('created'), r.get('finished'))})")],
        ["Conclusion", esc(f"{counts['member']} member, {counts['not found']} not found, "
                           f"{counts['inconclusive']} inconclusive, out of {len(verdicts)} document(s) audited")
         + (f" <b>(cancelled before the end{esc(not_audited(r))})</b>" if r.get("cancelled") else "")
         + (" <b>(stopped before the end: " + esc(scrub_text(str((r.get("failures") or {})["stopped"])))
            + ")</b>" if not r.get("cancelled") and (r.get("failures") or {}).get("stopped") else "")],
        ["Calls", esc(calls_line(r))],
        ["Retrieval", esc(retrieval_line(r))],
        ["Answers", esc(freshness_line(r))],
        ["Report", esc(f"generated {now} by RAG Provenance Auditor {tool_version()}; document texts "
                       + ("redacted (SHA-256 and first words only)" if redact else "included"))],
    ]
    story.append(_table(facts, [3.2 * cm, width - 3.2 * cm], st, header=False))
    story.append(Spacer(1, 6))
    silent = silent_methods(r)
    for m, why in not_run.items():  # said here once, so that the rows below need not say it each
        story.append(P(f"<b>{esc(method_label(m))}</b> could not run on this target: {esc(plain_reason(why))}.",
                       "small"))
    for m, why in no_signal.items():
        story.append(P(f"<b>{esc(method_label(m))}:</b> {esc(why)}. "
                       + ("It sent no query, so it has no result." if m in silent else
                          "Its results are shown but do not count towards any verdict."), "small"))
    story.append(P("Per document", "h2"))
    if verdicts:
        from audit_core.verdict import REWRITING_EVIDENCE

        rows = [["Document", "Verdict", "Why"]]
        colors_ = [None]
        long_r5 = f", and {REWRITING_EVIDENCE}"
        abstaining = silent_reasons(r)
        for v in verdicts:  # R5's evidence is said once under the table, not in every row of the summary
            why = row_reason(v, abstaining).replace(long_r5, " (rule R5, below)")
            rows.append([cell_id(v.get("doc_id")), esc(v.get("verdict")), cell_reason(why)])
            colors_.append(_VERDICT_COLORS.get(v.get("verdict")))
        story.append(_table(rows, [4.0 * cm, 2.4 * cm, width - 6.4 * cm], st, row_colors=colors_))
        if any(long_r5 in str(v.get("reason") or "") for v in verdicts):
            story.append(P(f"Rule R5: {esc(REWRITING_EVIDENCE)}.", "small"))
        for note in never_clears_notes(verdicts):
            story.append(P(esc(note) + ".", "small"))
    else:
        story.append(P("No document was audited."))
    story.append(Spacer(1, 6))
    story.append(P(PROVES, "small"))
    story.append(Spacer(1, 4))
    story.append(P(f"SHA-256 of this report's data ({esc(export_name(result, 'json'))}): {json_sha}. The SHA-256 "
                   "of each document is listed at the end; anyone holding a text can check it was the one audited.",
                   "small"))
    # the details begin on a page of their own, unless the summary ran over page 1 by a few lines: a page
    # break there left page 2 all but empty
    story.append(CondPageBreak(SUMMARY_OVERFLOW * doc.height))

    # -- what was sent ---------------------------------------------------------
    story.append(P("What was sent", "h1"))
    acc = r.get("account") or {}
    n_docs = len(r.get("documents") or []) or len(verdicts)
    story.append(P(
        f"{n_docs} document(s) were audited against <b>{esc(target)}</b>. The target received "
        f"{int(acc.get('queries', 0) or 0)} queries ({int(acc.get('failures', 0) or 0)} failed, "
        f"{int(acc.get('retries', 0) or 0)} retries); tokens used: {tokens_text(acc)}. Queries contain the "
        "documents' text, in part or (for some methods, such as RAG-MIA) whole, as the methods require; nothing "
        "else about you was sent."))
    if freshness_sentence(r):
        story.append(P(esc(freshness_sentence(r))))
    caps = r.get("capabilities") or {}
    if caps:
        story.append(P(f"Target capabilities: logprobs {'returned' if caps.get('logprobs') else 'not returned'}; "
                       f"up to {esc(caps.get('max_top_logprobs', 'n/a'))} alternatives per token.", "small"))
    style = (r.get("config") or {}).get("target_style")
    if style:
        source = (r.get("config") or {}).get("target_style_source") or ""
        ran = set((r.get("config") or {}).get("methods") or []) - set(r.get("not_run") or {})
        srag = ", and S-RAG read the target," if "srag" in ran else ""
        story.append(P(f"Answer style: {esc(style)}{' (' + esc(source) + ')' if source else ''}. The shadow RAG "
                       f"answered{srag} in this style.", "small"))

    # -- methods ---------------------------------------------------------------
    story.append(P("Methods and parameters", "h1"))
    cfg = r.get("config") or {}
    if cfg.get("methods_source"):  # the audit chose them (--method auto): say for what
        story.append(P(f"Methods {esc(cfg['methods_source'])}.", "small"))
    rows = [["Method", "What it does", "Parameters"]]
    for m in methods:
        cal = calibrations.get(m) or {}
        params = dict((cfg.get("method_params") or {}).get(m) or {})
        cal_cfg = (cal.get("params") or {}).get("config")
        text = _scalar_params(cal_cfg if isinstance(cal_cfg, dict) else params)
        if cal.get("threshold") is not None:
            text = f"threshold={_fmt(cal.get('threshold'), 3)}; " + text
        if m in not_run:
            text = "could not run on this target"
        rows.append([esc(method_label(m)), esc(METHODS[m].description if m in METHODS else ""), esc(text or "defaults")])
    if len(rows) > 1:
        story.append(_table(rows, [2.4 * cm, 7.4 * cm, width - 9.8 * cm], st))
    else:
        story.append(P("No method was configured."))
    for key, label in (("shadow", "Shadow RAG"), ("verdict", "Verdict rules")):
        if cfg.get(key):
            story.append(P(f"<b>{label}:</b> {esc(_scalar_params(cfg.get(key), limit=20))}", "small"))

    # -- verdicts --------------------------------------------------------------
    story.append(P("Verdicts", "h1"))
    if verdicts:
        table, left_out = verdict_table(r, PDF_SCORE_COLUMNS)
        rows = [[esc(c) for c in table[0]]] + [[cell_id(row[0]), esc(row[1]), cell_reason(row[2]),
                                                 *(esc(c) for c in row[3:])] for row in table[1:]]
        colors_ = [None] + [_VERDICT_COLORS.get(v.get("verdict")) for v in verdicts]
        story.append(_table(rows, verdict_column_widths(width, table[0][3:]), st, row_colors=colors_))
        for note in never_clears_notes(verdicts):
            story.append(P(esc(note) + ".", "small"))
        if left_out:
            story.append(P("Scores of " + esc(", ".join(method_label(m) for m in left_out)) + ": in each "
                           "document's evidence below and in the CSV export (no room for more columns here).",
                           "small"))
        if silent:
            story.append(P("Not in the table, having sent no query: " + esc("; ".join(
                f"{method_label(m)} ({why})" for m, why in silent.items())) + ".", "small"))
        story.append(P(esc(CALIBRATED_SCORE_NOTE), "small"))
    else:
        story.append(P("No document was audited."))

    # -- shadow validation -----------------------------------------------------
    story.append(P("How reliable each method was on the shadow", "h1"))
    story.append(P("Before the audit, each method was tested on a shadow RAG system whose contents we know. The "
                   "AUC below is measured on shadow documents held out from fitting: 0.5 is chance, 1.0 is "
                   "perfect. Below 0.7 a method's results are weak evidence."))
    power_rows = [row for row in method_power_rows(r) if row[0] not in not_run]
    if len(power_rows) > 1:  # FPR-controlled: what each method's "member" and "not found" calls are worth
        story.append(P("Power is the share of the shadow's members a method calls members at the audit's "
                       "false-positive rate; “not found” is said only of a score that few shadow members "
                       "reach (at most the stated miss rate), and the column before the AUC gives the share of "
                       "shadow non-members that low."))
        rows = [power_rows[0]] + [[esc(method_label(row[0]))] + [esc(c) for c in row[1:]] for row in power_rows[1:]]
        widths = fitted_widths(width, power_rows[0], [2.6 * cm, 2.5 * cm, 2.0 * cm, 3.4 * cm, 2.5 * cm])
        story.append(_table(rows, widths, st))
        for line in never_clears_lines(r):
            story.append(P(esc(line) + ".", "small"))
    else:
        rows = [["Method", "Shadow AUC", "Reading"]]
        for m in methods:
            if m in not_run:
                continue
            auc = (calibrations.get(m) or {}).get("shadow_auc")
            rows.append([esc(method_label(m)), _fmt(auc), esc(auc_reading(auc))])
        if len(rows) > 1:
            story.append(_table(rows, [3 * cm, 2.2 * cm, width - 5.2 * cm], st))
    for line in mirror_sentences(r):
        story.append(P(esc(line), "small"))

    # -- methods that could not run --------------------------------------------
    if not_run:
        story.append(P("Methods that could not run", "h1"))
        for m, why in not_run.items():
            story.append(P(f"<b>{esc(method_label(m))}:</b> {esc(plain_reason(why))}"))

    # -- score distributions ---------------------------------------------------
    kde_methods = plotted_methods(r)
    if kde_methods:
        # the section's heading and introduction stay with its first plot (no orphaned heading)
        head = [P("Your documents against the shadow's score distributions", "h1"),
                P("Each plot shows the scores a method gave to shadow documents known to be in the shadow's "
                  "knowledge base (members) and known not to be (non-members), with your documents marked at "
                  f"their scores (numbered, with the key under each plot, up to {MAX_NUMBERED} documents; more "
                  "are marked without numbers). A document far inside the member curve looks like a member. The "
                  "calibrated scores each plot draws, and the raw scores behind them, "
                  f"are in {esc(export_name(result, SCORES_EXT))}, exported beside this report (the app's "
                  "Export section; the CLI's --report-dir).")]
        for i, m in enumerate(kde_methods):
            block = (head if i == 0 else []) + [P(esc(method_label(m)), "h2"),
                                                _image(kde_png(r, m, dpi=opt.figure_dpi, notes=False), width * 0.92)]
            key = kde_key(r, m)
            if key:
                block.append(P("Marks: " + "; ".join(f"<b>{n}</b> {cell_id(d)} ({_fmt(sc, 3)})" for n, d, sc in key),
                               "small"))
            note = kde_data(r, m).note  # said here as text, once: the image leaves it out
            if note:
                block.append(P(esc(note), "note"))
            story.append(KeepTogether(block))

    # -- per-document evidence -------------------------------------------------
    story.append(CondPageBreak(6 * cm))
    story.append(P("Evidence per document", "h1"))
    texts = {str(d.get("id")): d.get("text", "") for d in r.get("documents") or [] if isinstance(d, dict)}
    by_id = {str(v.get("doc_id")): v for v in verdicts}
    ids = document_ids(r)
    shown_ids = evidence_documents(ids, by_id, opt.evidence_documents)
    shown = set(shown_ids)
    left_out = evidence_note(ids, shown_ids, by_id, export_name(result, "json"))
    if left_out:
        story.append(P(esc(left_out), "note"))
    for doc_id in ids:
        if doc_id in shown:
            story.extend(_document_evidence(r, doc_id, by_id.get(doc_id), texts.get(doc_id, ""), st, width, opt))
        if progress:  # counted for every document, so the caller's bar still ends at its total
            progress(1)

    # -- documents and their hashes -------------------------------------------
    story.append(P("Documents and their SHA-256", "h1"))
    story.append(P("The SHA-256 of each document's text (UTF-8). Anyone holding the text can compute it "
                   "(e.g. <i>sha256sum</i>) and check that it is the document audited here.", "small"))
    rows = [["Document", "SHA-256 of the text"]]
    for d in r.get("documents") or []:
        rows.append([cell_id(d.get("id")), f"<font size=7>{esc(d.get('sha256'))}</font>"])
    if len(rows) > 1:
        story.append(_table(rows, [4.0 * cm, width - 4.0 * cm], st))

    # -- limitations -----------------------------------------------------------
    story.append(P("Limitations", "h1"))
    shows = r.get("what_this_shows")
    if shows:  # the plain statement of what this audit can and cannot show (evidence.statement)
        story.append(P(esc(shows)))
        story.append(Spacer(1, 3))
    for text in LIMITATIONS:
        story.append(P("• " + esc(text)))
        story.append(Spacer(1, 3))

    decorate = _page_decoration(created)
    doc.build(story, onFirstPage=decorate, onLaterPages=decorate)
    return buf.getvalue()


#: the order in which documents get the PDF's evidence sections when not all can (``evidence_documents``)
EVIDENCE_ORDER = ("member", "inconclusive", "not found")


def evidence_documents(ids: list[str], verdicts: dict[str, dict], limit: int) -> list[str]:
    """The documents whose evidence the PDF lays out, in audit order: all of them up to ``limit``; beyond it
    the members first, then the inconclusive ones, then the rest, as far as ``limit`` goes."""
    if len(ids) <= limit:
        return list(ids)
    rank = {v: i for i, v in enumerate(EVIDENCE_ORDER)}
    order = {d: i for i, d in enumerate(ids)}
    chosen = set(sorted(ids, key=lambda d: (rank.get(str((verdicts.get(d) or {}).get("verdict")), len(rank)),
                                            order[d]))[:max(0, limit)])
    return [d for d in ids if d in chosen]


def evidence_note(ids: list[str], shown: list[str], verdicts: dict[str, dict], json_name: str) -> str | None:
    """What the evidence section leaves out when it shows fewer documents than were audited, or None."""
    if len(shown) == len(ids):
        return None
    counts = {v: sum(1 for d in ids if (verdicts.get(d) or {}).get("verdict") == v) for v in EVIDENCE_ORDER}
    members = counts["member"]
    first = ("the one called a member, then " if members == 1 and shown else
             f"all {members} called members, then " if members and members <= len(shown) else
             "members first, then " if members else "")
    return (f"This section shows {len(shown)} of the {len(ids)} documents audited ({first}the inconclusive ones, "
            f"then the others, as far as {len(shown)} go), in the order they were audited. Every document's "
            f"verdict is in the table above, and every document's evidence is in {json_name}, exported beside "
            "this report.")


def _document_evidence(r: dict, doc_id: str, verdict: dict | None, text: str, st: dict, width: float,
                       opt: ReportOptions) -> list:
    from reportlab.lib.units import cm
    from reportlab.platypus import Paragraph, Spacer

    P = lambda t, style="body": Paragraph(t, st[style])  # noqa: E731
    redacted = bool(r.get("redacted"))
    out: list = [P(f"Document {esc(doc_id)}", "h2")]
    if verdict is not None:
        logprobs = (r.get("capabilities") or {}).get("logprobs")
        try:
            why = explain_verdict(verdict, logprobs)
        except ValueError:  # a kind this version does not know (an imported or hand-made audit): its own reason
            why = plain_reason(scrub_text(str(verdict.get("reason") or "")))
        out.append(P(f"<b>Verdict: {esc(verdict.get('verdict'))}.</b> {esc(why)}"))
    if text:
        excerpt = text if len(text) <= opt.excerpt_chars else text[: opt.excerpt_chars].rstrip() + " …"
        if RTL.search(excerpt):
            out += [P("<i>Text:</i>", "quote"), text_block(excerpt, st["quote"])]
        else:
            out.append(P(f"<i>Text:</i> {esc(excerpt)}", "quote"))
    out.append(Spacer(1, 4))

    srag = method_result(r, doc_id, "srag")
    if srag is not None:
        ev = srag.get("evidence") or {}
        out.append(P("<b>S-RAG: probed words</b> (probability the target gave to the true next word"
                     + ("; the words are redacted with the document text)" if redacted else ")")))
        words = [w for w in ev.get("words") or [] if isinstance(w, dict)]
        if words:
            rows = [["#", "True word", "Probability", "Note"]]
            for i, w in enumerate(words, 1):
                if w.get("error") or w.get("prob") is None:
                    prob, note = "n/a", f"call failed: {w.get('error') or 'no answer'}"
                elif w.get("below_top_k"):
                    prob, note = "0", ("not among the target's top alternatives"
                                       + ("" if redacted else f" (it said “{w.get('first_token', '')}”)"))
                else:
                    prob, note = (_fmt(w.get("prob"), 3),
                                  "" if redacted else f"target's first token: “{w.get('first_token', '')}”")
                rows.append([str(i), esc(w.get("word")), prob, esc(note)])
            out.append(_table(rows, [0.8 * cm, 3.6 * cm, 2.2 * cm, width - 6.6 * cm], st))
        else:
            out.append(P(esc(plain_reason(srag.get("reason")) or "No word was probed."), "note"))
        if ev.get("below_topk_share") is not None:
            out.append(P(f"Share of probes below the top-k alternatives: {_fmt(ev.get('below_topk_share'))}", "small"))
        if ev.get("reproduced_share") is not None:
            out.append(P("Share of the document's word 4-grams that no probe sent and the target's answers "
                         f"reproduced: {_fmt(ev.get('reproduced_share'))}", "small"))
        if ev.get("histogram"):  # without one, the reason above says all there is to say
            out.append(_image(srag_histogram_png(r, doc_id, dpi=opt.figure_dpi), width * 0.8))

    mba = method_result(r, doc_id, "mba")
    if mba is not None:
        ev = mba.get("evidence") or {}
        out.append(P("<b>MBA: masked words</b>"))
        masked = ev.get("masked_text")
        if isinstance(masked, str) and masked:
            if len(masked) > opt.masked_text_chars:
                masked = masked[: opt.masked_text_chars].rstrip() + " …"
            out.append(text_block(masked, st["quote"]))
        rows_ev = [x for x in ev.get("rows") or [] if isinstance(x, dict)]
        if rows_ev:
            rows = [["Mask", "Expected", "Target's answer", "Right?"]]
            for x in rows_ev:
                exp = x.get("expected")
                exp = " / ".join(map(str, exp)) if isinstance(exp, (list, tuple)) else exp
                mark = "✓ right" if x.get("correct") is True else "✗ wrong" if x.get("correct") is False else "n/a"
                rows.append([esc(x.get("mask")), esc(exp), esc(x.get("predicted") or "(no answer)"), mark])
            out.append(_table(rows, [2.2 * cm, 4.4 * cm, width - 9.0 * cm, 2.4 * cm], st))
            acc = mba_accuracy(r, doc_id)
            if acc is not None:
                out.append(P(f"{acc[0]} of {acc[1]} answered masked words filled in correctly"
                             f"{mba_unanswered(r, doc_id)}."
                             + (" The words and the target's answers are redacted with the document text."
                                if redacted else ""), "small"))
        note = reason_note("mba", mba)
        if note:
            out.append(P(esc(note), "note"))

    out.extend(_verbatim_evidence(r, doc_id, st, width))

    others = [m for m in (r.get("results") or {}).get(doc_id, {}) if m not in ("srag", "mba", "verbatim")]
    for m in others:
        out.append(P(f"<b>{esc(method_label(m))}:</b> {esc(result_line(method_result(r, doc_id, m) or {}))}",
                     "small"))
    out.append(Spacer(1, 8))
    return out


def _shadow_call(res: dict) -> str:
    """A method's own score and call, on its shadow's threshold (a verdict led by the controls says its call
    against them in the paragraph above, so the two are told apart)."""
    return f"score {_fmt(res.get('score'))}; on its shadow's threshold it says “{decision_text(res.get('decision'))}”"


def _verbatim_evidence(r: dict, doc_id: str, st: dict, width: float) -> list:
    """Verbatim continuation's evidence: the run the target copied, set apart from the document's text,
    and each probe's share (as the Results tab shows it, ``verbatim_reproduction``).

    ``r`` is the shared view: when texts are redacted, so is the run.
    """
    from reportlab.lib.units import cm
    from reportlab.platypus import Paragraph

    got = verbatim_reproduction(r, doc_id)
    res = method_result(r, doc_id, "verbatim")
    if res is None:
        return []
    P = lambda t, style="body": Paragraph(t, st[style])  # noqa: E731
    out = [P(f"<b>Verbatim continuation: what the target quoted from the part of the document it was not "
             f"shown</b> ({esc(result_line(res))})")]
    if got is None:
        return out
    if got["longest"]:
        out.append(P("The longest run the target reproduced:", "small"))
        out.append(text_block(got["longest"], st["reproduced"]))
        out.append(P("Your own words are evidence; a stock phrase that any document of this kind contains is not.",
                     "small"))
        if got.get("ngrams"):
            out.append(P(esc(COPIED_NOTE.format(got["ngrams"])), "small"))
    else:
        out.append(P("The target reproduced no run of four words or more from the unseen part.", "small"))
    if got.get("similarity") is not None:
        out.append(P(esc(SIMILARITY_NOTE.format(got["similarity"])), "small"))
    rows = [["Request", "Word runs copied", "Reproduced share", "Longest run (words)", "Non-answer"]]
    for p in got["probes"]:
        share, runs = p.get("reproduced share"), p.get("word runs copied")
        rows.append([esc(p.get("request")), "n/a" if runs is None else str(runs),
                     "n/a" if share is None else _fmt(share),
                     esc("n/a" if p.get("longest run (words)") is None else p.get("longest run (words)")),
                     esc(p.get("non-answer") or "")])
    out.append(_table(rows, [3.4 * cm, 2.6 * cm, 2.6 * cm, 3.0 * cm, width - 11.6 * cm], st))
    return out


def method_power_rows(result: dict) -> list[list[str]]:
    """The method-power table of a result: what each method's calls are worth at the audit's FPR.

    Header row first; one row per method of ``result["method_power"]``
    (AuditResult.to_json). Empty when the result predates FPR control.
    """
    mp = result.get("method_power") or {}
    if not mp:
        return []
    rows = [["Method", "False-positive rate", "Power (shadow TPR)", "Cleared (shadow non-members)",
             "Shadow AUC (out of fold) [95%]", "Decides"]]
    for name, info in mp.items():
        info = info if isinstance(info, dict) else {}  # a stored audit is read as found: n/a, never a failed PDF
        ci = info.get("shadow_auc_ci")
        ci = ci if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(_fmt(x) != "n/a" for x in ci) else None
        auc = _fmt(info.get("shadow_auc"))
        auc += f" [{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci and auc != "n/a" else ""
        fpr = "n/a" if _fmt(info.get("fpr")) == "n/a" else f"{info['fpr']:.0%}"
        power = _fmt(info.get("power"))
        rows.append([name, fpr, power, cleared_text(info), auc,
                     "yes" if info.get("decides") else f"no: {info.get('reason')}"])
    return rows


def never_clears_lines(result: dict) -> list[str]:
    """Under the method-power table (app and PDF): why each method in it that never says "not found" does not,
    which its row's "Cleared" cell refers to (``cleared_text``)."""
    from audit_core.evidence.calibration import clearing_withheld

    return [why for m, info in (result.get("method_power") or {}).items()
            if (info or {}).get("never_clears") and (why := clearing_withheld(m))]


def cleared_text(info: dict, why_where: str = "under this table") -> str:
    """How many shadow non-members a method may call "not found", and at what miss rate (``why_where``: where
    the reader finds why a method never says it: under the method-power table in the app and the PDF
    (``never_clears_lines``), once under the verdicts in the CLI)."""
    if info.get("never_clears"):
        return f'none (this method never says "not found"; the reason is given {why_where})'
    if _fmt(info.get("miss_rate")) == "n/a":
        return "n/a"
    if not info.get("cleared"):
        from audit_core.evidence.calibration import NOT_CLEARED

        if info.get("clear_reason"):  # the shadow is too small for the rate, not its members too low
            return f"none ({str(info['clear_reason']).removeprefix(NOT_CLEARED + ': ')})"
        return f"none (its members score too low too often to clear at a {info['miss_rate']:.0%} miss rate)"
    return f"{_fmt(info['cleared'])} (members missed at most {info['miss_rate']:.0%})"

