"""Text-only methods on a real chat RAG (SmolLM2-135M-Instruct, chat template), 20 members + 20 non-members.

Slow (each method sends 2-10 generations per document to a CPU model): run
with ``./run test -m slow tests/audit_core/test_textonly_real.py``. The bar
is "better than chance on this target" for a method whose shadow shows signal,
the ranking S-RAG and the baselines are held to, and "says it cannot, never
'not found'" for one whose shadow does not; the measured AUCs are in
BENCHMARKS.md (text-only section and target zoo).
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


def _shipped_chat_calibration(name: str, root: Path):
    """The method as an audit of a chat target creates it, and the calibration its shipped quick chat
    preparation gives (loaded, not probed: the test fails if that preparation is not shipped)."""
    from audit_core.methods import reads_target_style
    from shadow import shipped
    from shadow.corpus import corpus_hash
    from shadow.prepare import prepare_shadow

    prep = shipped.DefaultPreparation(name, (("style", "chat"),) if reads_target_style(name) else (), "quick", "chat")
    key = shipped.key_of(prep, corpus_hash(prep.shadow_config().corpus_docs()))
    assert key in shipped.read_manifest(), f"{name}: no shipped quick chat preparation"
    method = prep.create_method()
    return method, prepare_shadow([method], prep.shadow_config(), root=root).calibrations[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["verbatim", "interrogation", "entailment", "perturbation", "robustness",
                                  "srag_sampled"])
def test_method_on_a_chat_rag_separates_or_says_it_cannot(name, chat_rag_split, tmp_path):
    """Each text-only method on a real chat RAG, calibrated by its shipped chat-style shadow as an audit is.

    Where that shadow shows signal, the method ranks members above non-members
    here too; where it does not (most of these methods on a 135M chat model:
    BENCHMARKS.md, target zoo), every document is inconclusive with the reason,
    and no member is called "not found".
    """
    from sklearn.metrics import roc_auc_score

    from audit_core.methods.base import no_signal_reason

    m, cal = _shipped_chat_calibration(name, tmp_path)
    rag, members, nonmembers = chat_rag_split
    scores, labels, results = [], [], []
    for lab, group in ((1, members), (0, nonmembers)):
        for d in group:
            obs = m.probe(d, rag)
            results.append((lab, m.score(obs, cal)))
            if name == "srag_sampled":
                f, _, _ = m.features(obs)
                s = None if f is None else f["mean_prob"]
            else:
                s = None if obs.skipped else m.observation_score(obs)[0]
            if s is not None:
                scores.append(s)
                labels.append(lab)
    assert not [r.doc_id for lab, r in results if lab == 1 and r.decision is False], "a member called 'not found'"
    why = no_signal_reason(cal)
    if why is not None:
        assert all(r.decision is None and r.reason for _, r in results), why
        return
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


@pytest.mark.slow
def test_cited_sources_on_a_chat_rag_that_lists_its_sources_and_on_one_that_does_not(chat_rag_split):
    """Retrieval read from the cited passages: members far above non-members on a real chat RAG; the same
    RAG without a sources field leaves every document inconclusive with the reason, never "not found"."""
    from sklearn.metrics import roc_auc_score

    from audit_core.methods import create_method
    from audit_core.methods.base import Calibration

    rag, members, nonmembers = chat_rag_split
    m = create_method("cited_sources")
    m.use_collection([d.text for d in members + nonmembers])  # each half asked again, led by a neighbour
    rag.cite_sources = True
    try:
        scores = [m.observation_score(m.probe(d, rag))[0] for d in members + nonmembers]
    finally:
        rag.cite_sources = False
    assert None not in scores
    assert roc_auc_score([1] * len(members) + [0] * len(nonmembers), scores) >= 0.9
    cal = Calibration("cited_sources", threshold=0.05, shadow_auc=0.99)
    silent = [m.score(m.probe(d, rag), cal) for d in members[:5]]
    assert all(r.decision is None and r.reason.startswith("no_sources") for r in silent)
