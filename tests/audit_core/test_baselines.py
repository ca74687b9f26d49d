"""Baselines RAG-MIA, S2MIA-T/M and Min-k% Prob against a scripted target, plus one end-to-end run."""
from __future__ import annotations

import json
import math
from typing import Callable

import pytest

from audit_core.documents import Document
from audit_core.methods.base import Calibration, Observation, no_signal_reason
from audit_core.methods.baseline_common import split_halves
from audit_core.methods.mink import MinKMethod, min_k_mean
from audit_core.methods.rag_mia import RagMiaMethod, p_yes_from_tokens, parse_yes_no, yes_no_mass
from audit_core.methods.s2mia import S2miaModelMethod, S2miaThresholdMethod, bleu1, extract_features
from audit_core.target.base import (ChatRequest, Completion, NoLogprobs, RateLimited, Target,
                                    TokenLogprob, Usage)

Reply = Callable[[ChatRequest], Completion]


class ScriptedTarget(Target):
    """A target whose answers are written by the test; it records every request it gets."""

    name = "scripted"

    def __init__(self, reply: Reply) -> None:
        super().__init__()
        self.reply = reply
        self.seen: list[ChatRequest] = []

    def complete(self, request: ChatRequest) -> Completion:
        self.seen.append(request)
        return self.reply(request)


def completion(text: str, logprobs: list[float] | None = None,
               tops: list[list[tuple[str, float]]] | None = None, tokens: list[str] | None = None) -> Completion:
    """A completion of ``text``; with ``logprobs``, one token per word (or the given tokens)."""
    toks = None
    if logprobs is not None:
        pieces = tokens or [(" " if i else "") + w for i, w in enumerate(text.split())]
        assert len(pieces) == len(logprobs)
        toks = [TokenLogprob(p, lp, (tops[i] if tops else [(p, lp)])) for i, (p, lp) in enumerate(zip(pieces, logprobs))]
    return Completion(text, toks, Usage(10, len(text.split())))


def user_text(req: ChatRequest) -> str:
    return req.messages[-1][1]


SYMPTOMS = ["a dry cough", "knee pain", "blurred vision", "a rash on my arms", "night sweats", "chest tightness",
            "ringing in my ears", "swollen ankles", "frequent headaches", "a sore throat", "lower back pain",
            "numb fingers", "heartburn after meals", "dizziness when standing", "itchy eyes", "a stiff neck",
            "painful urination", "hair loss", "a racing heartbeat", "trouble sleeping", "a persistent fever",
            "bleeding gums"]
CONDITIONS = ["bronchitis", "a meniscus tear", "cataracts", "contact dermatitis", "tuberculosis", "asthma",
              "tinnitus", "heart failure", "migraine", "strep throat", "a herniated disc", "carpal tunnel syndrome",
              "acid reflux", "orthostatic hypotension", "allergic conjunctivitis", "cervical spondylosis",
              "a urinary tract infection", "alopecia", "atrial fibrillation", "insomnia", "malaria", "gingivitis"]
TESTS = ["a chest X-ray", "an MRI of the knee", "an eye exam", "a patch test", "a sputum culture", "spirometry",
         "an audiogram", "an echocardiogram", "a neurological exam", "a throat swab", "a spine MRI",
         "a nerve conduction study", "an endoscopy", "a tilt table test", "an allergy panel", "a neck X-ray",
         "a urine culture", "a thyroid panel", "an ECG", "a sleep study", "a blood smear", "a dental exam"]


def make_docs() -> list[Document]:
    return [Document(f"d{i}", f"Patient: Doctor, I have had {s} for {i + 3} days and it is getting worse. "
                              f"Doctor: This could be {c}. We should run {t} and follow up next week.")
            for i, (s, c, t) in enumerate(zip(SYMPTOMS, CONDITIONS, TESTS))]


DOCS = make_docs()
UNRELATED = "The city council approved a new budget for road repairs and library opening hours."


def doc_for(req: ChatRequest, docs: list[Document] = DOCS) -> Document:
    txt = user_text(req)
    hits = [d for d in docs if split_halves(d.text).first in txt]
    assert len(hits) == 1
    return hits[0]


# --------------------------------------------------------------------------- RAG-MIA


@pytest.mark.parametrize("text,expected", [
    ("Yes", True), ("Yes.", True), ("yes, it appears in the context", True), ("**Yes**", True),
    ("No", False), ("No, it does not", False), ("no.", False), ("NO", False),
    ("Answer: Yes", True), ("The answer is no.", False),
    ("I cannot say", None), ("", None), ("   ", None), ("No idea.", None),
    ("Yes and no, it is hard to tell", True),  # a leading answer commits
    ("It might be yes or no", None),  # contradictory without a leading answer
    ("The document does not appear in the context.", False),
    ("I'm not sure whether it is present.", None),
    ("Maybe", None),
])
def test_yes_no_parsing(text, expected):
    assert parse_yes_no(text) is expected


def test_p_yes_sums_variants_and_skips_positions_without_yes_or_no():
    first = TokenLogprob("**", -0.1, [("**", -0.1), ("The", -2.5)])
    second = TokenLogprob("Yes", math.log(0.5), [("Yes", math.log(0.5)), (" yes", math.log(0.1)),
                                                 ("No", math.log(0.2)), ("NO", math.log(0.05)), ("Maybe", -3.0)])
    p_yes, p_no = yes_no_mass(second)
    assert p_yes == pytest.approx(0.6) and p_no == pytest.approx(0.25)
    score, pos, _, _ = p_yes_from_tokens([first, second])
    assert pos == 1 and score == pytest.approx(0.6 / 0.85)
    # "no" outside the top-k counts as probability 0
    only_yes = TokenLogprob("Yes", -0.01, [("Yes", -0.01), ("Sure", -5.0)])
    assert p_yes_from_tokens([only_yes])[0] == 1.0
    assert p_yes_from_tokens([first]) is None


def test_rag_mia_continuous_score_from_logprobs():
    tops = [[("No", math.log(0.7)), ("Yes", math.log(0.2)), (" yes", math.log(0.05))], [(".", -0.01)]]
    target = ScriptedTarget(lambda r: completion("No.", [math.log(0.7), -0.01], tops, tokens=["No", "."]))
    m = RagMiaMethod()
    obs = m.probe(DOCS[0], target)
    req = target.seen[0]
    assert req.logprobs and req.top_logprobs == 20 and req.temperature == 0 and req.max_tokens <= 16
    assert user_text(req) == f"Does this: {DOCS[0].text} appear in the context? Answer with Yes or No."
    res = m.score(obs, Calibration("rag_mia", threshold=0.2))
    assert res.score == pytest.approx(0.25 / 0.95)
    assert res.decision is True and res.evidence["mode"] == "logprobs"  # 0.263 >= 0.2: the threshold decides
    assert m.score(obs, Calibration("rag_mia", threshold=0.5)).decision is False


def test_rag_mia_degrades_to_the_answer_text_without_logprobs():
    m = RagMiaMethod()
    plain = ScriptedTarget(lambda r: completion("Yes, it does."))
    res = m.score(m.probe(DOCS[1], plain), Calibration("rag_mia", threshold=0.9))
    assert (res.score, res.decision, res.reason) == (1.0, True, None)
    assert res.evidence["mode"] == "text" and "no logprobs" in res.evidence["logprobs_note"]

    def refuses(req: ChatRequest) -> Completion:
        if req.logprobs:
            raise NoLogprobs("this endpoint does not return logprobs")
        return completion("No")

    target = ScriptedTarget(refuses)
    obs = m.probe(DOCS[1], target)
    assert obs.queries == 2 and obs.failed == 1 and not target.seen[1].logprobs
    res = m.score(obs, Calibration("rag_mia", threshold=0.5))
    assert (res.score, res.decision) == (0.0, False)

    vague = m.score(m.probe(DOCS[1], ScriptedTarget(lambda r: completion("I cannot say."))),
                    Calibration("rag_mia", threshold=0.5))
    assert vague.score is None and vague.decision is None and vague.reason == "unparseable_answer"


def test_rag_mia_prepare_fits_threshold_on_shadow_logprob_scores():
    members, nonmembers = DOCS[:6], DOCS[6:12]
    p_yes = {d.id: 0.6 + 0.05 * i for i, d in enumerate(members)}
    p_yes |= {d.id: 0.2 + 0.05 * i for i, d in enumerate(nonmembers)}  # 0.2 .. 0.45

    def reply(req: ChatRequest) -> Completion:
        d = next(d for d in DOCS if d.text in user_text(req))
        p = p_yes[d.id]
        tok = "Yes" if p >= 0.5 else "No"
        return completion(tok, [math.log(max(p, 1 - p))], [[("Yes", math.log(p)), ("No", math.log(1 - p))]])

    m, target = RagMiaMethod(), ScriptedTarget(reply)
    cal = m.prepare(m.probe_many(members, target), m.probe_many(nonmembers, target))
    assert cal.shadow_auc == 1.0 and cal.params["threshold_source"] == "shadow_logprob_scores"
    assert sorted(cal.params["evidence"]["member_raw"]) == pytest.approx(sorted(p_yes[d.id] for d in members))
    # the KDE curves use the calibrated probabilities: same order as P(yes)
    assert sorted(cal.member_scores) == sorted(cal.member_scores) and min(cal.member_scores) > max(cal.nonmember_scores)
    # 6 shadow non-members cannot promise a 5% false-positive rate: abstain, and say why
    assert cal.threshold is None and "too few shadow non-members" in no_signal_reason(cal)


# --------------------------------------------------------------------------- every method: failures


ALL_METHODS = [RagMiaMethod, S2miaThresholdMethod, S2miaModelMethod, MinKMethod]


@pytest.mark.parametrize("cls", ALL_METHODS)
def test_target_errors_make_an_inconclusive_result_with_the_reason(cls):
    def fail(req: ChatRequest) -> Completion:
        raise RateLimited("429 from the server: slow down")

    m = cls()
    obs = m.probe(DOCS[2], ScriptedTarget(fail))
    res = m.score(obs, Calibration(m.name, threshold=0.5))
    assert res.score is None and res.decision is None
    assert res.reason == "rate_limited" and "429" in res.evidence["error"]


@pytest.mark.parametrize("cls", [S2miaThresholdMethod, MinKMethod])
def test_too_short_documents_are_skipped_without_a_query(cls):
    target = ScriptedTarget(lambda r: pytest.fail("no query expected"))
    m = cls()
    obs = m.probe(Document("short", "Knee pain."), target)
    assert obs.queries == 0 and obs.skipped == "document_too_short"
    res = m.score(obs, Calibration(m.name, threshold=0.5))
    assert res.decision is None and res.reason == "document_too_short"


# --------------------------------------------------------------------------- Min-k% Prob


def test_min_k_mean_takes_the_lowest_k_percent():
    assert min_k_mean([-0.1, -5.0, -0.2, -3.0, -0.1], 20) == (-5.0, 1)
    assert min_k_mean([-0.1, -5.0, -0.2, -3.0, -0.1], 40) == (-4.0, 2)
    with pytest.raises(ValueError):
        min_k_mean([], 20)


def test_mink_is_higher_for_confident_continuations():
    doc = DOCS[3]
    second = split_halves(doc.text).second
    n = len(second.split())
    m = MinKMethod()
    confident = ScriptedTarget(lambda r: completion(second, [-0.05] * n))
    unsure = ScriptedTarget(lambda r: completion(second, [-0.05 if i % 3 else -4.0 for i in range(n)]))
    cal = Calibration("mink", threshold=0.5)
    a, b = m.score(m.probe(doc, confident), cal), m.score(m.probe(doc, unsure), cal)
    assert a.score > b.score and a.decision and not b.decision
    assert a.score == pytest.approx(math.exp(-0.05)) and a.evidence["min_k_logprob"] == pytest.approx(-0.05)
    req = confident.seen[0]
    assert req.logprobs and req.max_tokens == min(64, n) and split_halves(doc.text).first in user_text(req)


def test_mink_without_logprobs_is_inconclusive():
    m = MinKMethod()
    assert m.requires_logprobs
    res = m.score(m.probe(DOCS[4], ScriptedTarget(lambda r: completion("some continuation"))),
                  Calibration("mink", threshold=0.5))
    assert res.score is None and res.decision is None and res.reason == "no_logprobs"

    def refuses(req):
        raise NoLogprobs("logprobs are not supported")

    res = m.score(m.probe(DOCS[4], ScriptedTarget(refuses)), Calibration("mink", threshold=0.5))
    assert res.reason == "no_logprobs"


def test_mink_prepare_fits_threshold_and_auc_and_rescoring_offline_gives_the_same_result():
    members, nonmembers = DOCS[:5], DOCS[5:10]

    def reply(req):
        d = doc_for(req)
        lp = -0.1 if d in members else -2.5
        words = ["word"] * 6
        return completion(" ".join(words), [lp, -0.05, -0.05, -0.05, -0.05, -0.05])

    m, target = MinKMethod(), ScriptedTarget(reply)
    cal = m.prepare(m.probe_many(members, target), m.probe_many(nonmembers, target))
    assert cal.shadow_auc == 1.0 and len(cal.member_scores) == 5
    assert cal.params["threshold_source"].startswith("shadow")
    ev = cal.params["evidence"]
    assert len(set(ev["member_raw"])) == 1 and min(ev["member_raw"]) > max(ev["nonmember_raw"])
    obs = m.probe(DOCS[0], target)
    again = Observation.from_json(json.loads(json.dumps(obs.to_json())))
    assert m.score(again, cal).to_json() == m.score(obs, cal).to_json()
    # without shadow members there is no validation: scoring abstains and says so
    empty = m.prepare([], m.probe_many(nonmembers, target))
    assert empty.threshold is None
    res = m.score(obs, empty)
    assert res.decision is None and res.reason.startswith("uncalibrated")


# --------------------------------------------------------------------------- S2MIA


def test_bleu1():
    assert bleu1("the cat sat", "the cat sat") == 1.0
    assert bleu1("dog", "the cat sat") == 0.0
    assert 0 < bleu1("the cat", "the cat sat on the mat") < 1  # brevity penalty


def test_s2mia_similarity_is_higher_when_the_answer_repeats_the_second_half():
    doc = DOCS[5]
    halves = split_halves(doc.text)
    m = S2miaThresholdMethod()
    echo = ScriptedTarget(lambda r: completion(halves.second))
    other = ScriptedTarget(lambda r: completion(UNRELATED))
    o1, o2 = m.probe(doc, echo), m.probe(doc, other)
    assert user_text(echo.seen[0]).count(halves.first) == 1 and halves.second not in user_text(echo.seen[0])
    f1, f2 = extract_features([o1, o2], m.config.embedder)
    assert f1.similarity > 0.95 and f1.similarity > f2.similarity + 0.5
    assert f1.bleu1 > f2.bleu1
    cal = Calibration("s2mia_t", threshold=0.6)
    r1, r2 = m.score(o1, cal), m.score(o2, cal)
    assert r1.decision is True and r2.decision is False and 0 <= r2.score < r1.score <= 1


def _s2mia_reply(members: set[str], logprobs: bool) -> Reply:
    """Members: the system echoes the second half confidently; others: an unrelated, unsure answer."""
    def reply(req: ChatRequest) -> Completion:
        d = doc_for(req)
        text = split_halves(d.text).second if d.id in members else UNRELATED
        lp = (-0.2 if d.id in members else -2.0) if logprobs else None
        return completion(text, None if lp is None else [lp] * len(text.split()))
    return reply


def test_s2mia_variants_share_one_probe_and_calibrate_on_the_shadow():
    shadow_m, shadow_n, held_m, held_n = DOCS[:8], DOCS[8:16], DOCS[16:19], DOCS[19:22]
    members = {d.id for d in shadow_m + held_m}
    target = ScriptedTarget(_s2mia_reply(members, logprobs=True))
    t_method, m_method = S2miaThresholdMethod(), S2miaModelMethod()
    obs_m, obs_n = t_method.probe_many(shadow_m, target), t_method.probe_many(shadow_n, target)
    assert obs_m[0].method == "s2mia" and t_method.version == m_method.version
    assert m_method.probe(shadow_m[0], target).to_json() == obs_m[0].to_json()

    cal_t = t_method.prepare(obs_m, obs_n)
    assert cal_t.shadow_auc == 1.0 and cal_t.params["threshold_source"].startswith("shadow")
    assert min(cal_t.member_scores) > max(cal_t.nonmember_scores)

    cal_m = m_method.prepare(obs_m, obs_n)
    assert cal_m.shadow_auc == 1.0 and set(cal_m.model) == {"full", "reduced"}
    assert cal_m.params["models"]["full"]["features"] == ["similarity", "answer_nll", "bleu1"]
    assert "out-of-fold" in cal_m.params["evidence"]["source"]
    scores: dict[str, list[float]] = {"m": [], "n": [], "t_m": [], "t_n": []}
    for d in held_m + held_n:
        obs = m_method.probe(d, target)
        res = m_method.score(obs, cal_m)
        # 8 shadow non-members cannot promise a 5% false-positive rate: no decision, a reason
        assert res.decision is None and "too few shadow non-members" in res.reason, (d.id, res)
        assert 0 <= res.score <= 1 and res.evidence["features"] == ["similarity", "answer_nll", "bleu1"]
        scores["m" if d.id in members else "n"].append(res.score)
        scores["t_m" if d.id in members else "t_n"].append(t_method.score(obs, cal_t).score)
    assert min(scores["m"]) > max(scores["n"]) and min(scores["t_m"]) > max(scores["t_n"])

    # the target hides logprobs: the classifier without perplexity answers, and says so
    plain = ScriptedTarget(_s2mia_reply(members, logprobs=False))
    res = m_method.score(m_method.probe(held_m[0], plain), cal_m)
    assert res.score > max(scores["n"]) and res.evidence["features"] == ["similarity", "bleu1"]
    assert "no logprobs" in res.evidence["features_note"]


def test_s2mia_m_gradient_boosting_is_seeded():
    from audit_core.methods.s2mia import S2miaConfig

    target = ScriptedTarget(_s2mia_reply({d.id for d in DOCS[:6]}, logprobs=True))
    m = S2miaModelMethod(S2miaConfig(classifier="gradient_boosting", seed=3))
    om, on = m.probe_many(DOCS[:6], target), m.probe_many(DOCS[6:12], target)
    a, b = m.prepare(om, on), m.prepare(om, on)
    assert a.params == b.params and a.member_scores == b.member_scores
    with pytest.raises(ValueError):
        S2miaModelMethod(S2miaConfig(classifier="xgb"))._new_model()


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_baselines_end_to_end_on_a_shadow_rag(shared_data):
    try:
        from shadow.rag import RagConfig, RagSystem
    except ImportError as exc:
        pytest.skip(f"shadow.rag is not available yet: {exc}")
    from itertools import islice

    from audit_core.methods.mink import MinKConfig
    from audit_core.methods.s2mia import S2miaConfig

    with open(shared_data / "genmedgpt5k.jsonl", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in islice(fh, 20)]
    docs = [Document(r["id"], r["text"]) for r in rows]
    members, nonmembers = docs[:10], docs[10:]
    rag = RagSystem(members, RagConfig(generator="gemma-3-270m"))
    # shorter answers than the defaults keep this CPU run to a few minutes
    s2_cfg = S2miaConfig(max_answer_tokens=40)
    s2_t, s2_m = S2miaThresholdMethod(s2_cfg), S2miaModelMethod(s2_cfg)
    runs = [(RagMiaMethod(), None), (s2_t, None), (s2_m, s2_t), (MinKMethod(MinKConfig(max_tokens_cap=32)), None)]
    probed: dict[str, tuple[list[Observation], list[Observation]]] = {}
    for method, shares_probe_of in runs:
        if shares_probe_of is not None:  # S2MIA-M scores S2MIA-T's observations: no second query
            om, on = probed[shares_probe_of.name]
        else:
            om, on = method.probe_many(members, rag), method.probe_many(nonmembers, rag)
            probed[method.name] = (om, on)
        cal = method.prepare(om, on)
        for obs in om + on:
            res = method.score(obs, cal)
            assert res.method == method.name and res.doc_id == obs.doc_id
            if res.decision is None:
                assert res.score is None and res.reason, res
            else:
                assert res.reason is None and 0.0 <= res.score <= 1.0, res
        # the in-process target answers every request with logprobs: most documents get a score
        assert len(cal.member_scores) + len(cal.nonmember_scores) >= 10, (method.name, cal.params)
        print(method.name, "shadow AUC", cal.shadow_auc, "threshold", cal.threshold)


def test_a_method_without_signal_on_the_shadow_abstains_instead_of_calling_everything_a_member():
    from audit_core.methods.base import Calibration, Observation
    from audit_core.methods.baseline_common import decide

    obs = Observation(method="mink", doc_id="d1")
    flat = Calibration("mink", threshold=0.0, member_scores=[0.0] * 5, nonmember_scores=[0.0] * 5, shadow_auc=0.5)
    res = decide("mink", obs, 0.0, flat, {})
    assert res.decision is None and res.reason.startswith("no signal") and res.score == 0.0
    good = Calibration("mink", threshold=0.4, shadow_auc=0.8)
    assert decide("mink", obs, 0.7, good, {}).decision is True
    assert decide("mink", obs, 0.1, good, {}).decision is False
