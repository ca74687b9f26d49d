"""Evidence (issue 17): FPR-controlled calibration, out-of-fold scores, the abstain rule, non-answers,
the verdict rule table, the collection test and canaries. No model is loaded here."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from audit_core.documents import Document
from audit_core.evidence import calibration as C
from audit_core.evidence.answers import non_answer, too_many_non_answers
from audit_core.evidence.canaries import CanaryKit, canary_text, load_kit, new_kit, save_kit, sibling_calls
from audit_core.evidence.collection import choose_method, collection_test, savage_scores, top_weighted_test, u_test
from audit_core.methods.base import Calibration, MembershipMethod, MethodResult, Observation
from audit_core.target.base import Capabilities, ChatRequest, Completion, Target, Usage
from audit_core.verdict import INCONCLUSIVE, MEMBER, NOT_FOUND, VerdictConfig, decide


def _script(name: str = "bench_evidence"):
    """scripts/<name>.py as a module (a script, not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def _separated(n: int = 100, shift: float = 2.0, seed: int = 0) -> tuple[list[float], list[float]]:
    rng = np.random.default_rng(seed)
    return (rng.normal(shift, 1, n).tolist(), rng.normal(0, 1, n).tolist())


# --------------------------------------------------------------------------- calibration at a stated FPR


def test_conformal_threshold_admits_at_most_the_rate_on_the_shadow_and_on_fresh_nonmembers():
    rng = np.random.default_rng(1)
    realised = []
    for _ in range(400):
        shadow_n = rng.normal(size=60)
        t = C.conformal_threshold(shadow_n, 0.05)
        # on the shadow itself: at most floor(0.05 * 61) - 1 = 2 non-members at or above it
        assert (shadow_n >= t).sum() <= 2
        realised.append(float((rng.normal(size=200) >= t).mean()))
    # exchangeable fresh non-members: the expected rate is at most 5% (conformal guarantee)
    assert np.mean(realised) <= 0.05 + 0.005
    assert np.mean(realised) > 0.02  # and the threshold is not needlessly strict


def test_too_few_shadow_nonmembers_for_a_rate_means_no_threshold_and_a_reason():
    assert C.min_nonmembers(0.05) == 19 and C.min_nonmembers(0.01) == 99 and C.min_nonmembers(0.10) == 9
    assert C.conformal_threshold(list(range(18)), 0.05) is None
    assert C.conformal_threshold(list(range(19)), 0.05) is not None
    m, n = _separated(50)
    ev = C.fit_evidence(m, n, source="test")
    assert ev["at_fpr"]["0.01"]["threshold"] is None and "99" in ev["at_fpr"]["0.01"]["reason"]
    cal = C.apply_evidence(Calibration("x"), ev)
    assert C.decide_raw(5.0, C.with_fpr(cal, 0.05)).decision is True
    low = C.decide_raw(5.0, C.with_fpr(cal, 0.01))
    assert low.decision is None and "too few shadow non-members" in low.reason


def test_not_found_needs_a_score_few_shadow_members_reach_and_misses_at_most_the_rate():
    """A score under the member threshold is "not found" only when at most 5% of members score as low."""
    rng = np.random.default_rng(3)
    missed, cleared = [], []
    for _ in range(300):
        m, n = rng.normal(2.5, 1, 60), rng.normal(0, 1, 60)
        ev = C.fit_evidence(m.tolist(), n.tolist(), source="test")
        cal = C.apply_evidence(Calibration("x"), ev)
        t = C.clear_threshold(m)
        assert (m <= t).sum() <= math.floor(0.05 * 61) - 1  # on the shadow itself
        fresh_m, fresh_n = rng.normal(2.5, 1, 50), rng.normal(0, 1, 50)
        missed.append(np.mean([C.decide_raw(x, cal).decision is False for x in fresh_m]))
        cleared.append(np.mean([C.decide_raw(x, cal).decision is False for x in fresh_n]))
    # exchangeable fresh members are cleared at most 5% of the time; most non-members still are
    assert np.mean(missed) <= 0.05 + 0.005
    assert np.mean(cleared) > 0.7


def test_a_method_whose_members_often_score_the_floor_never_clears_a_document():
    """Verbatim-like: 12 of 30 members and every non-member reproduce nothing (score 0)."""
    members = [0.0] * 12 + [0.1 + 0.03 * i for i in range(18)]
    nonmembers = [0.0] * 27 + [0.05, 0.08, 0.12]
    ev = C.fit_evidence(members, nonmembers, source="test")
    assert ev["signal"]
    cal = C.apply_evidence(Calibration("x"), ev)
    d = C.decide_raw(0.0, cal)
    assert d.decision is None and d.reason.startswith(C.NOT_CLEARED) and "12 of the shadow's 30 members" in d.reason
    assert d.evidence["member_p_value"] == pytest.approx(13 / 31)
    assert C.decide_raw(0.6, cal).decision is True
    assert C.clearance(ev)["cleared_share"] == 0.0


def test_a_method_whose_clearing_is_withheld_never_says_not_found():
    """S-RAG without logprobs cleared 7 of 50 target members on the completion benchmark: it calls
    members as before, but a low score leaves a document "not cleared" with that reason."""
    m, n = _separated(100, shift=3.0)
    ev = C.fit_evidence(m, n, source="test")
    low, high = min(n) - 1.0, max(m) + 1.0
    assert C.decide_raw(low, C.apply_evidence(Calibration("srag"), ev)).decision is False
    cal = C.apply_evidence(Calibration("srag_sampled"), ev)
    withheld = C.decide_raw(low, cal)
    assert withheld.decision is None and withheld.reason.startswith(C.NOT_CLEARED)
    assert "7 of 50" in withheld.reason and withheld.evidence["clear_threshold"] is None
    assert C.decide_raw(high, cal).decision is True
    assert C.clearance_of(cal)["cleared_share"] is None and C.clearance_of(cal)["reason"] == withheld.reason


def test_too_few_shadow_members_to_clear_gives_a_reason_and_old_calibrations_get_the_rule():
    m, n = _separated(100, shift=3.0)
    ev = C.fit_evidence(m[:15], n, source="test")  # 15 members: fewer than the 19 a 5% miss rate needs
    cal = C.apply_evidence(Calibration("x"), ev)
    d = C.decide_raw(-3.0, cal)
    assert d.decision is None and "at least 19" in d.reason
    # a calibration stored before the rule (no clearance fields) is cleared from its stored member scores
    ev = C.fit_evidence(m, n, source="test")
    stored = Calibration(**json.loads(json.dumps(C.apply_evidence(Calibration("x"), ev).to_json())))
    low = C.decide_raw(min(n) - 1.0, stored)
    assert low.decision is False and low.evidence["clear_threshold"] is not None
    assert C.clearance_of(stored)["cleared_share"] > 0.5


def test_power_is_the_shadow_tpr_at_the_threshold_and_grows_with_the_rate():
    m, n = _separated(200, shift=1.5)
    ev = C.fit_evidence(m, n, source="test")
    for key, at in ev["at_fpr"].items():
        assert at["power"] == pytest.approx(np.mean(np.asarray(m) >= at["threshold_raw"]))
        assert at["shadow_fpr"] <= float(key)
    assert ev["at_fpr"]["0.01"]["power"] <= ev["at_fpr"]["0.05"]["power"] <= ev["at_fpr"]["0.1"]["power"]


def test_platt_probability_is_monotone_and_calibration_is_plain_json():
    m, n = _separated(100, shift=1.0)
    cal = C.apply_evidence(Calibration("x"), C.fit_evidence(m, n, source="test"))
    xs = np.linspace(-3, 4, 50)
    probs = [C.platt_probability(x, cal.params["evidence"]["platt"]) for x in xs]
    assert all(a < b for a, b in zip(probs, probs[1:])) and 0 < probs[0] < 0.5 < probs[-1] < 1
    back = Calibration(**json.loads(json.dumps(cal.to_json())))
    assert C.decide_raw(1.3, back) == C.decide_raw(1.3, cal)


def test_a_shadow_whose_scores_run_the_other_way_gets_a_flat_fit_never_a_reversed_one():
    """Members scoring lower on the shadow must not make a higher raw score read as a lower probability."""
    m, n = _separated(60, shift=1.0)
    flat = C.fit_platt(n, m)  # the shadow's members are the low scorers
    assert flat == {"a": 0.0, "b": pytest.approx(0.0), "prior_log_odds": pytest.approx(0.0)}
    assert C.platt_probability(-3.0, flat) == C.platt_probability(4.0, flat) == pytest.approx(0.5)
    assert C.fit_platt(n[:30], m)["b"] == pytest.approx(math.log(30 / 60))  # the shadow's share of members
    assert C.fit_platt(m, n)["a"] > 0  # the usual direction is fitted as before


def test_a_few_far_out_non_members_do_not_flatten_the_probabilities_of_a_shadow_with_signal():
    """Two non-members 1,000 units out turn the plain fit around although the ranking has signal (AUC ~0.9);
    the refit inside the shadow's central 90% rises with the score, and the same bounds hold audited scores."""
    m, n = _separated(60, shift=2.0, seed=3)
    n = n[:-2] + [1000.0, 1200.0]
    from sklearn.linear_model import LogisticRegression

    x = np.r_[m, n].reshape(-1, 1)
    plain = LogisticRegression(C=1e4, max_iter=1000).fit(x, np.r_[np.ones(60), np.zeros(60)])
    assert plain.coef_[0, 0] < 0  # the case this guards: without the refit the fit would be flat
    ev = C.fit_evidence(m, n, source="test")
    assert ev["signal"]
    platt = ev["platt"]
    assert platt["a"] > 0 and platt["lo"] < platt["hi"] < 1000
    probs = [C.platt_probability(v, platt) for v in (-2.0, 0.0, 1.0, 2.0, 4.0)]
    assert all(a < b for a, b in zip(probs, probs[1:]))
    assert C.platt_probability(1000.0, platt) == C.platt_probability(platt["hi"], platt)  # held at the bound
    from audit_core.evidence.collection import weights_kind

    assert weights_kind(platt) == "likelihood ratio"


def test_calibration_never_sees_an_audited_document():
    """run_audit calibrates on the shadow only and scoring leaves the calibration as it was.

    The preparation records every document it was given; if an audited
    document reached it, or scoring updated the threshold, this test fails.
    """
    from audit_core.audit import AuditConfig, run_audit

    rng = np.random.default_rng(3)
    shadow_m = [Observation("toy", f"sm{i}", data={"raw": float(rng.normal(2, 1))}) for i in range(60)]
    shadow_n = [Observation("toy", f"sn{i}", data={"raw": float(rng.normal(0, 1))}) for i in range(60)]
    seen_by_prepare: set[str] = set()
    prepared: dict[str, Calibration] = {}
    before: dict[str, str] = {}

    class Prep:
        def __init__(self, cals):
            self.calibrations = cals

    def prepare(methods, shadow_cfg, progress):
        m = methods[0]
        # everything the preparation is handed, as text: an audited document's id or words must not be in it
        seen_by_prepare.add(repr((methods, [vars(x) for x in methods], shadow_cfg)))
        prepared["toy"] = m.prepare(shadow_m, shadow_n)
        before["toy"] = json.dumps(prepared["toy"].to_json(), sort_keys=True)
        return Prep({"toy": prepared["toy"]})

    docs = [Document(f"d{i}", f"text of document {i} " * 3) for i in range(20)]
    controls = [Document(f"c{i}", f"text of control {i} " * 3) for i in range(20)]
    target = _ToyTarget({d.id: 10.0 for d in docs[:10]})
    import audit_core.audit as audit_mod

    orig = audit_mod.create_method
    audit_mod.create_method = lambda name, **kw: _ToyMethod()
    try:
        result = run_audit(docs, target, AuditConfig(methods=["toy"], fpr=0.05), prepare=prepare,
                           capabilities=Capabilities(reachable=True, logprobs=False, max_top_logprobs=0),
                           controls=controls)
    finally:
        audit_mod.create_method = orig
    handed = " ".join(seen_by_prepare)
    assert handed and "text of document" not in handed and "text of control" not in handed
    assert json.dumps(prepared["toy"].to_json(), sort_keys=True) == before["toy"]  # scoring changed nothing
    cal = result.calibrations["toy"]
    # the calibration the verdicts were decided with holds the shadow's scores and nothing else
    assert cal.params["evidence"]["nonmember_raw"] == [o.data["raw"] for o in shadow_n]
    assert cal.params["evidence"]["member_raw"] == [o.data["raw"] for o in shadow_m]
    assert json.dumps(cal.to_json(), sort_keys=True) == before["toy"]
    # documents with a huge raw score are members at 5%; the others mostly not
    called = [v.verdict for v in result.verdicts]
    assert called[:10] == [MEMBER] * 10 and called[10:].count(MEMBER) <= 3
    coll = result.to_json()["collection"]
    assert coll["method"] == "toy" and coll["n_documents"] == 20 and coll["n_controls"] == 20
    assert coll["p_value"] < 0.01 and coll["controls_kind"] == "declared" and 0 <= coll["power"] <= 1
    assert result.to_json()["fpr"] == 0.05 and result.to_json()["method_power"]["toy"]["decides"] is True


def test_with_declared_controls_the_owners_own_rate_leads_the_verdicts():
    """The owner's text scores lower than the shadow's (the shift BENCHMARKS measured): members that the
    shadow's 5% threshold misses are found against the owner's controls, and its rate is said."""
    from audit_core.audit import AuditConfig, run_audit

    rng = np.random.default_rng(4)
    shadow_m = [Observation("toy", f"sm{i}", data={"raw": float(rng.normal(4, 1))}) for i in range(60)]
    shadow_n = [Observation("toy", f"sn{i}", data={"raw": float(rng.normal(0, 1))}) for i in range(60)]

    class Prep:
        def __init__(self, cals):
            self.calibrations = cals

    def prepare(methods, shadow_cfg, progress):
        return Prep({"toy": methods[0].prepare(shadow_m, shadow_n)})

    docs = [Document(f"d{i}", "t") for i in range(20)]
    controls = [Document(f"c{i}", "t") for i in range(20)]
    # members score 1.0: below the shadow's 5% threshold (about 1.6), above every control (about -3)
    target = _ToyTarget({d.id: 1.0 for d in docs[:10]} | {d.id: -3.0 + 0.01 * i for i, d in enumerate(docs[10:])}
                        | {c.id: -3.0 + 0.01 * i + 0.005 for i, c in enumerate(controls)})
    import audit_core.audit as audit_mod

    orig = audit_mod.create_method
    audit_mod.create_method = lambda name, **kw: _ToyMethod()
    try:
        run = lambda kind, ctl: run_audit(  # noqa: E731
            docs, target, AuditConfig(methods=["toy"], fpr=0.05, controls_kind=kind), prepare=prepare,
            capabilities=Capabilities(reachable=True, logprobs=False, max_top_logprobs=0), controls=ctl)
        shadow_only, declared, generated = run("declared", []), run("declared", controls), run("generated", controls)
    finally:
        audit_mod.create_method = orig
    assert [v.verdict for v in shadow_only.verdicts[:10]].count(MEMBER) == 0  # the shadow's threshold misses them
    assert [v.verdict for v in declared.verdicts] == [MEMBER] * 10 + [v.verdict for v in shadow_only.verdicts[10:]]
    assert all("against your 20 controls" in v.reason for v in declared.verdicts[:10])
    assert declared.collection["leads_verdicts"] is True and "set that rate" in declared.to_json()["what_this_shows"]
    # rewritten controls are biased: they give p-values but do not lead
    assert generated.collection["leads_verdicts"] is False
    assert [v.verdict for v in generated.verdicts] == [v.verdict for v in shadow_only.verdicts]


class _ToyTarget(Target):
    """Answers a number: the raw score of the document (10 for 'members', else noise)."""

    name = "toy"

    def __init__(self, members: dict[str, float]):
        super().__init__()
        self.members = members
        self.rng = np.random.default_rng(5)

    def complete(self, request: ChatRequest) -> Completion:
        doc_id = request.messages[-1][1]
        value = self.members.get(doc_id, float(self.rng.normal(0, 1)))
        return Completion(str(value), None, Usage(1, 1))


class _ToyMethod(MembershipMethod):
    name = "toy"

    def probe(self, doc, target):
        obs = Observation(self.name, doc.id)
        obs.add({}, target.complete(ChatRequest.chat([{"role": "user", "content": doc.id}])))
        obs.data["raw"] = float(obs.responses[0]["text"])
        return obs

    def prepare(self, members, nonmembers):
        from audit_core.methods.baseline_common import fit_threshold

        return fit_threshold(self.name, [o.data["raw"] for o in members], [o.data["raw"] for o in nonmembers])

    def score(self, obs, calibration):
        from audit_core.methods.baseline_common import decide as decide_score

        return decide_score(self.name, obs, obs.data["raw"], calibration, {})

    def query_cost(self, n_words):
        return None


# --------------------------------------------------------------------------- out-of-fold scores


def test_oof_predictions_never_score_a_row_with_a_model_that_saw_it():
    y = [1] * 12 + [0] * 12
    calls = []

    def fit_predict(train, test):
        assert not set(train) & set(test)
        calls.append((set(train), set(test)))
        return np.full(len(test), 0.5)

    out = C.oof_predictions(24, y, fit_predict, folds=4)
    assert len(calls) == 4 and set().union(*(t for _, t in calls)) == set(range(24)) and not np.isnan(out).any()


def test_srag_kde_uses_out_of_fold_scores_which_differ_from_in_sample(monkeypatch):
    """A model that memorises its rows scores them perfectly in sample; the stored (KDE) scores are out of fold."""
    pd = pytest.importorskip("pandas")
    from sklearn.tree import DecisionTreeClassifier

    from audit_core.methods import srag

    rng = np.random.default_rng(0)
    obs, labels = [], []
    for i in range(60):
        lab = int(i < 30)
        obs.append(Observation("srag", f"s{i}", data={"f": {"a": float(rng.normal(0.8 * lab, 1)),
                                                              "b": float(rng.normal(0, 1))}}))
        labels.append(lab)

    class Tree:
        def __init__(self, df):
            self.m = DecisionTreeClassifier(random_state=0).fit(df.drop(columns=["member"]), df["member"])

        def predict_proba(self, X):
            return pd.DataFrame(self.m.predict_proba(X), columns=[0, 1])

    trained_on: list[int] = []

    def fake_train(df, cfg):
        trained_on.append(len(df))
        return Tree(df)

    monkeypatch.setattr(srag, "train_predictor", fake_train)
    monkeypatch.setattr(srag, "_best_model_name", lambda p: "tree")
    monkeypatch.setattr(srag, "_mean_hist", lambda df, label, bins: [])
    method = srag.SragMethod()
    monkeypatch.setattr(method, "features", lambda o: (o.data["f"], None, []))
    cal = method.prepare(obs[:30], obs[30:])
    assert trained_on == [48] * 5 + [60]  # five fold models on 4/5 of the rows, then the final model on all
    oof = np.asarray(cal.params["oof_scores"])
    final = srag.member_probability(cal.model, pd.DataFrame([o.data["f"] for o in obs])[["a", "b"]])
    assert set(np.unique(final)) <= {0.0, 1.0} and (final == np.asarray(labels)).all()  # in sample: perfect
    assert not np.allclose(oof, final) and cal.shadow_auc < 0.95  # out of fold: honest
    platt = cal.params["evidence"]["platt"]
    expected_kde = sorted(C.platt_probability(x, platt) for x, lab in zip(oof, labels) if lab == 1)
    assert sorted(cal.member_scores) == pytest.approx(expected_kde)
    json.dumps(cal.to_json())  # the out-of-fold scores are data in the calibration JSON


# --------------------------------------------------------------------------- abstain rule


def test_abstain_rule_uses_the_lower_bound_of_the_shadow_auc():
    rng = np.random.default_rng(2)
    flat = C.fit_evidence(rng.normal(size=100).tolist(), rng.normal(size=100).tolist(), source="test")
    assert flat["signal"] is False and flat["reason"].startswith("no signal")
    # point AUC 0.72 but only 10 + 10 documents: the interval reaches below 0.6, so no decision
    small = C.fit_evidence([i + 2.5 for i in range(10)], [float(i) for i in range(10)], source="test")
    assert small["auc"] == pytest.approx(0.72) and small["auc_ci"][0] <= 0.6 and small["signal"] is False
    m, n = _separated(100, shift=2.0)
    strong = C.fit_evidence(m, n, source="test")
    assert strong["signal"] is True and strong["auc_ci"][0] > 0.6
    cal = C.apply_evidence(Calibration("x"), flat)
    d = C.decide_raw(10.0, cal)
    assert d.decision is None and d.reason.startswith("no signal") and d.score is not None  # score kept, no verdict
    # either side of 0.6 (a rule of 0.5 had passed the cases above): lower bounds 0.592 and 0.619
    rng = np.random.default_rng(0)
    below = C.fit_evidence(rng.normal(0.5, 1, 100).tolist(), rng.normal(0, 1, 100).tolist(), source="t")
    rng = np.random.default_rng(0)
    above = C.fit_evidence(rng.normal(0.6, 1, 100).tolist(), rng.normal(0, 1, 100).tolist(), source="t")
    assert 0.5 < below["auc_ci"][0] < 0.6 < above["auc_ci"][0] < 0.65
    assert below["signal"] is False and above["signal"] is True


# --------------------------------------------------------------------------- non-answers


@pytest.mark.parametrize("text, kind", [
    ("", "empty"), ("   \n", "empty"), ("...", "empty"), (None, "empty"),
    ("I'm sorry, but I can't help with that.", "refusal"), ("I cannot provide that information.", "refusal"),
    ("As an AI, I do not have access.", "refusal"), ("I don't know.", "I don't know"),
    ("The context does not mention this.", "I don't know"), ("Not sure", "I don't know"),
    ("amoxicillin 500 mg twice a day", None), ("Yes", None), ("No", None),
    ("Sorry for the delay, the dose is 5 mg", None),
    ("I'm unable to continue this text.", "refusal"), ("I'm not able to share that.", "refusal"),
    ("I apologize, but I cannot continue.", "refusal"), ("Sorry I can't help with that.", "refusal"),
    ("I'm afraid I can't share that.", "refusal"), ("I won't be able to continue.", "refusal"),
    ("The provided context doesn't contain that.", "I don't know"),
    ("I don't have enough information to say.", "I don't know"),
    ("That information is not available.", "I don't know"),
    # a patient's own words that open like one stay answers
    ("I can't sleep since the operation", None), ("I'm unable to walk far without pain", None),
    ("Sorry to hear about your knee; rest it for a week", None),
    ("I apologize to my family every day for the pain", None), ("My apologies to the nurse were sincere", None),
    ("Information is not available for patients under 12, so ask your doctor", None),
    ("I don't have any details yet, but the scan showed a cyst", None),
    # session 60: refusals of the very requests Verbatim sends, and short ignorance, were read as answers
    ("I'm unable to quote that text.", "refusal"), ("I cannot repeat the document.", "refusal"),
    ("I can't recall the rest of it.", "refusal"), ("I do not have the rest of that message.", "I don't know"),
    ("I couldn't find any information about that.", "I don't know"),
    ("I could not find that in the provided context.", "I don't know"), ("Idk", "I don't know"),
    ("No idea.", "I don't know"), ("I have no idea.", "I don't know"), ("I'm not certain.", "I don't know"),
    ("Apologies, I can't help.", "refusal"), ("Sorry!", "refusal"),
    # ... and these openings of a patient's own words were read as refusals
    ("I declined the surgery last spring", None), ("Apologize to your partner and rest", None),
    ("No idea why my back hurts so much at night", None),
])
def test_non_answer_detector(text, kind):
    assert non_answer(text) == kind


@pytest.mark.parametrize("text, kind", [
    ("Lo siento, no puedo ayudar con eso.", "refusal"), ("No lo sé.", "I don't know"),
    ("Désolé, je ne peux pas répondre.", "refusal"), ("Je ne sais pas.", "I don't know"),
    ("Es tut mir leid, das weiß ich nicht.", "refusal"), ("Ich weiß es nicht.", "I don't know"),
    ("Mi dispiace, non posso rispondere.", "refusal"), ("Non lo so.", "I don't know"),
    ("Desculpe, não posso ajudar.", "refusal"), ("Não sei.", "I don't know"),
    ("Het spijt me.", "refusal"), ("Ik weet het niet.", "I don't know"),
    ("Извините, я не могу помочь.", "refusal"), ("Я не знаю.", "I don't know"),
    ("抱歉，我无法回答。", "refusal"), ("我不知道。", "I don't know"), ("わかりません。", "I don't know"),
    # the same words opening a genuine answer or a continued document stay answers
    ("No se recomienda tomar ibuprofeno.", None), ("Ich kann nicht schlafen, seit Tagen.", None),
    ("Я не могу спать по ночам.", None), ("我不能睡觉。", None), ("Non sono mai stato in ospedale.", None),
])
def test_non_answer_detector_reads_other_languages_openings(text, kind):
    assert non_answer(text) == kind


def test_yes_no_readers_take_a_foreign_i_dont_know_that_opens_with_no_as_no_answer():
    from audit_core.methods.questions import IDK, NO, read_answer

    for text in ("No lo sé.", "No sé, lo siento.", "Non lo so.", "No information is given about that."):
        assert read_answer(text) == IDK, text
    assert read_answer("No, the dose was 5 mg.") == NO and read_answer("No, I don't know that one.") == NO


def test_too_many_non_answers_makes_a_document_inconclusive_with_the_reason():
    assert too_many_non_answers([None] * 6 + ["refusal"] * 4) is None
    why = too_many_non_answers([None] * 4 + ["refusal"] * 5 + ["unparseable"])
    assert why.startswith("too many non-answers: 6 of 10") and "5 refusal" in why


def _mba_observation(texts: list[str], elicitation: str) -> Observation:
    from audit_core.methods.mba_masks import MaskAnswer, MaskPlan

    words = ["alpha", "bravo", "charlie", "delta", "echo"]
    answers = [MaskAnswer(i + 1, w, [w], 0, 0, 0, False) for i, w in enumerate(words)]
    plan = MaskPlan(" ".join(f"[Mask_{i + 1}]" for i in range(5)), answers, 5)
    obs = Observation("mba", "d", data={"plan": plan.to_json(), "elicitation": elicitation})
    for t in texts:
        obs.add({}, Completion(t, None, Usage(1, 1)))
    return obs


def test_mba_counts_refusals_and_empty_replies_as_non_answers_not_wrong_answers():
    from audit_core.methods.mba import MbaMethod
    from audit_core.methods.mba_masks import MbaConfig

    mba = MbaMethod(MbaConfig(elicitation="continue"), lm=object())
    cal = Calibration("mba", threshold=0.5)
    refused = mba.score(_mba_observation(["I'm sorry, I can't help with that."] * 3 + ["", "delta"], "continue"), cal)
    assert refused.decision is None and refused.score is None and refused.reason.startswith("too many non-answers")
    wrong = mba.score(_mba_observation(["zulu", "yankee", "xray", "whiskey", "echo"], "continue"), cal)
    assert wrong.decision is False and wrong.evidence["accuracy"] == pytest.approx(0.2)  # answers, just wrong
    fill = MbaMethod(MbaConfig(), lm=object())
    blank = fill.score(_mba_observation(["I don't know."], "fill_in"), cal)
    assert blank.decision is None and "5 I don't know" in blank.reason


def test_baseline_refusal_is_inconclusive_not_a_low_score():
    from audit_core.methods.baseline_common import unusable

    obs = Observation("mink", "d")
    obs.add({}, Completion("I'm sorry, but I cannot help with that request.", None, Usage(1, 1)))
    res = unusable("mink", obs)
    assert res is not None and res.decision is None and res.reason.startswith("non-answer (refusal)")


# --------------------------------------------------------------------------- verdict rule table


def _r(method, decision, score=0.5, reason=None):
    return MethodResult(method, "d", None if decision is None and reason else score, decision, reason, {"fpr": 0.05})


def _uncleared(method, member_share):
    """Under its member threshold, with ``member_share`` of its shadow's members scoring as low."""
    return MethodResult(method, "d", 0.3, None, f"not cleared: below the member threshold, but {member_share:.0%} ...",
                        {"fpr": 0.05, "member_p_value": member_share})


@pytest.mark.parametrize("results, verdict, rule", [
    # R1: nobody decided
    ([], INCONCLUSIVE, "R1"),
    ([_r("srag", None, reason="no signal: ..."), _r("mba", None, reason="too many non-answers: ...")], INCONCLUSIVE, "R1"),
    # R2: the first voter says member
    ([_r("srag", True, 0.9)], MEMBER, "R2"),
    ([_r("srag", True, 0.9), _r("mba", False, 0.2)], MEMBER, "R2"),
    ([_r("srag", True, 0.9), _r("mba", True, 0.8)], MEMBER, "R2"),
    ([_r("srag", None, reason="no logprobs"), _r("mba", True, 0.8)], MEMBER, "R2"),
    ([_r("rag_mia", True, 0.7), _r("mink", False, 0.1)], MEMBER, "R2"),  # baselines only: first in order
    # a text-only method votes before the baselines where S-RAG and MBA could not decide
    ([_r("srag", None, reason="no logprobs"), _r("rag_mia", False, 0.1), _r("interrogation", True, 0.9)],
     MEMBER, "R2"),
    # R3: every voter says not found (the target retrieves with queries as sent: AS_SENT below)
    ([_r("srag", False, 0.1)], NOT_FOUND, "R3"),
    # R4: the first voter says not found, a later one member
    ([_r("srag", False, 0.1), _r("mba", False, 0.2), _r("rag_mia", True, 0.9)], INCONCLUSIVE, "R4"),  # not a voter,
    # but its member call stops the clearing: a reproduced e-mail address (Extraction) was cleared that way
    ([_r("mba", False, 0.2), _r("extraction", True, 0.33)], INCONCLUSIVE, "R4"),
    ([_r("srag", None, reason="x"), _r("interrogation", False, 0.1), _r("extraction", True, 0.3)], INCONCLUSIVE, "R4"),
    ([_r("srag", None, reason="x"), _r("mba", False, 0.3)], NOT_FOUND, "R3"),
    ([_r("srag", None, reason="x"), _r("mba", None, reason="y"), _r("interrogation", False, 0.1)], NOT_FOUND, "R3"),
    # R4: the first voter says not found, a later one member
    ([_r("srag", False, 0.1), _r("mba", True, 0.9)], INCONCLUSIVE, "R4"),
    # R6: a voter says not found, but the primary or second opinion scored the document as too many of its
    # shadow's members do (session 33, completion seed 6: S-RAG 13%, MBA "not found")
    ([_uncleared("srag", 0.13), _r("mba", False, 0.3)], INCONCLUSIVE, "R6"),
    ([_r("srag", False, 0.1), _uncleared("mba", 0.4)], INCONCLUSIVE, "R6"),
    ([_uncleared("srag", 0.2), _r("mba", None, reason="no signal: ..."), _r("interrogation", False, 0.1)],
     INCONCLUSIVE, "R6"),
    # ... not where that share is within the clearing rule's 5% (a shadow too small to clear, say), nor for a
    # method outside the voting pool
    ([_uncleared("srag", 0.04), _r("mba", False, 0.3)], NOT_FOUND, "R3"),
    ([_uncleared("srag", 0.05), _r("mba", False, 0.3)], NOT_FOUND, "R3"),  # exactly the rate: within it
    # a result saved before the shadow_member flag: re-decided against controls, it stands against clearing
    ([MethodResult("srag", "d", 0.9, None, "x", {"fpr": 0.05, "calibrated_on": "controls"}), _r("mba", False, 0.3)],
     INCONCLUSIVE, "R6"),
    # ... nor the text-only chain: each method in turn had been a fresh chance to clear a member (session 61)
    ([_uncleared("interrogation", 0.13), _r("perturbation", False, 0.1)], INCONCLUSIVE, "R6"),
    ([_r("srag", None, reason="no logprobs"), _uncleared("verbatim", 0.3), _r("srag_sampled", False, 0.1)],
     INCONCLUSIVE, "R6"),
    ([_r("srag", False, 0.1), _r("mba", False, 0.2), _uncleared("rag_mia", 0.6)], NOT_FOUND, "R3"),
    # ... nor an abstention that kept its probability (it was never set against the members' scores)
    ([MethodResult("srag", "d", 0.4, None, "no signal: ...", {"fpr": 0.05}), _r("mba", False, 0.3)], NOT_FOUND, "R3"),
    # R7: a member call behind a method that scored the document below its member threshold is not counted
    # (the union of two methods' member calls; session 53's review measured 5.9-14.2% at a stated 5%)
    ([_uncleared("srag", 0.3), _r("mba", True, 0.9)], INCONCLUSIVE, "R7"),
    ([_uncleared("srag", 0.03), _r("mba", True, 0.9)], INCONCLUSIVE, "R7"),  # scored low, yet too few to clear
    ([_r("srag", None, reason="too many non-answers: ..."), _uncleared("verbatim", 0.3),
      _uncleared("srag_sampled", 0.2), _r("interrogation", True, 0.9)], INCONCLUSIVE, "R7"),
    # ... behind the second opinion too, where the primary could not score
    ([_r("srag", None, reason="no logprobs"), _uncleared("mba", 0.4), _r("verbatim", True, 0.9)], INCONCLUSIVE, "R7"),
    # ... but not behind an abstention that does not depend on the score (it kept its probability, no threshold)
    ([MethodResult("srag", "d", 0.4, None, "no signal: ...", {"fpr": 0.05}), _r("mba", True, 0.9)], MEMBER, "R2"),
    # ... nor where the method that scored low comes after the one that calls it a member
    ([_r("srag", True, 0.9), _uncleared("mba", 0.3)], MEMBER, "R2"),
    ([_r("srag", None, reason="x"), _r("verbatim", True, 0.9), _uncleared("rag_mia", 0.3)], MEMBER, "R2"),
    # a member call its own method withdrew (Verbatim: only its tie-break lifted the score) depends on the
    # score too, so it does not pass the vote on (session 61; before, the next method's call stood)
    ([MethodResult("verbatim", "d", 0.9, None, "not cleared: above the member threshold only by the closeness "
                   "in meaning ...", {"fpr": 0.05}), _r("srag_sampled", True, 0.9)], INCONCLUSIVE, "R7"),
])
def test_verdict_rule_table_row_by_row(results, verdict, rule):
    v = decide("d", results, AS_SENT)
    assert (v.verdict, v.rule) == (verdict, rule), v.reason
    if rule == "R4":
        assert v.reason.startswith("methods disagree")
    if rule == "R6":
        assert v.reason.startswith("not cleared") and "does not clear it" in v.reason
        assert decide("d", results).rule == "R6"  # whatever is known of how the target retrieves
    if rule == "R1" and results:
        assert "no signal" in v.reason and "too many non-answers" in v.reason  # every reason is kept
    if rule == "R7":
        assert v.reason.startswith("not confirmed")
        assert ("below its member threshold" in v.reason) != ("withdrew its own member call" in v.reason)
        assert v.score == 0.9  # the member call's probability is kept; only the call is withheld
        assert decide("d", results).rule == "R7"


AS_SENT = VerdictConfig(retrieval_as_sent=True)


def test_a_not_found_names_a_method_that_could_not_read_the_document_but_not_one_out_for_the_whole_audit():
    """S-RAG failing on a document (non-answers, failed calls) while MBA cleared it read "MBA did not find it",
    as if S-RAG had had nothing to say; an abstention for the whole audit is said once, not on every row."""
    from audit_core.verdict import FOR_THE_AUDIT

    failed = _r("srag", None, reason="too many non-answers: 6 of 8 replies were not answers")
    v = decide("d", [failed, _r("mba", False, 0.1)], AS_SENT)
    assert (v.verdict, v.rule) == (NOT_FOUND, "R3")
    assert v.reason.endswith("; S-RAG could not read it (too many non-answers: 6 of 8 replies were not answers)")
    out = MethodResult("srag", "d", None, None, "no signal: ...; none of its queries were sent", {FOR_THE_AUDIT: True})
    v = decide("d", [out, _r("mba", False, 0.1)], AS_SENT)
    assert v.rule == "R3" and "could not read" not in v.reason
    # a method outside the pool (behind the voter) is not named
    v = decide("d", [_r("srag", False, 0.1), _r("rag_mia", None, reason="unparseable_answer")], AS_SENT)
    assert v.rule == "R3" and "could not read" not in v.reason


def test_an_r6_verdict_shows_the_probability_of_the_method_that_does_not_clear():
    """R6 stands on the objection, so its score is the objector's, not the "not found" it overrides (in the
    benchmark's combined row, members held back by S-RAG had ranked by MBA's near-zero scores)."""
    srag = MethodResult("srag", "d", 0.72, None, "not cleared: ...", {"fpr": 0.05, "member_p_value": 0.2})
    v = decide("d", [srag, _r("mba", False, 0.01)], AS_SENT)
    assert (v.rule, v.score) == ("R6", 0.72)
    mba = MethodResult("mba", "d", 0.35, None, "not cleared: ...", {"fpr": 0.05, "member_p_value": 0.3})
    assert decide("d", [srag, mba, _r("interrogation", False, 0.05)], AS_SENT).score == 0.72  # the higher
    assert decide("d", [_r("srag", False, 0.1), _r("mba", False, 0.01)], AS_SENT).score == 0.1  # R3: the voter's


@pytest.mark.parametrize("results", [
    [_r("srag", False, 0.1)],
    [_r("srag", False, 0.1), _r("mba", False, 0.2), _r("rag_mia", False, 0.3)],
    [_r("srag", None, reason="no logprobs"), _r("mba", None, reason="y"), _r("interrogation", False, 0.1)],
])
def test_verdict_r5_no_clearing_unless_the_target_retrieves_with_queries_as_sent(results):
    """Where R3 would clear, a target not known to retrieve with the query as sent gets "inconclusive"."""
    assert decide("d", results, AS_SENT).verdict == NOT_FOUND
    v = decide("d", results)  # the default: nobody stated it
    assert (v.verdict, v.rule) == (INCONCLUSIVE, "R5"), v.reason
    assert v.reason.startswith("not cleared") and "rewrites queries" in v.reason and "74%" in v.reason
    assert v.score == decide("d", results, AS_SENT).score  # the evidence is kept, only the call is withheld
    # member calls and disagreements do not depend on it
    for other in ([_r("srag", True, 0.9)], [_r("srag", False, 0.1), _r("mba", True, 0.9)]):
        assert decide("d", other) == decide("d", other, AS_SENT)


def _controls(p, kind="declared", method="srag", n=20, called=1):
    """A collection summary as ``audit.collection_summary`` writes it, for one document "d" with p-value ``p``."""
    return {"method": method, "controls_kind": kind, "fpr": 0.05, "called_members": called,
            "document_p_values": {"d": p}, "control_scores": {f"c{i}": 0.1 for i in range(n)} | {"unscored": None}}


@pytest.mark.parametrize("results, collection, verdict, rule, reason", [
    # R0: the collection method's call against the controls leads; a member at p <= 5% though the shadow did
    # not clear or call it
    ([_r("srag", None, 0.4, reason="not cleared"), _r("mba", False, 0.1)], _controls(1 / 21), MEMBER, "R2",
     "S-RAG calls it a member at a 5% false-positive rate against your 20 controls; MBA did not find it"),
    # the collection method need not be the primary: MBA's control call leads, S-RAG's "not found" dissents
    ([_r("srag", False, 0.1), _r("mba", None, 0.6, reason="not cleared")], _controls(1 / 21, method="mba"), MEMBER,
     "R2", "MBA calls it a member at a 5% false-positive rate against your 20 controls; S-RAG did not find it"),
    # above the rate: "not found" only where the shadow clears it too
    ([_r("srag", False, 0.1)], _controls(0.5), NOT_FOUND, "R3", "S-RAG did not find it"),
    ([_r("srag", None, 0.4, reason="not cleared")], _controls(0.5), INCONCLUSIVE, "R1", "not cleared"),
    # a shadow member call the controls do not confirm is not counted
    ([_r("srag", True, 0.9)], _controls(0.3), INCONCLUSIVE, "R1", "your controls score as high"),
    # ... nor does it clear: the shadow saw a member, so MBA's "not found" alone does not stand (R6)
    ([_r("srag", True, 0.9), _r("mba", False, 0.2)], _controls(0.3), INCONCLUSIVE, "R6", "S-RAG does not clear it"),
    ([_r("srag", False, 0.1), _r("mba", False, 0.2)], _controls(0.3), NOT_FOUND, "R3", "MBA agrees"),
    # above the rate against the controls, the lead's call stops MBA's shadow member call from counting (R7)
    ([MethodResult("srag", "d", 0.4, None, "not cleared", {"fpr": 0.05}), _r("mba", True, 0.9)], _controls(0.3),
     INCONCLUSIVE, "R7",
     "against your 20 controls (above 5%)"),
    # R0 does not apply: rewritten controls (biased), too few controls to call, no p-value: the shadow decides
    ([_r("srag", None, 0.4, reason="not cleared")], _controls(1 / 21, kind="generated"), INCONCLUSIVE, "R1",
     "not cleared"),
    ([_r("srag", None, 0.4, reason="not cleared")], _controls(1 / 19, n=18, called=None), INCONCLUSIVE, "R1",
     "not cleared"),
    ([_r("srag", True, 0.9)], _controls(None), MEMBER, "R2", "S-RAG calls it a member at a 5% false-positive rate"),
    # the audit's own rate decides: at 1%, p = 0.03 is no call (it would be at 5%), p = 0.005 is one
    ([_r("srag", None, 0.4, reason="not cleared")], {**_controls(0.03, n=120), "fpr": 0.01}, INCONCLUSIVE, "R1",
     "not cleared"),
    ([_r("srag", None, 0.4, reason="not cleared")], {**_controls(0.005, n=120), "fpr": 0.01}, MEMBER, "R2",
     "at a 1% false-positive rate against your 120 controls"),
])
def test_verdict_rule_r0_the_call_against_the_controls_leads(results, collection, verdict, rule, reason):
    from audit_core.verdict import decide_with_controls

    v = decide_with_controls("d", results, collection, AS_SENT)
    if rule == "R3":  # without the statement, R0's "not found" is withheld like any other (R5)
        assert decide_with_controls("d", results, collection).rule == "R5"
    assert (v.verdict, v.rule) == (verdict, rule), v.reason
    assert reason in v.reason or reason in str(v.methods), (v.reason, v.methods)
    if rule == "R2" and "controls" not in reason:
        assert "controls" not in v.reason  # a shadow call does not claim the controls' rate


def test_verdict_config_ignores_keys_of_older_versions():
    assert VerdictConfig.from_json({"confident_low": 0.2, "primary": "mba"}) == VerdictConfig(primary="mba")


# --------------------------------------------------------------------------- collection test


def test_collection_p_value_on_a_case_with_a_known_answer():
    # every document above every control: U = n m; exact one-sided p = 1 / C(n + m, n)
    u, p = u_test([3.0, 4.0], [1.0, 2.0])
    assert u == 4 and p == pytest.approx(1 / 6)
    u, p = u_test([5.0, 6.0, 7.0], [1.0, 2.0, 3.0, 4.0])
    assert u == 12 and p == pytest.approx(1 / math.comb(7, 3))
    t, p = top_weighted_test([3.0, 4.0], [1.0, 2.0])  # the pre-registered test: exact here too
    assert t == pytest.approx((1 / 4 + 1 / 3 + 1 / 2 + 1) + (1 / 4 + 1 / 3 + 1 / 2)) and p == pytest.approx(1 / 6)
    assert top_weighted_test([1.0, 2.0], [3.0, 4.0])[1] == 1.0
    a = savage_scores(np.array([5.0, 1.0, 3.0, 3.0]))
    assert a.mean() == pytest.approx(1.0) and a[2] == a[3] and a[0] > a[2] > a[1]
    res = collection_test([0.9] * 10 + [0.8] * 10, [0.1] * 20, method="srag", controls_kind="declared")
    assert res.effect_size == 1.0 and res.p_value == pytest.approx(1 / 10000)  # tied: permutation, 9,999 draws
    assert "on S-RAG's score" in res.note and "srag" not in res.note  # the owner reads labels
    assert collection_test([0.1] * 20, [0.9] * 20, method="srag", controls_kind="declared").p_value > 0.99


def test_collection_test_weighs_a_few_members_at_the_top_more_than_mann_whitney():
    """A RAG holding 5 of 20 documents: the Savage statistic finds them more often than U would."""
    rng = np.random.default_rng(8)
    sav = mw = 0
    for i in range(150):
        docs = np.r_[rng.normal(3.1, 1, 5), rng.normal(0, 1, 15)]
        ctl = rng.normal(0, 1, 20)
        sav += top_weighted_test(docs, ctl, seed=i, n_permutations=999)[1] <= 0.05
        mw += u_test(docs, ctl)[1] <= 0.05
    assert sav > mw + 20


def test_the_mixture_weights_are_the_log_likelihood_ratio_of_a_quarter_member_collection():
    from audit_core.evidence.collection import mixture_weights, statistic_weights

    w = mixture_weights(np.array([-100.0, 0.0, math.log(5.0), 100.0]), {"a": 1.0, "b": 0.0})
    # LR = e^x: log(3/4 + LR/4); an even score weighs 0, a hopeless one log(3/4), a sure one ~ x + log(1/4)
    assert w[0] == pytest.approx(math.log(0.75)) and w[1] == pytest.approx(0.0)
    assert w[2] == pytest.approx(math.log(0.75 + 5 / 4)) and w[3] == pytest.approx(50.0 + math.log(0.25), abs=1e-9)
    _, kind = statistic_weights(np.array([0.1, 0.9]), {"a": -3.0, "b": 1.0})  # a fit that falls with the score
    assert kind == "savage"
    assert statistic_weights(np.array([0.1, 0.9]), None)[1] == "savage"
    assert statistic_weights(np.array([0.1, 0.9]), {"a": 2.0, "b": -1.0})[1] == "likelihood ratio"


def test_the_mixture_weights_take_the_shadows_member_share_out_of_the_platt_odds():
    """A shadow with 40 usable members beside 80 non-members: the fit's odds are a posterior at prior 1/2, and the
    collection test weighs the likelihood ratio, so the same scores get the weights a balanced shadow gives them."""
    from audit_core.evidence.collection import mixture_weights

    m, n = _separated(80, shift=1.5, seed=7)
    unbalanced, balanced = C.fit_platt(m[:40], n), C.fit_platt(m, n)
    assert unbalanced["prior_log_odds"] == pytest.approx(math.log(40 / 80))
    assert balanced["prior_log_odds"] == pytest.approx(0.0)
    xs = np.linspace(-2, 3, 11)
    # the posterior log-odds differ by about the prior; the likelihood ratios they imply agree far better
    assert np.mean(unbalanced["a"] * xs + unbalanced["b"] - (balanced["a"] * xs + balanced["b"])) < -0.4
    want = mixture_weights(xs, balanced)
    corrected = np.abs(mixture_weights(xs, unbalanced) - want).mean()
    as_before = np.abs(mixture_weights(xs, {k: v for k, v in unbalanced.items() if k != "prior_log_odds"})
                       - want).mean()
    assert corrected < as_before / 3


def test_the_likelihood_ratio_statistic_finds_a_quarter_member_collection_more_often_than_ranks():
    """5 members of 20 against 20 controls at S-RAG-like separation (d = 3.1, AUC 0.986), the LR known."""
    d = 3.1
    lr = {"a": d, "b": -d * d / 2}  # binormal: log LR(x) = d x - d^2 / 2
    rng = np.random.default_rng(8)
    by_lr = by_rank = null_lr = 0
    for i in range(200):
        docs, ctl = np.r_[rng.normal(d, 1, 5), rng.normal(0, 1, 15)], rng.normal(0, 1, 20)
        by_lr += top_weighted_test(docs, ctl, seed=i, n_permutations=999, platt=lr)[1] <= 0.05
        by_rank += top_weighted_test(docs, ctl, seed=i, n_permutations=999)[1] <= 0.05
        null_lr += top_weighted_test(rng.normal(0, 1, 20), ctl, seed=i, n_permutations=999, platt=lr)[1] <= 0.05
    assert by_lr >= by_rank + 25 and by_lr / 200 > 0.75
    assert null_lr / 200 <= 0.09  # a permutation test: its level holds whatever the weights


def test_a_wrong_likelihood_ratio_costs_power_but_not_validity():
    rng = np.random.default_rng(5)
    wild = {"a": 40.0, "b": -30.0}  # far too steep for these scores
    ps = np.array([top_weighted_test(rng.normal(size=20), rng.normal(size=20), seed=i, n_permutations=999,
                                     platt=wild)[1] for i in range(300)])
    assert abs(np.mean(ps <= 0.05) - 0.05) < 0.035 and abs(np.mean(ps <= 0.5) - 0.5) < 0.1


def test_the_collection_test_weighs_by_the_shadows_fit_and_says_which_statistic_it_used():
    m, n = _separated(200, shift=3.0, seed=4)
    platt = C.fit_platt(m, n)
    kw = dict(method="srag", controls_kind="declared", member_raw=m, nonmember_raw=n)
    docs, ctl = m[:5] + n[:15], n[100:120]
    with_lr = collection_test(docs, ctl, platt=platt, **kw)
    by_rank = collection_test(docs, ctl, **kw)
    assert with_lr.weights == "likelihood ratio" and by_rank.weights == "savage"
    assert "log-likelihood ratio of a 25%-member collection" in with_lr.note and "Savage" in by_rank.note
    assert with_lr.power_quarter_members > by_rank.power_quarter_members + 0.1
    falling = collection_test(docs, ctl, platt={"a": -1.0, "b": 0.0}, **kw)
    assert falling.weights == "savage" and falling.p_value == by_rank.p_value


def test_collection_p_value_is_about_uniform_under_the_null():
    rng = np.random.default_rng(11)
    ps = np.array([collection_test(rng.normal(size=20), rng.normal(size=20), method="x",
                                   controls_kind="declared").p_value for _ in range(400)])
    assert abs(np.mean(ps <= 0.05) - 0.05) < 0.03 and abs(np.mean(ps <= 0.5) - 0.5) < 0.08
    hist = np.histogram(ps, bins=4, range=(0, 1))[0]
    assert hist.min() > 70  # no quarter of [0, 1] is starved


def test_collection_power_comes_from_the_shadow_and_grows_with_signal():
    weak_m, weak_n = _separated(200, shift=0.3)
    strong_m, strong_n = _separated(200, shift=1.5)
    kw = dict(method="x", controls_kind="declared")
    weak = collection_test([0.0] * 20, [0.0] * 20, member_raw=weak_m, nonmember_raw=weak_n, **kw)
    strong = collection_test([0.0] * 20, [0.0] * 20, member_raw=strong_m, nonmember_raw=strong_n, **kw)
    assert weak.power < 0.5 < strong.power and strong.power_quarter_members < strong.power
    with pytest.raises(ValueError):
        collection_test([1.0], [0.0], method="x", controls_kind="whatever")


def test_the_collection_result_says_how_many_controls_would_find_a_quarter_member_collection():
    from audit_core.evidence.collection import controls_for_power, simulated_power

    m, n = _separated(200, shift=3.0, seed=4)  # S-RAG-like separation on the completion profile
    at_20 = simulated_power(m, n, 20, 20, 0.25, n_sim=150)
    needed = controls_for_power(m, n, 20, 20, n_sim=150)
    assert at_20 < 0.9 and needed is not None and needed[0] in (40, 60, 100) and needed[1] >= 0.9
    weak_m, weak_n = _separated(200, shift=0.3)
    assert controls_for_power(weak_m, weak_n, 20, 20, n_sim=100) is None  # the signal, not the controls, limits
    res = collection_test([0.0] * 20, [0.0] * 20, method="x", controls_kind="declared", member_raw=m, nonmember_raw=n)
    assert res.power_quarter_members < 0.9 and res.controls_needed in (40, 60, 100)
    assert f"with about {res.controls_needed} controls" in res.note


def test_collection_method_is_chosen_from_the_shadow_not_from_audited_scores():
    good = C.apply_evidence(Calibration("mba"), C.fit_evidence(*_separated(100), source="t"))
    rng = np.random.default_rng(0)
    flat = C.apply_evidence(Calibration("srag"), C.fit_evidence(rng.normal(size=50).tolist(),
                                                                rng.normal(size=50).tolist(), source="t"))
    order = ("srag", "mba", "rag_mia")
    assert choose_method(["srag", "mba"], {"srag": flat, "mba": good}, order) == "mba"
    assert choose_method(["srag", "mba"], {"srag": good, "mba": good}, order) == "srag"
    assert choose_method(["srag"], {"srag": flat}, order) == "srag"  # nothing has signal: still one, fixed
    # both with signal: the one whose shadow promises the test more power, whatever the order
    weaker = C.apply_evidence(Calibration("srag"), C.fit_evidence(*_separated(100, shift=1.2), source="t"))
    stronger = C.apply_evidence(Calibration("mba"), C.fit_evidence(*_separated(100, shift=3.5), source="t"))
    assert choose_method(["srag", "mba"], {"srag": weaker, "mba": stronger}, order) == "mba"
    assert choose_method(["srag", "mba"], {"srag": stronger, "mba": weaker}, order) == "srag"
    # without controls there is no test to give power to: the first with signal, and no simulation is run
    import audit_core.evidence.collection as collection

    def no_simulation(*a, **k):
        raise AssertionError("simulated the power of a test that has no controls")

    real, collection.simulated_power = collection.simulated_power, no_simulation
    try:
        assert choose_method(["srag", "mba"], {"srag": weaker, "mba": stronger}, order, 4000, 0) == "srag"
        assert choose_method(["srag", "mba"], {"srag": flat, "mba": good}, order, 4000, 0) == "mba"
        assert choose_method(["srag"], {"srag": flat}, order, 4000, 0) == "srag"
    finally:
        collection.simulated_power = real


def test_run_audit_picks_the_collection_method_from_its_shadow_when_the_audited_scores_favour_another():
    """Two methods: the shadow separates A's members well and B's hardly at all, while every audited document
    scores far higher under B. The pre-registered method is A, whatever the audit's own scores say."""
    from audit_core.audit import AuditConfig, run_audit

    rng = np.random.default_rng(11)

    class Named(_ToyMethod):
        def __init__(self, name, shift):
            super().__init__()
            self.name, self.shift = name, shift

        def probe(self, doc, target):
            obs = super().probe(doc, target)
            obs.method = self.name
            obs.data["raw"] += self.shift
            return obs

    def shadow(name, gap):
        return ([Observation(name, f"{name}m{i}", data={"raw": float(rng.normal(gap, 1))}) for i in range(60)],
                [Observation(name, f"{name}n{i}", data={"raw": float(rng.normal(0, 1))}) for i in range(60)])

    shadows = {"toya": shadow("toya", 4.0), "toyb": shadow("toyb", 0.8)}

    class Prep:
        def __init__(self, cals):
            self.calibrations = cals

    def prepare(methods, shadow_cfg, progress):
        return Prep({m.name: m.prepare(*shadows[m.name]) for m in methods})

    docs = [Document(f"d{i}", f"text {i} " * 3) for i in range(20)]
    controls = [Document(f"c{i}", f"control {i} " * 3) for i in range(20)]
    import audit_core.audit as audit_mod

    made = {"toya": lambda: Named("toya", 0.0), "toyb": lambda: Named("toyb", 50.0)}
    orig = audit_mod.create_method
    audit_mod.create_method = lambda name, **kw: made[name]()
    try:
        result = run_audit(docs, _ToyTarget({d.id: 3.0 for d in docs[:5]}),
                           AuditConfig(methods=["toyb", "toya"], fpr=0.05), prepare=prepare,
                           capabilities=Capabilities(reachable=True, logprobs=False, max_top_logprobs=0),
                           controls=controls)
    finally:
        audit_mod.create_method = orig
    raw = {m: np.mean([result.results[d.id][m].evidence["raw_score"] for d in docs]) for m in ("toya", "toyb")}
    assert raw["toyb"] > raw["toya"] + 40  # the audit's own scores favour B ...
    assert result.to_json()["collection"]["method"] == "toya"  # ... and the shadow chose A


# --------------------------------------------------------------------------- canaries


def test_canaries_are_reproducible_from_their_seed_and_distinct_across_seeds(tmp_path):
    kit = new_kit(10)
    again = CanaryKit(kit.seed, 10)
    assert [d.text for d in kit.published()] == [d.text for d in again.published()]
    assert [d.text for d in kit.siblings()] == [d.text for d in again.siblings()]
    other = new_kit(10)
    assert not {d.text for d in kit.published()} & {d.text for d in other.published() + other.siblings()}
    pub, sib = kit.published(), kit.siblings()
    assert len(pub) == len(sib) == 10 and not {d.id for d in pub} & {d.id for d in sib}
    assert len({canary_text(kit.seed, i) for i in range(500)}) == 500  # unique
    assert all(25 <= d.n_words <= 90 for d in pub + sib)  # long enough for S-RAG and MBA
    path = save_kit(kit, tmp_path / "kit.json")
    assert (path.stat().st_mode & 0o077) == 0 and load_kit(path) == kit  # owner-only file
    assert kit.seed not in json.dumps([d.text for d in pub]) and kit.seed not in kit.kit_id
    with pytest.raises(ValueError):
        load_kit(tmp_path / "missing.json")


def test_sibling_calls_have_a_false_positive_rate_of_at_most_the_rate():
    rng = np.random.default_rng(4)
    rates = []
    for _ in range(300):
        calls = sibling_calls(rng.normal(size=20).tolist(), rng.normal(size=40).tolist(), 0.05)
        rates.append(np.mean([c for _, c in calls]))
    assert np.mean(rates) <= 0.05 + 0.01
    assert sibling_calls([1.0], [0.0] * 5, 0.05) == [(pytest.approx(1 / 6), None)]  # too few siblings: no call


# --------------------------------------------------------------------------- report and CLI pieces


def test_report_json_states_fpr_power_and_what_the_audit_shows():
    from audit_core.evidence.statement import what_this_shows
    from audit_core.report import method_power_rows

    m, n = _separated(100)
    cal = C.apply_evidence(Calibration("srag"), C.fit_evidence(m, n, source="t"))
    from audit_core.audit import method_power

    result = {"method_power": method_power({"srag": cal})}
    rows = method_power_rows(result)
    assert rows[0][0] == "Method" and rows[1][:3] == ["srag", "5%", f"{C.power_at(cal):.2f}"] and rows[1][5] == "yes"
    cleared = C.clearance_of(cal)["cleared_share"]
    assert 0.5 < cleared < 1 and rows[1][3] == f"{cleared:.2f} (members missed at most 5%)"
    assert method_power_rows({}) == []
    text = what_this_shows(0.05, {"p_value": 0.003, "n_documents": 20, "n_controls": 20, "controls_kind": "declared"})
    assert "at most 5%" in text and "cannot by itself prove" in text and "p = 0.003" in text
    led = {"p_value": 0.003, "n_documents": 20, "n_controls": 20, "leads_verdicts": True}
    declared = what_this_shows(0.05, led | {"controls_kind": "declared"})
    assert "the rate holds on your own kind of text as far as your controls are drawn like" in declared
    assert "the rate holds by construction" in what_this_shows(0.05, led | {"controls_kind": "canaries"})


def test_a_quarter_of_a_small_collection_is_at_least_one_member():
    """round(0.25 * 2) is 0: the "quarter" power was the false-positive rate, and the note blamed the method."""
    from audit_core.evidence.collection import simulated_power

    m, n = _separated(60, shift=4.0, seed=3)
    assert simulated_power(m, n, 2, 20, 0.25, n_sim=200) > 0.2


def test_cli_prints_the_collection_line_first_and_makes_a_private_kit(tmp_path, capsys):
    from app import cli

    cli._print_collection({"p_value": 0.0042, "statistic": 30.1, "effect_size": 0.71, "n_documents": 20,
                           "n_controls": 18, "power": 0.93, "controls_kind": "declared", "method": "srag"})
    out = capsys.readouterr().out
    assert out.startswith("your collection: member evidence p = 0.0042, from 20 documents against 18 controls")
    kit_file, pub = tmp_path / "kit.json", tmp_path / "pub.txt"
    assert cli.main(["canaries", "make", "--kit", str(kit_file), "--n", "10", "--out", str(pub)]) == 0
    kit = load_kit(kit_file)
    assert pub.read_text().strip().split("\n\n") == [d.text for d in kit.published()]
    assert kit.seed not in capsys.readouterr().err
    assert cli.main(["canaries", "make", "--kit", str(kit_file)]) == 2  # never overwrite a seed silently


def test_canaries_make_never_destroys_a_seed_and_leaves_no_kit_behind_on_bad_output(tmp_path, capsys):
    """--out equal to --kit overwrote the seed (exit 0); a missing --out folder crashed after saving the kit."""
    from app import cli

    kit_file = tmp_path / "k.json"
    assert cli.main(["canaries", "make", "--kit", str(kit_file), "--out", str(kit_file)]) == 2
    assert "would overwrite the seed" in capsys.readouterr().err and not kit_file.exists()
    assert cli.main(["canaries", "make", "--kit", str(kit_file), "--out", str(tmp_path / "no" / "p.txt")]) == 2
    assert "does not exist" in capsys.readouterr().err and not kit_file.exists()
    other = tmp_path / "other-kit.json"
    save_kit(new_kit(10), other)
    before = other.read_text()
    assert cli.main(["canaries", "make", "--kit", str(kit_file), "--out", str(other)]) == 2
    assert other.read_text() == before and not kit_file.exists()
    with pytest.raises(SystemExit) as stop:  # fewer than MIN_CANARIES: argparse refuses, exit 2
        cli.main(["canaries", "make", "--kit", str(kit_file), "--n", "2"])
    assert stop.value.code == 2 and "10 or more" in capsys.readouterr().err


def test_a_kit_with_a_weak_seed_or_an_edited_count_is_refused(tmp_path):
    """An empty seed made the canaries public; an edited n moved published canaries among the controls."""
    for seed in ("", "00", "AB" * 16, " ".join(["ab"] * 16)):
        with pytest.raises(ValueError, match="32 lowercase hex"):
            CanaryKit(seed, 10)
    for n in (0, 2.9, "20", True):
        with pytest.raises(ValueError, match="whole number"):
            CanaryKit("ab" * 16, n)
    path = save_kit(new_kit(20), tmp_path / "kit.json")
    saved = json.loads(path.read_text())
    assert load_kit(path).n == 20 and "check" in saved
    path.write_text(json.dumps(saved | {"n": 21}))
    with pytest.raises(ValueError, match="not a usable canary kit: its seed or number of canaries was changed"):
        load_kit(path)
    path.write_text(json.dumps({k: v for k, v in saved.items() if k != "check"}))  # a kit from before the check
    assert load_kit(path).n == 20


def test_a_cached_srag_calibration_from_before_fpr_control_abstains(monkeypatch):
    pd = pytest.importorskip("pandas")
    from audit_core.methods import srag

    class Fixed:
        def predict_proba(self, X):
            return pd.DataFrame({0: [0.1] * len(X), 1: [0.9] * len(X)})

    method = srag.SragMethod()
    monkeypatch.setattr(method, "features", lambda o: ({"a": 1.0, **{f"count_{j}": 0.0 for j in range(10)},
                                                        "below_topk_share": 0.0}, None, []))
    old = Calibration("srag", 0.5, shadow_auc=0.95, model=Fixed(),
                      params={"feature_columns": ["a"], "validation_scores": [0.1, 0.9]})
    res = method.score(Observation("srag", "d"), old)
    assert res.decision is None and res.reason.startswith("uncalibrated: the cached S-RAG calibration predates")
    m, n = _separated(60)
    new = C.apply_evidence(Calibration("srag", model=Fixed(), params={"feature_columns": ["a"]}),
                           C.fit_evidence([x / 10 for x in m], [x / 10 for x in n], source="t"))
    res = method.score(Observation("srag", "d"), new)
    assert res.decision is not None and res.evidence["raw_score"] == pytest.approx(0.9) and res.evidence["fpr"] == 0.05


def test_the_evidence_benchmark_counts_a_document_not_cleared_as_not_called_a_member():
    """Realised FPR is false positives over every non-member the method judged, not only the decided ones."""
    bench = _script()
    gray = f"{C.NOT_CLEARED}: below the member threshold, but 9 of the shadow's 30 members score this low"
    rows = ([{"method": "x", "label": 0, "score": 0.9, "decision": True, "reason": None}]
            + [{"method": "x", "label": 0, "score": 0.2, "decision": None, "reason": gray}] * 3
            + [{"method": "x", "label": 0, "score": 0.0, "decision": False, "reason": None}] * 6
            + [{"method": "x", "label": 0, "score": None, "decision": None, "reason": "target error"}] * 5
            + [{"method": "x", "label": 1, "score": 0.1, "decision": None, "reason": gray}] * 2
            + [{"method": "x", "label": 1, "score": 0.95, "decision": True, "reason": None}] * 2)
    res = bench.realised_fpr(rows, {})["x"]
    at = res["at_fpr"]["0.05"]
    assert at["decided_nonmembers"] == 10 and at["false_positives"] == 1 and at["realised_fpr"] == pytest.approx(0.1)
    assert at["realised_tpr"] == pytest.approx(0.5)
    assert res["not_found"] == {"members": 0, "nonmembers": 6, "not_cleared_members": 2, "not_cleared_nonmembers": 3}


def test_the_evidence_benchmark_weighs_stored_probabilities_as_the_audit_weighs_raw_scores():
    """The benchmark keeps Platt probabilities; their log-odds with (1, 0) are the raw scores with (a, b)."""
    from audit_core.evidence.collection import LOG_ODDS, log_odds, mixture_weights

    bench = _script()
    m, n = _separated(60, shift=2.5, seed=2)
    platt = C.fit_platt(m, n)
    raw = np.array(m[:10] + n[:10])
    probs = [C.platt_probability(x, platt) for x in raw]
    assert np.allclose(mixture_weights(np.array(log_odds(probs)), LOG_ODDS), mixture_weights(raw, platt))
    res = bench.simulate_collections(log_odds([C.platt_probability(x, platt) for x in m]),
                                     log_odds([C.platt_probability(x, platt) for x in n]), 60,
                                     platt=LOG_ODDS)
    assert res["weights"] == "likelihood ratio" and res["power_5_of_20"] > 0.3


def test_the_audits_collection_test_weighs_raw_scores_by_the_calibrations_platt_fit():
    from audit_core.audit import AuditConfig, collection_summary

    m, n = _separated(100, shift=3.0, seed=6)
    cal = C.apply_evidence(Calibration("srag"), C.fit_evidence(m, n, source="t"))
    platt = cal.params["evidence"]["platt"]
    doc_raw, ctl_raw = m[:5] + n[:15], n[50:70]

    def result(i: str, raw: float) -> MethodResult:
        return MethodResult("srag", i, C.platt_probability(raw, platt), None, None, {"raw_score": raw})

    docs = [Document(f"d{i}", "text") for i in range(20)]
    ctls = [Document(f"c{i}", "text") for i in range(20)]
    results = {d.id: {"srag": result(d.id, x)} for d, x in zip(docs, doc_raw)}
    ctl_results = {c.id: result(c.id, x) for c, x in zip(ctls, ctl_raw)}
    out = collection_summary(docs, results, ctls, ctl_results, "srag", {"srag": cal}, AuditConfig())
    assert out["weights"] == "likelihood ratio"
    direct = collection_test(doc_raw, ctl_raw, method="srag", controls_kind="declared", member_raw=m,
                             nonmember_raw=n, platt=platt)
    assert out["p_value"] == direct.p_value and out["statistic"] == pytest.approx(direct.statistic)


def test_the_evidence_benchmark_reads_the_calibration_the_benchmark_run_used(tmp_path):
    """A cache with a quick and a standard shadow of one method: the run's own is taken, not the newest."""
    import os

    bench = _script()
    for i, (key, thr) in enumerate([("quickkey", 0.81), ("standardkey", 0.89)]):
        (tmp_path / "shadow" / key).mkdir(parents=True)
        f = tmp_path / "shadow" / key / "calibration.json"
        f.write_text(json.dumps({"method": "srag", "threshold": thr, "params": {"evidence": {"tag": key}}}))
        os.utime(f, (1000 + i, 1000 + i))  # the standard one is newer
    run = tmp_path / "run"
    run.mkdir()
    assert bench.calibrations(tmp_path, run)["srag"]["params"]["evidence"]["tag"] == "standardkey"  # newest
    (run / "results.json").write_text(json.dumps({"shadow": {"srag": {"threshold": 0.81}}}))
    assert bench.calibrations(tmp_path, run)["srag"]["params"]["evidence"]["tag"] == "quickkey"  # by threshold
    (run / "results.json").write_text(json.dumps({"shadow": {"srag": {"threshold": 0.81, "key": "standardkey"}}}))
    assert bench.calibrations(tmp_path, run)["srag"]["params"]["evidence"]["tag"] == "standardkey"  # by key
    # a zoo run names its shadows profile:method; the audited profile's entry decides
    (run / "results.json").write_text(json.dumps({"shadow": {"chat:srag": {"key": "quickkey"},
                                                             "http-custom:srag": {"key": "standardkey"}}}))
    assert bench.calibrations(tmp_path, run, "chat")["srag"]["params"]["evidence"]["tag"] == "quickkey"
    assert bench.calibrations(tmp_path, run, "http-custom")["srag"]["params"]["evidence"]["tag"] == "standardkey"


def test_the_generated_controls_benchmark_sees_a_rewrite_bias_and_no_bias_where_there_is_none():
    """Originals against their own rewrites: exchangeable rewrites reject at the level, deflated ones far more."""
    bench = _script("bench_generated_controls")
    rng = np.random.default_rng(3)
    ids_m, ids_n = [f"m{i}" for i in range(50)], [f"n{i}" for i in range(50)]
    orig = {i: rng.normal(3.0, 1) for i in ids_m} | {i: rng.normal(0, 1) for i in ids_n}
    fair = {i: rng.normal(0, 1) for i in ids_m + ids_n}  # a rewrite is a fresh non-member
    deflated = {i: orig[i] - 1.0 for i in ids_m + ids_n}  # a rewrite scores lower than its original
    fit = {"a": 3.0, "b": -4.5}
    ok = bench.collections(orig, fair, ids_m, ids_n, 200, fit)
    biased = bench.collections(orig, deflated, ids_m, ids_n, 200, fit)
    assert ok["fpr_20_nonmembers_vs_their_rewrites"] <= 0.1 and ok["power_5_members_of_20_vs_their_rewrites"] > 0.5
    assert biased["fpr_20_nonmembers_vs_their_rewrites"] > 0.5


def test_a_test_against_generated_controls_states_their_measured_bias():
    from audit_core.evidence.collection import GENERATED_CONTROLS_BIAS

    m, n = _separated(100, shift=3.0, seed=6)
    kw = dict(method="srag", member_raw=m, nonmember_raw=n, platt=C.fit_platt(m, n))
    generated = collection_test(m[:5] + n[:15], n[50:70], controls_kind="generated", **kw)
    declared = collection_test(m[:5] + n[:15], n[50:70], controls_kind="declared", **kw)
    assert GENERATED_CONTROLS_BIAS in generated.note and "12.5%" in generated.note
    assert GENERATED_CONTROLS_BIAS not in declared.note and generated.p_value == declared.p_value


def test_each_document_gets_its_p_value_against_the_controls_and_the_line_counts_the_calls():
    """With controls, every scored document is also called against them alone (conformal, at the audit's rate)."""
    from audit_core.audit import AuditConfig, collection_summary
    from audit_core.evidence.statement import collection_sentence
    from audit_core.report import collection_lines

    m, n = _separated(100, shift=3.0, seed=6)
    cal = C.apply_evidence(Calibration("srag"), C.fit_evidence(m, n, source="t"))
    ctl_raw = [float(x) for x in np.linspace(-1.0, 1.0, 20)]
    doc_raw = [5.0, 0.0, 1.5, None]  # above every control, in the middle, just above the highest, no score

    def result(i: str, raw: float | None) -> MethodResult:
        return MethodResult("srag", i, None if raw is None else C.platt_probability(raw, cal.params["evidence"]["platt"]),
                            None, None, {} if raw is None else {"raw_score": raw})

    docs = [Document(f"d{i}", "text") for i in range(4)]
    ctls = [Document(f"c{i}", "text") for i in range(20)]
    results = {d.id: {"srag": result(d.id, x)} for d, x in zip(docs, doc_raw)}
    ctl_results = {c.id: result(c.id, x) for c, x in zip(ctls, ctl_raw)}
    out = collection_summary(docs, results, ctls, ctl_results, "srag", {"srag": cal}, AuditConfig())
    pv = out["document_p_values"]
    assert pv["d0"] == pytest.approx(1 / 21) and pv["d2"] == pytest.approx(1 / 21) and pv["d3"] is None
    assert pv["d1"] == pytest.approx(11 / 21)  # 10 of 20 controls score 0.0 or more
    assert out["called_members"] == 2
    line = collection_sentence(out)
    assert "Against the controls alone, 2 of 3 documents are called members at 5%" in line
    # declared controls: as strong as the declaration; only canaries' random assignment holds by construction
    assert "holds by construction" not in line and "as far as the controls are drawn like the documents" in line
    assert "holds by construction" in collection_sentence({**out, "controls_kind": "canaries"})
    # both powers: the all-member figure alone read as clearance beside a large p-value
    assert f"{out['power']:.2f} if every document were a member, {out['power_quarter_members']:.2f} if a quarter" \
        in line and any("if a quarter were" in x for x in collection_lines({"collection": out}))
    assert any("Called: d0, d2." in x for x in collection_lines({"collection": out}))
    # 18 controls are too few for a call at 5%: p-values, but no call, and the line says what is needed
    few = collection_summary(docs, results, ctls[:18], ctl_results, "srag", {"srag": cal}, AuditConfig())
    assert few["called_members"] is None and few["document_p_values"]["d0"] == pytest.approx(1 / 19)
    assert "needs at least 19 scored controls" in collection_sentence(few)
    # rewritten controls: the clause does not claim the rate holds by construction
    assert "holds by construction" not in collection_sentence({**out, "controls_kind": "generated"})


def test_the_evidence_benchmark_reads_one_profile_of_a_run_with_several(tmp_path):
    """A run of two profiles holds the same documents twice: their rows must not replace each other."""
    bench = _script()
    rows = [{"profile": p, "defense": "none", "method": "verbatim", "doc_id": "d", "label": 1, "score": s}
            for p, s in (("chunked", 0.3), ("http-custom", 0.7))]
    (tmp_path / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [r["score"] for r in bench.load_rows(tmp_path)] == [0.3]  # the folder's first profile
    assert [r["score"] for r in bench.load_rows(tmp_path, profile="http-custom")] == [0.7]


def test_the_evidence_benchmark_measures_whole_verdicts_with_and_without_r0():
    """Shadow calls that are conservative on the target (threshold far above its non-members): R0 brings the
    realised rate up to about the requested 5% and finds the members the shadow's threshold missed."""
    bench = _script()
    rng = np.random.default_rng(9)
    rows = []
    for i, (label, s) in enumerate([(0, x) for x in rng.normal(0, 1, 70)] + [(1, x) for x in rng.normal(3, 1, 40)]):
        rows.append({"method": "srag", "doc_id": f"d{i}", "label": label, "score": float(s), "reason": None,
                     "decision": True if s > 4.0 else (False if s < 1.0 else None)})
    res = bench.control_led_verdicts(rows, "srag", n_controls=20, splits=200)
    assert res["shadow"]["nonmember_member"] < 0.01 and res["shadow"]["member_member"] < 0.3
    assert 0.02 < res["r0"]["nonmember_member"] < 0.08 and res["r0"]["member_member"] > 0.8
    assert res["r0"]["member_not_found"] <= res["shadow"]["member_not_found"]
    assert "too few" in bench.control_led_verdicts(rows[:15], "srag")["reason"]


def test_the_evidence_benchmark_calls_documents_against_held_out_controls_at_the_rate():
    """Controls drawn from exchangeable non-members: the realised FPR is about the rate; members are found."""
    bench = _script()
    rng = np.random.default_rng(8)
    rows = ([{"method": "x", "label": 0, "score": float(s)} for s in rng.normal(0, 1, 60)]
            + [{"method": "x", "label": 1, "score": float(s)} for s in rng.normal(4, 1, 30)]
            + [{"method": "y", "label": 0, "score": 0.0}] * 10)
    res = bench.control_calibrated_fpr(rows, n_controls=20, splits=300)
    assert 0.02 < res["x"]["mean_fpr"] < 0.08 and res["x"]["mean_tpr"] > 0.8
    assert res["x"]["tested_nonmembers"] == 40 and "too few" in res["y"]["reason"]


def test_the_evidence_benchmarks_oracle_weighs_by_the_draws_own_likelihood_ratio():
    """The upper bound reads a monotone, clipped log-LR off the labels; it outscores the shadow's fit where both apply."""
    from audit_core.evidence.collection import LOG_ODDS

    bench = _script()
    m, n = _separated(50, shift=2.0, seed=4)
    lm, ln = bench.oracle_log_lr(m, n)
    pairs = sorted(zip(m + n, lm + ln))
    assert all(b[1] >= a[1] - 1e-12 for a, b in zip(pairs, pairs[1:]))  # never runs against the score
    bound = math.log((1 - 0.5 / 51) / (0.5 / 51))
    assert max(map(abs, lm + ln)) <= bound + 1e-9 and np.mean(lm) > 1 > -1 > np.mean(ln)
    oracle = bench.simulate_collections(lm, ln, 200, platt=LOG_ODDS)
    ranks = bench.simulate_collections(m, n, 200, platt=None)
    assert oracle["power_5_of_20"] > ranks["power_5_of_20"]


def test_a_score_that_is_not_a_number_decides_nothing_and_counts_as_no_score():
    """A NaN became a member call against the controls (smallest p-value) and a "not cleared" reading 0."""
    from audit_core.evidence.canaries import sibling_calls
    from audit_core.evidence.collection import raw_score

    m, n = _separated(60)
    cal = C.apply_evidence(Calibration("x"), C.fit_evidence(m, n, source="t"))
    d = C.decide_raw(float("nan"), cal)
    assert d.decision is None and d.score is None and d.reason.startswith("no usable score")
    calls = sibling_calls([float("nan"), 0.5], [float("nan")] * 19 + [0.2], 0.05)
    assert calls[0] == (None, None) and calls[1] == (pytest.approx(1 / 2), None)  # one scored control: no call
    assert raw_score(MethodResult("x", "d", 0.3, None, None, {"raw_score": float("nan")})) is None


def test_a_target_logprob_that_is_nan_or_positive_is_a_bad_response():
    from audit_core.target.base import BadResponse
    from audit_core.target.openai_compat import tokens_from_logprob_entries

    ok = [{"token": "a", "logprob": -0.5, "top_logprobs": [{"token": "a", "logprob": -0.5}]}]
    assert tokens_from_logprob_entries(ok, str, "t")[0].logprob == -0.5
    assert tokens_from_logprob_entries([{"token": "a", "logprob": 1e-7}], str, "t")  # rounding: kept
    for bad in (float("nan"), 0.7):
        with pytest.raises(BadResponse, match="not a log-probability"):
            tokens_from_logprob_entries([{"token": "a", "logprob": bad}], str, "t")


def test_an_abstaining_lead_under_r0_does_not_object_and_a_not_found_states_the_miss_rate():
    """R0 turned a lead without signal into an R6 objection; "not found" reasons named a false-positive rate."""
    from audit_core.verdict import decide_with_controls

    lead = MethodResult("srag", "d", 0.4, None, "no signal: on the shadow RAG this method's AUC is 0.55", {"fpr": 0.05})
    coll = {"controls_kind": "declared", "called_members": 0, "method": "srag", "fpr": 0.01,
            "document_p_values": {"d": 0.5}, "control_scores": {f"c{i}": 0.1 * i for i in range(120)}}
    v = decide_with_controls("d", [lead, _r("mba", False, 0.2)], coll, AS_SENT)
    assert (v.verdict, v.rule) == (NOT_FOUND, "R3"), v.reason
    assert v.reason == "MBA did not find it (at most 5% of its shadow's members score this low)"
    # a shadow member call the controls do not confirm still objects
    called = MethodResult("srag", "d", 0.9, True, None, {"fpr": 0.01})
    assert decide_with_controls("d", [called, _r("mba", False, 0.2)], coll, AS_SENT).rule == "R6"


def test_nineteen_controls_allow_a_call_at_five_percent_and_eighteen_do_not():
    """At least 1/fpr - 1 controls: with 19 the best p-value is 1/20 = 0.05, which is a call at 5% (p <= fpr)."""
    from audit_core.verdict import control_call

    assert sibling_calls([9.0], [0.0] * 19, 0.05) == [(pytest.approx(0.05), True)]
    assert sibling_calls([9.0], [0.0] * 18, 0.05) == [(pytest.approx(1 / 19), None)]
    assert control_call(_r("srag", None, 0.4, reason="x"), 0.05, 0.05, 19).decision is True
    assert control_call(_r("srag", None, 0.4, reason="x"), 0.051, 0.05, 19).decision is None


def test_a_nan_among_the_shadow_scores_is_left_out_of_the_fit():
    m, n = _separated(60)
    ev = C.fit_evidence(m + [float("nan")], n + [float("nan")], source="t")
    assert len(ev["member_raw"]) == len(m) and len(ev["nonmember_raw"]) == len(n) and math.isfinite(ev["auc"])


@pytest.mark.parametrize("fpr, called", [(0.05, 1), (0.01, 0)])
def test_the_collection_summary_calls_each_document_at_the_audits_rate(fpr, called):
    """One document above 118 of 120 controls: p = 3/121 = 0.025, a call at 5% but not at 1% (the audit's rate
    had no test: a summary made at 5% whatever the rate passed them all)."""
    from audit_core.audit import AuditConfig, collection_summary

    docs = [Document("d", "word " * 30)]
    controls = [Document(f"c{i}", f"other{i} " * 30) for i in range(120)]
    results = {"d": {"srag": MethodResult("srag", "d", 0.9, True, None, {"raw_score": 0.95})}}
    ctl = {c.id: MethodResult("srag", c.id, 0.1, False, None, {"raw_score": 0.99 if i < 2 else i / 1000})
           for i, c in enumerate(controls)}
    m, n = _separated(60)
    cal = {"srag": C.apply_evidence(Calibration("srag"), C.fit_evidence(m, n, source="t"))}
    out = collection_summary(docs, results, controls, ctl, "srag", cal, AuditConfig(fpr=fpr))
    assert out["fpr"] == fpr and out["document_p_values"]["d"] == pytest.approx(3 / 121)
    assert out["called_members"] == called


@pytest.mark.parametrize("n_docs, n_controls, decimals", [(40, 30, None), (12, 50, 1), (50, 12, 1)])
def test_the_permutation_test_draws_its_permutations_in_blocks_with_the_same_p_value(monkeypatch, n_docs, n_controls,
                                                                                     decimals):
    """All 9,999 permutations at once held 3.3 GB at 4,000 documents and 50 controls (session 55). In blocks the
    generator draws the same stream, so the p-value is the one all at once gave, to the last digit. Session 58
    finds each permutation's documents by a partition of its keys, on the smaller side, where a full sort took
    three quarters of the time: the same sets, so the same p-value, with fewer documents than controls or more,
    and with tied scores."""
    import audit_core.evidence.collection as collection

    rng = np.random.default_rng(7)
    docs, ctl = rng.normal(0.4, 1, n_docs), rng.normal(0, 1, n_controls)
    if decimals is not None:
        docs, ctl = docs.round(decimals), ctl.round(decimals)
    docs, ctl = docs.tolist(), ctl.tolist()
    a, _ = collection.statistic_weights(np.concatenate([docs, ctl]), None)
    t = float(a[:n_docs].sum())
    whole = np.argsort(np.random.default_rng(3).random((999, n_docs + n_controls)),
                       axis=1)[:, :n_docs]  # the earlier computation
    expected = (1 + np.sum(a[whole].sum(axis=1) >= t - 1e-9 * max(1.0, abs(t)))) / 1000
    for block in (1, 7 * (n_docs + n_controls), 10 ** 9):  # one permutation at a time, seven, all
        monkeypatch.setattr(collection, "PERMUTATION_BLOCK", block)
        assert top_weighted_test(docs, ctl, seed=3, n_permutations=999) == (t, float(expected))


def test_the_collection_tests_effect_size_is_u_without_a_permutation_p_value():
    """The test read only U from u_test, whose permutation p-value (with ties) held 9,999 resamples of every
    score at once: 3 GB at 4,000 documents and 50 controls (session 55)."""
    from audit_core.evidence.collection import u_statistic

    rng = np.random.default_rng(2)
    for docs, ctl in (([3.0, 4.0], [1.0, 2.0]), (rng.normal(0.5, 1, 30).round(1).tolist(),  # with ties
                                                  rng.normal(0, 1, 25).round(1).tolist())):
        assert u_statistic(docs, ctl) == u_test(docs, ctl)[0]
    assert u_statistic([1.0, 1.0], [1.0]) == 1.0  # a tie counts a half


@pytest.mark.parametrize("n", [19, 20, 30, 39, 40, 50, 59, 60, 100, 199, 200])
def test_a_not_cleared_reason_states_the_count_the_rule_allows(n):
    """The reason said "needs at most 5%" beside the plain share: with 30 members, one member as low (3%)
    already kept a document from being cleared. It now states how many members the rule lets score as low."""
    members = [float(i) for i in range(n)]
    allowed = C.clear_allowance(n)
    assert sum(x <= C.clear_threshold(members) for x in members) == allowed  # the count the rule clears at
    # too many non-members for the rate score above every member: the member threshold is above them all
    high = math.floor(0.05 * (n + 1)) + 1
    ev = C.fit_evidence(members, [-1000.0] * (n - high) + [1000.0] * high, source="test")
    cal = C.apply_evidence(Calibration("x"), ev)
    first_blocked = float(allowed)  # a score with allowed + 1 members at or below it
    d = C.decide_raw(first_blocked, cal)
    assert d.decision is None and d.reason.startswith(C.NOT_CLEARED)
    assert f"{allowed + 1} of the shadow's {n} members" in d.reason
    assert f"needs at most {allowed} of them" in d.reason
    assert C.decide_raw(first_blocked - 1, cal).decision is False


def test_the_power_table_says_a_shadow_too_small_to_clear_rather_than_blaming_its_members():
    """With 15 shadow members no document can be cleared at 5% whatever they score; the table said "its
    members score too low too often", which sends the reader looking for a weak method."""
    from audit_core.audit import method_power
    from audit_core.report import cleared_text

    members, nonmembers = [10.0 + i for i in range(15)], [float(i) for i in range(25)]
    small = C.apply_evidence(Calibration("x"), C.fit_evidence(members, nonmembers, source="test"))
    text = cleared_text(method_power({"x": small})["x"])
    assert text.startswith("none (the shadow has 15 scored member(s); at least 19 are needed")
    assert "too low too often" not in text
    low = C.apply_evidence(Calibration("x"), C.fit_evidence([0.0] * 5 + members * 2, nonmembers, source="test"))
    assert "too low too often" in cleared_text(method_power({"x": low})["x"])


def test_a_canary_kit_of_more_canaries_than_any_audit_runs_is_refused_before_it_is_made(tmp_path, capsys):
    """``--n 99999999999`` filled the memory ("unexpected failure (MemoryError)")."""
    from app import cli
    from audit_core.evidence.canaries import MAX_CANARIES

    with pytest.raises(SystemExit):
        cli.main(["canaries", "make", "--kit", str(tmp_path / "k.json"), "--n", "99999999999"])
    assert f"it must be {MAX_CANARIES} or less" in capsys.readouterr().err
    assert not (tmp_path / "k.json").exists()


def test_the_power_simulation_counts_every_assignment_where_the_test_does():
    """3 documents against 3 controls, perfectly apart: the exact test's p is 1/20 = 0.05 and always rejects,
    while 999 Monte Carlo permutations put p above 0.05 about half the time, so the power read 0.49."""
    from audit_core.evidence.collection import simulated_power, top_weighted_test

    members, nonmembers = [5.0, 5.1, 5.2, 5.3], [0.0, 0.1, 0.2, 0.3]
    assert top_weighted_test([5.0, 5.1, 5.2], [0.0, 0.1, 0.2])[1] == pytest.approx(0.05)
    assert simulated_power(members, nonmembers, 3, 3, n_sim=50) == 1.0


def test_an_infinite_platt_slope_falls_back_to_ranks_instead_of_weighing_with_nan():
    from audit_core.evidence.collection import top_weighted_test, weights_kind

    assert weights_kind({"a": math.inf, "b": 0.0}) == "savage"
    _, p = top_weighted_test([0.1, 0.2, 0.3], [0.4, 0.5, 0.6], platt={"a": math.inf, "b": 0.0})
    assert p > 0.5  # documents under every control: no evidence, where NaN weights gave p = 0


def test_a_canary_kit_file_with_an_impossible_number_of_canaries_is_refused_in_words(tmp_path):
    """A kit without its check and n = 10^11 filled the memory ("unexpected failure (MemoryError)")."""
    import json

    from audit_core.evidence.canaries import MAX_CANARIES, load_kit

    path = tmp_path / "kit.json"
    path.write_text(json.dumps({"seed": "0" * 32, "n": 10 ** 11}))
    with pytest.raises(ValueError, match=f"from one to {MAX_CANARIES:,}"):
        load_kit(path)


def test_generator_one_still_writes_what_old_kits_published_and_new_kits_write_grammatically():
    """Kits store a seed, not texts: the texts generator 1 wrote must never change (a pinned digest of 200), or an
    old kit would audit canaries that were never published. New kits use generator 2, which drew the same words
    but wrote "a organ tuner", "two ferrets sleeps" and "the honey cake sell out" in about 18% of them."""
    import hashlib

    from audit_core.evidence.canaries import GENERATOR, CanaryKit, canary_text, new_kit

    seed = "0123456789abcdef0123456789abcdef"
    v1 = "\n".join(canary_text(seed, i) for i in range(200))
    assert hashlib.sha256(v1.encode()).hexdigest() == "cd46d7028a6c462e88bbc483e2b8fd5d0e8f54cb1bfe304c4d5a9c7233f95804"
    v2 = [canary_text(seed, i, "2") for i in range(2000)]
    bad = re.compile(r"\ba (?:organ|old|o)|\btwo ferrets (?:sleeps|guards)|honey cake (?:sell |cool |are )")
    assert re.search(bad, v1) and not any(bad.search(t) for t in v2)
    assert new_kit(10).generator == GENERATOR == "2"
    old = CanaryKit.from_json({"seed": seed, "n": 10})  # saved before generators had names
    assert old.generator == "1" and old.published()[0].text == canary_text(seed, old.published_indices()[0])


def test_a_kit_whose_canaries_this_code_writes_otherwise_is_refused(tmp_path):
    import json

    from audit_core.evidence.canaries import load_kit, new_kit, save_kit

    kit = new_kit(10)
    path = save_kit(kit, tmp_path / "kit.json")
    assert load_kit(path) == kit
    saved = json.loads(path.read_text())
    path.write_text(json.dumps(saved | {"published_sha256": "0" * 64}))
    with pytest.raises(ValueError, match="texts that were never published"):
        load_kit(path)
    path.write_text(json.dumps(saved | {"generator": "9"}))
    with pytest.raises(ValueError, match="generator '9'"):
        load_kit(path)


def test_a_not_found_from_a_hand_built_calibration_claims_no_measured_miss_rate():
    """A threshold without out-of-fold evidence decides by raw >= threshold, with no clearing rule behind a
    "not found": its reason had said "at most 5% of its shadow's members score this low" all the same."""
    from audit_core.evidence.calibration import decide_raw

    d = decide_raw(0.49, Calibration("mba", threshold=0.5))
    v = decide("d", [MethodResult("mba", "d", d.score, d.decision, d.reason, d.evidence)], AS_SENT)
    assert v.rule == "R3" and "at most 5%" not in v.reason and "was not measured" in v.reason
