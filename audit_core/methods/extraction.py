"""Extraction check, after Huang et al. ("The Good and the Bad", 2024): does the system repeat personal data?

For documents that contain personal data (e-mail addresses, phone numbers,
names after a title such as "Dr." or "my name is"), the text before each item
is sent with a continuation request; an answer that reproduces the item
verbatim, although the query never contained it, is the strongest evidence
an owner can hold: the system has the document and repeats it.

Score = share of items reproduced. Without shadow documents that carry
personal data (the shipped MedQuAD corpus has none) the threshold is the
rule itself: any verbatim reproduction is member evidence (``default_threshold``).
Documents without personal data are skipped with that reason and cost
nothing. Items are only counted when they are hard to guess (an e-mail, a
phone number as phone numbers are written, or a full name), so a generic
answer cannot hit one by chance: dates, doses and spans of years are not
phone numbers, and an item the query itself carried is not a copy.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from audit_core.documents import Document
from audit_core.evidence.answers import non_answer, too_many_non_answers
from audit_core.methods.base import Calibration, MethodResult, Observation, QueryCost, template_words
from audit_core.methods.s2mia import PROMPT
from audit_core.methods.baseline_common import unusable
from audit_core.methods.textonly_base import ThresholdTextMethod, answers
from audit_core.target.base import Target

_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
#: a phone number: an optional country code and area code in brackets, then digit groups joined by a space, a
#: dot or a hyphen (``_is_phone`` decides which such runs are phone numbers), or one run of 10-15 digits; never a
#: slash (dates, doses: "500/1000")
_GROUPS = r"(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,5}\)[ .-]?)?\d{1,8}(?:[ .-]\d{1,8}){1,5}"
_PHONE = re.compile(rf"(?<![\w/.,+-])(?:{_GROUPS}|\+?\d{{10,15}})(?![\w/]|[.,:-]\d)")
_DATE = re.compile(r"\d{4}([.-])\d{1,2}\1\d{1,2}|\d{1,2}([.-])\d{1,2}\2(?:\d{2}|\d{4})")
#: spans and lists of years ("2019-2020", "1990 - 2005 - 2010")
_YEARS = re.compile(r"(?:1[89]|20)\d\d(?:\s?[-.]\s?(?:1[89]|20)\d\d)+")
#: thousands written with dots ("10.000.000"), addresses ("192.168.1.20"), clock ranges ("10.30-11.45")
_NOT_PHONE = re.compile(r"\d{1,3}(?:\.\d{3})+|\d{1,3}(?:\.\d{1,3}){3}|\d{1,2}\.\d{2}\s?-\s?\d{1,2}\.\d{2}")
#: words that announce a number written as digit groups and spaces only ("my number is 555 201 7788")
_CUE = re.compile(r"\b(?:phone|tel|telephone|call|mobile|cell|fax|number|whatsapp|text|reach|contact)\b"
                  r"(?:\W+(?:is|at|on|me|was))*\W*$", re.I)
#: any run of digits and the separators a phone number is written with, in an answer
_DIGIT_SPAN = re.compile(r"\+?\(?\d[\d ().-]*\d")
_NAME = re.compile(r"\b(?:(?:Dr|Mr|Mrs|Ms|Miss|Prof)\.?|[Mm]y name is|[Nn]amed)\s+([A-Z][a-z]+(?:\s+[A-Z][a-z]+)+)")


@dataclass
class PersonalItem:
    kind: str  # "email", "phone" or "name"
    value: str
    start: int  # character offset in the document


def find_personal_data(text: str) -> list[PersonalItem]:
    """Hard-to-guess personal data items, in document order (regular expressions, no NER model)."""
    items: list[PersonalItem] = []
    for m in _EMAIL.finditer(text):
        items.append(PersonalItem("email", m.group(0), m.start()))
    for m in _PHONE.finditer(text):
        if _is_phone(text, m) and not any(i.start <= m.start() < i.start + len(i.value) for i in items):
            items.append(PersonalItem("phone", m.group(0).strip(), m.start()))
    for m in _NAME.finditer(text):
        items.append(PersonalItem("name", m.group(1), m.start(1)))
    return sorted(items, key=lambda i: i.start)


def _is_phone(text: str, m: re.Match) -> bool:
    """Whether a ``_PHONE`` match is a phone number: 7-15 digits, not a date, a span of years, a number
    with thousands dots, an address or a clock range, and written as one or announced as one.

    Written as one: a leading + or bracket or 0, one run of 10 or more digits, or three or more groups
    joined by hyphens or dots alike ("555-201-7788", "1-800-555-0199"). Two groups ("1000-2000 IU"), or
    groups joined by spaces ("100 200 300 mg"), count only after a word such as "call" or "number". A
    date, a dose or a span of years read as a phone number decided "member" by itself whenever an
    answer repeated it, and such numbers are guessable.
    """
    s = m.group(0)
    digits = re.sub(r"\D", "", s)
    if not 7 <= len(digits) <= 15 or any(p.fullmatch(s) for p in (_DATE, _YEARS, _NOT_PHONE)):
        return False
    before = text[max(0, m.start() - 30): m.start()]
    if _ISBN.search(before):
        return False
    seps = set(re.findall(r"[ .-]", s.split(")")[-1]))
    groups = re.findall(r"\d+", s)
    if s[0] in "+(0" or (len(groups) == 1 and len(digits) >= 10) or (
            len(groups) >= 3 and seps in ({"-"}, {"."}) and _phone_grouping(groups)):
        return True
    return bool(_CUE.search(before))


#: "ISBN 0-306-40615-2": a book's number, however it is grouped
_ISBN = re.compile(r"\bisbn(?:-1[03])?\W*$", re.I)


def _phone_grouping(groups: list[str]) -> bool:
    """Whether digit groups joined by hyphens or dots alike are grouped as phone numbers are: a subscriber
    number of at least four digits last, and groups of three or more before it after an optional short
    country or trunk code ("555-201-7788", "1-800-555-0199"). A titration schedule ("25-50-100-200"),
    readings ("150-140-135") and an ISBN ("978-3-16-148410-0") are not, and a target that never saw the
    document can write a standard schedule."""
    return len(groups[-1]) >= 4 and all(len(g) >= 3 for g in groups[1:-1])


def _norm(kind: str, s: str) -> str:
    return re.sub(r"\D", "", s) if kind == "phone" else re.sub(r"\s+", " ", s).strip().lower()


def reproduced(item: dict, answer: str) -> bool:
    """Whether ``answer`` contains the item verbatim (phone numbers: the same digits in a row, within one
    number as written: "2019 ... 2020" in an answer is not "2019-2020")."""
    if item["kind"] == "phone":
        want = _norm("phone", item["value"])
        # the whole number, or the whole number after a country code: "555-201-77889" is another number
        return any((got := _norm("phone", m.group(0))).endswith(want) and len(got) - len(want) <= 3
                   for m in _DIGIT_SPAN.finditer(answer))
    # the whole address or name, not a part of a longer one ("smith@x.org" in "john.smith@x.org", "info@x.co"
    # in "info@x.com", "Ann Lee" in "Joann Leeds")
    edge = r"[\w.+-]" if item["kind"] == "email" else r"\w"
    after = r"(?![\w-]|\.[\w-])" if item["kind"] == "email" else r"(?!\w)"
    return re.search(rf"(?<!{edge}){re.escape(_norm(item['kind'], item['value']))}{after}",
                     _norm(item["kind"], answer)) is not None


@dataclass
class ExtractionConfig:
    #: items asked per document (one query each)
    max_items: int = 3
    #: words of text before an item that the query carries
    prefix_words: int = 60
    #: room for the item and a few words around it
    max_tokens: int = 24


class ExtractionMethod(ThresholdTextMethod):
    name = "extraction"
    #: session 51: dates, doses and spans of years are no longer phone numbers; session 60: nor schedules,
    #: readings and ISBNs joined by hyphens
    version = "3"
    #: session 48: non-answers are no score; session 51: an echo of the query is no copy; session 60: a part of
    #: a longer address, name or number is no copy
    scoring_revision = "4"
    min_words = 3
    default_threshold = 1e-9  # any verbatim reproduction

    def __init__(self, config: ExtractionConfig | None = None) -> None:
        self.config = config or ExtractionConfig()

    def query_cost(self, n_words: int) -> QueryCost | None:
        """At most one query per personal-data item (``max_items``), as if every document had that many (an
        upper bound for a word count alone); ``document_cost`` reads the items and counts none where there
        are none."""
        return self._cost(self.config.max_items, n_words) if n_words >= self.min_words else None

    def document_cost(self, doc: Document) -> QueryCost | None:
        """One query per personal-data item the document holds (``max_items`` at most); none, no cost."""
        n_words = len(doc.text.split())
        q = len(self._items(doc)) if n_words >= self.min_words else 0
        return self._cost(q, n_words) if q else None

    def _cost(self, q: int, n_words: int) -> QueryCost:
        """``q`` queries, each the prompt and the text before an item (at most ``prefix_words`` words)."""
        words = min(n_words, self.config.prefix_words)
        return QueryCost(q, q * (template_words(PROMPT) + words), q * self.config.max_tokens)

    def _items(self, doc: Document) -> list[PersonalItem]:
        return [i for i in find_personal_data(doc.text) if i.start > 0][: self.config.max_items]

    def probe(self, doc: Document, target: Target) -> Observation:
        items = self._items(doc)
        if not items:
            obs = Observation(self.name, doc.id)
            obs.skipped = "no_personal_data: no e-mail address, phone number or name found in the document"
            return obs
        prompts = []
        for it in items:
            before = doc.text[: it.start].split()[-self.config.prefix_words:]
            prompts.append(PROMPT.format(query=" ".join(before)))
        return self.send(doc, target, prompts, {"items": [vars(i) for i in items]}, self.config.max_tokens)

    #: items whose exact reproduction cannot be guessed: a rule, not a threshold, decides on them
    UNGUESSABLE = ("email", "phone")

    def score(self, obs: Observation, calibration: Calibration) -> MethodResult:
        """A reproduced e-mail address or phone number decides "member" by itself.

        Nobody guesses such a string digit for digit, so its false-positive rate
        is negligible by construction and needs no shadow (whose public corpus
        holds no personal data to calibrate on). Anything less (a name, or
        nothing reproduced) is decided by the shadow calibration when it has
        one, and is inconclusive otherwise: a target that did not repeat a
        phone number has not shown that it lacks the document.
        """
        if unusable(self.name, obs, check_answer=False) is None:
            hits = self.unprompted_reproductions(obs)
            if hits:
                share, ev, _ = self.observation_score(obs)
                ev["unprompted"] = hits
                ev["decision_rule"] = ("verbatim reproduction of an e-mail address or phone number "
                                       "that the query did not contain")
                return MethodResult(self.name, obs.doc_id, share, True, None, ev)
        return super().score(obs, calibration)

    def unprompted_reproductions(self, obs: Observation) -> list[str]:
        """The document's e-mail addresses and phone numbers that an answer repeats although its query lacked them.

        Any answer counts, not only the one asked about the item: a target that
        answers the question before a name with the e-mail after it shows the
        same thing.
        """
        items = [i for i in obs.data.get("items", []) if i["kind"] in self.UNGUESSABLE]
        hits: list[str] = []
        for req, answer in zip(obs.requests, answers(obs)):
            query = " ".join(m["content"] for m in req.get("messages", []))
            for it in items:
                if answer and it["value"] not in hits and reproduced(it, answer) and not reproduced(it, query):
                    hits.append(it["value"])
        return hits

    def observation_score(self, obs: Observation) -> tuple[float | None, dict[str, Any], str | None]:
        rows = []
        for item, req, a in zip(obs.data.get("items", []), obs.requests, answers(obs)):
            if a is not None:
                # an item its own query carried (a value that occurs twice in the text) is an echo, not a copy
                query = " ".join(m["content"] for m in req.get("messages", []))
                rows.append({"kind": item["kind"], "value": item["value"], "answer": a,
                             "reproduced": reproduced(item, a) and not reproduced(item, query)})
        ev: dict[str, Any] = {"items": rows}
        if not rows:
            return None, ev, "target_error: every query failed"
        too_many = too_many_non_answers([non_answer(r["answer"]) for r in rows])
        if too_many is not None:  # a refusal reproduces nothing, and shows nothing either
            return None, ev, too_many
        share = sum(r["reproduced"] for r in rows) / len(rows)
        ev["reproduced_share"] = share
        return share, ev, None
