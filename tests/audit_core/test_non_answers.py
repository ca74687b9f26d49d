"""Non-answers are never evidence (issue 17 point 2): every method, on replies that carry no signal.

An empty reply, a refusal or "I don't know" is a non-answer. A document with too many is
inconclusive with that reason, never a low score that clears it and never a member call.
Each case below failed before (session 48's review): the method scored the non-answers.
"""
from __future__ import annotations

from audit_core.methods.base import Observation
from audit_core.target.base import Completion, TokenLogprob, Usage

REFUSAL = "I'm sorry, I can't help with that."
IDK = "I don't know."


def _obs(method: str, texts: list[str], **data) -> Observation:
    obs = Observation(method, "d", requests=[{"q": i} for i in range(len(texts))],
                      responses=[Completion(t, None, Usage(5, 5)).to_json() for t in texts])
    obs.data = data
    return obs


def test_robustness_reads_two_refusals_as_no_evidence_not_as_two_alike_answers():
    from audit_core.methods.robustness import RobustnessMethod

    for pair in ([REFUSAL, REFUSAL], [IDK, IDK], ["...", "..."], [REFUSAL, "The knee hurts after a long shift."]):
        score, _, why = RobustnessMethod().observation_score(_obs("robustness", pair))
        assert score is None and why.startswith("non-answer"), (pair, score, why)


def test_perturbation_needs_a_yes_or_no_to_both_statements():
    from audit_core.methods.perturbation import PerturbationMethod

    for pair in (["Yes.", REFUSAL], [REFUSAL, "Yes."], ["", "No."]):
        score, _, why = PerturbationMethod().observation_score(_obs("perturbation", pair, edits=[]))
        assert score is None and why.startswith("non-answer"), (pair, score)
    score, _, why = PerturbationMethod().observation_score(_obs("perturbation", ["Yes.", "No."], edits=[]))
    assert score == 1.0 and why is None


def _questions(n: int) -> list[dict]:
    return [{"question": f"Is fact {i} true?", "expected": "yes"} for i in range(n)]


def test_interrogation_and_entailment_call_mostly_non_answers_inconclusive():
    from audit_core.methods.entailment import EntailmentMethod
    from audit_core.methods.interrogation import InterrogationMethod

    for texts in ([REFUSAL] * 8, [IDK] * 8, [REFUSAL] * 6 + ["Yes."] * 2):
        score, _, why = InterrogationMethod().observation_score(_obs("interrogation", texts, questions=_questions(8)))
        assert score is None and why.startswith("too many non-answers"), (texts[0], score, why)
        score, _, why = EntailmentMethod().observation_score(
            _obs("entailment", texts, questions=_questions(8), document="My knee hurts after a long shift."))
        assert score is None and why.startswith("too many non-answers"), (texts[0], score, why)
    score, _, why = InterrogationMethod().observation_score(
        _obs("interrogation", ["Yes."] * 6 + [IDK] * 2, questions=_questions(8)))
    assert why is None and score is not None  # a few "I don't know"s: the paper's penalty applies


def test_srag_reads_no_probability_from_a_refusal():
    from audit_core.methods.srag import observe_word

    toks = [TokenLogprob(t, -0.1, [(t, -0.1)]) for t in ["I", "'m", " sorry", ",", " I", " can", "'t"]]
    w = observe_word("amoxicillin", Completion(REFUSAL, toks, Usage(5, 7)), prefix="The doctor prescribed")
    assert w.prob is None and w.aligned == "not_aligned" and w.error.startswith("non_answer (refusal)")


def test_rag_mia_reads_a_hedge_as_no_answer_and_extraction_a_refusal_as_none():
    from audit_core.methods.extraction import ExtractionMethod
    from audit_core.methods.rag_mia import parse_yes_no

    for hedge in ("I'm not able to determine whether this appears in the context.",
                  "It is impossible for me to say whether it appears in the context."):
        assert parse_yes_no(hedge) is None, hedge
    assert parse_yes_no("Yes, it appears in the context.") is True
    items = [{"kind": "email", "value": "jane.doe@example.org"}]
    for texts in ([REFUSAL], ["..."]):
        score, _, why = ExtractionMethod().observation_score(_obs("extraction", texts, items=items))
        assert score is None and why.startswith("too many non-answers"), (texts, score, why)


def test_srag_reads_an_empty_reply_as_a_non_answer_not_as_missing_logprobs():
    from audit_core.methods.srag import SragConfig, observe_word, unaligned_features

    w = observe_word("amoxicillin", Completion("", [], Usage(5, 0)), prefix="The doctor prescribed")
    assert w.prob is None and w.error.startswith("non_answer (empty)")
    feats, why, _ = unaligned_features([w] * 5, SragConfig())
    assert feats is None and why.startswith("too many non-answers") and "logprobs" not in why
    text_only = observe_word("amoxicillin", Completion("amoxicillin", None, Usage(5, 1)))
    assert text_only.error.startswith("no_logprobs")  # an answer without probabilities is the missing capability


#: the fingerprint of the non-answer reader at each READER_REVISION (``_reader_fingerprint``)
READER_FINGERPRINTS = {"2": "d50a604666fcb3033f4adcf19c4321d0d738da7679e7ef9f5f5d79ed75018eee",
                       "3": "56b0761927ef9c3b83712ba5db184f9fec862aa7adf12713f5a477c2ac064f6e"}


def _reader_fingerprint() -> str:
    """SHA-256 of what decides how replies are read: both patterns with their flags, the share of non-answers
    that makes a document inconclusive, and the code of ``non_answer`` and ``too_many_non_answers`` without
    their docstrings (a reworded docstring or comment leaves it as it is)."""
    import ast
    import hashlib
    import inspect

    from audit_core.evidence import answers

    parts = [answers._REFUSAL.pattern, str(answers._REFUSAL.flags), answers._IGNORANCE.pattern,
             str(answers._IGNORANCE.flags), repr(answers.MAX_NON_ANSWER_SHARE)]
    for f in (answers.non_answer, answers.too_many_non_answers):
        fn = ast.parse(inspect.getsource(f)).body[0]
        if isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant):
            fn.body = fn.body[1:]
        parts.append(ast.unparse(fn))
    return hashlib.sha256("\n\x00".join(parts).encode()).hexdigest()


def test_a_change_in_how_replies_are_read_comes_with_a_new_reader_revision():
    """Saved calibrations are reused only under the reader revision they were fitted with (shadow.prepare):
    session 55 widened and narrowed the refusal patterns with no revision to bump, so a cache fitted
    with the older reader was reused as if nothing had changed. Changing a pattern or ``non_answer`` fails
    here until READER_REVISION is bumped and its new fingerprint recorded above (then recalibrate the shipped
    preparations: test_shipped checks they carry the revision)."""
    from audit_core.evidence.answers import READER_REVISION

    assert READER_FINGERPRINTS.get(READER_REVISION) == _reader_fingerprint(), (
        f"the non-answer reader changed under READER_REVISION {READER_REVISION!r}: bump it, record "
        f"{_reader_fingerprint()!r} for the new revision in READER_FINGERPRINTS, and recalibrate the shipped "
        "preparations (scripts/build_default_preparation.py --recalibrate)")
