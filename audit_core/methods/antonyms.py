"""A small antonym lexicon of English adjectives and adverbs, for DCMI-style perturbation.

Why a shipped list: DCMI replaces adjectives/adverbs with WordNet antonyms,
but WordNet's data cannot be installed offline from PyPI here (``nltk`` and
``wn`` download their data from other hosts at run time) and no POS tagger
model ships either. The list below is our own, written by hand from common
English usage, weighted toward words that occur in health texts (the
project's corpora). The list is also the part-of-speech filter: a word is
perturbed only when it is in it. Most entries are adjectives or adverbs, but
not all (session 51): prepositions ("before", "above", "inside"), verbs and
participles ("present", "open", "known"), "right" and "daily" make copies no
reader takes for the original. They stay for now because Interrogation makes
its false statements with this list too, and its shipped preparations were
probed with it (BENCHMARKS.md, session 51).

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


def _build() -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in _PAIRS.replace("\n", " ").split(";"):
        words = pair.split()
        if len(words) != 2:
            continue
        a, b = words
        out.setdefault(a, b)
        out.setdefault(b, a)
    return out


#: lower-case word -> its antonym
ANTONYMS: dict[str, str] = _build()


def antonym(word: str) -> str | None:
    """The antonym of ``word`` with its capitalisation (None when the lexicon has none)."""
    ant = ANTONYMS.get(word.lower())
    if ant is None:
        return None
    if word.isupper() and len(word) > 1:
        return ant.upper()
    if word[:1].isupper():
        return ant[:1].upper() + ant[1:]
    return ant
