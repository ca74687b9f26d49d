"""Text-only methods on a real chat RAG (SmolLM2-135M-Instruct, chat template), 20 members + 20 non-members.

Slow (each method sends 2-10 generations per document to a CPU model): run
with ``./run test -m slow tests/audit_core/test_textonly_real.py``. The bar
is "better than chance on this target", the ranking S-RAG and the baselines
are held to; the measured AUCs are in BENCHMARKS.md (text-only section).
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def chat_rag_split():
    from shadow.corpus import filter_by_words, load_corpus, split_members
    from shadow.rag import RagConfig, RagSystem

    docs = filter_by_words(load_corpus(ROOT / "assets" / "aux_medquad.jsonl"), max_words=120)
    half = len(docs) // 2
    kb, outside = split_members(docs, half, len(docs) - half, 0)
    rnd = random.Random(1)
    rag = RagSystem(kb, RagConfig(generator="smollm2-135m-instruct", prompt_style="chat"))
    return rag, rnd.sample(list(kb), 20), rnd.sample(list(outside), 20)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["interrogation", "entailment", "perturbation", "robustness", "srag_sampled"])
def test_method_ranks_members_above_non_members_on_a_chat_rag(name, chat_rag_split):
    from sklearn.metrics import roc_auc_score

    from audit_core.methods import create_method

    rag, members, nonmembers = chat_rag_split
    m = create_method(name)
    scores, labels = [], []
    for lab, group in ((1, members), (0, nonmembers)):
        for d in group:
            obs = m.probe(d, rag)
            if name == "srag_sampled":
                f, _, _ = m.features(obs)
                s = None if f is None else f["mean_prob"]
            else:
                s = None if obs.skipped else m.observation_score(obs)[0]
            if s is not None:
                scores.append(s)
                labels.append(lab)
    assert labels.count(1) >= 10 and labels.count(0) >= 10, "the method abstained on most documents"
    assert roc_auc_score(labels, scores) > 0.5


@pytest.mark.slow
def test_extraction_reproduces_personal_data_held_by_a_chat_rag():
    """A knowledge base that holds contact details: the extraction check reads a verbatim reproduction."""
    from audit_core.documents import Document
    from audit_core.methods import create_method
    from shadow.rag import RagConfig, RagSystem

    held = Document("pii", "Patient: My knee has been swollen for a week. Doctor: Please book a scan with "
                           "Dr. Helena Okafor, phone 555-301-4477, e-mail helena.okafor@ortho-clinic.example.")
    rag = RagSystem([held], RagConfig(generator="smollm2-135m-instruct", prompt_style="chat"))
    m = create_method("extraction")
    obs = m.probe(held, rag)
    s, ev, reason = m.observation_score(obs)
    assert s is not None, reason
    assert len(ev["items"]) == 3
