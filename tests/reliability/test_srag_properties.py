"""Property-based tests (hypothesis) of S-RAG's word/token matcher and histogram features.

The matcher decides which of a target's returned alternatives count as "the
true next word"; the histogram turns those probabilities into the classifier's
features. A mistake in either moves every S-RAG score silently, so their
contracts are checked over generated inputs rather than a few examples.
"""
from __future__ import annotations

import math
import string
import unicodedata

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit_core.methods.srag import (MIN_PARTIAL_TOKEN, histogram_features, normalise_token, normalise_word,
                                     observe_word, token_matches_word)
from audit_core.target.base import Completion, TokenLogprob, Usage

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

LETTERS = string.ascii_letters + "éèàüößçñøåÉÜ"
PUNCT = ".,;:!?\"'()[]-_*…«»"
#: a word as it appears in a document: letters/digits, maybe with punctuation around it
core_words = st.text(alphabet=LETTERS + string.digits, min_size=1, max_size=15)
words = st.tuples(st.text(alphabet=PUNCT, max_size=2), core_words, st.text(alphabet=PUNCT, max_size=3)).map("".join)
#: how tokenizers mark a leading space
space_markers = st.sampled_from(["", " ", "Ġ", "▁"])
punctuation_only = st.text(alphabet=PUNCT + " \t\n", min_size=0, max_size=6)
probabilities = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
bins = st.integers(min_value=5, max_value=20)


def completion(first: str, first_lp: float, alternatives: list[tuple[str, float]]) -> Completion:
    return Completion(text=first, tokens=[TokenLogprob(first, first_lp, alternatives)], usage=Usage(1, 1))


# --------------------------------------------------------------------------- normalisation


@SETTINGS
@given(st.text(max_size=30))
def test_normalise_word_is_idempotent_and_never_raises(w):
    once = normalise_word(w)
    assert normalise_word(once) == once


@SETTINGS
@given(words)
def test_normalised_word_has_no_edge_punctuation_or_case(w):
    n = normalise_word(w)
    assert n == n.lower()
    assert n and n[0].isalnum() and n[-1].isalnum()


# --------------------------------------------------------------------------- the matcher


def test_the_documented_examples():
    assert token_matches_word(" amox", "amoxicillin")
    assert token_matches_word(" amoxicillin", "amoxicillin,")
    assert token_matches_word("ĠAmox", "Amoxicillin,")
    assert not token_matches_word(" ,", "amoxicillin")
    assert not token_matches_word(" amoxicillins", "amoxicillin")
    # a short token starts a long word only when the answer spells it out (observe_word)
    assert not token_matches_word(" a", "amoxicillin") and token_matches_word(" am", "amoxicillin")
    assert token_matches_word(" the", "the") and token_matches_word(" a", "a")
    # the word's opening punctuation is its first token (issue 20, point 1)
    assert token_matches_word(" (", "(Adacel)") and token_matches_word("(", "(Tigan),")
    assert token_matches_word(" (Tiga", "(Tigan),") and token_matches_word(" Tigan", "(Tigan),")
    assert not token_matches_word(" (", "Tigan")


@SETTINGS
@given(words, space_markers, st.data())
def test_every_long_enough_prefix_of_the_word_matches_whatever_its_case_and_space_marker(w, marker, data):
    core = normalise_word(w)
    k = data.draw(st.integers(min_value=min(len(core), MIN_PARTIAL_TOKEN), max_value=len(core)))
    assert token_matches_word(marker + core[:k], w)
    assert token_matches_word(marker + core[:k].upper(), w) or core[:k].upper().lower() != core[:k]


@SETTINGS
@given(words, space_markers, st.sampled_from(list(".,;:!?\"')")))
def test_the_whole_word_matches_with_trailing_punctuation_on_the_token(w, marker, p):
    assert token_matches_word(marker + normalise_word(w) + p, w)


@SETTINGS
@given(words, space_markers, st.data())
def test_a_prefix_shorter_than_the_minimum_matches_only_a_short_word(w, marker, data):
    core = normalise_word(w)
    if len(core) <= MIN_PARTIAL_TOKEN:
        return
    k = data.draw(st.integers(min_value=1, max_value=MIN_PARTIAL_TOKEN - 1))
    assert not token_matches_word(marker + core[:k], w)


@SETTINGS
@given(punctuation_only, words)
def test_a_token_of_only_punctuation_or_space_matches_only_the_words_opening_punctuation(token, w):
    nw = unicodedata.normalize("NFKC", w).strip().lower()
    lead = nw[: len(nw) - len(nw.lstrip(PUNCT + "."))]
    t = unicodedata.normalize("NFKC", token).strip()
    assert token_matches_word(token, w) == bool(t and lead.startswith(t))


@SETTINGS
@given(words, st.data())
def test_a_token_that_departs_from_the_word_does_not_match(w, data):
    core = normalise_word(w)
    k = data.draw(st.integers(min_value=0, max_value=len(core) - 1))
    other = data.draw(st.sampled_from(string.ascii_lowercase + string.digits).filter(lambda c: c != core[k]))
    assert not token_matches_word(" " + core[:k] + other, w)


@SETTINGS
@given(words)
def test_a_token_longer_than_the_word_does_not_match(w):
    core = normalise_word(w)
    assert not token_matches_word(" " + core + "x" + core, w)


# --------------------------------------------------------------------------- observe_word

alternatives = st.lists(st.tuples(st.text(alphabet=LETTERS + " Ġ", min_size=1, max_size=8),
                                  st.floats(min_value=-20.0, max_value=0.0)), max_size=20)


@SETTINGS
@given(words, alternatives, st.floats(min_value=-20.0, max_value=0.0))
def test_observed_probability_is_the_matching_mass_capped_at_one(w, alts, first_lp):
    first = alts[0][0] if alts else "zzz"
    obs = observe_word(w, completion(first, first_lp, alts))
    assert obs.prob is not None and 0.0 <= obs.prob <= 1.0
    assert obs.below_top_k == (obs.prob == 0.0)
    merged = list(alts) if any(t == first for t, _ in alts) else list(alts) + [(first, first_lp)]
    core = normalise_word(w)
    matching = [(normalise_token(t), lp) for t, lp in merged if token_matches_word(t, w)]
    longest = max((len(t) for t, _ in matching if core.startswith(t)), default=0)
    # the longest matching prefix only (and the opening punctuation, absent from these alternatives)
    expected = sum(math.exp(lp) for t, lp in matching if len(t) == longest or not core.startswith(t))
    assert math.isclose(obs.prob, min(1.0, expected), rel_tol=1e-9, abs_tol=1e-12)


@SETTINGS
@given(words, alternatives, st.floats(min_value=-20.0, max_value=0.0))
def test_the_whole_word_among_the_alternatives_is_always_credited(w, alts, lp):
    first = alts[0][0] if alts else "zzz"
    extra = (" " + normalise_word(w), lp)
    after = observe_word(w, completion(first, -1.0 if not alts else alts[0][1], alts + [extra])).prob
    assert after >= min(1.0, math.exp(lp)) - 1e-12


@SETTINGS
@given(words, alternatives)
def test_no_logprobs_is_a_failure_never_a_probability(w, alts):
    obs = observe_word(w, Completion(text="x", tokens=None, usage=Usage()))
    assert obs.prob is None and obs.error and obs.error.startswith("no_logprobs")
    empty = observe_word(w, Completion(text="", tokens=[], usage=Usage()))
    assert empty.prob is None


# --------------------------------------------------------------------------- histogram features


@SETTINGS
@given(st.lists(probabilities, max_size=40), bins)
def test_counts_sum_to_n_and_fractions_to_one(probs, m):
    f = histogram_features(probs, m)
    counts = [f[f"count_{j}"] for j in range(m)]
    fracs = [f[f"frac_{j}"] for j in range(m)]
    assert sum(counts) == len(probs) == f["n_probes"]
    assert all(c >= 0 for c in counts)
    if probs:
        assert math.isclose(sum(fracs), 1.0, rel_tol=1e-9)
        assert all(math.isclose(fr, c / len(probs)) for fr, c in zip(fracs, counts))
        assert math.isclose(f["mean_prob"], sum(probs) / len(probs), rel_tol=1e-9, abs_tol=1e-12)
    else:
        assert sum(fracs) == 0.0 and f["mean_prob"] == 0.0 and f["below_topk_share"] == 0.0
    assert math.isclose(f["below_topk_share"], (sum(p == 0.0 for p in probs) / len(probs)) if probs else 0.0)


@SETTINGS
@given(probabilities, bins)
def test_each_value_falls_in_its_interval(p, m):
    f = histogram_features([p], m)
    j = next(j for j in range(m) if f[f"count_{j}"] == 1)
    if p == 1.0:
        assert j == m - 1  # 1.0 belongs to the last interval, not an extra one
    else:
        assert j / m <= p < (j + 1) / m or math.isclose(p, (j + 1) / m) or math.isclose(p, j / m)


@SETTINGS
@given(bins, st.data())
def test_interval_edges_open_the_upper_interval(m, data):
    """An edge j/m belongs to interval j (intervals are [(j-1)/m, j/m), counted from 0 here)."""
    j = data.draw(st.integers(min_value=0, max_value=m - 1))
    f = histogram_features([j / m], m)
    assert f[f"count_{j}"] == 1


@SETTINGS
@given(st.lists(probabilities, min_size=1, max_size=30), bins, st.randoms())
def test_features_do_not_depend_on_probe_order(probs, m, rnd):
    shuffled = list(probs)
    rnd.shuffle(shuffled)
    a, b = histogram_features(probs, m), histogram_features(shuffled, m)
    assert set(a) == set(b)
    for k in a:
        assert math.isclose(a[k], b[k], rel_tol=1e-9, abs_tol=1e-12), k


@SETTINGS
@given(bins)
def test_feature_names_are_fixed_for_a_bin_count(m):
    """The classifier's columns must not depend on the data (an empty observation has them all)."""
    assert set(histogram_features([], m)) == set(histogram_features([0.0, 0.5, 1.0], m))
    assert len(histogram_features([], m)) == 2 * m + 3
