"""Mirabel's cost to honest users: the benign false-positive rate."""
from __future__ import annotations

import json

import pytest

from audit_core.documents import Document
from shadow.defenses import benign_false_positive_rate, benign_questions


def test_benign_questions_are_medquad_questions_outside_the_knowledge_base(tmp_path):
    rows = [{"id": str(i), "text": f"Question: What is condition {i} ? Answer: It is a thing number {i}."}
            for i in range(6)] + [{"id": "x", "text": "No question here."}]
    p = tmp_path / "q.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    qs = benign_questions(str(p), 10, exclude=[rows[0]["text"]])
    assert sorted(qs) == [f"What is condition {i}?" for i in range(1, 6)]
    assert benign_questions(str(p), 2) == benign_questions(str(p), 2)  # seeded


@pytest.fixture(scope="module")
def defended(tmp_path_factory):
    from shadow.rag import RagConfig, RagSystem

    topics = ["knee pain after running", "a dry cough at night", "blurred vision when reading", "a rash on the arms",
              "ringing in the ears", "swollen ankles in the evening", "heartburn after meals", "hair loss in winter",
              "trouble sleeping", "bleeding gums when brushing", "a stiff neck in the morning", "numb fingers"]
    docs = [Document(f"d{i}", f"Patient: I have had {t} for a while. Doctor: We should examine it and run tests.")
            for i, t in enumerate(topics)]
    cfg = RagConfig(defense="mirabel", persist_dir=str(tmp_path_factory.mktemp("chroma")))
    return RagSystem(docs, cfg), docs


def test_benign_fpr_counts_the_queries_mirabel_flags(defended):
    rag, docs = defended
    attack = [d.text for d in docs[:4]]  # a document quoted whole: what Mirabel is built to catch
    benign = ["What foods are good for the heart?", "How much water should an adult drink?",
              "Is walking every day healthy?", "What vaccines do travellers need?"]
    a = benign_false_positive_rate(rag, attack)
    b = benign_false_positive_rate(rag, benign)
    assert a.total == b.total == 4
    assert a.rate > b.rate
    assert a.to_json()["flagged"] == a.flagged


def test_benign_fpr_needs_a_mirabel_system():
    class NotDefended:
        class config:
            defense = None

    with pytest.raises(ValueError, match="mirabel"):
        benign_false_positive_rate(NotDefended(), ["q"])


def test_the_benchmark_puts_mirabels_benign_rate_beside_every_row_under_it(tmp_path, monkeypatch):
    """runner.benign_fpr measures the profile's own defended knowledge base (chunked here), and the
    zoo table prints it in each Mirabel row and nowhere else."""
    from shadow.bench.report import zoo_table
    from shadow.bench.runner import BenchConfig, benign_fpr
    from shadow.profiles import get_profile

    monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path / "cache"))
    kb = [Document(f"k{i}", f"Question: What causes condition {c} ? Answer: Condition {c} comes from "
                            f"{c} exposure. " + " ".join(f"word{i}x{j}" for j in range(70)))
          for i, c in enumerate(["alpha", "beta", "gamma", "delta", "epsilon"])]
    q = tmp_path / "q.jsonl"
    q.write_text("\n".join(json.dumps({"id": str(i), "text": f"Question: How is ailment {i} treated ? Answer: rest."})
                           for i in range(8)) + "\n" + json.dumps({"id": "k0", "text": kb[0].text}))
    cfg = BenchConfig(benign_queries=6, benign_corpus=str(q))
    res = benign_fpr(cfg, get_profile("chunked"), kb)
    assert res["total"] == 6 and res["corpus"] == "q.jsonl" and 0 <= res["flagged"] <= 6  # the kb's record left out
    assert res["rate"] == pytest.approx(res["flagged"] / 6)
    s = {"auc": 0.7, "n_members": 2, "n_nonmembers": 2, "queries_per_doc": 3.0}
    zoo = {"chunked": {"none": {"verbatim": s}, "mirabel": {"verbatim": s}}}
    lines = zoo_table(zoo, {}, {"chunked": res}).splitlines()
    assert lines[0].endswith("defense's benign FPR |")
    none_row = next(x for x in lines if "| none |" in x)
    mirabel_row = next(x for x in lines if "| mirabel |" in x)
    assert none_row.endswith("| - |")
    assert mirabel_row.endswith(f"| {res['rate']:.3f} ({res['flagged']} / 6) |")
    assert zoo_table(zoo, {}, {}).splitlines()[-1].endswith("| not measured |")
