"""S-RAG end to end on real models: shadow from the shipped auxiliary corpus
(SmolLM2), target = reference RAG with Gemma over genmedgpt5k documents."""
from __future__ import annotations

import random

import numpy as np
import pytest

from audit_core.metrics import roc_auc

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def experiment(shared_data):
    from audit_core.methods.srag import SragConfig, SragMethod
    from shadow.corpus import filter_by_words, load_corpus
    from shadow.prepare import ShadowConfig, prepare_shadow
    from shadow.rag import RagConfig, RagSystem

    docs = filter_by_words(load_corpus(shared_data / "genmedgpt5k.jsonl"), min_words=30)
    docs = sorted(docs, key=lambda d: d.id)
    picked = random.Random(4).sample(docs, 60)
    members, nonmembers = picked[:30], picked[30:]
    target = RagSystem(members, RagConfig(generator="gemma-3-270m"))
    method = SragMethod(SragConfig(time_limit_s=60))
    prep = prepare_shadow([method], ShadowConfig(n_members=50, n_nonmembers=50))
    cal = prep.calibrations["srag"]
    m_obs = method.probe_many(members, target)
    n_obs = method.probe_many(nonmembers, target)
    return method, cal, m_obs, n_obs


def test_member_features_differ_from_non_members_in_the_expected_direction(experiment):
    method, _, m_obs, n_obs = experiment

    def mean_prob(obs):
        vals = []
        for o in obs:
            f, _, _ = method.features(o)
            vals.append(f["mean_prob"])
        return np.mean(vals)

    def below(obs):
        return np.mean([method.features(o)[0]["below_topk_share"] for o in obs])

    # the target has the member documents in its context: their hard words become likely
    assert mean_prob(m_obs) > mean_prob(n_obs) + 0.1
    assert below(m_obs) < below(n_obs)


def test_srag_auc_on_the_reference_target(experiment):
    method, cal, m_obs, n_obs = experiment
    scores = [method.score(o, cal).score for o in m_obs + n_obs]
    assert all(s is not None for s in scores)
    auc = roc_auc([1] * len(m_obs) + [0] * len(n_obs), scores)
    print(f"S-RAG AUC {auc:.3f}; shadow validation AUC {cal.shadow_auc:.3f}")
    assert cal.shadow_auc >= 0.8
    assert auc >= 0.8
