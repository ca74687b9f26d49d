"""Rule-based text edits shared by the text-only methods.

Sentences, self-contained statements, antonym perturbation (DCMI), light
word-drop edits (Tang et al.'s robustness signal) and content-word phrases
for broad questions. Rules, not a parser: no POS tagger or spaCy pipeline
ships offline (spaCy is installed but has no English model), so every rule
here is a regular expression over words; each says what it cannot do.
"""
from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass

from audit_core.methods.antonyms import antonym
from audit_core.scoring import split_words

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
#: speaker labels of dialogue and Q/A corpora ("Patient:", "Doctor:", "Question:", "Answer:")
_SPEAKER = re.compile(r"\b(?:Patient|Doctor|Question|Answer|Summary|Q|A|User|Assistant)\s*:\s*")
_VOCATIVE = re.compile(r"^(?:Doctor|Doc|Hi|Hello|Dear doctor|Well|So|Okay|OK|Yes|No)\s*,\s*", re.I)

#: first person -> third person, for statements quoted back as questions
_PERSON = {"i": "the patient", "me": "the patient", "my": "the patient's", "mine": "the patient's",
           "myself": "the patient", "i'm": "the patient is", "i've": "the patient has", "i'd": "the patient would"}

STOPWORDS = frozenset("""
a an the and or but if then so of to in on at by for with from as into onto about over under than that this
these those it its is are was were be been being am do does did has have had having can could should would
will shall may might must not no nor i me my we our you your he him his she her they them their there here
what which who whom whose when where why how all any some such very just also too more most other only own
same both each few many much up down out off again further once doctor patient question answer s t
know think need needs want like sounds telling based make sure take taking get getting feel feeling seems
recommend suggest start perform conduct undergo check examine additionally also well however generally
usually often summary information
""".split())


def split_sentences(text: str) -> list[str]:
    """Sentences of a text, speaker labels removed (each label starts a new sentence)."""
    parts: list[str] = []
    for chunk in _SPEAKER.split(text):
        for s in _SENTENCE_END.split(chunk.strip()):
            s = _VOCATIVE.sub("", s.strip())
            if s:
                parts.append(s)
    return parts


def third_person(sentence: str) -> str:
    """First-person words replaced so a statement reads as a fact about someone ("I have" -> "the patient has")."""
    def sub(m: re.Match) -> str:
        w = m.group(0)
        rep = _PERSON[w.lower()]
        return rep[:1].upper() + rep[1:] if m.start() == 0 else rep

    out = re.sub(r"\b(?:I'm|I've|I'd|I|me|my|mine|myself)\b", sub, sentence)
    # verb agreement after "the patient": only the commonest cases
    out = re.sub(r"\b(the patient) (have|am|are|do|was not|were)\b",
                 lambda m: m.group(1) + " " + {"have": "has", "am": "is", "are": "is", "do": "does",
                                               "was not": "was not", "were": "was"}[m.group(2)],
                 out, flags=re.I)
    return out


def statements(text: str, min_words: int = 5, max_words: int = 40) -> list[str]:
    """Declarative, self-contained sentences of a document (questions and fragments left out)."""
    out = []
    for s in split_sentences(text):
        n = len(s.split())
        if s.endswith("?") or n < min_words or n > max_words:
            continue
        out.append(third_person(s.rstrip(" .!")))
    return out


def text_seed(text: str) -> int:
    """A seed from a text, so every edit of a document is the same on every run."""
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16)


@dataclass
class Edit:
    """One replaced word: where it was (character span in the original) and what it became."""

    start: int
    end: int
    old: str
    new: str


@dataclass
class EditedText:
    text: str
    edits: list[Edit]


def _apply(text: str, edits: list[Edit]) -> str:
    out, pos = [], 0
    for e in sorted(edits, key=lambda e: e.start):
        out.append(text[pos:e.start])
        out.append(e.new)
        pos = e.end
    out.append(text[pos:])
    return "".join(out)


_CORE = re.compile(r"^([^\w]*)([\w'-]+?)([^\w]*)$")


def antonym_candidates(text: str, adjectives_only: bool = True) -> list[tuple[int, int, str, str, str, str]]:
    """(start, end, prefix punctuation, word, suffix punctuation, antonym) for every lexicon word."""
    out = []
    for word, start, end in split_words(text):
        m = _CORE.match(word)
        if not m:
            continue
        ant = antonym(m.group(2), adjectives_only)
        if ant is not None:
            out.append((start, end, m.group(1), m.group(2), m.group(3), ant))
    return out


def perturb_antonyms(text: str, ratio: float = 0.06, min_changes: int = 1, seed: int | None = None,
                     adjectives_only: bool = True) -> EditedText:
    """DCMI's perturbation: replace ``ratio`` of the adjectives/adverbs with antonyms (at least ``min_changes``).

    The adjectives/adverbs are the words of the shipped lexicon (``antonyms``;
    ``adjectives_only=False`` adds its other swaps, as "before" -> "after");
    which ones are replaced is drawn with a seed taken from the text, so the
    perturbed copy is reproducible. Everything but the chosen words, including
    spacing and punctuation, is kept byte for byte. No candidate: no edit.
    """
    cands = antonym_candidates(text, adjectives_only)
    if not cands:
        return EditedText(text, [])
    k = min(len(cands), max(min_changes, round(ratio * len(cands))))
    rnd = random.Random(text_seed(text) if seed is None else seed)
    chosen = sorted(rnd.sample(range(len(cands)), k))
    edits = []
    for i in chosen:
        start, end, pre, word, suf, ant = cands[i]
        edits.append(Edit(start + len(pre), end - len(suf), word, ant))
    return EditedText(_apply(text, edits), edits)


def drop_words(text: str, ratio: float = 0.1, seed: int | None = None) -> EditedText:
    """A light edit for Tang et al.'s robustness signal: delete ``ratio`` of the words (at least one).

    The first and last words stay, so the text still starts and ends as the
    original does; deleted words take one adjacent space with them.
    """
    words = split_words(text)
    if len(words) < 3:
        return EditedText(text, [])
    inner = list(range(1, len(words) - 1))
    k = min(len(inner), max(1, round(ratio * len(words))))
    rnd = random.Random(text_seed(text) if seed is None else seed)
    edits = []
    for i in sorted(rnd.sample(inner, k)):
        _, start, _ = words[i]
        end = words[i + 1][1]  # up to the next word: the word and its following space
        edits.append(Edit(start, end, text[start:end], ""))
    return EditedText(_apply(text, edits), edits)


def key_phrase(sentence: str, max_words: int = 5) -> str | None:
    """The longest run of content words in a sentence (ties: the first), e.g. "frequent panic attacks".

    A stand-in for a noun-phrase chunker: in health texts the longest run of
    non-stopwords is usually the condition, test or treatment a sentence is about.
    """
    best: list[str] = []
    run: list[str] = []
    for w in re.findall(r"[A-Za-z][A-Za-z'-]*|\d+", sentence) + [""]:
        if w and w.lower() not in STOPWORDS and len(w) > 1 and "'" not in w:
            run.append(w)
            continue
        if len(run) > len(best):
            best = run
        run = []
    if not best or (len(best) == 1 and len(best[0]) < 5):
        return None
    return " ".join(best[:max_words])
