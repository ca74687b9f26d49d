"""MBA mask generation: which words of a document to hide, and what counts as a right answer.

Follows Liu et al., "Mask-based Membership Inference Attacks for RAG" (MBA),
Sections 4.3.1-4.3.4 and Algorithms 1-4:

* a *word* is a spaCy token of ``spacy.blank("en")`` (no model download), with
  pieces written together without a space ("well-known", "500mg", "x-ray")
  kept as one word, as the paper's Algorithm 2 joins them;
* a word the proxy model's tokenizer cuts into several tokens is *fragmented*
  and is masked as a whole; if it is misspelled (pyspellchecker), its
  correction is used for ranking and both spellings are accepted answers,
  provided the correction is a spelling of the same word and not another
  word (``mba_parse.is_spelling_variant``; Algorithm 1);
* the rank score of a word is the rank of its true token in the proxy model's
  next-token distribution, the largest over its tokens for a fragmented word
  (Algorithm 3);
* the document is cut into M subtexts with the same number of words, and the
  highest-ranked eligible word of each is masked; stop words (spaCy's list),
  punctuation and the neighbours of an already chosen mask are never eligible
  (Algorithm 4).

A word is never masked where the request shows another occurrence of it
(session 51): ranked against the original text, a rare word scores high at its
first occurrence and low where the proxy could copy it, so the first was masked
and a later one stayed in the fill-in prompt (17% of masks on genmedgpt5k). The
paper's sequential conditioning avoids part of that (a masked first occurrence
makes a later one hard again), not all of it (a subtext masks one word only).
A "continue" request shows only the text before its mask, so there only an
earlier occurrence rules a word out.

Deviation from Algorithm 4, for cost: the paper conditions subtext i on the
*masked* earlier subtexts, which needs M sequential passes. Here every word is
conditioned on the original preceding text, so all ranks of a document come
from one forward pass (or, for a document longer than ``max_pass_tokens``, one
batched call over its M subtexts, each with its preceding text as context).
"""
from __future__ import annotations

import bisect
import functools
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

from audit_core.models import DEFAULT_PROXY_MODEL, LocalLM, load_causal_lm
from audit_core.scoring import encode_text, score_texts
from audit_core.methods.mba_parse import is_spelling_variant

#: characters that join two word pieces written without spaces ("well-known", "and/or")
_CONNECTORS = frozenset({"-", "/", "\u2010", "\u2011", "\u2013"})


#: how MBA asks the target for the hidden words (MbaConfig.elicitation)
ELICITATIONS = ("fill_in", "continue")


@dataclass(frozen=True)
class MbaConfig:
    """MBA's parameters, with the paper's defaults where it has one."""

    #: proxy language model for rank scores. The paper uses GPT-2 XL (1.6B);
    #: the project ships a small local model so audits run on a laptop CPU.
    proxy_model: str = DEFAULT_PROXY_MODEL
    #: M, masks per document. The paper tries {5, 10, 15, 20}; 10 is the
    #: project-wide default (DESIGN.md). Allowed: 5-20.
    n_masks: int = 10
    #: gamma: a document is a member when more than gamma * M masks are right.
    #: The paper finds 0.5-0.7 stable and recommends about 0.5. Used only when
    #: the shadow lacks a class; otherwise the threshold is fitted on the shadow.
    gamma: float = 0.5
    #: fewest masks a document must yield to be probed at all (a shorter one is
    #: inconclusive). 5 is the smallest M the paper evaluates.
    min_masks: int = 5
    #: edit distance of pyspellchecker. The paper uses a contextual seq2seq
    #: corrector; a context-free dictionary at distance 2 "corrects" rare
    #: medical terms into common words (tracheoscopy -> tracheostomy), so we
    #: keep to distance 1, which covers single typos and transpositions.
    spell_distance: int = 1
    #: documents up to this many proxy tokens are ranked in one forward pass;
    #: longer ones per subtext, each with up to this many tokens of context.
    max_pass_tokens: int = 2048
    #: documents longer than this (proxy tokens) are not masked: no RAG
    #: target would retrieve or read them whole.
    max_doc_tokens: int = 16384
    #: completion budget: tokens per mask plus a fixed allowance (the answer
    #: lines are "[Mask_i]: word", about 6-8 tokens each).
    answer_tokens_per_mask: int = 8
    answer_tokens_extra: int = 32
    #: sequences per forward pass when ranking
    batch_size: int = 4
    #: how the target is asked for the hidden words. "fill_in" (the paper):
    #: one request with the masked text and M blanks. "continue" (our
    #: addition): one short request per mask with the document up to the
    #: hidden word, read as the first word the target continues with. Small
    #: completion-style targets (the reference and demo targets) cannot follow
    #: a cloze instruction, they copy the masked text back (BENCHMARKS.md,
    #: "MBA with small target models"), but they do continue text they have
    #: retrieved; "continue" costs M requests per document instead of one.
    elicitation: str = "fill_in"
    #: completion budget per "continue" request: enough for one word
    continue_tokens: int = 6

    def __post_init__(self) -> None:
        if not 5 <= self.n_masks <= 20:
            raise ValueError("n_masks (M) must be between 5 and 20, as in the paper")
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError("gamma must be in (0, 1]")
        if not 1 <= self.min_masks <= self.n_masks:
            raise ValueError("min_masks must be between 1 and n_masks")
        if self.elicitation not in ELICITATIONS:
            raise ValueError(f"unknown MBA elicitation '{self.elicitation}'; choose one of {', '.join(ELICITATIONS)}")
        if self.spell_distance not in (1, 2):
            raise ValueError("spell_distance must be 1 or 2")
        if self.max_pass_tokens < 64 or self.max_doc_tokens < self.max_pass_tokens:
            raise ValueError("need 64 <= max_pass_tokens <= max_doc_tokens")

    @property
    def max_answer_tokens(self) -> int:
        return self.answer_tokens_per_mask * self.n_masks + self.answer_tokens_extra


# --------------------------------------------------------------------------- words


@dataclass
class Unit:
    """One word (or punctuation run) of a document, with its character span."""

    text: str
    start: int
    end: int
    is_word: bool  # has a letter or digit; punctuation runs are not words
    maskable: bool  # a word that is not a stop word (lexical test only)


@dataclass
class RankedUnit(Unit):
    """A unit with what the proxy model made of it."""

    n_tokens: int = 0  # proxy tokens overlapping the word; > 1 means fragmented
    correction: str | None = None  # spelling correction of a misspelled fragmented word
    rank: int | None = None  # largest rank of its tokens; None when unscored

    @property
    def fragmented(self) -> bool:
        return self.n_tokens > 1

    @property
    def eligible(self) -> bool:
        return self.maskable and self.rank is not None


@functools.lru_cache(maxsize=1)
def _nlp():
    import spacy

    return spacy.blank("en")


def stop_words() -> frozenset[str]:
    """The paper's stop words: spaCy's English list."""
    return frozenset(_nlp().Defaults.stop_words)


@functools.lru_cache(maxsize=2)
def _spellchecker(distance: int):
    from spellchecker import SpellChecker

    return SpellChecker(distance=distance)


def split_units(text: str) -> list[Unit]:
    """Words and punctuation of ``text`` (spaCy tokens, pieces written together joined)."""
    toks = [t for t in _nlp()(text) if not t.is_space]
    stops = stop_words()

    def touching(a, b) -> bool:
        return a.idx + len(a.text) == b.idx

    def alnum_end(t) -> bool:
        return t.text[-1].isalnum()

    def alnum_start(t) -> bool:
        return t.text[0].isalnum()

    units: list[Unit] = []
    i = 0
    while i < len(toks):
        group = [toks[i]]
        j = i + 1
        while j < len(toks) and touching(toks[j - 1], toks[j]) and alnum_end(toks[j - 1]):
            nxt = toks[j]
            if alnum_start(nxt):
                group.append(nxt)
                j += 1
            elif (nxt.text in _CONNECTORS and j + 1 < len(toks)
                  and touching(nxt, toks[j + 1]) and alnum_start(toks[j + 1])):
                group.extend([nxt, toks[j + 1]])
                j += 2
            else:
                break
        start, end = group[0].idx, group[-1].idx + len(group[-1].text)
        word = text[start:end]
        is_word = any(c.isalnum() for c in word)
        all_stop = all(t.is_punct or t.lower_ in stops or t.is_stop for t in group)
        # a word right before a colon ("Doctor:") would put "[Mask_k]:" inside the
        # text, which reads like an answer line: such words are not masked
        before_colon = text[end:end + 1] == ":"
        maskable = is_word and not all_stop and word.lower() not in stops and not before_colon
        units.append(Unit(word, start, end, is_word, maskable))
        i = j
    return units


def _correct(word: str, distance: int) -> str | None:
    """pyspellchecker's correction of a misspelled word, in the word's case; None if it is fine."""
    if not word.isalpha():
        return None
    low = word.lower()
    spell = _spellchecker(distance)
    if not spell.unknown([low]):
        return None
    fix = spell.correction(low)
    if not fix or fix == low or not is_spelling_variant(word, fix):
        return None  # no correction, or the nearest entry is another word ("Tigan" / "Titan")
    if word.isupper():
        return fix.upper()
    if word[0].isupper():
        return fix[0].upper() + fix[1:]
    return fix


# --------------------------------------------------------------------------- the plan


@dataclass
class MaskAnswer:
    """The ground truth of one mask."""

    index: int  # k of [Mask_k], 1-based, in text order
    word: str  # the word as written in the document
    accepted: list[str]  # every spelling counted right (the word, and its correction)
    start: int  # character span of the word in the document
    end: int
    rank: int  # the proxy model's rank score
    fragmented: bool
    correction: str | None = None


@dataclass
class MaskPlan:
    """A masked document: the probe's question and its answer key."""

    masked_text: str
    answers: list[MaskAnswer]
    requested: int  # M
    reason: str | None = None  # why fewer than M masks, None when there are M
    proxy_model: str = ""

    @property
    def n_masks(self) -> int:
        return len(self.answers)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "MaskPlan":
        d = dict(d)
        d["answers"] = [MaskAnswer(**a) for a in d.get("answers", [])]
        return cls(**d)


def mask_label(k: int) -> str:
    return f"[Mask_{k}]"


def _split_even(n: int, parts: int) -> list[range]:
    """``parts`` consecutive ranges covering 0..n-1, sizes differing by at most one."""
    base, extra = divmod(n, parts)
    out, s = [], 0
    for p in range(parts):
        size = base + (1 if p < extra else 0)
        out.append(range(s, s + size))
        s += size
    return out


def word_form(word: str) -> str:
    """What two words share when one gives the other away: lower case, without a possessive or plural s."""
    w = word.lower().replace("\u2019", "'")
    w = w[:-2] if w.endswith("'s") else w
    return w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w


def choose_masks(units: Sequence[RankedUnit], n_masks: int, shown: str = "all") -> tuple[list[int], str | None]:
    """Indices (into ``units``) of the words to mask, in text order, and why fewer than M.

    One mask per subtext of equal word count: its eligible word with the
    largest rank score (the earliest on ties), never beside a chosen mask, and
    never a word whose other occurrence the request shows (``word_form``): any
    reader of the prompt could fill it in. ``shown`` is what a request shows
    around a mask: "all" (the fill-in request sends the whole masked document:
    any other occurrence) or "before" (a "continue" request sends the text
    before the mask: an earlier occurrence only).
    A subtext with no eligible word leaves its mask to the best remaining
    word elsewhere, so a document gets M masks whenever it has M eligible,
    pairwise non-adjacent words.
    """
    words = [i for i, u in enumerate(units) if u.is_word]
    chosen: set[int] = set()  # positions in ``words``
    # a word the document repeats stays readable at its other occurrences: the target could fill it in
    # from the prompt alone, member or not (17% of masks on genmedgpt5k, 27% on MedQuAD before session 51)
    if shown not in ("all", "before"):
        raise ValueError(f"shown must be 'all' or 'before', not {shown!r}")
    forms = Counter(word_form(units[i].text) for i in words)
    first_at: dict[str, int] = {}  # form -> index (into ``units``) of its first occurrence
    for i in words:
        first_at.setdefault(word_form(units[i].text), i)

    def given_away(i: int) -> bool:
        u = units[i]
        spellings = [word_form(u.text)] + ([word_form(u.correction)] if u.correction else [])
        if shown == "before":
            return any(first_at.get(f, i) < i for f in spellings)
        return forms[spellings[0]] > 1 or any(forms[f] > 0 for f in spellings[1:])

    def free(w: int) -> bool:
        return (units[words[w]].eligible and not given_away(words[w]) and w not in chosen and w - 1 not in chosen
                and w + 1 not in chosen)

    def best(cands: Sequence[int]) -> int | None:
        cands = [w for w in cands if free(w)]
        return max(cands, key=lambda w: (units[words[w]].rank, -w)) if cands else None

    for chunk in _split_even(len(words), n_masks):
        w = best(chunk)
        if w is not None:
            chosen.add(w)
    while len(chosen) < n_masks:
        w = best(range(len(words)))
        if w is None:
            break
        chosen.add(w)
    reason = None
    if len(chosen) < n_masks:
        n_eligible = sum(1 for i in words if units[i].eligible and not given_away(i))
        reason = (
            f"the document allows only {len(chosen)} of {n_masks} masks: it has {len(words)} words, "
            f"{n_eligible} of them maskable (not stop words, not shown elsewhere in the request), and no two masks may be adjacent; "
            f"M masks need at least M maskable words with a word between any two "
            f"(at least {2 * n_masks - 1} words)"
        )
    return sorted(words[w] for w in chosen), reason


def build_plan(text: str, units: Sequence[RankedUnit], chosen: Sequence[int], requested: int,
               reason: str | None, proxy_model: str) -> MaskPlan:
    """Replace the chosen words by numbered labels and record the answer key."""
    pieces: list[str] = []
    answers: list[MaskAnswer] = []
    pos = 0
    for k, i in enumerate(sorted(chosen), start=1):
        u = units[i]
        pieces.append(text[pos:u.start])
        pieces.append(mask_label(k))
        pos = u.end
        accepted = [u.text] + ([u.correction] if u.correction else [])
        answers.append(MaskAnswer(k, u.text, accepted, u.start, u.end, int(u.rank), u.fragmented, u.correction))
    pieces.append(text[pos:])
    return MaskPlan("".join(pieces), answers, requested, reason, proxy_model)


# --------------------------------------------------------------------------- ranking


@dataclass
class _Prepared:
    text: str
    units: list[RankedUnit]
    rtext: str = ""  # the ranking text: the document with corrections substituted
    rspans: list[tuple[int, int]] = field(default_factory=list)  # unit spans in rtext
    segments: list[tuple[int, int, int]] = field(default_factory=list)  # (context start, start, end)
    too_long: str | None = None


class _Spans:
    """Token spans sorted by position, for fast 'which tokens overlap this word' queries."""

    def __init__(self, spans: Sequence[tuple[int, int]]):
        self.starts = [s for s, _ in spans]
        self.ends = [e for _, e in spans]

    def overlapping(self, start: int, end: int) -> range:
        # tokens are contiguous and ordered, so both starts and ends are sorted
        return range(bisect.bisect_right(self.ends, start), bisect.bisect_left(self.starts, end))


class MaskGenerator:
    """Builds MaskPlans with a proxy language model (loaded on first use)."""

    def __init__(self, config: MbaConfig | None = None, lm: LocalLM | None = None):
        self.config = config or MbaConfig()
        self._lm = lm

    @property
    def lm(self) -> LocalLM:
        if self._lm is None:
            self._lm = load_causal_lm(self.config.proxy_model)
        return self._lm

    def plan(self, text: str) -> MaskPlan:
        return self.plan_many([text])[0]

    def plan_many(self, texts: Sequence[str], progress: Callable[[int, int], None] | None = None) -> list[MaskPlan]:
        """Mask several documents; all their ranking passes share batched forward calls.

        ``progress(done, total)``: documents planned, 0 before the proxy model is touched (it loads on first
        use), then after each forward batch (``rank_units``)."""
        plans = []
        for text, ranked in zip(texts, self.rank_units(texts, progress)):
            if isinstance(ranked, str):
                plans.append(MaskPlan(text, [], self.config.n_masks, ranked, self.lm.name))
            else:
                # a "continue" request shows the text before a mask, a fill-in request the whole masked text
                shown = "before" if self.config.elicitation == "continue" else "all"
                chosen, reason = choose_masks(ranked, self.config.n_masks, shown)
                plans.append(build_plan(text, ranked, chosen, self.config.n_masks, reason, self.lm.name))
        return plans

    def rank_units(self, texts: Sequence[str], progress: Callable[[int, int], None] | None = None,
                   ) -> list[list[RankedUnit] | str]:
        """Every unit of every text with its rank score; a reason string for a text too long.

        ``progress(done, total)``: texts whose every segment is ranked, reported before anything else
        (the proxy model loads on first use: minutes the first time) and after each forward batch."""
        n = len(texts)
        if progress is not None:
            progress(0, n)
        preps = [self._prepare(t) for t in texts]
        jobs: list[tuple[int, int, int, int]] = []  # (doc, context start, start, end)
        for d, p in enumerate(preps):
            if p.too_long is None:
                jobs.extend((d, c, s, e) for c, s, e in p.segments)
        # similar lengths in one batch waste less padding
        order = sorted(range(len(jobs)), key=lambda j: jobs[j][3] - jobs[j][1])
        pending = Counter(d for d, _, _, _ in jobs)  # segments of each text still to rank
        done = n - len(pending)
        scored = []
        bs = self.config.batch_size
        # one score_texts call per forward batch, the very batches of a single call, so that the ranks
        # are the same and the documents done can be counted as they are
        for b in range(0, len(order), bs):
            batch = order[b:b + bs]
            scored += score_texts(self.lm, [preps[jobs[j][0]].rtext[jobs[j][2]:jobs[j][3]] for j in batch],
                                  [preps[jobs[j][0]].rtext[jobs[j][1]:jobs[j][2]] for j in batch],
                                  batch_size=bs, ranks=True)
            for j in batch:
                pending[jobs[j][0]] -= 1
                done += pending[jobs[j][0]] == 0
            if progress is not None:
                progress(done, n)
        if progress is not None and not jobs:
            progress(n, n)
        per_doc: dict[int, list[tuple[int, int, int]]] = {}  # doc -> (start, end, rank) of tokens
        for j, ts in zip(order, scored):
            d, _, s, _ = jobs[j]
            per_doc.setdefault(d, []).extend(
                (t.start + s, t.end + s, t.rank) for t in ts.tokens if t.rank is not None
            )
        out: list[list[RankedUnit] | str] = []
        for d, p in enumerate(preps):
            if p.too_long is not None:
                out.append(p.too_long)
                continue
            toks = sorted(per_doc.get(d, []))
            spans = _Spans([(s, e) for s, e, _ in toks])
            for u, (rs, re_) in zip(p.units, p.rspans):
                ranks = [toks[t][2] for t in spans.overlapping(rs, re_)]
                u.rank = max(ranks) if ranks else None
            # As in Algorithm 4 (which ranks d_{j+1} given d_1..d_j), the first
            # word is never ranked: with nothing before it, its rank measures
            # how documents start, not how hard the word is in context.
            first = next((u for u in p.units if u.is_word), None)
            if first is not None:
                first.rank = None
            out.append(p.units)
        return out

    def _prepare(self, text: str) -> _Prepared:
        """Units, fragmentation, spelling corrections and the segments to score, for one text."""
        cfg = self.config
        units = [RankedUnit(**asdict(u)) for u in split_units(text)]
        prep = _Prepared(text, units)
        _, offs = encode_text(self.lm, text)
        if len(offs) > cfg.max_doc_tokens:
            prep.too_long = (f"the document has {len(offs)} proxy tokens, more than the "
                             f"{cfg.max_doc_tokens} that MBA masks (max_doc_tokens)")
            return prep
        spans = _Spans(offs)
        pieces, pos, rlen = [], 0, 0
        for u in units:
            u.n_tokens = len(spans.overlapping(u.start, u.end))
            if u.maskable and u.fragmented:
                u.correction = _correct(u.text, cfg.spell_distance)
            written = u.correction or u.text
            gap = text[pos:u.start]
            pieces.extend([gap, written])
            rlen += len(gap)
            prep.rspans.append((rlen, rlen + len(written)))
            rlen += len(written)
            pos = u.end
        pieces.append(text[pos:])
        prep.rtext = "".join(pieces)
        _, roffs = encode_text(self.lm, prep.rtext)
        if len(roffs) <= cfg.max_pass_tokens:
            prep.segments = [(0, 0, len(prep.rtext))]
            return prep
        # a long document: its M subtexts (cut at word ends, so each starts with
        # its own whitespace) with the preceding text, up to max_pass_tokens, as context
        words = [k for k, u in enumerate(units) if u.is_word]
        cuts = [0]
        for chunk in _split_even(len(words), cfg.n_masks)[1:]:
            if len(chunk):
                cuts.append(prep.rspans[words[chunk.start] - 1][1] if words[chunk.start] > 0 else 0)
        cuts = sorted(set(cuts)) + [len(prep.rtext)]
        for s, e in zip(cuts, cuts[1:]):
            first_tok = next((t for t, (a, _) in enumerate(roffs) if a >= s), len(roffs))
            ctx_tok = max(0, first_tok - cfg.max_pass_tokens)
            c = roffs[ctx_tok][0] if ctx_tok < len(roffs) and first_tok > 0 else s
            prep.segments.append((min(c, s), s, e))
        return prep


def unmask(plan: MaskPlan) -> str:
    """The original text back from a plan (the inverse of masking; used by tests and evidence)."""
    out = plan.masked_text
    for a in plan.answers:
        out = out.replace(mask_label(a.index), a.word, 1)
    return out
