"""Natural questions about a document, and how to read a target's answers to them.

Shared by the question-based text-only methods: interrogation (IA, yes/no
questions with known answers) and entailment (MEntA, broad
information-seeking questions).

Question generators (``QuestionConfig.generator``):

* ``"rules"`` (default): questions built from the document's own sentences
  by rules (``text_edits``). The local model of the registry
  (SmolLM2-135M-Instruct) was tried first and writes no usable questions
  (asked for a yes/no question about a consultation it answered "Yes."; asked
  for a patient's question it restated the text or refused), and no spaCy
  English model installs offline, so rules are the default.
* ``"helper"``: any OpenAI-compatible chat model the user configures (base
  URL, model, and the NAME of an environment variable holding its key; the
  key itself is never stored). It must not be the audited target: a probe
  refuses a helper whose identity equals the target's.

Questions are cached per document as JSON under ``cache_dir()/questions``,
keyed by a hash of the text, the kind of question, the generator identity and
the number asked, so a second audit of the same documents asks the same
questions without generating them again.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from audit_core.evidence.answers import non_answer
from audit_core.methods.rag_mia import HEDGE, parse_yes_no
from audit_core.methods.text_edits import key_phrase, perturb_antonyms, statements

#: bump when the rules change: cached questions of older rules are not reused
RULES_VERSION = "rules-1"

#: auxiliaries that invert into a question; do/does/did are left out (mostly main verbs in these texts)
_AUX = ("is", "are", "was", "were", "can", "could", "should", "will", "may", "might", "must", "has", "have", "had")
#: a short subject (no apostrophes, no comma) before the first auxiliary
_INVERT = re.compile(r"^(?P<subj>(?:[\w-]+\s+){0,3}?[\w-]+)\s+(?P<aux>" + "|".join(_AUX) + r")\s+(?P<rest>.+)$",
                     re.I)
_NEGATE = re.compile(r"\b(" + "|".join(_AUX) + r")\b", re.I)
_NUMBER = re.compile(r"\b\d+\b")
_PROPER = re.compile(r"^(?:[A-Z]{2,}|[A-Z][a-z]+[A-Z])")  # acronyms and CamelCase keep their case

_IDK = re.compile(
    r"\b(?:i (?:do not|don't|dont) know|i am not sure|i'm not sure|not sure|unsure|no information|"
    r"not (?:mentioned|specified|provided|stated|given|available)|(?:does not|doesn't) (?:say|mention|specify)|"
    r"cannot (?:determine|tell|say|answer)|can't (?:determine|tell|say|answer)|unable to (?:determine|answer|say)|"
    r"no (?:context|data|details)|unknown|i have no (?:idea|way))\b", re.I)
_REFUSAL = re.compile(
    r"\b(?:i'm sorry|i am sorry|sorry, (?:but )?i|i cannot help|i can't help|as an ai|i (?:cannot|can't) provide|"
    r"i'm not able|i am not able|i'm unable|i am unable)\b", re.I)

#: the folder of the question cache, under the cache directory (``history.delete_all_history`` empties it)
QUESTIONS_DIR = "questions"

#: how an answer was read
YES, NO, IDK, EMPTY, OTHER = "yes", "no", "idk", "empty", "other"


def read_answer(text: str) -> str:
    """yes / no / idk ("I don't know", a hedge or a refusal) / empty / other.

    A reply that opens as a non-answer (``evidence.answers.non_answer``, in any
    of its languages) or as RAG-MIA's hedge ("No idea", "No way to tell") is "idk"; else a leading yes or no commits ("No, I don't
    know that" is no); otherwise a hedge or refusal anywhere makes it "idk"; otherwise RAG-MIA's yes/no reader
    decides; an answer that commits to neither is "other".
    """
    t = text.strip()
    if not t or not re.search(r"\w", t):
        return EMPTY
    if non_answer(t) or HEDGE.match(t.lower()):  # before the leading no: "No lo sé", "No idea" are no "no"
        return IDK
    first = re.findall(r"[a-z]+", t.lower())[:1]
    if first and first[0] in ("yes", "no"):
        return YES if first[0] == "yes" else NO
    if _IDK.search(t) or _REFUSAL.search(t):
        return IDK
    yn = parse_yes_no(t)
    if yn is None:
        return OTHER
    return YES if yn else NO


def refusal(text: str) -> bool:
    """Whether a reply only refuses ("I'm sorry, I can't help with that"), which is not "I don't know".

    A refusal that also says it does not know ("I'm sorry, I don't know") is "I don't know".
    """
    return (non_answer(text) == "refusal" or bool(_REFUSAL.search(text))) and not _IDK.search(text)


@dataclass
class Question:
    question: str
    #: "yes" / "no" for yes/no questions, None for broad questions
    expected: str | None
    #: the sentence the question was made from
    source: str

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class QuestionConfig:
    """Which generator writes the questions (see the module docstring)."""

    generator: str = "rules"  # "rules" or "helper"
    helper_base_url: str = ""
    helper_model: str = ""
    #: name of the environment variable that holds the helper's key (the key is never stored)
    helper_api_key_env: str = "RPA_HELPER_API_KEY"
    cache: bool = True

    def identity(self) -> str:
        if self.generator == "rules":
            return RULES_VERSION
        if self.generator == "helper":
            return f"helper:{self.helper_base_url.rstrip('/')}:{self.helper_model}"
        raise ValueError(f"unknown question generator '{self.generator}'; use 'rules' or 'helper'")


# --------------------------------------------------------------------------- rules


def _lower_first(s: str) -> str:
    return s if _PROPER.match(s) else s[:1].lower() + s[1:]


def yes_no_form(statement: str) -> str:
    """A statement as a natural yes/no question: auxiliary inversion, else "Is it true that ...?"."""
    m = _INVERT.match(statement)
    if m and m.group("subj").split()[0].lower() not in _AUX + ("do", "does", "did", "it", "there"):
        return f"{m.group('aux').capitalize()} {_lower_first(m.group('subj'))} {m.group('rest')}?"
    return f"Is it true that {_lower_first(statement)}?"


def false_version(statement: str) -> str | None:
    """A statement made false by one change: an antonym, else a changed number, else a negation."""
    pert = perturb_antonyms(statement, ratio=0.0, min_changes=1, adjectives_only=False)
    if pert.edits:
        return pert.text
    m = _NUMBER.search(statement)
    if m:
        n = int(m.group(0))
        return statement[:m.start()] + str(n * 2 + 3) + statement[m.end():]
    m = _NEGATE.search(statement)
    if m and not re.search(r"\bnot\b|n't\b", statement, re.I):
        return statement[:m.end()] + " not" + statement[m.end():]
    return None


def rule_yes_no_questions(text: str, n: int) -> list[Question]:
    """Up to ``n`` yes/no questions, alternating a true and a false one per sentence.

    True: the sentence turned into a question (expected "yes"). False: the
    sentence with one fact changed (antonym, number or negation), asked the
    same way (expected "no"); a yes-saying target gets half of them right.
    """
    trues, falses = [], []
    for s in statements(text):
        trues.append(Question(yes_no_form(s), YES, s))
        f = false_version(s)
        if f is not None:
            falses.append(Question(yes_no_form(f), NO, s))
    out: list[Question] = []
    for i in range(max(len(trues), len(falses))):
        for group in (trues, falses):
            if i < len(group) and len(out) < n:
                out.append(group[i])
    return out


_BROAD = ("What can you tell me about {p}?", "What should I know about {p}?", "Can you explain {p} to me?",
          "What does {p} mean for a patient?", "How is {p} usually handled?")


def rule_broad_questions(text: str, n: int, phrases_per_question: int = 1, overlap: bool = False) -> list[Question]:
    """Up to ``n`` broad information-seeking questions about the distinct key phrases of the document.

    Each question names ``phrases_per_question`` key phrases (of consecutive
    statements, joined with "and"), fewer for the last when the document runs
    out; with ``overlap`` consecutive questions share all but one phrase.
    """
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    for s in statements(text, min_words=4):
        p = key_phrase(s)
        if p is None or p.lower() in seen:
            continue
        seen.add(p.lower())
        found.append((p, s))
    k = phrases_per_question
    starts = range(max(1, len(found) - k + 1)) if overlap else range(0, len(found), k)
    out: list[Question] = []
    for i in starts:
        group = found[i:i + k]
        if not group:  # a document without key phrases
            break
        topic = " and ".join(_lower_first(p) for p, _ in group)
        out.append(Question(_BROAD[len(out) % len(_BROAD)].format(p=topic), None, " ".join(s for _, s in group)))
        if len(out) >= n:
            break
    return out


# --------------------------------------------------------------------------- helper model

_HELPER_PROMPTS = {
    "yes_no": ("Write {n} natural yes/no questions that someone could answer only after reading the text "
               "below, as an ordinary user of a chatbot would ask them. About half should have the answer "
               "no. One per line, in the form 'yes|question' or 'no|question' (the expected answer first). "
               "No other text.\n\nText:\n{text}"),
    "broad": ("Write {n} broad, natural information-seeking questions that the text below answers, as an "
              "ordinary user of a chatbot would ask them. Do not quote the text. One question per line, "
              "no numbering, no other text.\n\nText:\n{text}"),
}


def helper_target(cfg: QuestionConfig):
    """The configured helper model as a Target (its key read from the named environment variable)."""
    from audit_core.target.openai_compat import OpenAITarget

    key = os.environ.get(cfg.helper_api_key_env) or None
    return OpenAITarget(cfg.helper_base_url, cfg.helper_model, api_key=key)


def helper_questions(text: str, kind: str, n: int, target) -> list[Question]:
    """Questions written by a helper model; lines that do not parse are dropped."""
    from audit_core.target.base import ChatRequest

    req = ChatRequest.chat([{"role": "user", "content": _HELPER_PROMPTS[kind].format(n=n, text=text)}],
                           max_tokens=60 * n, temperature=0.0)
    reply = target.complete(req).text
    out: list[Question] = []
    for line in reply.splitlines():
        line = re.sub(r"^\s*(?:[-*]|\d+[.)])\s*", "", line).strip()
        if not line:
            continue
        if kind == "yes_no":
            m = re.match(r"^(yes|no)\s*\|\s*(.+\?)\s*$", line, re.I)
            if m:
                out.append(Question(m.group(2), m.group(1).lower(), ""))
        elif line.endswith("?"):
            out.append(Question(line, None, ""))
    return out[:n]


# --------------------------------------------------------------------------- cache + entry point


def _cache_file(text: str, kind: str, n: int, cfg: QuestionConfig, root: Path | None, phrases: int = 1) -> Path:
    from audit_core.models import cache_dir

    shape = kind if phrases == 1 else f"{kind}:{phrases}"  # the one-phrase questions keep the keys they had
    key = hashlib.sha256(json.dumps([shape, n, cfg.identity(), text]).encode("utf-8")).hexdigest()[:32]
    return (root or cache_dir() / QUESTIONS_DIR) / f"{key}.json"


def questions_for(text: str, kind: str, n: int, cfg: QuestionConfig | None = None, *,
                  target_name: str | None = None, helper=None, root: Path | None = None,
                  phrases: int = 1) -> list[Question]:
    """The questions of one document (from the cache when asked before).

    ``kind`` is "yes_no" (IA) or "broad" (MEntA). ``helper`` overrides the
    configured helper target (tests); ``target_name`` is the audited
    target's identity, which a helper must not share. ``phrases``: key
    phrases per rule-made broad question (overlapping groups when above 1).
    """
    cfg = cfg or QuestionConfig()
    if kind not in _HELPER_PROMPTS:
        raise ValueError(f"unknown question kind '{kind}'")
    if phrases < 1:
        raise ValueError("a question names at least one key phrase")
    path = _cache_file(text, kind, n, cfg, root, phrases)
    if cfg.cache and path.exists():
        try:
            return [Question(**q) for q in json.loads(path.read_text())["questions"]]
        except (ValueError, KeyError, TypeError):
            pass  # a damaged cache entry is regenerated
    if cfg.generator == "rules":
        qs = (rule_yes_no_questions(text, n) if kind == "yes_no"
              else rule_broad_questions(text, n, phrases, overlap=phrases > 1))
    else:
        helper = helper or helper_target(cfg)
        if target_name is not None and getattr(helper, "name", None) == target_name:
            raise ValueError("the question helper model must not be the audited target itself")
        qs = helper_questions(text, kind, n, helper)
    if cfg.cache:
        from audit_core.io import write_private_atomic

        write_private_atomic(path, json.dumps({"generator": cfg.identity(), "kind": kind,
                                               "questions": [q.to_json() for q in qs]}))
    return qs


def answer_counts(labels: Sequence[str]) -> dict[str, int]:
    return {k: sum(1 for x in labels if x == k) for k in (YES, NO, IDK, EMPTY, OTHER)}
