"""The capability probe finds how a target answers (completion or chat), and the audit's
shadow and S-RAG follow it (issue 19 point 2: "found by the capability probe, or chosen
by the user"). Reading a chat model as a completion model clears its members silently."""
from __future__ import annotations

import pytest

from audit_core.audit import AuditConfig, run_audit, with_target_style
from audit_core.documents import Document
from audit_core.methods.base import Calibration
from audit_core.target.base import (Capabilities, ChatRequest, Completion, RateLimited, Target, TokenLogprob,
                                    Usage)
from audit_core.target.style import STYLE_PROBES, answer_shape, classify, detect_style, resolve_style
from shadow.prepare import ShadowConfig

#: what each kind of model answered to the probes (real answers of the served profiles, abridged)
CONTINUING = {p: a for p, a in zip(STYLE_PROBES, [" coffee and eats a large breakfast.", " crops. The farmers were",
                                                    " oven. The recipe says to"])}
RESTATING = {p: p + " tea" for p in STYLE_PROBES}
REPLYING = {p: "Sure! Here is the completed paragraph:" for p in STYLE_PROBES}


class ScriptedTarget(Target):
    """Answers the style probes from a script (by the text it was asked to complete); counts requests."""

    name = "http://fake.local/v1 scripted"

    def __init__(self, answers: dict[str, str], fail: bool = False) -> None:
        super().__init__()
        self.answers, self.fail, self.requests = answers, fail, []

    def complete(self, request: ChatRequest) -> Completion:
        self.requests.append(request)
        if self.fail:
            raise RateLimited("429 too many requests")
        text = next((a for p, a in self.answers.items() if request.messages[-1][1].endswith(p)), "Yes")
        return Completion(text, [TokenLogprob("x", -0.1, [("x", -0.1)])], Usage(5, 1), "m")


@pytest.mark.parametrize("answers, style", [(CONTINUING, "completion"), (RESTATING, "chat"), (REPLYING, "chat")])
def test_the_probe_tells_a_continuing_model_from_a_chat_model(answers, style):
    target = ScriptedTarget(answers)
    found = detect_style(target)
    assert found.style == style
    # the requests are S-RAG's own prompt around each probe text, greedy, a few tokens each
    assert len(target.requests) == len(STYLE_PROBES)
    for req, probe in zip(target.requests, STYLE_PROBES):
        assert req.messages[-1][1].endswith(probe) and "Complete the paragraph" in req.messages[-1][1]
        assert req.temperature == 0.0 and 1 < req.max_tokens <= 16 and not req.logprobs


def test_answer_shapes():
    p = "After the storm had passed, the farmers walked out to check on their"
    assert answer_shape(p, " crops, which were flattened.") == "continues"
    assert answer_shape(p, "\n- animals") == "continues"
    assert answer_shape(p, "After the storm had passed") == "restates"
    assert answer_shape(p, "the farmers walked out to check on their crops") == "restates"
    assert answer_shape(p, "Crops were flattened by the wind.") == "reply"
    assert answer_shape(p, "I cannot help with that.") == "reply"
    assert answer_shape(p, "  \n") == "empty"


def test_a_majority_decides_and_silence_is_unknown():
    assert classify(["continues", "continues", "restates"]).style == "completion"
    assert classify(["continues", "restates", "reply"]).style == "chat"
    assert classify(["continues", "empty", "empty"]).style == "completion"  # unanswered probes are left out
    unknown = classify(["empty", "empty", "empty"])
    assert unknown.style is None and "none of the style probes" in unknown.detail
    failed = detect_style(ScriptedTarget(CONTINUING, fail=True))
    assert failed.style is None and "rate_limited" in failed.detail


def test_the_capability_probe_reports_the_style():
    caps = ScriptedTarget(CONTINUING).capabilities()
    assert caps.reachable and caps.style == "completion" and "3 of 3" in caps.style_detail
    assert ScriptedTarget(RESTATING).capabilities().style == "chat"


def test_the_users_choice_wins_then_the_probe_and_an_unknown_style_is_read_as_chat():
    assert resolve_style("completion", "chat") == ("completion", "chosen by the user")
    style, source = resolve_style(None, "completion", "it continued")
    assert style == "completion" and "capability probe" in source and "it continued" in source
    style, source = resolve_style(None, None, "the style probes failed (rate_limited)")
    assert style == "chat" and "rate_limited" in source
    with pytest.raises(ValueError):
        resolve_style("base", None)


def test_the_shadow_and_srag_follow_the_style_found():
    cfg = AuditConfig(methods=["srag", "mba"], shadow=ShadowConfig(), method_params={"srag": {"bins": 12}})
    styled = with_target_style(cfg, Capabilities(True, True, 20, style="chat", style_detail="3 of 3"))
    assert styled.shadow.prompt_style == "chat" and styled.method_params["srag"] == {"bins": 12, "style": "chat"}
    assert styled.target_style == "chat" and "capability probe" in styled.target_style_source
    assert cfg.shadow.prompt_style == "completion" and "style" not in cfg.method_params["srag"]  # a copy
    chosen = with_target_style(AuditConfig(shadow=ShadowConfig(), target_style="completion"),
                               Capabilities(True, True, 20, style="chat"))
    assert chosen.shadow.prompt_style == "completion" and chosen.method_params["srag"]["style"] == "completion"


def test_an_audit_of_a_chat_target_prepares_a_chat_shadow_and_says_so():
    seen = []

    class Prep:
        def __init__(self, methods, shadow):
            seen.append((shadow.prompt_style, {m.name: getattr(m.config, "style", None) for m in methods}))
            self.calibrations = {m.name: Calibration(m.name, 0.5, [0.9, 0.8], [0.2, 0.85], shadow_auc=0.9)
                                 for m in methods}

    docs = [Document("d0", "My knee hurts when I climb the stairs at work, mostly in the evening after a shift.")]
    result = run_audit(docs, ScriptedTarget(RESTATING), AuditConfig(methods=["srag"], shadow=ShadowConfig()),
                       lambda methods, shadow, progress=None: Prep(methods, shadow))
    assert seen == [("chat", {"srag": "chat"})]
    assert result.config["target_style"] == "chat" and "capability probe" in result.config["target_style_source"]
    assert result.capabilities["style"] == "chat"


def test_srag_without_logprobs_reads_a_chat_answer_where_it_reaches_the_word():
    """A chat model restates the paragraph first: the word read is the one after the restated prefix."""
    from audit_core.methods.base import Observation
    from audit_core.methods.srag import Probe
    from audit_core.methods.srag_sampled import SragSampledConfig, SragSampledMethod, aligned_word_hit

    prefix = "The patient was given five days of"
    said = lambda text, cut=False: Completion(text, None, Usage(5, 5), "length" if cut else "stop")
    assert aligned_word_hit(said(" amoxicillin for the ear"), prefix, "amoxicillin") == ("first", True)
    assert aligned_word_hit(said("The patient was given five days of Amoxicillin."), prefix,
                            "amoxicillin") == ("restated", True)
    assert aligned_word_hit(said("The patient was given five days of rest."), prefix, "amoxicillin") == \
        ("restated", False)
    assert aligned_word_hit(said("The patient was given five days of amox", cut=True), prefix,
                            "amoxicillin") == ("restated", True)
    assert aligned_word_hit(said("The patient was given five", cut=True), prefix, "amoxicillin")[1] is None

    chat = SragSampledMethod(SragSampledConfig(style="chat"))
    completion = SragSampledMethod(SragSampledConfig())
    probe = {"word": "amoxicillin", "word_index": 7, "prefix": prefix, "proxy_prob": 0.1}
    restated = said("The patient was given five days of amoxicillin twice a day.").to_json()
    obs = Observation("srag_sampled", "d", data={"probes": [probe, probe]}, responses=[restated, said(
        "The patient was given").to_json()], errors=[None, None])
    read = chat.word_observations(obs)
    assert (read[0].prob, read[0].aligned) == (1.0, "restated")
    assert read[1].prob is None and read[1].aligned == "not_aligned"  # no reading, never a miss
    assert [w.prob for w in completion.word_observations(obs)] == [0.0, 0.0]  # what a first-word reading saw
    # a chat probe asks for room to restate; the capability probe's style reaches this method too
    tokens = [m.build_requests([Probe(**probe)])[0].max_tokens for m in (chat, completion)]
    assert tokens[0] > tokens[1]
    styled = with_target_style(AuditConfig(methods=["srag_sampled"], shadow=ShadowConfig()),
                               Capabilities(True, False, 0, style="chat"))
    assert styled.method_params["srag_sampled"]["style"] == "chat"
