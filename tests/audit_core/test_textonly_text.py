"""Text edits and questions of the text-only methods: what changes, what is asked, what is cached."""
from __future__ import annotations

import json

import pytest

from audit_core.methods import questions as Q
from audit_core.methods.antonyms import ANTONYMS, antonym
from audit_core.methods.text_edits import drop_words, key_phrase, perturb_antonyms, split_sentences, statements
from audit_core.scoring import split_words
from audit_core.target.base import Completion, Target, Usage

TEXT = ("Patient: Doctor, I have had a mild rash on my arms for three days. Doctor: It is likely a common "
        "allergy. A rapid test is possible, but early treatment is usually simple and safe. Severe cases "
        "are rare, and the swelling often goes down quickly.")


def test_perturbation_changes_only_the_chosen_adjectives_and_adverbs():
    cands = [w for w, _, _ in split_words(TEXT) if w.strip(".,:").lower() in ANTONYMS]
    assert len(cands) >= 10
    for ratio, expected in ((0.06, 1), (0.3, round(0.3 * len(cands))), (1.0, len(cands))):
        p = perturb_antonyms(TEXT, ratio=ratio)
        assert len(p.edits) == expected
        before, after = split_words(TEXT), split_words(p.text)
        assert len(before) == len(after)  # one word for one word
        changed = [(a[0], b[0]) for a, b in zip(before, after) if a[0] != b[0]]
        assert len(changed) == expected
        for (old, new), e in zip(changed, p.edits):
            assert old.replace(e.old, e.new) == new  # only the word, not its punctuation
            assert antonym(e.old) == e.new
        # everything outside the edits is byte for byte the original
        pos, rebuilt = 0, []
        for e in p.edits:
            assert TEXT[e.start:e.end] == e.old
            rebuilt.append(TEXT[pos:e.start] + e.new)
            pos = e.end
        assert "".join(rebuilt) + TEXT[pos:] == p.text
    assert perturb_antonyms(TEXT).text == perturb_antonyms(TEXT).text  # seeded by the text
    assert perturb_antonyms("The cat sat on the mat.").edits == []


def test_perturbation_leaves_prepositions_verbs_and_participles_alone_but_false_statements_use_them():
    """DCMI swaps adjectives and adverbs: "Patients absent with symptoms after the age of 3" was a copy any model
    rejects, member or not. Interrogation only needs a statement made false, and "before" -> "after" makes one."""
    text = ("Patients present with symptoms before the age of 3 and are known to have pain above the right knee. "
            "The right to open the file was taken inside the clinic, with a daily dose.")
    assert perturb_antonyms(text, ratio=1.0).edits == []
    got = perturb_antonyms("Patients with mild symptoms recover quickly.", ratio=1.0)
    assert [(e.old, e.new) for e in got.edits] == [("mild", "severe"), ("quickly", "slowly")]
    assert len(perturb_antonyms(text, ratio=1.0, adjectives_only=False).edits) == 9
    assert Q.false_version("Symptoms start before the age of 3.") == "Symptoms start after the age of 3."
    assert antonym("before") == "after" and antonym("before", adjectives_only=True) is None


def test_antonyms_keep_capitalisation():
    assert antonym("Severe") == "Mild" and antonym("RARE") == "COMMON" and antonym("quickly") == "slowly"
    assert antonym("table") is None


def test_drop_words_removes_inner_words_only():
    p = drop_words(TEXT, ratio=0.1)
    assert p.text.split()[0] == TEXT.split()[0] and p.text.split()[-1] == TEXT.split()[-1]
    assert len(TEXT.split()) - len(p.text.split()) == len(p.edits) == round(0.1 * len(TEXT.split()))


def test_sentences_statements_and_key_phrases():
    sents = split_sentences(TEXT)
    assert sents[0].startswith("I have had a mild rash")  # speaker label and vocative removed
    st = statements(TEXT)
    assert st[0].startswith("The patient has had a mild rash on the patient's arms")
    assert key_phrase("Swollen ankles can be an early sign of heart failure.") == "Swollen ankles"  # ties: the first run
    assert key_phrase("It is what it is.") is None


def test_rule_questions_have_known_answers():
    qs = Q.rule_yes_no_questions(TEXT, 10)
    assert 4 <= len(qs) <= 10
    assert {q.expected for q in qs} == {"yes", "no"}
    for q in qs:
        assert q.question.endswith("?")
        if q.expected == "yes":
            assert Q.yes_no_form(q.source) == q.question
        else:
            assert q.question != Q.yes_no_form(q.source)
    assert Q.yes_no_form("Drusen are yellow deposits under the retina") == \
        "Are drusen yellow deposits under the retina?"
    broad = Q.rule_broad_questions(TEXT, 5)
    assert broad and all(q.expected is None and q.question.endswith("?") for q in broad)


def test_broad_questions_can_name_several_key_phrases_each(tmp_path):
    one = Q.rule_broad_questions(TEXT, 10)
    two = Q.rule_broad_questions(TEXT, 10, phrases_per_question=2, overlap=True)
    assert len(one) >= 3 and len(two) == len(one) - 1  # overlapping pairs: one question fewer
    assert " and " in two[0].question and two[0].source == one[0].source + " " + one[1].source
    apart = Q.rule_broad_questions(TEXT, 10, phrases_per_question=2)
    assert len(apart) == (len(one) + 1) // 2 and apart[1].source.startswith(one[2].source)
    # cached apart from the one-phrase questions of the same text
    a = Q.questions_for(TEXT, "broad", 5, root=tmp_path)
    b = Q.questions_for(TEXT, "broad", 5, root=tmp_path, phrases=2)
    assert [q.question for q in a] != [q.question for q in b] and len(list(tmp_path.glob("*.json"))) == 2
    with pytest.raises(ValueError, match="key phrase"):
        Q.questions_for(TEXT, "broad", 5, root=tmp_path, phrases=0)


@pytest.mark.parametrize("text,label", [
    ("Yes.", "yes"), ("No, it is not.", "no"), ("I don't know.", "idk"), ("I'm not sure about that.", "idk"),
    ("I'm sorry, I cannot help with that.", "idk"), ("", "empty"), ("  ...", "empty"),
    ("The context does not mention it.", "idk"), ("Drusen are deposits.", "other"),
    ("The answer is yes.", "yes"),
    # a hedge that opens with "no" is not a committed no (it escaped IA's "I don't know" penalty)
    ("No idea.", "idk"), ("No way to tell from the text.", "idk"), ("No, I have no idea.", "no"),
    ("**No idea.**", "idk"), ('"No idea."', "idk"), ("No clue.", "idk"), ("No way of knowing.", "idk"),
])
def test_answers_are_read_as_yes_no_or_i_dont_know(text, label):
    assert Q.read_answer(text) == label


def test_questions_are_cached_per_document(tmp_path, monkeypatch):
    calls = []
    real = Q.rule_yes_no_questions

    def counted(text, n):
        calls.append(text)
        return real(text, n)

    monkeypatch.setattr(Q, "rule_yes_no_questions", counted)
    first = Q.questions_for(TEXT, "yes_no", 6, root=tmp_path)
    again = Q.questions_for(TEXT, "yes_no", 6, root=tmp_path)
    assert calls == [TEXT] and [q.question for q in again] == [q.question for q in first]
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["generator"] == Q.RULES_VERSION
    Q.questions_for(TEXT + " More.", "yes_no", 6, root=tmp_path)  # another text: generated again
    assert len(calls) == 2
    files[0].write_text("{broken")  # a damaged entry is regenerated, not fatal
    assert [q.question for q in Q.questions_for(TEXT, "yes_no", 6, root=tmp_path)] == [q.question for q in first]


class Helper(Target):
    name = "https://helper.example/v1 · small"

    def __init__(self):
        super().__init__()
        self.prompts = []

    def complete(self, req):
        self.prompts.append(req.messages[-1][1])
        return Completion("1. yes|Did the rash last three days?\nno|Was the rash on the legs?\nnot a question\n",
                          None, Usage(1, 1))


def test_a_helper_model_writes_questions_and_must_not_be_the_target(tmp_path, monkeypatch):
    monkeypatch.setenv("RPA_HELPER_API_KEY", "sk-test-not-stored")
    cfg = Q.QuestionConfig(generator="helper", helper_base_url="https://helper.example/v1", helper_model="small")
    h = Helper()
    qs = Q.questions_for(TEXT, "yes_no", 4, cfg, helper=h, root=tmp_path, target_name="some target")
    assert [(q.question, q.expected) for q in qs] == [("Did the rash last three days?", "yes"),
                                                      ("Was the rash on the legs?", "no")]
    assert TEXT in h.prompts[0]
    cached = list(tmp_path.glob("*.json"))[0].read_text()
    assert "sk-test" not in cached and "helper.example" in cached
    with pytest.raises(ValueError, match="must not be the audited target"):
        Q.questions_for(TEXT + " x", "yes_no", 4, cfg, helper=h, root=tmp_path, target_name=h.name)


def test_dcmi_reads_a_hedge_as_unsure_even_where_the_first_tokens_logprobs_say_no():
    """On a target that returns logprobs, "No idea" was read from its first token's P(yes): a committed no."""
    from audit_core.methods.perturbation import answer_value
    from audit_core.target.base import TokenLogprob

    comp = Completion("No idea.", [TokenLogprob("No", -0.01, [("No", -0.01), ("Yes", -5.0)])], Usage(5, 2), "m")
    assert answer_value(comp.to_json()) == (0.5, "unsure")
    comp = Completion("No, it is not.", [TokenLogprob("No", -0.01, [("No", -0.01), ("Yes", -5.0)])], Usage(5, 2), "m")
    value, how = answer_value(comp.to_json())
    assert how == "logprobs" and value < 0.05


def test_questions_of_one_text_are_cached_apart_per_generator(tmp_path, monkeypatch):
    """The "and generator" of the cache key: the rules' questions are never served for a helper model's,
    nor one helper model's for another's; each generator's questions are then served from its own file."""
    monkeypatch.setenv("RPA_HELPER_API_KEY", "sk-test-not-stored")
    rules = Q.questions_for(TEXT, "yes_no", 4, root=tmp_path)
    assert rules and len(list(tmp_path.glob("*.json"))) == 1
    small = Q.QuestionConfig(generator="helper", helper_base_url="https://helper.example/v1", helper_model="small")
    h = Helper()
    by_helper = Q.questions_for(TEXT, "yes_no", 4, small, helper=h, root=tmp_path)
    assert len(h.prompts) == 1 and TEXT in h.prompts[0]  # asked, not the rules' questions from the cache
    assert [q.question for q in by_helper] == ["Did the rash last three days?", "Was the rash on the legs?"]
    assert [q.question for q in by_helper] != [q.question for q in rules]
    files = sorted(tmp_path.glob("*.json"))
    assert len(files) == 2
    assert sorted(json.loads(f.read_text())["generator"] for f in files) == sorted([Q.RULES_VERSION, small.identity()])
    # each from its own file now: the helper is not asked again, the rules' questions stay the rules'
    assert [q.question for q in Q.questions_for(TEXT, "yes_no", 4, small, helper=h, root=tmp_path)] == \
        [q.question for q in by_helper] and len(h.prompts) == 1
    assert [q.question for q in Q.questions_for(TEXT, "yes_no", 4, root=tmp_path)] == [q.question for q in rules]
    # another helper model is another generator: asked again, a third file
    large = Q.QuestionConfig(generator="helper", helper_base_url="https://helper.example/v1", helper_model="large")
    Q.questions_for(TEXT, "yes_no", 4, large, helper=h, root=tmp_path)
    assert len(h.prompts) == 2 and len(list(tmp_path.glob("*.json"))) == 3
