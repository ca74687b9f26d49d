"""A small antonym lexicon of English adjectives and adverbs, for DCMI-style perturbation.

Why a shipped list: DCMI replaces adjectives/adverbs with WordNet antonyms,
but WordNet's data cannot be installed offline from PyPI here (``nltk`` and
``wn`` download their data from other hosts at run time) and no POS tagger
model ships either. The list below is our own, written by hand from common
English usage, weighted toward words that occur in health texts (the
project's corpora). The list is also the part-of-speech filter for DCMI: a
word is perturbed only when it is in it.

Most pairs are adjectives or adverbs (with "more", "less", "many" and "few",
quantifiers whose swap keeps a sentence whole). Eight are not, or have an
antonym that is mostly something else in health texts (``_NOT_ADJECTIVE``):
prepositions ("before", "above", "inside"), verbs and participles ("present
with", "to open", "known to"), "right" (a side, a claim) and "daily" (whose
antonym is an adverb). Their swaps make copies no reader takes for the original
("Patients absent with symptoms after the age of 3"), which any model rejects
whether or not it holds the document, so DCMI leaves them alone
(``adjectives_only``, session 53). Interrogation's false statements keep them:
there a swap only has to make a statement false, and "before" -> "after" does.
A few words kept can still be another part of speech ("a cold", "the light").

Pairs are read both ways; a word with several antonyms keeps the first.
"""
from __future__ import annotations

_PAIRS = """
mild severe; acute chronic; high low; higher lower; highest lowest; common rare; commonly rarely;
frequent infrequent; frequently rarely; often seldom; early late; earlier later; sudden gradual;
suddenly gradually; large small; larger smaller; largest smallest; big little; long short;
longer shorter; heavy light; hot cold; warm cool; dry wet; hard soft; fast slow; quickly slowly;
rapid slow; rapidly slowly; strong weak; stronger weaker; good bad; better worse; best worst;
positive negative; normal abnormal; normally abnormally; benign malignant; internal external;
upper lower; inner outer; active inactive; safe unsafe; effective ineffective; healthy unhealthy;
possible impossible; likely unlikely; usually rarely; always never; painful painless; visible invisible;
easy difficult; easily hardly; simple complex; young old; younger older; new old; more less;
most least; many few; full empty; open closed; thick thin; deep shallow; wide narrow; bright dark;
clear unclear; stable unstable; regular irregular; regularly irregularly; necessary unnecessary;
important unimportant; dangerous harmless; serious minor; major minor; primary secondary;
general specific; temporary permanent; temporarily permanently; partial complete; partially completely;
present absent; same different; similar different; inherited acquired; dominant recessive; male female;
true false; correct incorrect; able unable; sufficient insufficient; adequate inadequate;
constant intermittent; persistent transient; increased decreased; increasing decreasing; elevated reduced;
excessive deficient; healthier sicker; happy sad; calm anxious; comfortable uncomfortable;
certain uncertain; known unknown; natural artificial; frequent occasional; daily rarely; worse better;
swollen shrunken; tight loose; dull sharp; fever-free feverish; hungry full; awake asleep; alive dead;
successful unsuccessful; successfully unsuccessfully; completely partially; fully partly;
slightly greatly; mildly severely; severely mildly; significantly slightly; highly slightly;
inside outside; above below; before after; forward backward; right wrong; legal illegal;
treatable untreatable; curable incurable; contagious noncontagious; infectious noninfectious;
painfully painlessly; visibly invisibly; quickly slowly; heavily lightly; deeply shallowly;
harmful harmless; useful useless; helpful unhelpful; responsive unresponsive; conscious unconscious;
symmetric asymmetric; single multiple; unilateral bilateral; local systemic; localized widespread;
mature immature; fertile infertile; pregnant nonpregnant; moist dry; smooth rough; sweet bitter;
loud quiet; fertile sterile; maximum minimum; strongest weakest; rich poor; cheap expensive
"""


#: the pairs of ``_PAIRS`` that are not an adjective or adverb swap (see the module's docstring)
_NOT_ADJECTIVE = frozenset({"present absent", "open closed", "known unknown", "daily rarely", "inside outside",
                            "above below", "before after", "right wrong"})


def _build(adjectives_only: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in _PAIRS.replace("\n", " ").split(";"):
        words = pair.split()
        if len(words) != 2 or (adjectives_only and " ".join(words) in _NOT_ADJECTIVE):
            continue
        a, b = words
        out.setdefault(a, b)
        out.setdefault(b, a)
    return out


#: lower-case word -> its antonym, every pair (Interrogation's false statements)
ANTONYMS: dict[str, str] = _build(adjectives_only=False)
#: the same for adjectives and adverbs only (DCMI's perturbation)
ADJECTIVE_ANTONYMS: dict[str, str] = _build(adjectives_only=True)


def antonym(word: str, adjectives_only: bool = False) -> str | None:
    """The antonym of ``word`` with its capitalisation (None when the lexicon has none)."""
    ant = (ADJECTIVE_ANTONYMS if adjectives_only else ANTONYMS).get(word.lower())
    if ant is None:
        return None
    if word.isupper() and len(word) > 1:
        return ant.upper()
    if word[:1].isupper():
        return ant[:1].upper() + ant[1:]
    return ant
