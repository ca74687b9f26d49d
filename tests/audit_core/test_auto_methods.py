"""``--method auto``: the methods are chosen for what the target's capability probe found.

Before it, the command line's default was S-RAG and MBA whatever the target: a first audit of a chat service
without logprobs (the common real case) sent four probe queries and called all 20 documents inconclusive, and
the owner had to read a hint and run again.
"""
from __future__ import annotations

import pytest

from audit_core.audit import AuditConfig, config_dict, select_methods, with_target_style
from audit_core.methods import AUTO, METHODS, expand_auto, methods_for_target
from audit_core.target.base import Capabilities


def _caps(logprobs: bool, style: str, sources: bool = False) -> Capabilities:
    return Capabilities(True, logprobs, 20 if logprobs else 0, style=style, style_detail="test", sources=sources)


def test_a_base_model_with_logprobs_keeps_the_papers_methods():
    # the README's first audit (the demo: logprobs, completion style, no sources) is unchanged by the default
    assert methods_for_target(True, False, "completion") == ["srag", "mba"]


def test_a_chat_model_gets_the_method_that_decides_there():
    assert methods_for_target(False, False, "chat") == ["verbatim"]
    # with logprobs S-RAG and MBA stay (they abstain with their reason when their shadow shows no signal)
    assert methods_for_target(True, False, "chat") == ["srag", "mba", "verbatim"]
    assert "verbatim" in methods_for_target(False, False, "completion")


@pytest.mark.parametrize("logprobs,style", [(True, "completion"), (True, "chat"), (False, "chat"),
                                            (False, "completion")])
def test_a_target_that_cites_sources_also_gets_the_methods_that_read_them(logprobs, style):
    with_sources = methods_for_target(logprobs, True, style)
    readers = [n for n, s in METHODS.items() if s.requires_sources]
    assert readers and set(readers) <= set(with_sources)
    assert not set(readers) & set(methods_for_target(logprobs, False, style))


def test_every_method_chosen_can_run_on_the_target_it_was_chosen_for():
    for logprobs in (True, False):
        for style in ("completion", "chat"):
            for sources in (False, True):
                caps = _caps(logprobs, style, sources)
                cfg = with_target_style(AuditConfig(methods=[AUTO]), caps)
                _, cannot = select_methods(cfg, caps)
                assert cfg.methods and not cannot, (logprobs, style, sources, cannot)


def test_auto_is_expanded_in_place_beside_named_methods_each_once():
    assert expand_auto(["mink", AUTO, "verbatim"], False, False, "chat") == ["mink", "verbatim"]
    assert expand_auto(["srag", "mink"], False, False, "chat") == ["srag", "mink"]  # nothing to expand


def test_the_configuration_says_why_the_methods_were_chosen_and_only_then():
    chosen = with_target_style(AuditConfig(methods=[AUTO]), _caps(False, "chat"))
    assert chosen.methods == ["verbatim"]
    assert "--method auto" in chosen.methods_source and "text only" in chosen.methods_source
    assert config_dict(chosen)["methods_source"] == chosen.methods_source
    # the target's style as the user said it decides, not the probe's
    said = with_target_style(AuditConfig(methods=[AUTO], target_style="completion"), _caps(True, "chat"))
    assert said.methods == ["srag", "mba"]
    named = with_target_style(AuditConfig(methods=["srag", "mba"]), _caps(False, "chat"))
    assert named.methods == ["srag", "mba"] and named.methods_source == ""
    # a configuration that chose nothing keeps the plain data an older unfinished run was stored with
    assert "methods_source" not in config_dict(named)


def test_the_report_says_the_methods_were_chosen_for_the_target_and_why():
    import io

    from pypdf import PdfReader

    from audit_core import report
    from tests.audit_core.test_report import make_result

    r = make_result()
    why = with_target_style(AuditConfig(methods=[AUTO]), _caps(True, "completion")).methods_source
    r["config"] = {**r["config"], "methods_source": why}
    text = " ".join("\n".join(p.extract_text() for p in PdfReader(io.BytesIO(report.pdf_report(r))).pages).split())
    assert f"Methods {why}." in text
    plain = make_result()
    text = " ".join("\n".join(p.extract_text() for p in PdfReader(io.BytesIO(report.pdf_report(plain))).pages)
                    .split())
    assert "--method auto" not in text
