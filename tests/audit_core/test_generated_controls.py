"""Generated controls (audit_core.evidence.controls): the rewriting stage reports done / total from before
its model loads. No model is loaded here: the loader and the rewrite are fakes."""
from __future__ import annotations

import audit_core.models as models
from audit_core.documents import Document
from audit_core.evidence import controls


def test_rewriting_controls_reports_zero_of_total_before_the_model_loads(monkeypatch):
    """Loading the rewriting model takes a minute or more the first time: the stage shows 0 / 3 meanwhile,
    not nothing until the first document is rewritten."""
    events: list = []
    monkeypatch.setattr(models, "load_causal_lm", lambda name: events.append(("load", name)) or "lm")
    monkeypatch.setattr(controls, "rewrite", lambda text, lm: events.append(("rewrite", lm)) or
                        ("" if text == "empty" else text.upper()))
    docs = [Document("a", "one"), Document("b", "empty"), Document("c", "three")]
    out = controls.generate_controls(docs, progress=lambda done, total: events.append((done, total)))
    assert events == [(0, 3), ("load", controls.REWRITE_MODEL), ("rewrite", "lm"), (1, 3), ("rewrite", "lm"),
                      (2, 3), ("rewrite", "lm"), (3, 3)]
    assert [(d.id, d.text) for d in out] == [("control-a", "ONE"), ("control-c", "THREE")]  # an empty rewrite dropped
    # with a model given, nothing loads, and the stage still starts at 0
    events.clear()
    controls.generate_controls(docs[:1], lm="given", progress=lambda done, total: events.append((done, total)))
    assert events == [(0, 1), ("rewrite", "given"), (1, 1)]


def test_a_rewrite_that_echoes_its_original_or_takes_a_documents_id_is_no_control(monkeypatch, capsys):
    """Generated controls skipped the checks declared ones get: a rewrite equal to its document became a control
    identical to it, and a document named control-x collided with the control of document x."""
    import audit_core.evidence.controls as controls_mod
    from app.cli import _generated_controls
    from audit_core.documents import Document

    docs = [Document("x", "my first text about a sore knee"), Document("control-x", "a second text of mine"),
            Document("y", "a third text")]
    made = [Document("control-x", "my first text  about a sore knee"),  # an echo of x
            Document("control-control-x", "another text rewritten"),
            Document("control-y", "a text rewritten from the third")]
    monkeypatch.setattr(controls_mod, "generate_controls", lambda docs, progress=None: made)
    got = _generated_controls(docs)
    assert [c.text for c in got] == ["another text rewritten", "a text rewritten from the third"]
    assert not {c.id for c in got} & {d.id for d in docs}
    assert "same text as a document you audit" in capsys.readouterr().err
