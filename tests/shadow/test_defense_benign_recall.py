"""A defense's cost to honest users' answers: the honest question set and the retrieval recall."""
from __future__ import annotations

import json

import pytest

from shadow.defenses import benign_retrieval_recall, honest_questions_with_answers, question_answer


def _corpus(tmp_path, rows):
    p = tmp_path / "qa.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    return str(p)


def test_question_answer_splits_a_medquad_record():
    assert question_answer("Question: What is gout ? Answer: A kind of arthritis.") == \
        ("What is gout?", "A kind of arthritis.")
    assert question_answer("Patient: my knee hurts.") is None


def test_each_question_has_exactly_one_stored_answer_and_no_stored_question(tmp_path):
    rows = [{"id": f"r{i}", "text": f"Question: What causes condition {i} ? Answer: Condition {i} comes from "
                                    f"cause number {i} in most people."} for i in range(10)]
    # the same question twice (two answer parts): never drawn, since two documents would answer it
    rows += [{"id": "dup1", "text": "Question: What is shared ? Answer: The first part of a shared answer here."},
             {"id": "dup2", "text": "Question: What is shared ? Answer: The second part of a shared answer here."},
             {"id": "r0", "text": "Question: What repeats an id ? Answer: A record whose id occurs twice in it."}]
    kb, questions, gold = honest_questions_with_answers(_corpus(tmp_path, rows), n=4, kb_size=8, seed=1)
    assert len(kb) == 8 and len(questions) == len(gold) == 4
    assert len({d.id for d in kb}) == 8
    stored = {d.id: d.text for d in kb}
    for q, g in zip(questions, gold):
        assert g in stored and "shared" not in q
        assert q not in stored[g] and not stored[g].startswith("Question:")
        number = q.split("condition ")[1].rstrip("?")
        assert stored[g].startswith(f"Condition {number} ")
    assert honest_questions_with_answers(_corpus(tmp_path, rows), 4, 8, seed=1)[1] == questions  # seeded
    with pytest.raises(ValueError, match="asked once"):
        honest_questions_with_answers(_corpus(tmp_path, rows), n=20, kb_size=30)


class _Rec:
    def __init__(self, doc_ids, acted):
        self.doc_ids, self.defense_acted = doc_ids, acted


class _HidesOdd:
    """Retrieves each question's own answer, except that it hides it for every other question."""

    def __init__(self):
        self.calls = []

    def retrieve_records(self, queries):
        self.calls.append(len(queries))
        out = []
        for q in queries:
            i = int(q.split()[-1])
            out.append(_Rec(["other"] if i % 2 else [f"a{i}", "other"], acted=bool(i % 2)))
        return out


def test_recall_counts_the_questions_whose_answer_was_retrieved():
    rag, done = _HidesOdd(), []
    res = benign_retrieval_recall(rag, [f"question {i}" for i in range(7)], [f"a{i}" for i in range(7)], batch=3,
                                  progress=done.append)
    assert (res.found, res.total, res.acted) == (4, 7, 3)
    assert res.rate == pytest.approx(4 / 7)
    assert rag.calls == [3, 3, 1] and done == [3, 3, 1]
    with pytest.raises(ValueError, match="one answer id"):
        benign_retrieval_recall(rag, ["question 1"], [])
