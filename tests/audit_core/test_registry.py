"""The method registry is the one place methods are declared: everything else follows it."""
from __future__ import annotations

import pytest

from audit_core.documents import Document
from audit_core.estimate import estimate_audit
from audit_core.methods import LABELS, METHODS, create_method
from audit_core.methods.base import MembershipMethod


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_builds_and_matches_its_spec(name):
    spec = METHODS[name]
    m = create_method(name)
    assert isinstance(m, MembershipMethod)
    assert m.name == name
    assert m.requires_logprobs == spec.requires_logprobs
    assert m.requires_sources == spec.requires_sources
    assert LABELS[name] == spec.label


def test_every_method_appears_in_the_estimate():
    # the second document holds personal data, so that Extraction (one query per item) has something to ask
    docs = [Document("a", " ".join(f"word{i}" for i in range(150))),
            Document("b", " ".join(f"word{i}" for i in range(40)) + " write to me at jo.doe@mail.example today")]
    est = estimate_audit(docs, list(METHODS))
    assert set(est.methods) == set(METHODS)
    assert all(est.methods[m].queries > 0 or m == "s2mia_m" for m in METHODS)


def test_every_method_is_a_cli_choice(capsys):
    from app.cli import main

    with pytest.raises(SystemExit):
        main(["audit", "--help"])
    out = capsys.readouterr().out
    assert all(m in out for m in METHODS)


def test_every_method_has_a_report_and_plot_label():
    from audit_core.plots import method_label

    for name in METHODS:
        assert method_label(name) == LABELS[name] != name
        assert len(METHODS[name].description) > 30  # the report's "how it works" column
