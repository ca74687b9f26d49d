"""Reading a target's answers to an MBA cloze probe, and judging them.

Pure functions, no model: stored raw answers can be re-parsed offline.

A target is asked for lines "[Mask_i]: answer", but real models answer in
many shapes: numbering variants ("Mask 3:", "[MASK_3]", "3.", "mask_3 -"),
markdown bold, quotes, JSON-ish pairs, chatter around the list, several
answers on one line, or the whole text rewritten with the blanks filled in.
``parse_mask_answers`` reads all of them; anything it cannot read is simply
missing (and counted wrong by the caller). It never raises.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

#: a mask label as written in our masked text
MASK_TOKEN_RE = re.compile(r"\[Mask_(\d+)\]")

# "[Mask_3]", "Mask 3", "MASK-3", "(mask #3)", "Blank 3", "<mask_3>", "{Mask_3}"
_LABEL = r"[\[\(\{<]?[ \t]*(?:mask|blank)[ \t_\-#]*(?P<num>\d{1,3})[ \t]*[\]\)\}>]?"
# what closes a label before its answer: quotes / markdown, then a separator
_SEP = r"""["'*_`]*[ \t]*(?:->|=>|→|[:=]|[-–—](?!\d))[ \t]*"""
_LABELLED_RE = re.compile(_LABEL + _SEP, re.IGNORECASE)
# "3. fever", "3) fever", "(3) fever", "- 3: fever" at the start of a line
_NUMBERED_RE = re.compile(r"^[ \t]*(?:[-*•][ \t]*)?[\(\[]?(?P<num>\d{1,3})[\.\):\]][ \t]+(?P<ans>\S.*)$")
_LABEL_ONLY_RE = re.compile(r"(?i)[\[\(\{<]?\s*mask[ \t_#-]*\d+\s*[\]\)\}>]?")
_PLACEHOLDER_RE = re.compile(r"(?i)<[^<>]*>|answer[ _]?(?:\d+|i)?|\.\.\.")
_QUOTES = "\"'`*_“”‘’«»"
_STRIP = _QUOTES + "{}[]<>"
#: answers longer than this (in words) are explanations, not a hidden word
_MAX_ANSWER_WORDS = 6


@dataclass
class ParsedAnswers:
    """Answers by mask number, and how each was read ("labelled", "aligned", "numbered")."""

    answers: dict[int, str] = field(default_factory=dict)
    sources: dict[int, str] = field(default_factory=dict)

    def get(self, k: int) -> str | None:
        return self.answers.get(k)


def _clean(ans: str) -> str:
    """Strip markup, quotes, explanations and trailing punctuation around one answer."""
    a = ans.strip()
    if _LABEL_ONLY_RE.fullmatch(a.strip(_QUOTES)) or _PLACEHOLDER_RE.fullmatch(a):
        return ""  # an echoed label or template placeholder is not an answer
    a = re.sub(r"\s*[,;|]\s*$", "", a)
    a = re.split(r"\s+[-–—]\s+|\s+\(|\s+because\s+", a, maxsplit=1)[0]  # "fever - as the text says"
    a = a.strip().strip(_STRIP).strip()
    a = a.rstrip(".,;:!?").strip().strip(_STRIP).strip()
    if MASK_TOKEN_RE.search(a) or re.fullmatch(r"(?i)(?:n/?a|none|unknown|\?+|\.\.\.|…)", a):
        return ""
    if len(a.split()) > _MAX_ANSWER_WORDS:
        return ""
    return a


def _put(out: ParsedAnswers, k: int, ans: str, source: str, n_masks: int) -> None:
    # the first non-empty answer for a mask wins: later repeats are usually echoes
    if 1 <= k <= n_masks and k not in out.answers and ans:
        out.answers[k] = ans
        out.sources[k] = source


def _labelled(raw: str, out: ParsedAnswers, n_masks: int) -> None:
    for line in raw.splitlines():
        hits = list(_LABELLED_RE.finditer(line))
        for h, nxt in zip(hits, hits[1:] + [None]):
            end = nxt.start() if nxt is not None else len(line)
            _put(out, int(h.group("num")), _clean(line[h.end():end]), "labelled", n_masks)


def _numbered(raw: str, out: ParsedAnswers, n_masks: int) -> None:
    for line in raw.splitlines():
        m = _NUMBERED_RE.match(line)
        if m:
            _put(out, int(m.group("num")), _clean(m.group("ans")), "numbered", n_masks)


def _anchor(words: Sequence[str]) -> str:
    return r"\s+".join(re.escape(w) for w in words)


def _aligned(raw: str, masked_text: str, out: ParsedAnswers, n_masks: int) -> None:
    """Answers from a rewrite of the whole text: what stands between each mask's known neighbours."""
    parts = MASK_TOKEN_RE.split(masked_text)
    segs, nums = parts[0::2], [int(n) for n in parts[1::2]]
    cursor = 0
    for p, k in enumerate(nums):
        left, right = segs[p], segs[p + 1]
        lw, rw = left.split(), right.split()
        l_gap = r"\s+" if left[-1:].isspace() else ""
        r_gap = r"\s+" if right[:1].isspace() else ""
        found = None
        for n in (4, 3, 2, 1):
            ln, rn = min(n, len(lw)), min(n, len(rw))
            if ln == 0 and rn == 0:
                break
            if ln and rn:
                pat = _anchor(lw[-ln:]) + l_gap + r"(?P<ans>[^\n]{1,80}?)" + r_gap + _anchor(rw[:rn])
            elif ln:  # the mask ends the text: take one word after the left neighbours
                pat = _anchor(lw[-ln:]) + l_gap + r"(?P<ans>[^\s\[\]]+)"
            else:  # the mask starts the text: one word before the right neighbours
                pat = r"(?P<ans>[^\s\[\]]+)" + r_gap + _anchor(rw[:rn])
            found = re.compile(pat, re.IGNORECASE).search(raw, cursor)
            if found:
                break
        if found is None:
            continue
        cursor = found.end("ans")
        if k not in out.answers:
            _put(out, k, _clean(found.group("ans")), "aligned", n_masks)


def parse_mask_answers(raw: str | None, n_masks: int, masked_text: str | None = None) -> ParsedAnswers:
    """Read answers for [Mask_1]..[Mask_n] from a target's raw reply.

    Order of trust: labelled answers ("[Mask_i]: x" and variants), then a
    rewritten text aligned against ``masked_text`` (if given), then bare
    numbered lines ("3. x") for masks still missing. Never raises: a reply it
    cannot read gives no answers.
    """
    out = ParsedAnswers()
    if not raw or not isinstance(raw, str) or n_masks <= 0:
        return out
    try:
        _labelled(raw, out, n_masks)
        if masked_text and len(out.answers) < n_masks:
            _aligned(raw, masked_text, out, n_masks)
        if len(out.answers) < n_masks:
            _numbered(raw, out, n_masks)
    except (re.error, RecursionError, ValueError):  # pragma: no cover - defensive: never raise on a reply
        pass
    return out


# --------------------------------------------------------------------------- judging


def _has_vowel(s: str) -> bool:
    return any(c in "aeiouy" for c in s)


def _undouble(s: str) -> str:
    if len(s) >= 3 and s[-1] == s[-2] and s[-1] not in "aeioulsz":
        return s[:-1]
    return s


def stem(word: str) -> str:
    """A small stemmer for inflections only: plural s/es, -ies, -ed, -ing, final e.

    Deliberately conservative (no derivational suffixes): it decides whether
    "headaches" answers "headache", not whether "diagnosis" answers "diagnostic".
    """
    w = word
    if len(w) <= 3 or not w.isalpha():
        return w
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("ied") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("es") and w[:-2].endswith(("s", "x", "z", "ch", "sh")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    elif w.endswith("ing") and len(w) - 3 >= 3 and _has_vowel(w[:-3]):
        w = _undouble(w[:-3])
    elif w.endswith("ed") and not w.endswith("eed") and len(w) - 2 >= 3 and _has_vowel(w[:-2]):
        w = _undouble(w[:-2])
    if w.endswith("e") and len(w) > 3:
        w = w[:-1]
    return w


def normalize_answer(text: str) -> str:
    """Case, accents, punctuation, whitespace, possessive 's and simple inflections removed."""
    t = unicodedata.normalize("NFKD", text or "")
    t = "".join(c for c in t if not unicodedata.combining(c)).lower()
    t = re.sub(r"['’]s\b", "", t)
    t = re.sub(r"[.'’]", "", t)  # "U.S." = "US", "don't" = "dont"
    t = re.sub(r"[^\w\s]|_", " ", t)  # other punctuation separates words: "5-7" = "5 7"
    return " ".join(stem(w) for w in t.split())


def is_correct(predicted: str | None, accepted: Iterable[str]) -> bool:
    """True when the prediction equals one accepted spelling, after normalisation."""
    if not predicted:
        return False
    p = normalize_answer(predicted)
    return bool(p) and any(p == normalize_answer(a) for a in accepted)


# --------------------------------------------------------------------------- spelling variants

_QWERTY_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")


def _keyboard_neighbours() -> dict[str, set[str]]:
    """Letters next to each letter on a QWERTY keyboard (same row, and the rows above and below)."""
    pos = {c: (r, i) for r, row in enumerate(_QWERTY_ROWS) for i, c in enumerate(row)}
    return {c: {d for d, (r2, i2) in pos.items() if d != c and abs(r - r2) <= 1 and abs(i - i2) <= 1}
            for c, (r, i) in pos.items()}


_NEIGHBOURS = _keyboard_neighbours()
#: a variant may differ by at most this share of the word's letters (one edit in five)
MAX_RELATIVE_EDITS = 0.2


def _typo_edit(typed: str, meant: str) -> bool:
    """True when ``typed`` is ``meant`` with one slip of the hand.

    The slips: two neighbouring letters swapped, a letter replaced by a key
    next to it, a letter dropped, or a letter doubled / a neighbouring key hit
    as well. The first letter is never part of the slip: people rarely mistype
    it, and a different first letter usually makes a different word
    ("melena" / "elena").
    """
    if typed[:1] != meant[:1]:
        return False
    if len(typed) == len(meant):
        diff = [i for i, (a, b) in enumerate(zip(typed, meant)) if a != b]
        if len(diff) == 1:
            i = diff[0]
            return typed[i] in _NEIGHBOURS.get(meant[i], set())
        if len(diff) == 2 and diff[1] == diff[0] + 1:
            i = diff[0]
            return typed[i] == meant[i + 1] and typed[i + 1] == meant[i]
        return False
    if len(typed) + 1 == len(meant):  # a letter dropped
        return any(typed == meant[:i] + meant[i + 1:] for i in range(1, len(meant)))
    if len(typed) == len(meant) + 1:  # a letter added: a double, or a key beside a neighbour
        for i in range(1, len(typed)):
            if typed[:i] + typed[i + 1:] == meant:
                extra, around = typed[i], {typed[i - 1]} | ({typed[i + 1]} if i + 1 < len(typed) else set())
                if extra in around or _NEIGHBOURS.get(extra, set()) & around:
                    return True
        return False
    return False


def is_spelling_variant(word: str, variant: str, known: Callable[[str], bool] | None = None) -> bool:
    """True when ``word`` (as written in the document) is a misspelling of ``variant``.

    MBA counts a corrected spelling as a right answer only when both are the
    same word. A dictionary's nearest word is not enough: drug names and
    medical terms are missing from a general dictionary, and their nearest
    entry is another word ("Raxar" / "Radar", "Tigan" / "Titan", "otologic" /
    "oologic", "melena" / "elena"). A variant is accepted only when

    - ``word`` is not itself a dictionary word (``known``) and is not written
      with a capital (a name, which a dictionary cannot correct);
    - the two differ by at most one edit in five letters (``MAX_RELATIVE_EDITS``);
    - the difference is one slip of the hand (``_typo_edit``), not a change
      that a different word would explain.
    """
    if not word or not variant or not word.isalpha() or not variant.isalpha():
        return False
    if word[0].isupper():
        return False
    w, v = word.lower(), variant.lower()
    if w == v:
        return True
    if known is not None and known(w):
        return False
    if 1 / max(len(w), len(v)) > MAX_RELATIVE_EDITS:
        return False
    return _typo_edit(w, v)
