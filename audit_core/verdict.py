"""Per-document verdicts from method results: the one place the combining rule is written down.

A verdict is "member", "not found" or "inconclusive" -- never a bare guess.
"not found" is deliberately not "not a member": a RAG can hold a document and
still fail to retrieve it for our probes. A method says "not found" only of a
score that at most 5% of its shadow's members reach; a lower score that is not
that low leaves the method undecided ("not cleared",
``audit_core.evidence.calibration`` point 4), so a weak method never clears.

Each method has already decided at the audit's false-positive rate (FPR) or
abstained with its reason (``audit_core.evidence.calibration``): no signal on
its shadow, a shadow too small for the rate, too many non-answers, failed
calls, no logprobs. Only methods that decided vote. The voters are the
primary (S-RAG) and the second opinion (MBA) when either decided; when
neither did, the first method in ``PRIMARY_ORDER`` that decided (text-only
methods before the baselines).

RULES (one row per case, tested row by row in tests/audit_core/test_evidence.py):

====  ==========================================  ==============  =========================================
row   voters' decisions                           verdict         why
====  ==========================================  ==============  =========================================
R1    nobody decided (or nobody ran)              inconclusive    every method's reason (``undecided_reason``):
                                                                  first, whole, those that scored the
                                                                  document below their member threshold,
                                                                  then the others' in brief
R2    the first voter says member                 member          a member call keeps the FPR of the
                                                                  method that made it; a dissenting
                                                                  voter is reported, not counted
R3    every voter says not found, and the         not found       --
      target is known to retrieve with queries
      as sent (``retrieval_as_sent``)
R4    the first voter says not found, and a       inconclusive    "methods disagree": calling it member
      later voter, or any other method that                       would let either method's false
      decided, says member                                        positives through (up to twice the
                                                                  FPR); calling it not found would hide
                                                                  a calibrated member call (a method
                                                                  outside the vote cannot make a member
                                                                  verdict, but its member call, such as
                                                                  Extraction's reproduced e-mail
                                                                  address, still stops a clearing)
R5    every voter says not found, but nobody      inconclusive    "not cleared": a target that rewrites
      stated that the target retrieves with                       queries or withholds documents from
      queries as sent                                             probes that resemble them hides the
                                                                  documents it holds from every method
                                                                  (``REWRITING_EVIDENCE``)
R6    every voter says not found, but the         inconclusive    "not cleared": that method scored the
      primary, the second opinion or a method                     document as more than 5% of its shadow's
      ahead of the voter in the voting order                      members score (or its shadow called it a
      scored the document without clearing it                     member that your controls did not
      (``withholds_clearance``); checked before                   confirm), so a "not found" would rest on
      R3 and R5                                                   one method while the other sees a
                                                                  plausible member
R7    the first voter says member, but a method   inconclusive    "not confirmed": that method scored the
      ahead of it in the voting order scored the                  document below its own member threshold
      document below its member threshold                         (``below_member_call``), and that depends
      without deciding (``below_member_call``);                   on the score, so letting the next method
      checked before R2                                           call it a member would make the verdict
                                                                  the union of two methods' member calls
====  ==========================================  ==============  =========================================

Why R6. Each "not found" keeps its own method's miss rate (at most 5% of
the shadow's members score that low). With S-RAG "not cleared" and MBA
"not found", clearing would let MBA's misses through whatever S-RAG sees;
asking every method with signal in the voting pool to clear bounds the
verdict's miss rate by the smaller of the two. Added in session 33 after a
member of a benchmark draw (completion, seed 6) was cleared that way: MBA
called it "not found" while 13% of S-RAG's shadow members score as low as
it did. On three completion draws (50 + 50 each) the combined verdict
cleared 7 of 150 members under R1-R5 and 1 under R6; the price was 15 of
150 non-members inconclusive instead of "not found", and no member call
changed (BENCHMARKS.md, target zoo, session 33). Since session 61 the pool
also holds every method ahead of the voter in the voting order: where S-RAG
and MBA decided nothing, each text-only method in turn had been a fresh chance
to clear a member (a review's simulation: 10% of members cleared by the second
of two methods that each miss 5%, against 0% for S-RAG then MBA). A method of
the pool that could not read the document (failed calls, non-answers) is named
in the reason of the "not found" that stands on the others (``no_reading``).

Why R5. Every method's probe is built from the document, and a target may
change what its retriever sees: query rewriting (common in production RAG;
the S-RAG paper's paraphrasing defense) or a detector that withholds the
best match of a document-like query (Mirabel). From outside, a document so
hidden looks exactly like one the target never held, and no probe we have is
immune (``scripts/rewriting_retrieval_check.py``; BENCHMARKS.md, "Session 26:
which probes reach the document when the target rewrites queries"): on 2,000 patient
dialogues, S-RAG's probes found their document for 0.96 of queries as sent,
0.15 after a small instruct model's rewrite and 0.32 behind Mirabel; the
best of any method was 0.84 after the rewrite and 0.60 behind Mirabel, and
on MedQuAD Mirabel left every method at most 0.32. So "not found"
is said only where the target is known to retrieve with the query as sent
and to withhold nothing: the built-in demo target without such a defense,
or an endpoint whose operator states it (``VerdictConfig.retrieval_as_sent``,
the app's checkbox, the CLI's ``--retrieval-as-sent``).

Why R7. A method that abstains for a reason that does not depend on the
document's score (no signal on its shadow, too many non-answers, no
logprobs) passes the vote on, and the next method's member call keeps that
method's rate. A method that scored the document and found it below its
member threshold ("not cleared", or above the rate against the owner's
controls) has made a call that depends on the score: had the next method's
member call counted then, every non-member would get one chance per method
in the chain (session 53's review: 5.9% member verdicts on non-members at a
stated 5% for S-RAG then MBA, 14.2% for three text-only methods in a row).

So every "member" verdict is one method's member call at the stated FPR: the
verdict's false-positive rate is that method's, never the sum of two.

R0, before the table: when the owner gave controls drawn like the documents
(declared never-published documents or canary siblings, ``LEADING_KINDS``)
and at least 1/FPR - 1 of them were scored, the collection test's method is
re-decided against those controls (``control_call``) and votes first. Its
member call is then "p <= FPR against your controls", whose false-positive
rate holds on the owner's own kind of text by construction, where a shadow's
threshold holds only as far as the shadow resembles the target (BENCHMARKS,
evidence section: the shadow's 5% was 0-2% realised, the controls' 4.5-5.1%,
with much higher recall). It says "not found" only where its shadow clears
the document too, and a shadow member call that the controls do not confirm
is not counted. Rows R1-R7 then apply unchanged.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Sequence

from audit_core.evidence.calibration import CLEAR_RULE, NOT_CLEARED, is_score
from audit_core.methods import METHODS
from audit_core.methods.base import MethodResult

MEMBER = "member"
NOT_FOUND = "not found"
INCONCLUSIVE = "inconclusive"

#: the registry's roles in voting order: the primary and second opinion lead, then the text-only
#: methods (built for targets where those two cannot run), then the published baselines
ROLE_ORDER = ("primary", "second opinion", "text-only", "baseline")
#: who votes first when several methods decided: by role, then in registry order
PRIMARY_ORDER = tuple(sorted(METHODS, key=lambda m: ROLE_ORDER.index(METHODS[m].role)))


#: what R5 cites: the measured cost of clearing without knowing how the target retrieves
REWRITING_EVIDENCE = ("a target that rewrites queries before retrieval, or withholds documents from queries that "
                      "resemble them, hides documents it holds from these probes (in our benchmark, a target whose "
                      "queries a small instruct model rewrote got 74% of the documents it held called \u201cnot "
                      "found\u201d by S-RAG)")


@dataclass
class VerdictConfig:
    primary: str = "srag"
    second: str = "mba"
    #: the target retrieves with each query exactly as sent and withholds nothing it retrieves (no
    #: query rewriting or expansion, no detect-and-hide defense): known for the built-in demo target
    #: without such a defense (``shadow.defenses.retrieval_as_sent``), stated by the operator for an
    #: endpoint. False (nobody knows): "not found" is withheld (R5)
    retrieval_as_sent: bool = False

    @classmethod
    def from_json(cls, d: dict | None) -> "VerdictConfig":
        """From stored configuration; keys of older versions (e.g. confidence bounds) are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (d or {}).items() if k in known})

    def order(self) -> list[str]:
        """Every registered method in voting order: the primary, the second opinion, then ``PRIMARY_ORDER``."""
        return [self.primary, self.second] + [m for m in PRIMARY_ORDER if m not in (self.primary, self.second)]


@dataclass
class Verdict:
    doc_id: str
    verdict: str
    reason: str
    score: float | None  # the deciding method's calibrated probability (R6: the objecting method's)
    methods: dict[str, dict] = field(default_factory=dict)  # method -> {score, decision, reason}
    rule: str = ""  # which row of the rule table applied (R1-R7)

    def to_json(self) -> dict:
        return asdict(self)


#: kinds of controls whose per-document calls lead a verdict (R0): drawn like the documents, so the rate
#: holds by construction; rewrites are biased (``evidence.collection.GENERATED_CONTROLS_BIAS``)
LEADING_KINDS = ("declared", "canaries")


def control_call(result: MethodResult, p: float, fpr: float, n_controls: int) -> MethodResult:
    """``result`` re-decided against the owner's controls (R0, module docstring).

    Member when the document's conformal p-value against the controls is at
    most ``fpr``. Otherwise "not found" only if the shadow cleared it as well,
    and undecided where the shadow did not, or where only the shadow's
    threshold called it a member (the controls score as high, so on this kind
    of text that call would not keep its rate).
    """
    ev = {**(result.evidence or {}), "fpr": fpr, "calibrated_on": "controls", "control_p_value": p,
          "n_controls": n_controls, "shadow_member": bool(result.decision)}
    against = f"p = {p:.2g} against your {n_controls} controls"
    if p <= fpr:
        return replace(result, decision=True, reason=f"{against} (at most {fpr:.0%})", evidence=ev)
    if result.decision is False:
        return replace(result, reason=f"{against}, and its shadow clears it", evidence=ev)
    why = ("its shadow's threshold calls it a member, but your controls score as high, so that call is not counted"
           if result.decision else result.reason or "its shadow does not clear it")
    return replace(result, decision=None, reason=f"{against} (above {fpr:.0%}): {why}", evidence=ev)


def controls_lead(collection: dict) -> bool:
    """Whether R0 applies to an audit's collection block: controls drawn like the documents, enough of them
    scored for a call at the audit's rate (``audit.collection_summary`` sets ``called_members`` then)."""
    return collection.get("controls_kind") in LEADING_KINDS and collection.get("called_members") is not None


def decide_with_controls(doc_id: str, results: Sequence[MethodResult], collection: dict,
                         cfg: VerdictConfig | None = None) -> Verdict:
    """``decide`` after R0: the collection method's call against the controls leads where it applies."""
    method = collection.get("method")
    p = (collection.get("document_p_values") or {}).get(doc_id)
    if not controls_lead(collection) or p is None or not any(r.method == method for r in results):
        return decide(doc_id, results, cfg)
    n = sum(is_score(v) for v in (collection.get("control_scores") or {}).values())
    fpr = collection.get("fpr") or 0.05
    swapped = [control_call(r, p, fpr, n) if r.method == method else r for r in results]
    return decide(doc_id, swapped, cfg, lead=method)


def voting_order(cfg: VerdictConfig, methods: Sequence[str] = (), lead: str | None = None) -> list[str]:
    """Every method in the order it votes: ``lead`` (R0), the primary, the second opinion, then
    ``PRIMARY_ORDER``, then any unregistered name of ``methods`` alphabetically."""
    order = list(dict.fromkeys([m for m in (lead,) if m] + cfg.order()))
    return order + sorted(set(methods) - set(order))


def voters(results: Sequence[MethodResult], cfg: VerdictConfig, lead: str | None = None) -> list[MethodResult]:
    """The methods whose decisions count, in voting order (module docstring); ``lead`` votes first (R0)."""
    decided = {r.method: r for r in results if r.decision is not None}
    lead_ = [decided[m] for m in dict.fromkeys((lead, cfg.primary, cfg.second)) if m in decided]
    if lead_:
        return lead_
    order = cfg.order()[2:]
    order += sorted(m for m in decided if m not in order)
    first = next((decided[m] for m in order if m in decided), None)
    return [first] if first is not None else []


def withholds_clearance(result: MethodResult) -> str | None:
    """Why a method that scored a document but decided nothing stands against its "not found" (R6), or None.

    It does where more than the clearing rule's miss rate of its shadow's
    members score as low as the document (``member_p_value``, set by
    ``evidence.calibration.decide_raw``), and where it was re-decided against
    the owner's controls after its shadow had called the document a member
    (``control_call``: no ``member_p_value`` then). An abstention (no signal,
    too many non-answers) was never set against the members' scores, so it
    carries no ``member_p_value`` and never stands against anything.
    """
    if result.decision is not None or result.score is None:
        return None
    ev = result.evidence or {}
    p = ev.get("member_p_value")
    if isinstance(p, (int, float)):
        if p <= CLEAR_RULE.max_miss_rate:  # the test ``evidence.calibration.clear_threshold`` sets its threshold by
            return None
        fallback = (f"its shadow's members score this low too often to clear it (member p-value {p:.2f}; "
                    f"\"not found\" needs {CLEAR_RULE.max_miss_rate:.2f} or less)")
    elif ev.get("calibrated_on") == "controls" and ev.get("shadow_member", True):  # rows before the flag: as then
        fallback = "its shadow called it a member"
    else:
        return None
    return (result.reason or fallback).removeprefix(f"{NOT_CLEARED}: ")


#: evidence flag of the result that stands for a method abstaining for the whole audit (it cannot run on the
#: target, or its shadow showed no signal: ``audit.run_audit``), as opposed to one that tried this document
FOR_THE_AUDIT = "abstains_for_the_audit"


def no_reading(result: MethodResult) -> str | None:
    """Why a method got neither a score nor a decision from this document (failed calls, too many
    non-answers, too short for it), or None: also where it abstains for the whole audit (``FOR_THE_AUDIT``),
    which the audit says once rather than on every document."""
    if result.decision is not None or result.score is not None or (result.evidence or {}).get(FOR_THE_AUDIT):
        return None
    return result.reason or "no reason recorded"


def _threshold_read(result: MethodResult) -> bool:
    """Whether a method's undecided result was read against a member threshold (its shadow's, or the owner's
    controls'), as opposed to a member call the method withdrew (``below_member_call``)."""
    ev = result.evidence or {}
    return isinstance(ev.get("member_p_value"), (int, float)) or (
        ev.get("calibrated_on") == "controls" and isinstance(ev.get("control_p_value"), (int, float)))


def below_member_call(result: MethodResult) -> str | None:
    """Why a method that scored a document below its member threshold stands against a later member call (R7).

    ``member_p_value`` is set only once a score has been set against the
    member threshold and found below it (``evidence.calibration.decide_raw``);
    a call re-decided against the owner's controls above the rate carries
    ``control_p_value``; a member call its own method withdrew says "not
    cleared" (Verbatim, when only its tie-break lifts a score over the
    threshold). An abstention for a reason that does not depend on the score
    has none of these and passes the vote on.
    """
    if result.decision is not None or result.score is None:
        return None
    if _threshold_read(result):
        return result.reason or "below its member threshold"
    if (result.reason or "").startswith(f"{NOT_CLEARED}:"):
        # a member call its method withdrew because it rests on a part of the score it does not trust
        # (Verbatim's tie-break): it depends on the score, so it passes no vote on either
        return result.reason
    return None


def _who(method: str) -> str:
    """The name a person reads for a method (its registry label), in the reasons a verdict gives."""
    spec = METHODS.get(method)
    return spec.label if spec is not None else method


#: a method's reason that is a bare machine code (``Outcome.reason`` of a failed call, a skip code), in words;
#: a code not listed here is shown with its underscores as spaces
CODE_WORDS = {
    "document_too_short": "the document is too short for this method",
    "document_empty": "the document is empty",
    "not_probed": "the document was not probed",
    "target_error": "the target's calls failed",
    "authentication_failed": "the target refused the API key",
    "unknown_model": "the target does not know the model",
    "no_logprobs": "the target returned no logprobs (token probabilities)",
    "context_too_long": "the request was too long for the target's context",
    "unreachable": "the target could not be reached",
    "rate_limited": "the target limited the rate of requests and the calls failed",
    "server_error": "the target's server failed",
    "bad_response": "the target's answer could not be read",
    "request_rejected": "the target rejected the request",
    "redirect_refused": "the target redirected the request to another address, which was refused",
    "unparseable_answer": "the target's answer could not be read as yes or no",
}
#: ``code: text``, a machine code leading a text (``no_questions: only 2 question(s) ...``): the text alone is
#: what a person reads. A code is lowercase words joined by underscores, so "no signal: ..." is left alone
_CODE_PREFIX = re.compile(r"(?:^|(?<=[\s(]))[a-z]+(?:_[a-z]+)+: (?=\S)")
#: a code standing as a whole clause (the whole reason, or between separators of a joined one)
_BARE_CODE = re.compile(r"(?:^|(?<=: )|(?<=; )|(?<=\())([a-z]+(?:_[a-z]+)+)(?=$|[;),])")


def plain_reason(reason: object) -> str:
    """A method's (or a verdict's) reason as a person reads it: machine codes out.

    Methods and connectors start some reasons with a code for programs
    (``no_questions: ...``, ``target_error: ...``) and give others as a bare
    code (``document_too_short``, ``rate_limited``); the stored result keeps
    them (tests and the CSV's method columns read them), but a code is not a
    sentence for a data owner. A ``code: text`` prefix is dropped (the text
    says it), a bare code becomes its ``CODE_WORDS`` phrase, or its words.
    """
    text = "" if reason is None else str(reason)
    text = _CODE_PREFIX.sub("", text)
    return _BARE_CODE.sub(lambda m: CODE_WORDS.get(m.group(1), m.group(1).replace("_", " ")), text)


#: the most characters of a reason given in brief (``brief_reason``)
BRIEF_CHARS = 80


def brief_reason(reason: object) -> str:
    """The head of a reason, for a method named beside the one(s) that made a verdict (R1).

    Its lead (what kind of reason: "no signal", "too short", "cannot run") is
    kept whole; what follows is cut at its first clause ("; " or " (") and at
    ``BRIEF_CHARS``. The whole reason stays in the verdict's ``methods`` and in
    each method's evidence.
    """
    text = plain_reason(reason)
    head, sep, rest = text.partition(": ")
    rest = re.split(r"; | \(", rest, maxsplit=1)[0] if sep else ""
    short = re.split(r"; | \(", head, maxsplit=1)[0] if not sep else f"{head}{sep}{rest}"
    if len(short) > BRIEF_CHARS:
        short = short[:BRIEF_CHARS].rsplit(" ", 1)[0].rstrip(",;:") + "\u2026"
    return short


def undecided_reason(results: Sequence[MethodResult], cfg: VerdictConfig, lead: str | None = None) -> str:
    """The reason of a verdict that no method decided (R1), deciding part first.

    What keeps such a document undecided is a method that scored it below its
    member threshold without clearing it (``below_member_call``: "not cleared",
    or above the rate against the owner's controls): those lead, whole, in
    voting order. Where none did, the first method in voting order leads. The
    others abstained for reasons that do not depend on this document's score
    (no signal on the shadow, cannot run, too short): they follow in brief,
    methods with the same brief reason named together. Joining every reason
    whole in the audit's order had led a verdict with a method that does not
    vote, and a table cell cut at 300 characters then hid the one that mattered.
    """
    if not results:
        return "no method was run"
    order = voting_order(cfg, [r.method for r in results], lead)
    ranked = sorted(results, key=lambda r: order.index(r.method))
    leads = [r for r in ranked if below_member_call(r)] or ranked[:1]
    whole = "; ".join(f"{_who(r.method)}: {plain_reason(r.reason or 'no reason recorded')}" for r in leads)
    groups: dict[str, list[str]] = {}
    for r in ranked:
        if r not in leads:
            groups.setdefault(brief_reason(r.reason or "no reason recorded"), []).append(_who(r.method))
    if not groups:
        return whole
    return f"{whole}; also undecided: " + "; ".join(f"{', '.join(names)} ({why})" for why, names in groups.items())


def decide(doc_id: str, results: Sequence[MethodResult], cfg: VerdictConfig | None = None,
           lead: str | None = None) -> Verdict:
    cfg = cfg or VerdictConfig()
    summary = {r.method: {"score": r.score, "decision": r.decision, "reason": r.reason} for r in results}
    vote = voters(results, cfg, lead)
    if not vote:  # R1
        return Verdict(doc_id, INCONCLUSIVE, undecided_reason(results, cfg, lead), None, summary, "R1")
    first, others = vote[0], vote[1:]
    fpr = (first.evidence or {}).get("fpr")
    at = f" at a {fpr:.0%} false-positive rate" if isinstance(fpr, float) else ""
    if (first.evidence or {}).get("calibrated_on") == "controls":
        at += f" against your {first.evidence['n_controls']} controls"
    alone = "" if first.method in (cfg.primary, cfg.second, lead) else " alone"
    # a "not found" is the shadow's clearing (a miss rate), never a false-positive rate or a call against controls
    cleared = (f" (at most {CLEAR_RULE.max_miss_rate:.0%} of its shadow's members score this low)"
               if "member_p_value" in (first.evidence or {}) or "fpr" in (first.evidence or {}) else
               # a calibration without out-of-fold evidence (built by hand, or stored before the clearing rule)
               " (below its threshold; how many of its shadow's members score this low was not measured)")
    if first.decision:
        order = voting_order(cfg, [r.method for r in results], lead)
        ahead = set(order[:order.index(first.method)])
        below = [(r.method, why) for r in results if r.method in ahead and (why := below_member_call(r))]
        if below:  # R7
            read = {r.method: _threshold_read(r) for r in results}
            held = "; ".join(f"{_who(m)} " + ("scored it below its member threshold" if read[m] else
                                              "withdrew its own member call") + f" ({plain_reason(why)})"
                             for m, why in below)
            return Verdict(doc_id, INCONCLUSIVE, f"not confirmed: {_who(first.method)}{alone} calls it a "
                           f"member{at}, but {held}; counting the later call would add its false positives to "
                           "the earlier method's", first.score, summary, "R7")
        # R2
        dissent = [_who(r.method) for r in others if not r.decision]
        note = f"; {', '.join(dissent)} did not find it" if dissent else (
            f"; {', '.join(_who(r.method) for r in others)} agrees" if others else "")
        return Verdict(doc_id, MEMBER, f"{_who(first.method)}{alone} calls it a member{at}{note}", first.score,
                       summary, "R2")
    # every member call stands against a "not found", a voter's or not (R4)
    dissent = [r for r in others if r.decision] + [r for r in results if r.decision and r not in vote]
    if not dissent:
        agree = f"; {', '.join(_who(r.method) for r in others)} agrees" if others else ""
        # the primary and the second opinion, and every method ahead of the voter: a "not found" from the
        # text-only chain may not pass over a method before it that did not clear the document either
        order = voting_order(cfg, [r.method for r in results], lead)
        pool = {*(lead, cfg.primary, cfg.second), *order[:order.index(first.method)]}
        held = [(r.method, why) for r in results if r.method in pool and (why := withholds_clearance(r))]
        # a method of the pool that could not read this document is named: the "not found" stands on the others
        unread = "".join(f"; {_who(r.method)} could not read it ({brief_reason(why)})" for r in results
                         if r.method in pool and r is not first and (why := no_reading(r)))
        agree += unread
        if held:  # R6
            objections = "; ".join(f"{_who(m)} does not clear it ({plain_reason(why)})" for m, why in held)
            # the verdict stands on the objection, so it shows the objecting method's probability, not the
            # "not found" it overrides (the highest, where two object)
            shown = max((summary[m]["score"] for m, _ in held if summary[m]["score"] is not None),
                        default=first.score)
            return Verdict(doc_id, INCONCLUSIVE, f"not cleared: {_who(first.method)}{alone} did not find "
                           f"it{cleared}{agree}, but {objections}", shown, summary, "R6")
        if cfg.retrieval_as_sent:  # R3
            return Verdict(doc_id, NOT_FOUND, f"{_who(first.method)}{alone} did not find it{cleared}{agree}",
                           first.score, summary, "R3")
        return Verdict(doc_id, INCONCLUSIVE,  # R5
                       f"not cleared: {_who(first.method)}{alone} did not find it{cleared}{agree}, but nobody "
                       f"stated that the target retrieves with queries as sent, and {REWRITING_EVIDENCE}",
                       first.score, summary, "R5")
    callers = ", ".join(_who(r.method) for r in dissent)
    return Verdict(doc_id, INCONCLUSIVE,  # R4
                   f"methods disagree: {_who(first.method)} did not find it, {callers} calls it a member",
                   first.score, summary, "R4")
