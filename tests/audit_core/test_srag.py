"""S-RAG units: segmentation, the word/token matcher, observations and features."""
from __future__ import annotations

import math

import pytest

from audit_core import scoring
from audit_core.methods import srag
from audit_core.target.base import Completion, TokenLogprob, Usage

DOC = (
    "I have had a dull ache in my lower back for three weeks, mostly after long drives. "
    "My doctor suggested ibuprofen and gentle stretching, but the pain now spreads into my "
    "left thigh and I sometimes feel tingling in my toes. Should I ask for an MRI scan or "
    "see a physiotherapist first, and is it safe to keep driving to work every day?"
)


def test_segmentation_picks_the_lowest_probability_suffix_words(smollm):
    cfg = srag.SragConfig()
    probes = srag.segment(DOC, cfg, smollm)
    words = scoring.split_words(DOC)
    half = len(words) // 2
    scored = scoring.score_text(smollm, DOC).words()
    probs = {i: math.exp(scored[i].logprob) for i in range(half, len(words))}
    n = max(cfg.min_probes, (len(words) - half) // cfg.segment_factor)
    assert len(probes) == n
    chosen = {p.word_index for p in probes}
    assert all(i >= half for i in chosen)
    # every chosen word is at most as probable as every word left out
    assert max(probs[i] for i in chosen) <= min(probs[i] for i in probs if i not in chosen)
    for p in probes:
        # a probe is the text up to, not including, a whole word
        assert p.word == words[p.word_index][0]
        assert DOC.startswith(p.prefix)
        assert DOC[len(p.prefix):].lstrip().startswith(p.word)
        assert p.prefix == DOC[: words[p.word_index][1]].rstrip()


def test_segment_factor_sets_the_number_of_probes(smollm):
    long_doc = " ".join([DOC] * 3)  # ~ 210 words: suffix of ~105
    few = srag.segment(long_doc, srag.SragConfig(segment_factor=20, min_probes=1), smollm)
    many = srag.segment(long_doc, srag.SragConfig(segment_factor=10, min_probes=1), smollm)
    assert len(many) > len(few) >= 4


def test_too_short_document_gets_no_probes(smollm):
    assert srag.segment("Too short to audit.", srag.SragConfig(), smollm) == []


@pytest.mark.parametrize("fixture", ["smollm", "gemma"])
@pytest.mark.parametrize("word", ["amoxicillin", "Amoxicillin,", "physiotherapist.", "the", "MRI"])
def test_first_token_of_the_word_matches_with_real_tokenizers(request, fixture, word):
    lm = request.getfixturevalue(fixture)
    ids = lm.tokenizer(" " + word.strip(".,"), add_special_tokens=False)["input_ids"]
    first = lm.tokenizer.decode([ids[0]])
    assert srag.token_matches_word(first, word)
    # and a token of another word does not
    other = lm.tokenizer.decode([lm.tokenizer(" bicycle", add_special_tokens=False)["input_ids"][0]])
    assert not srag.token_matches_word(other, word)


@pytest.mark.parametrize(
    "token,word,ok",
    [(" amox", "amoxicillin", True), ("Amox", "amoxicillin", True), ("ĠAmox", "amoxicillin", True),
     (" amoxicillin", "Amoxicillin,", True), (" ", "amoxicillin", False), (",", "amoxicillin", False),
     (" pen", "amoxicillin", False), ("\n", "pain", False), (" pain", "pain.", True), ("▁pain", "pain", True)],
)
def test_matcher_table(token, word, ok):
    assert srag.token_matches_word(token, word) is ok


def _completion(first: str, top: list[tuple[str, float]]) -> Completion:
    return Completion(text=first, tokens=[TokenLogprob(first, top[0][1], top)], usage=Usage(10, 1))


def test_observation_sums_matching_alternatives_and_marks_below_top_k():
    c = _completion(" amox", [(" amox", math.log(0.5)), (" Amox", math.log(0.2)), (" pen", math.log(0.1))])
    o = srag.observe_word("amoxicillin", c)
    assert o.prob == pytest.approx(0.7) and not o.below_top_k
    miss = srag.observe_word("ibuprofen", c)
    assert miss.prob == 0.0 and miss.below_top_k
    none = srag.observe_word("ibuprofen", Completion("x", None, Usage()))
    assert none.prob is None and "no_logprobs" in none.error


def test_histogram_features_follow_equation_4():
    f = srag.histogram_features([0.0, 0.05, 0.1, 0.55, 0.99, 1.0], bins=10)
    counts = [f[f"count_{j}"] for j in range(10)]
    assert counts == [2, 1, 0, 0, 0, 1, 0, 0, 0, 2]
    assert f["frac_0"] == pytest.approx(2 / 6)
    assert f["below_topk_share"] == pytest.approx(1 / 6)
    assert sum(f[f"frac_{j}"] for j in range(10)) == pytest.approx(1.0)


class _FixedPredictor:
    """Stands in for the AutoGluon predictor: always the same member probability."""

    def __init__(self, p: float) -> None:
        self.p = p

    def predict_proba(self, df):
        import pandas as pd

        return pd.DataFrame({0: [1 - self.p] * len(df), 1: [self.p] * len(df)})


def test_srag_abstains_when_its_shadow_showed_no_signal():
    from audit_core.methods.base import Calibration, Observation

    method = srag.SragMethod()
    obs = Observation("srag", "d1", data={"probes": [{"word": "amoxicillin", "word_index": 3, "prefix": "Take",
                                                     "proxy_prob": 0.01}]})
    obs.add({}, _completion(" amox", [(" amox", math.log(0.9))]))
    cols = list(srag.histogram_features([0.9], method.config.bins))
    trusted = Calibration("srag", 0.5, shadow_auc=0.93, model=_FixedPredictor(0.8), params={"feature_columns": cols})
    res = method.score(obs, trusted)
    assert res.score == pytest.approx(0.8) and res.decision is True and res.reason is None
    # a classifier trained on a shadow it could not separate (validation AUC <= 0.5) gives no verdict
    blind = Calibration("srag", 0.5, shadow_auc=0.45, model=_FixedPredictor(0.8), params={"feature_columns": cols})
    res = method.score(obs, blind)
    assert res.score == pytest.approx(0.8) and res.decision is None and res.reason.startswith("no signal")
