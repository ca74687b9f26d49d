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
