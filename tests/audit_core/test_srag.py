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
     (" pen", "amoxicillin", False), ("\n", "pain", False), (" pain", "pain.", True), ("▁pain", "pain", True),
     # only a token that can start the word under a real tokenization
     (" a", "amoxicillin", False), (" am", "amoxicillin", True), (" the", "the", True), (" ther", "therapy", True),
     # the word's opening punctuation is normalised like the token (issue 20, point 1)
     (" (", "(Adacel)", True), ("(", "(Tigan),", True), (" (Adac", "(Adacel)", True), (" (A", "(Adacel)", False), (" (", "Adacel", False),
     (" Adacel", "(Adacel)", True), (" [", "(Adacel)", False)],
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


def _answer(pieces: list[tuple[str, list[tuple[str, float]]]]) -> Completion:
    """A multi-token answer: (token, alternatives) per position, the token first among its alternatives."""
    toks = [TokenLogprob(t, alts[0][1] if alts else math.log(0.9), alts or [(t, math.log(0.9))]) for t, alts in pieces]
    return Completion(text="".join(t for t, _ in pieces), tokens=toks, usage=Usage(10, len(toks)))


PREFIX = "My doctor suggested ibuprofen and gentle stretching, but the pain now spreads into my"


def test_a_restating_answer_is_read_where_it_reaches_the_probed_word():
    # a chat model repeats the end of the prefix, then goes on: the reading is at " left", not at "The"
    pieces = [("Sure", []), ("!", []), (" The", []), (" pain", []), (" now", []), (" spreads", []),
              (" into", []), (" my", []), (" left", [(" left", math.log(0.6)), (" lower", math.log(0.3))]),
              (" thigh", [])]
    toks = [t for t, _ in pieces]
    assert srag.align_answer(PREFIX, toks) == ("restated", 8)
    o = srag.observe_word("left", _answer(pieces), PREFIX)
    assert o.aligned == "restated" and o.position == 8 and o.prob == pytest.approx(0.6)
    # read at the first token instead, the same answer would say probability 0
    assert srag.observe_word("left", _answer(pieces)).prob == 0.0


def test_an_answer_that_continues_at_once_is_read_at_its_first_token():
    pieces = [(" left", [(" left", math.log(0.7)), (" right", math.log(0.2))]), (" thigh", []), (" and", [])]
    assert srag.align_answer(PREFIX, [t for t, _ in pieces]) == ("first", 0)
    assert srag.observe_word("left", _answer(pieces), PREFIX).prob == pytest.approx(0.7)


def test_an_answer_that_never_reaches_the_word_is_not_aligned_not_probability_zero():
    # it restates from the start of the paragraph and stops before the prefix ends
    pieces = [(" My", []), (" doctor", []), (" suggested", []), (" ibuprofen", []), (" and", [])]
    o = srag.observe_word("left", _answer(pieces), PREFIX)
    assert o.prob is None and o.aligned == "not_aligned" and o.error.startswith("not_aligned")
    # and one that ends right where the word should come has no reading either
    ends = [(" spreads", []), (" into", []), (" my", [])]
    assert srag.observe_word("left", _answer(ends), PREFIX).aligned == "not_aligned"


def test_a_short_token_counts_only_when_the_answer_spells_the_word_from_it():
    alts = [(" A", math.log(0.5)), (" An", math.log(0.2))]
    spelled = [(" A", alts), ("dacel", []), (" booster", [])]
    assert srag.observe_word("Adacel", _answer(spelled)).prob == pytest.approx(0.5)
    other = [(" A", alts), ("dvil", []), (" tablets", [])]
    o = srag.observe_word("Adacel", _answer(other))
    assert o.prob == 0.0 and o.below_top_k


def test_a_parenthesis_first_token_reads_the_word_probability():
    c = _completion(" (", [(" (", math.log(0.4)), (" and", math.log(0.3))])
    assert srag.observe_word("(Tigan),", c).prob == pytest.approx(0.4)


def _chat_obs(answers: list[list[tuple[str, list]]]):
    from audit_core.methods.base import Observation

    obs = Observation("srag", "d1", data={"probes": [{"word": "left", "word_index": 20, "prefix": PREFIX,
                                                     "proxy_prob": 0.01}] * len(answers)})
    for a in answers:
        obs.add({}, _answer(a))
    return obs


def test_too_many_unaligned_probes_make_the_document_inconclusive_with_that_reason():
    method = srag.SragMethod(srag.SragConfig(style="chat"))
    reached = [(" left", [(" left", math.log(0.8))])]
    stuck = [(" My", []), (" doctor", []), (" suggested", [])]
    feats, reason, words = method.features(_chat_obs([reached, stuck, stuck, stuck]))
    assert feats is None and reason.startswith("not aligned: in 3 of 4 probes")
    feats, reason, _ = method.features(_chat_obs([reached, reached, reached, stuck]))
    assert reason is None and feats["n_probes"] == 3 and feats["unaligned_share"] == pytest.approx(0.25)


def test_chat_style_asks_for_enough_tokens_and_the_cap_bounds_top_logprobs():
    probes = [srag.Probe("left", 20, PREFIX, 0.01)]
    chat = srag.SragMethod(srag.SragConfig(style="chat", top_logprobs=5))
    (req,) = chat.build_requests(probes, top_logprobs=20)
    # enough tokens to restate the whole prefix and reach the word, within the cap
    assert len(PREFIX.split()) < req.max_tokens <= chat.config.chat_max_tokens and req.top_logprobs == 5
    (req,) = srag.SragMethod().build_requests(probes, top_logprobs=8)
    assert req.max_tokens == 1 and req.top_logprobs == 8


def test_only_the_longest_matching_prefix_is_credited():
    c = _completion(" the", [(" the", math.log(0.5)), (" therapy", math.log(0.2)), (" Therapy", math.log(0.1))])
    assert srag.observe_word("therapy", c).prob == pytest.approx(0.3)  # not " the"
    c = _completion(" am", [(" am", math.log(0.4)), (" a", math.log(0.3))])
    assert srag.observe_word("amoxicillin", c).prob == pytest.approx(0.4)  # " am" is the real first token


#: a document whose probe prefix is longer than chat style's tail: 14 opening words, then PREFIX's 14
OPENING = "Last winter I slipped on the ice outside our bakery and landed hard on my lower back."
LONG_PREFIX = OPENING + " " + PREFIX


def _long_chat_obs(answers: list[str], method: srag.SragMethod):
    """One probe per answer, each answer a list of words read as tokens (the word 'left' with p = 0.7)."""
    from audit_core.methods.base import Observation

    obs = Observation("srag", "d1", data={"probes": [{"word": "left", "word_index": 28, "prefix": LONG_PREFIX,
                                                     "proxy_prob": 0.01}] * len(answers)})
    for text in answers:
        pieces = [(" " + w, [(" " + w, math.log(0.7))] if w == "left" else []) for w in text.split()]
        obs.add({}, _answer(pieces))
    return obs


def test_chat_probes_send_only_the_end_of_a_long_prefix_and_read_the_word_after_it():
    probes = [srag.Probe("left", 28, LONG_PREFIX, 0.01)]
    chat = srag.SragMethod(srag.SragConfig(style="chat", chat_tail_words=14))
    (req,) = chat.build_requests(probes)
    sent = req.messages[-1][1]
    assert sent.endswith(PREFIX) and "bakery" not in sent  # the opening stays home
    assert req.max_tokens == math.ceil(1.5 * 14) + 8  # a budget for restating the tail, not the whole prefix
    # the whole prefix in completion style, and with the tail turned off
    for cfg in (srag.SragConfig(), srag.SragConfig(style="chat", chat_tail_words=None)):
        (req,) = srag.SragMethod(cfg).build_requests(probes)
        assert req.messages[-1][1].endswith(LONG_PREFIX)
    # the answer restates the tail and goes on: read where it reaches the word
    (w,) = chat.word_observations(_long_chat_obs([PREFIX + " left thigh"], chat))
    assert w.aligned == "restated" and w.prob == pytest.approx(0.7)
    cost = chat.query_cost(60)
    assert cost.completion_tokens == cost.queries * (math.ceil(1.5 * 14) + 8)


def test_a_chat_answer_that_reproduces_words_no_probe_sent_shows_in_the_features():
    method = srag.SragMethod(srag.SragConfig(style="chat", chat_tail_words=14))
    # the target restates the paragraph from its start: the opening can only come from its context
    copied = method.features(_long_chat_obs([LONG_PREFIX + " left thigh"] * 2, method))[0]
    # the target restates only what it was sent
    echoed = method.features(_long_chat_obs([PREFIX + " left thigh"] * 2, method))[0]
    # (the echo reproduces one unsent 4-gram: the tail's last words with the probed word itself)
    assert copied["reproduced_share"] > 0.5 and echoed["reproduced_share"] < 0.1
    assert copied["frac_7"] == echoed["frac_7"] == 1.0  # the same readings: only the reproduction differs
    # an answer that reproduces the opening alone counts, unless other audited documents share it
    opening_only = [OPENING + " It hurts.", PREFIX + " right thigh"]
    assert method.features(_long_chat_obs(opening_only, method))[0]["reproduced_share"] > 0.5
    method.use_collection([LONG_PREFIX, OPENING + " Since then I cannot sit for long."])
    assert method.features(_long_chat_obs(opening_only, method))[0]["reproduced_share"] == 0.0
    # and the verdict's evidence carries it beside the histogram
    from audit_core.methods.base import Calibration

    cal = Calibration("srag", 0.5, shadow_auc=0.9, model=_FixedPredictor(0.8), params={"feature_columns": list(copied)})
    res = method.score(_long_chat_obs([LONG_PREFIX + " left thigh"] * 2, method), cal)
    assert res.evidence["reproduced_share"] == pytest.approx(copied["reproduced_share"])
    # completion style has no such feature (its one-token answers reproduce nothing)
    plain = srag.SragMethod(srag.SragConfig())
    assert "reproduced_share" not in plain.features(_long_chat_obs(["left"] * 2, plain))[0]


def test_the_shadow_is_scored_with_its_own_stock_phrases_and_the_audits_are_kept():
    method = srag.SragMethod(srag.SragConfig(style="chat", chat_tail_words=14))
    method.use_collection(["an owner's sentence that two documents share", "an owner's sentence that two documents share too"])
    owners = method._shared
    shadow = [_long_chat_obs(["x"], method), _long_chat_obs(["y"], method)]
    shadow[1].data["probes"] = [{**shadow[1].data["probes"][0], "prefix": OPENING + " Then my knee gave way and"}]
    with method._shadow_collection(shadow[:1], shadow[1:]):
        inside = method._shared
    assert ("sentence", "that", "two", "documents") in owners
    assert ("last", "winter", "i", "slipped") in inside and ("sentence", "that", "two", "documents") not in inside
    assert method._shared == owners


# --------------------------------------------------------------------------- the scorer the shadow chooses


def test_the_scorer_is_the_one_asked_for_or_the_better_on_the_shadow():
    assert srag.choose_scorer("auto", {"autogluon": 0.94, "mean_probability": 0.96}) == "mean_probability"
    assert srag.choose_scorer("auto", {"autogluon": 0.96, "mean_probability": 0.94}) == "autogluon"
    assert srag.choose_scorer("auto", {"autogluon": 0.95, "mean_probability": 0.95}) == "autogluon"  # the paper's
    assert srag.choose_scorer("auto", {"autogluon": 0.7}) == "autogluon"  # no mean probability to compare
    assert srag.choose_scorer("autogluon", {"autogluon": 0.5, "mean_probability": 0.99}) == "autogluon"
    with pytest.raises(ValueError, match="scorer"):
        srag.SragConfig(scorer="median")


def _scorer_shadow(monkeypatch, classifier_separates: bool):
    """60 shadow observations whose mean probability separates the classes well, and a stand-in classifier
    that reads a second, noisier feature (or, with ``classifier_separates``, the label itself)."""
    import numpy as np
    import pandas as pd

    from audit_core.methods.base import Observation

    rng = np.random.default_rng(3)
    obs = []
    for i in range(60):
        member = i < 30
        obs.append(Observation("srag", f"s{i}", data={"f": {
            "mean_prob": float(np.clip(rng.normal(0.6 if member else 0.3, 0.12), 0, 1)),
            "noisy": float(rng.normal(0.3 * member, 1.0)) + (5.0 * member if classifier_separates else 0.0)}}))

    class Stand:
        def __init__(self, df):
            self.cut = float(df["noisy"].median())

        def predict_proba(self, X):
            p = 1 / (1 + np.exp(-(X["noisy"].to_numpy() - self.cut)))
            return pd.DataFrame({0: 1 - p, 1: p})

    fits: list[int] = []
    monkeypatch.setattr(srag, "train_predictor", lambda df, cfg: fits.append(len(df)) or Stand(df))
    monkeypatch.setattr(srag, "_best_model_name", lambda p: "stand-in")
    monkeypatch.setattr(srag, "_mean_hist", lambda df, label, bins: [])
    return obs, fits


#: the histogram a scored document's evidence shows (empty here: the stand-ins read other features)
EMPTY_HISTOGRAM = {**{f"count_{j}": 0.0 for j in range(10)}, "below_topk_share": 0.0}


def _fake_features(method, monkeypatch):
    monkeypatch.setattr(method, "features", lambda o: ({**EMPTY_HISTOGRAM, **o.data["f"]}, None, []))


def test_the_shadow_picks_the_mean_probability_where_it_separates_better_and_then_trains_no_classifier(monkeypatch):
    from audit_core.methods.base import Observation

    obs, fits = _scorer_shadow(monkeypatch, classifier_separates=False)
    method = srag.SragMethod()
    _fake_features(method, monkeypatch)
    cal = method.prepare(obs[:30], obs[30:])
    aucs = cal.params["scorer_shadow_auc"]
    assert aucs["mean_probability"] > aucs["autogluon"] and cal.params["scorer"] == "mean_probability"
    assert fits == [48] * 5  # the fold models measured the classifier; no final one is trained
    assert cal.model is None and cal.shadow_auc == pytest.approx(aucs["mean_probability"])
    assert cal.params["oof_scores"] == [o.data["f"]["mean_prob"] for o in obs]
    assert len(cal.params["classifier_oof_scores"]) == 60
    high = Observation("srag", "d", data={"f": {"mean_prob": 0.95, "noisy": -3.0}})
    low = Observation("srag", "e", data={"f": {"mean_prob": 0.02, "noisy": 3.0}})
    res_high, res_low = method.score(high, cal), method.score(low, cal)
    assert res_high.evidence["scorer"] == "mean_probability" and res_high.evidence["raw_score"] == 0.95
    assert res_high.decision is True and res_low.decision is False  # the classifier would have said the opposite
    # asked for the paper's classifier, the same shadow trains and scores with it
    forced = srag.SragMethod(srag.SragConfig(scorer="autogluon"))
    _fake_features(forced, monkeypatch)
    fits.clear()
    cal_ag = forced.prepare(obs[:30], obs[30:])
    assert cal_ag.params["scorer"] == "autogluon" and fits == [48] * 5 + [60] and cal_ag.model is not None
    assert forced.score(low, cal_ag).evidence["raw_score"] > forced.score(high, cal_ag).evidence["raw_score"]
    # asked for the mean alone, nothing is fitted at all
    mean_only = srag.SragMethod(srag.SragConfig(scorer="mean_probability"))
    _fake_features(mean_only, monkeypatch)
    fits.clear()
    assert mean_only.prepare(obs[:30], obs[30:]).params["classifier_oof_scores"] is None and fits == []


def test_the_shadow_keeps_the_classifier_where_it_separates_better(monkeypatch):
    obs, fits = _scorer_shadow(monkeypatch, classifier_separates=True)
    method = srag.SragMethod()
    _fake_features(method, monkeypatch)
    cal = method.prepare(obs[:30], obs[30:])
    assert cal.params["scorer"] == "autogluon" and fits == [48] * 5 + [60] and cal.model is not None
    assert cal.params["oof_scores"] == cal.params["classifier_oof_scores"]


def _saved_before_the_choice(obs, monkeypatch) -> dict:
    """What a cache held before S-RAG chose its scorer: the classifier's calibration, without the choice."""
    from shadow import prepare

    method = srag.SragMethod(srag.SragConfig(scorer="autogluon"))
    _fake_features(method, monkeypatch)
    old = prepare.saved_calibration(method.prepare(obs[:30], obs[30:]), obs[:30], obs[30:])
    for k in ("scorer", "scorer_shadow_auc", "classifier_oof_scores"):
        old["params"].pop(k)
    old["params"]["config"].pop("scorer")
    old.pop("observations_sha256")
    old.pop("reader_revision")
    return old


def test_a_calibration_saved_before_the_choice_is_chosen_again_from_its_data_without_a_fit(tmp_path, monkeypatch):
    """An older cache or shipped file holds the classifier's out-of-fold scores as ``oof_scores`` and no scorer:
    restoring it picks the scorer from that data; only a classifier that wins is trained (once)."""
    import json

    from shadow import prepare

    obs, fits = _scorer_shadow(monkeypatch, classifier_separates=False)
    old = _saved_before_the_choice(obs, monkeypatch)
    auto = srag.SragMethod()
    _fake_features(auto, monkeypatch)
    fits.clear()
    cal = auto.restore(json_roundtrip(old), obs[:30], obs[30:])
    assert cal.params["scorer"] == "mean_probability" and fits == [] and cal.model is None
    assert cal.params["classifier_oof_scores"] == old["params"]["oof_scores"]
    # in a cache, the file is brought up to date on that load (what reads it as data sees the choice) ...
    cache_file = tmp_path / "calibration.json"
    cache_file.write_text(json.dumps({**old, "observations_sha256": prepare.observations_digest(obs[:30], obs[30:]),
                                      "reader_revision": prepare.READER_REVISION}))
    prepare._calibrate(auto, obs[:30], obs[30:], tmp_path)
    assert json.loads(cache_file.read_text())["params"]["scorer"] == "mean_probability" and fits == []
    # ... and left alone on the next
    before = cache_file.stat().st_mtime_ns
    prepare._calibrate(auto, obs[:30], obs[30:], tmp_path)
    assert cache_file.stat().st_mtime_ns == before and fits == []
    # saved with today's choice: read back as it is, with no fit
    fits.clear()
    saved = json_roundtrip(prepare.saved_calibration(cal, obs[:30], obs[30:]))
    saved.pop("observations_sha256")  # as prepare._calibrate hands it over
    saved.pop("reader_revision")
    again = auto.restore(saved, obs[:30], obs[30:])
    assert fits == [] and again.threshold == cal.threshold and again.params["scorer"] == "mean_probability"
    # the same old file where the classifier wins: one fit, the final model
    obs2, fits2 = _scorer_shadow(monkeypatch, classifier_separates=True)
    old2 = _saved_before_the_choice(obs2, monkeypatch)
    fits2.clear()
    auto2 = srag.SragMethod()
    _fake_features(auto2, monkeypatch)
    cal2 = auto2.restore(json_roundtrip(old2), obs2[:30], obs2[30:])
    assert cal2.params["scorer"] == "autogluon" and fits2 == [60] and cal2.model is not None


def json_roundtrip(d: dict) -> dict:
    import json

    return json.loads(json.dumps(d))
