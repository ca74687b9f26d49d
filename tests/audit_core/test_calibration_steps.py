"""The calibration stage counts its steps (each shadow document read, then the fit) for the threshold
text methods and for S-RAG restored from a shipped preparation: on a chat shadow Verbatim's read took 98 s
and S-RAG's classifier fit about 15 s, each shown as 0 / 1 with no time left (Check calibration)."""
from __future__ import annotations

from typing import Any

from audit_core.methods.base import Observation
from audit_core.methods.textonly_base import ThresholdTextMethod
from audit_core.progress import steps_of


class _Scored(ThresholdTextMethod):
    """A threshold method whose score is stored in the observation."""

    name = "scored"
    default_threshold = 0.5

    def observation_score(self, obs: Observation) -> tuple[float | None, dict[str, Any], str | None]:
        return obs.data["score"], {}, None


def _obs(i: int, score: float) -> Observation:
    o = Observation("scored", f"d{i}", data={"score": score})
    o.requests.append({})
    o.responses.append({"text": "x", "tokens": None, "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    o.errors.append(None)
    return o


def test_a_threshold_methods_calibration_counts_each_shadow_document_and_the_fit():
    members = [_obs(i, 0.6 + i / 100) for i in range(12)]
    nonmembers = [_obs(20 + i, 0.1 + i / 100) for i in range(12)]
    seen: list[tuple[int, int]] = []
    with steps_of(lambda done, total: seen.append((done, total))):
        cal = _Scored().prepare(members, nonmembers)
    assert seen == [(i, 25) for i in range(26)]
    assert len(cal.member_scores) == 12 and cal.shadow_auc == 1.0


def test_s_rag_restored_from_a_saved_calibration_counts_its_documents_and_the_final_fit(monkeypatch):
    from tests.audit_core.test_srag import _fake_features, _saved_before_the_choice, _scorer_shadow, json_roundtrip

    from audit_core.methods import srag

    obs, fits = _scorer_shadow(monkeypatch, classifier_separates=True)
    old = _saved_before_the_choice(obs, monkeypatch)
    fits.clear()
    method = srag.SragMethod()
    _fake_features(method, monkeypatch)
    seen: list[tuple[int, int]] = []
    with steps_of(lambda done, total: seen.append((done, total))):
        cal = method.restore(json_roundtrip(old), obs[:30], obs[30:])
    assert cal.model is not None and fits == [60]  # the final classifier was fitted, once
    assert seen[0] == (0, 61) and seen[-1] == (61, 61)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and (60, 61) in seen


def test_s_rag_falling_back_to_a_full_preparation_counts_on_never_backwards(monkeypatch):
    """A saved fit that does not describe these observations is prepared again within the same stage: its fold
    fits are counted after the documents read (they had restarted at 0 of another total)."""
    from tests.audit_core.test_srag import _fake_features, _saved_before_the_choice, _scorer_shadow, json_roundtrip

    from audit_core.methods import srag

    obs, fits = _scorer_shadow(monkeypatch, classifier_separates=True)
    stale = json_roundtrip(_saved_before_the_choice(obs, monkeypatch))
    stale["params"]["oof_labels"] = list(reversed(stale["params"]["oof_labels"]))  # another shadow's fit
    method = srag.SragMethod()
    _fake_features(method, monkeypatch)
    fits.clear()
    seen: list[tuple[int, int]] = []
    with steps_of(lambda done, total: seen.append((done, total))):
        method.restore(stale, obs[:30], obs[30:])
    assert len(fits) > 1  # folds and the final classifier: a full preparation ran
    done = [d for d, _ in seen]
    assert done == sorted(done) and seen[-1][0] == seen[-1][1] and seen[-1][0] > 60
