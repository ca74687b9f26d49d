"""The cited-sources method: a service that cites the owner's document is told apart from one that does not.

The fake services retrieve by word overlap, as a RAG does by similarity, and
list the passages they retrieved as the answer's sources (or echo the question,
or list none, or have no sources field), so every branch of the score can fail.
"""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

from audit_core.documents import Document
from audit_core.methods import create_method
from audit_core.methods.base import Calibration
from audit_core.target.base import Capabilities, ChatRequest, Completion, Target, Usage

DOCS = [
    Document(f"d{i}", text) for i, text in enumerate([
        "Patient: Doctor, I have had a dry cough for three days and it is getting worse at night. Doctor: This could "
        "be acute bronchitis. A chest X-ray is necessary and we should check your oxygen level.",
        "Question: What is tinnitus? Answer: Tinnitus is a common ringing in the ears. It is often mild but it can be "
        "severe in older adults. A hearing test is usually the first step and loud noise should be avoided.",
        "Patient: I have had swollen ankles for two weeks and I feel tired. Doctor: Swollen ankles can be an early "
        "sign of heart failure. An echocardiogram is the best test and a low salt diet is helpful.",
        "Question: What causes migraine? Answer: Migraine is a strong headache that often comes with nausea. Bright "
        "light and sudden stress are common triggers. A regular sleep schedule is helpful for most people.",
    ])
]


def _words(s: str) -> set[str]:
    return set(re.findall(r"[a-z]+", s.lower()))


class CitingRag(Target):
    """Retrieves the two passages that share the most words with the question and cites them."""

    name = "citing-rag"

    def __init__(self, docs, mode: str = "cite", chunk_words: int | None = None):
        super().__init__()
        self.mode = mode
        self.passages = []
        for d in docs:
            words = d.text.split()
            step = chunk_words or len(words)
            self.passages += [" ".join(words[i:i + step]) for i in range(0, len(words), step)]
        self.seen: list[ChatRequest] = []

    def complete(self, req: ChatRequest) -> Completion:
        self.seen.append(req)
        q = req.messages[-1][1]
        ranked = sorted(self.passages, key=lambda p: -len(_words(q) & _words(p)))[:2]
        sources = {"cite": ranked, "echo": [q], "none": [], "field_missing": None,
                   "titles": [f"https://forum.example/post/{i}" for i, _ in enumerate(ranked)]}[self.mode]
        return Completion("OK", None, Usage(10, 1), sources=sources)


def _score(method, doc, target) -> float:
    s, ev, reason = method.observation_score(method.probe(doc, target))
    assert s is not None, reason
    return s


def test_a_service_that_cites_the_document_scores_far_above_one_that_does_not():
    m = create_method("cited_sources")
    holds, lacks = CitingRag(DOCS), CitingRag(DOCS[1:])
    assert _score(m, DOCS[0], holds) == 1.0
    assert _score(m, DOCS[0], lacks) < 0.1
    assert len(holds.seen) == 2  # no collection: the two plain halves, no neighbour to lead them
    assert all(r.max_tokens == 1 and not r.logprobs for r in holds.seen)  # only the sources are read


def test_with_a_collection_each_half_is_asked_again_led_by_the_most_similar_other_document():
    m = create_method("cited_sources")
    twin = Document("d0-copy", DOCS[0].text)  # the same text is no neighbour: its words would all be left out
    m.use_collection([d.text for d in [DOCS[0], twin, DOCS[1], DOCS[3], DOCS[2]]])
    target = CitingRag(DOCS)
    obs = m.probe(DOCS[0], target)
    asked = [r.messages[-1][1] for r in target.seen]
    assert len(asked) == m.query_cost(DOCS[0].n_words).queries == 4
    assert obs.data["neighbour"] == DOCS[2].text  # the other patient's dialogue, not the Q&A records
    lead = " ".join(DOCS[2].text.split()[:m.config.lead_words])
    assert asked[:2] == obs.data["halves"] and asked[2:] == [f"{lead}\n\n{h}" for h in obs.data["halves"]]
    assert m.observation_score(obs)[0] == 1.0


def test_the_neighbours_words_are_never_counted_for_the_document_it_led():
    shared = "An echocardiogram is the best test and a low salt diet is helpful."
    a = Document("a", "Patient: My father has had shortness of breath on the stairs since the winter. " + shared)
    b = Document("b", "Patient: I have had swollen ankles for two weeks and I feel tired. Doctor: Swollen ankles can "
                      "be an early sign of heart failure. " + shared)
    m = create_method("cited_sources")
    m.use_collection([a.text, b.text, DOCS[1].text, DOCS[3].text])
    obs = m.probe(a, CitingRag([b, DOCS[1], DOCS[3]]))  # the service holds the neighbour, not the document
    assert obs.data["neighbour"] == b.text
    score, ev, _ = m.observation_score(obs)
    assert score == 0.0 and ev["ngrams_shared_with_the_neighbour"] > 0
    unguarded = dict(obs.data, neighbour="")
    blind = replace(obs, data=unguarded)
    assert m.observation_score(blind)[0] > 0.2  # what the neighbour's cited passage would have lent it


def test_the_shadow_is_probed_with_its_own_collection_and_the_owners_comes_back():
    m = create_method("cited_sources")
    m.use_collection([d.text for d in DOCS])
    shadow_docs = ["Question: What is gout? Answer: Gout is a painful swelling of a joint caused by uric acid.",
                   "Question: What is an ulcer? Answer: An ulcer is a sore in the lining of the stomach."]
    with m.probing_collection(shadow_docs):
        assert m.neighbour(shadow_docs[0]) == shadow_docs[1]
        assert m.neighbour(DOCS[0].text) in shadow_docs
    assert m.neighbour(DOCS[0].text) == DOCS[2].text


def test_a_chunked_service_is_credited_with_the_chunks_it_cites():
    m = create_method("cited_sources")
    s = _score(m, DOCS[2], CitingRag(DOCS, chunk_words=12))
    assert 0.15 < s < 1.0  # some chunks of the document come back, not all of them
    assert _score(m, DOCS[2], CitingRag([d for d in DOCS if d.id != "d2"], chunk_words=12)) < s / 3


def test_a_source_that_only_echoes_the_question_is_not_a_citation():
    m = create_method("cited_sources")
    assert _score(m, DOCS[0], CitingRag(DOCS, mode="echo")) == 0.0


@pytest.mark.parametrize("mode, reason", [("none", "no_source_cited"), ("field_missing", "no_sources"),
                                          ("titles", "no_passage")])
def test_without_cited_sources_the_document_is_inconclusive_never_not_found(mode, reason):
    m = create_method("cited_sources")
    res = m.score(m.probe(DOCS[0], CitingRag(DOCS, mode=mode)), Calibration("cited_sources", threshold=0.1,
                                                                             shadow_auc=0.99))
    assert res.score is None and res.decision is None and res.reason.startswith(reason)


def test_calibrated_on_a_shadow_it_calls_a_cited_document_a_member_and_never_clears_one():
    m = create_method("cited_sources")
    # copies under other ids stand in for a shadow of the size a 5% false-positive rate needs
    members = [Document(f"{d.id}~{i}", d.text) for i in range(12) for d in DOCS[:2]]
    nonmembers = [Document(f"{d.id}~{i}", d.text) for i in range(12) for d in DOCS[2:]]
    shadow = CitingRag(DOCS[:2])
    cal = m.prepare([m.probe(d, shadow) for d in members], [m.probe(d, shadow) for d in nonmembers])
    assert cal.threshold is not None and cal.shadow_auc == 1.0
    target = CitingRag([DOCS[3], DOCS[1]])
    yes, no = m.score(m.probe(DOCS[3], target), cal), m.score(m.probe(DOCS[0], target), cal)
    assert (yes.decision, no.decision) == (True, None), (yes, no)
    # member calls only: an uncited document is "not cleared", since a service citing chunks or snippets
    # of a document it holds would score it below what the shadow's whole documents taught
    assert no.reason.startswith("not cleared") and "snippets" in no.reason


def test_the_method_runs_only_on_a_target_whose_answers_carry_sources():
    from audit_core.audit import AuditConfig, select_methods

    cfg = AuditConfig(methods=["cited_sources", "verbatim"])
    _, cannot = select_methods(cfg, Capabilities(True, False, 0))
    assert "sources" in cannot["cited_sources"] and "verbatim" not in cannot
    can, cannot = select_methods(cfg, Capabilities(True, False, 0, sources=True))
    assert [x.name for x in can] == ["cited_sources", "verbatim"] and not cannot


def test_sources_survive_the_answer_store_and_older_answers_read_as_without():
    comp = Completion("OK", None, Usage(1, 1), sources=["a passage"])
    assert Completion.from_json(comp.to_json()).sources == ["a passage"]
    old = Completion("OK", None, Usage(1, 1)).to_json()
    assert "sources" not in old and Completion.from_json(old).sources is None
