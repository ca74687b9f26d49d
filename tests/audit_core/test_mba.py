"""MBA: mask generation, answer parsing, normalisation, scoring, and end-to-end behaviour."""
from __future__ import annotations

import json
import random
import re
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit_core.documents import Document
from audit_core.methods.base import Calibration
from audit_core.methods.mba import MBA_CONTINUE_PROMPT, MBA_PROMPT, MbaMethod, build_request, build_requests, first_word
from audit_core.methods.mba_masks import (
    MaskGenerator,
    MaskPlan,
    MbaConfig,
    RankedUnit,
    build_plan,
    choose_masks,
    word_form,
    split_units,
    stop_words,
    unmask,
)
from audit_core.methods.mba_parse import is_correct, is_spelling_variant, normalize_answer, parse_mask_answers
from audit_core.scoring import score_texts
from audit_core.target.base import ChatRequest, Completion, RateLimited, Target, Usage

# A real-looking clinical exchange, long enough for M = 10.
LONG_DOC = (
    "Patient: Doctor, for the past three weeks I have had a persistent dry cough, night sweats and "
    "a low-grade fever that gets worse in the evening. I also lost about four kilograms without "
    "dieting, and last week I noticed a little blood in my sputum. I work in a homeless shelter. "
    "Doctor: Given your symptoms and your workplace, we need to rule out pulmonary tuberculosis. "
    "I will order a chest X-ray, three sputum samples for acid-fast bacilli and a GeneXpert test, "
    "plus an interferon-gamma release assay. Until the results arrive, please wear a surgical mask "
    "at home and avoid crowded places. If the diagnosis is confirmed, treatment with isoniazid, "
    "rifampicin, pyrazinamide and ethambutol usually lasts six months, and your close contacts "
    "will be screened as well."
)

# Five sentences of five words, each with exactly one maskable word, so the
# choice per subtext (M = 5) is forced: nearlt (misspelled, fragmented),
# amoxicillin (fragmented), Canestan-like (hyphenated, fragmented), tinnitus, dizziness.
FORCED_DOC = (
    "It was nearlt over then. It was all amoxicillin then. Then he became very Canestan-like. "
    "It was otherwise tinnitus again. And so it was dizziness."
)

FIVE = MbaConfig(n_masks=5, min_masks=5)


@pytest.fixture(scope="module")
def generator(smollm):
    return MaskGenerator(MbaConfig(), smollm)


@pytest.fixture(scope="module")
def long_ranked(generator):
    return generator.rank_units([LONG_DOC])[0]


@pytest.fixture(scope="module")
def long_plan(generator, long_ranked):
    # what generator.plan(LONG_DOC) does, sharing the ranking pass with other tests
    chosen, reason = choose_masks(long_ranked, 10)
    return build_plan(LONG_DOC, long_ranked, chosen, 10, reason, generator.lm.name)


# --------------------------------------------------------------------------- ranks in scoring


def test_score_texts_ranks_agree_with_top_k(smollm):
    text = "The patient was given amoxicillin for the ear infection."
    plain = score_texts(smollm, [text], top_k=5)[0]
    ranked = score_texts(smollm, [text], top_k=5, ranks=True)[0]
    assert [t.logprob for t in plain.tokens] == pytest.approx([t.logprob for t in ranked.tokens])
    assert all(t.rank is None for t in plain.tokens)  # unchanged default
    for tok in ranked.tokens:
        assert tok.rank is not None and tok.rank >= 1
        in_top = [alt for alt, _ in tok.top].index(tok.text) + 1 if tok.text in [a for a, _ in tok.top] else None
        if in_top is not None:
            assert tok.rank == in_top
        else:
            assert tok.rank > 5


# --------------------------------------------------------------------------- mask generation


def test_long_document_gets_exactly_m_masks(long_plan):
    assert long_plan.n_masks == 10 and long_plan.reason is None
    labels = re.findall(r"\[Mask_(\d+)\]", long_plan.masked_text)
    assert labels == [str(k) for k in range(1, 11)]
    assert unmask(long_plan) == LONG_DOC
    assert [a.index for a in long_plan.answers] == list(range(1, 11))
    assert all(a.start < b.start for a, b in zip(long_plan.answers, long_plan.answers[1:]))


def test_masks_are_whole_words_not_stop_words_not_punctuation(long_plan):
    units = {(u.start, u.end): u for u in split_units(LONG_DOC)}
    stops = stop_words()
    for a in long_plan.answers:
        assert (a.start, a.end) in units, f"{a.word!r} is not a whole word"
        assert LONG_DOC[a.start:a.end] == a.word
        assert any(c.isalnum() for c in a.word)
        assert a.word.lower() not in stops
        assert not LONG_DOC[a.end:a.end + 1] == ":"  # "Doctor:" would read like an answer line
    # the first word has nothing before it and is never ranked
    assert long_plan.answers[0].start > 0


def test_no_two_masks_are_adjacent(long_plan):
    between = re.split(r"\[Mask_\d+\]", long_plan.masked_text)[1:-1]
    for gap in between:
        assert any(u.is_word for u in split_units(gap)), f"adjacent masks around {gap!r}"


def test_each_subtext_masks_its_highest_ranked_free_word(long_ranked):
    ranked = long_ranked
    chosen, reason = choose_masks(ranked, 10)
    words = [i for i, u in enumerate(ranked) if u.is_word]
    size, extra = divmod(len(words), 10)
    assert reason is None and len(chosen) == 10
    start = 0
    chosen_set = set(chosen)
    for c in range(10):
        chunk = words[start:start + size + (1 if c < extra else 0)]
        start += len(chunk)
        mine = [i for i in chunk if i in chosen_set]
        assert len(mine) == 1
        pos = words.index(mine[0])
        # every eligible word of the chunk with a higher rank must sit beside another mask
        forms = Counter(word_form(ranked[i].text) for i in words)
        for i in chunk:
            if ranked[i].eligible and ranked[i].rank > ranked[mine[0]].rank:
                p = words.index(i)
                beside = words[p - 1] in chosen_set or (p + 1 < len(words) and words[p + 1] in chosen_set)
                assert beside or forms[word_form(ranked[i].text)] > 1  # or a word the document repeats
        assert ranked[mine[0]].eligible and pos >= 0


def test_fragmented_and_misspelled_words(smollm):
    plan = MaskGenerator(FIVE, smollm).plan(FORCED_DOC)
    by_word = {a.word: a for a in plan.answers}
    assert set(by_word) == {"nearlt", "amoxicillin", "Canestan-like", "tinnitus", "dizziness"}
    # fragmented words are masked whole, hyphenated compounds included
    for w in ("nearlt", "amoxicillin", "Canestan-like"):
        assert by_word[w].fragmented
    assert "[Mask_3]." in plan.masked_text and "Canestan" not in plan.masked_text
    assert not re.search(r"\w\[Mask_|\]\w", plan.masked_text)
    # the misspelling keeps both spellings as correct answers
    assert by_word["nearlt"].accepted == ["nearlt", "nearly"]
    assert by_word["amoxicillin"].accepted == ["amoxicillin"]
    assert is_correct("nearly", by_word["nearlt"].accepted) and is_correct("Nearlt", by_word["nearlt"].accepted)


def test_short_document_gets_fewer_masks_with_a_reason(smollm):
    plan = MaskGenerator(MbaConfig(), smollm).plan("Severe headache and nausea since Monday.")
    assert 0 < plan.n_masks < 10
    assert plan.reason and "at least 19 words" in plan.reason
    assert unmask(plan) == "Severe headache and nausea since Monday."
    empty = MaskGenerator(MbaConfig(), smollm).plan("")
    assert empty.n_masks == 0 and empty.reason


def test_long_document_path_batches_subtexts(smollm):
    """Beyond max_pass_tokens, subtexts are ranked with their preceding text as context."""
    cfg = MbaConfig(n_masks=5, max_pass_tokens=64)
    gen = MaskGenerator(cfg, smollm)
    assert len(gen._prepare(MEMBERS[0]).segments) == 5
    plan = gen.plan(MEMBERS[0])
    assert plan.n_masks == 5 and plan.reason is None
    assert unmask(plan) == MEMBERS[0]


def test_plan_round_trips_through_json(long_plan):
    again = MaskPlan.from_json(json.loads(json.dumps(long_plan.to_json())))
    assert again == long_plan


def _ru(text: str, rank: int | None, maskable: bool = True, is_word: bool = True) -> RankedUnit:
    return RankedUnit(text, 0, 0, is_word, maskable, 1, None, rank)


def test_choose_masks_rules_without_a_model():
    units = [
        _ru("the", 9000, maskable=False),  # stop word: never, however rare
        _ru("alpha", 50), _ru("beta", 60),  # neighbours: only one of them
        _ru(",", 99999, maskable=False, is_word=False),
        _ru("gamma", 10), _ru("delta", None),  # unranked: never
        _ru("eps", 5), _ru("zeta", 7),
    ]
    chosen, reason = choose_masks(units, 5)
    texts = [units[i].text for i in chosen]
    assert "the" not in texts and "," not in texts and "delta" not in texts
    assert not ({"alpha", "beta"} <= set(texts))
    assert reason is not None and len(chosen) < 5
    # a chunk without an eligible word leaves its mask to the best free word elsewhere
    units = [_ru("a", 1), _ru("b", 1, maskable=False), _ru("c", 1, maskable=False), _ru("d", 1, maskable=False),
             _ru("e", 3), _ru("f", 1, maskable=False), _ru("g", 2)]
    chosen, reason = choose_masks(units, 5)
    assert [units[i].text for i in chosen] == ["a", "e", "g"] and reason


def test_no_mask_where_its_request_shows_another_occurrence_of_the_word():
    """Ranked against the original text, a rare word's first occurrence was masked and its second stayed in the
    prompt: a reader who never saw the document filled it in (17% of masks on genmedgpt5k)."""
    units = [_ru("amoxicillin", 900), _ru("for", 1, maskable=False), _ru("throat", 300),
             _ru("since", 1, maskable=False), _ru("Amoxicillin's", 5), _ru("dose", 200), _ru("and", 1, maskable=False),
             _ru("rash", 100), _ru("with", 1, maskable=False), _ru("fever", 50)]
    chosen, _ = choose_masks(units, 5)  # a fill-in request shows the whole masked text
    texts = [units[i].text for i in chosen]
    assert "amoxicillin" not in texts and "Amoxicillin's" not in texts
    assert {"throat", "rash"} <= set(texts)
    # a "continue" request shows the text before its mask: the first occurrence may be masked, the second not
    texts = [units[i].text for i in choose_masks(units, 5, "before")[0]]
    assert "amoxicillin" in texts and "Amoxicillin's" not in texts
    assert word_form("Fevers") == word_form("fever") and word_form("glass") == "glass"


def test_config_validates_the_papers_range():
    with pytest.raises(ValueError):
        MbaConfig(n_masks=4)
    with pytest.raises(ValueError):
        MbaConfig(n_masks=21)
    with pytest.raises(ValueError):
        MbaConfig(gamma=0.0)
    assert MbaConfig().max_answer_tokens == 8 * 10 + 32


# --------------------------------------------------------------------------- parsing

MT = ("The patient had [Mask_1] for three days, then a dry [Mask_2] started. "
      "He took [Mask_3] twice a day and felt [Mask_4] by Friday.")

PARSE_CASES = [
    # (raw reply, expected answers)
    ("[Mask_1]: fever\n[Mask_2]: cough\n[Mask_3]: ibuprofen\n[Mask_4]: better",
     {1: "fever", 2: "cough", 3: "ibuprofen", 4: "better"}),
    ("[Mask_3]: ibuprofen\n[Mask_1]: fever\n[Mask_4]: better\n[Mask_2]: cough",
     {1: "fever", 2: "cough", 3: "ibuprofen", 4: "better"}),
    ("Sure! Based on the context, here are the answers:\n\n**[Mask_1]**: fever\n**[Mask_2]:** cough\n"
     "**[Mask_3]** - ibuprofen\n\nLet me know if you need anything else.",
     {1: "fever", 2: "cough", 3: "ibuprofen"}),
    ("Mask 1: fever\nMASK_2: cough\nmask_3 - ibuprofen\n[MASK_4]: better", {1: "fever", 2: "cough", 3: "ibuprofen", 4: "better"}),
    ("1. fever\n2. cough\n3) ibuprofen\n(4) better", {1: "fever", 2: "cough", 3: "ibuprofen", 4: "better"}),
    ('[Mask_1]: "fever"\n[Mask_2]: \'cough\'\n[Mask_3]: `ibuprofen`', {1: "fever", 2: "cough", 3: "ibuprofen"}),
    ('{"Mask_1": "fever", "Mask_2": "cough", "Mask_3": "ibuprofen", "Mask_4": "better"}',
     {1: "fever", 2: "cough", 3: "ibuprofen", 4: "better"}),
    ("[Mask_1]: fever, [Mask_2]: cough; [Mask_3]: ibuprofen", {1: "fever", 2: "cough", 3: "ibuprofen"}),
    ("The patient had fever for three days, then a dry cough started. He took ibuprofen twice a day "
     "and felt better by Friday.", {1: "fever", 2: "cough", 3: "ibuprofen", 4: "better"}),
    ("Here is the completed text:\nThe patient had a fever for three days, then a dry cough started.\n"
     "He took paracetamol twice a day and felt fine by Friday.",
     {1: "a fever", 2: "cough", 3: "paracetamol", 4: "fine"}),
    ("[Mask_1]: fever\n[Mask_1]: chills\n[Mask_2]: cough", {1: "fever", 2: "cough"}),
    ("[Mask_1]: fever (the text mentions a temperature)\n[Mask_2]: cough.", {1: "fever", 2: "cough"}),
    ("[Mask_1]:\n[Mask_2]: N/A\n[Mask_3]: unknown\n[Mask_4]: [Mask_4]", {}),
    ("[Mask_1]: <word>\n[Mask_2]: answer_2\n[Mask_3]: ...\n[Mask_4]: [Mask_5]: [Mask_6]:", {}),  # template echoes
    ("", {}),
    ("I'm sorry, but I can't find this text in my documents.", {}),
    ("[Mask_7]: extra\n[Mask_0]: zero\n[Mask_2]: cough", {2: "cough"}),
    ("Blank 2 = cough\n<mask_3>: ibuprofen\n(mask #1) -> fever", {1: "fever", 2: "cough", 3: "ibuprofen"}),
    ("- [Mask_1]: **fever**\n- [Mask_2]: *cough*\n- [Mask_4]: better", {1: "fever", 2: "cough", 4: "better"}),
    ("[Mask_1]: I believe the hidden word is probably fever, given the symptoms described", {}),
    ("[Mask_1] fever [Mask_2] cough", {}),  # no separator: the echo of a masked text, not answers
    ("\x00\x01[[[Mask_\n]]]: ::: ---", {}),
]


@pytest.mark.parametrize("raw,expected", PARSE_CASES)
def test_parser_table(raw, expected):
    assert parse_mask_answers(raw, 4, MT).answers == expected


def test_parser_missing_masks_count_as_wrong():
    plan = MaskPlan(MT, [], 4)
    parsed = parse_mask_answers("[Mask_2]: cough", 4, plan.masked_text)
    assert parsed.get(1) is None and not is_correct(parsed.get(1), ["fever"])
    assert is_correct(parsed.get(2), ["cough"])


@pytest.mark.parametrize("pred,accepted,ok", [
    ("Fever", ["fever"], True),
    ("  fever. ", ["fever"], True),
    ("Headaches", ["headache"], True),
    ("allergies", ["allergy"], True),
    ("stopped", ["stopping"], True),
    ("taking", ["take"], True),
    ("patient's", ["patient"], True),
    ("X-ray", ["x ray"], True),
    ("U.S.", ["US"], True),
    ("doses", ["dose"], True),
    ("rifampicin", ["rifampin"], False),
    ("cough", ["fever"], False),
    ("", ["fever"], False),
    (None, ["fever"], False),
    ("nearly", ["nearlt", "nearly"], True),
    ("diagnosis", ["diagnostic"], False),
])
def test_normalisation(pred, accepted, ok):
    assert is_correct(pred, accepted) is ok


def test_normalize_answer_examples():
    assert normalize_answer("  The  FEVER's ") == normalize_answer("the fever")
    assert normalize_answer("café") == normalize_answer("cafe")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.text(max_size=400), n=st.integers(min_value=0, max_value=20), with_text=st.booleans())
def test_parser_never_raises(raw, n, with_text):
    out = parse_mask_answers(raw, n, MT if with_text else None)
    assert all(1 <= k <= max(n, 0) for k in out.answers)


_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-'", min_size=1,
                max_size=12).filter(lambda w: w[0].isalnum() and w[-1].isalnum()
                                    and not re.fullmatch(r"(?i)mask-*\d+", w)  # a bare label is no answer
                                    and not re.fullmatch(r"(?i)na|none|unknown", w))  # "I don't know" answers


@settings(max_examples=150, deadline=None)
@given(words=st.lists(_WORD, min_size=1, max_size=20), data=st.data())
def test_perfect_format_in_any_order_parses_exactly(words, data):
    n = len(words)
    order = data.draw(st.permutations(list(range(1, n + 1))))
    raw = "\n".join(f"[Mask_{k}]: {words[k - 1]}" for k in order)
    masked = " and ".join(f"[Mask_{k}]" for k in range(1, n + 1))
    parsed = parse_mask_answers(raw, n, masked)
    assert parsed.answers == {k: words[k - 1] for k in range(1, n + 1)}


# --------------------------------------------------------------------------- end to end with a fake target

MEMBERS = [
    "Patient: My six-year-old son has had a barking cough and a hoarse voice since last night, and he "
    "makes a high-pitched sound when he breathes in. Doctor: This sounds like croup, usually caused by a "
    "parainfluenza virus. A single dose of oral dexamethasone reduces the swelling of the airway. Cool night "
    "air can help, but go to the emergency department if he struggles to breathe or turns blue.",
    "Patient: I am thirty-four weeks pregnant and my ankles, hands and face have swollen suddenly; I also have "
    "a pounding headache and flashing lights in my vision. Doctor: These symptoms can point to preeclampsia. "
    "We must check your blood pressure and test your urine for protein today. If it is confirmed, magnesium "
    "sulfate prevents seizures and early delivery may be advised.",
    "Patient: After a camping trip in Connecticut I found a red rash shaped like a bullseye on my thigh, and I "
    "feel tired with aching joints. Doctor: That is typical of erythema migrans, the early sign of Lyme disease "
    "transmitted by ticks. A three-week course of doxycycline is the usual treatment. Tell me if you develop "
    "facial weakness or palpitations.",
    "Patient: My father, who is seventy, suddenly could not lift his right arm and his speech became slurred "
    "about an hour ago. Doctor: Call an ambulance now: these are warning signs of an ischemic stroke. At the "
    "hospital a CT scan will exclude bleeding, and thrombolysis with alteplase works best within four and a "
    "half hours of the first symptoms.",
]
NONMEMBERS = [
    "Patient: For two days I have had burning when I urinate, I need to go very often, and my lower belly "
    "aches. Doctor: This is most likely a bladder infection. A urine dipstick and culture will confirm it. "
    "Nitrofurantoin for five days is a common choice, and drinking plenty of water helps. See a doctor "
    "quickly if fever or flank pain appear.",
    "Patient: My knee gave way while I was playing football, I heard a pop, and it swelled within hours. "
    "Doctor: A pop followed by rapid swelling suggests a torn anterior cruciate ligament. Rest, ice and "
    "compression will ease the swelling, and an MRI will show the damage. Physiotherapy or reconstructive "
    "surgery may be needed depending on your activity level.",
    "Patient: I wake up several times every night gasping, my partner says I snore loudly and stop breathing, "
    "and I fall asleep at my desk. Doctor: You may have obstructive sleep apnea. A polysomnography study will "
    "measure your breathing at night. Losing weight helps, and a CPAP machine keeps the airway open while "
    "you sleep.",
    "Patient: The skin on my elbows and knees has thick, silvery, scaly patches that itch and sometimes crack. "
    "Doctor: These look like plaque psoriasis, an immune condition rather than an infection. Moisturisers, "
    "topical corticosteroids and vitamin D creams are the first steps; for widespread disease, phototherapy "
    "or biologic drugs such as adalimumab can be considered.",
]


class KnowingTarget(Target):
    """A fake RAG system: it fills masks from a document it holds, and guesses otherwise.

    Answers come in varied shapes (shuffled labels, bold, a rewritten text) so
    that the parser is exercised as it would be by a real model.
    """

    name = "fake-knowing"

    def __init__(self, knowledge: list[str], fail: bool = False):
        super().__init__()
        self.knowledge = knowledge
        self.fail = fail
        self.calls = 0
        self.rng = random.Random(0)

    def complete(self, request: ChatRequest) -> Completion:
        self.calls += 1
        prompt = request.messages[-1][1]
        masked = re.search(r"Text:\n(.*?)\n\nReply", prompt, re.S).group(1)
        if self.fail:
            raise RateLimited("429 too many requests (retry budget spent)")
        parts = re.split(r"\[Mask_\d+\]", masked)
        pattern = "(.+?)".join(re.escape(p) for p in parts)
        n = len(parts) - 1
        for doc in self.knowledge:
            m = re.fullmatch(pattern, doc, re.S)
            if m:
                answers = list(m.groups())
                break
        else:
            answers = [self.rng.choice(["pain", "fever", "doctor", "treatment", "infection"]) for _ in range(n)]
        style = self.calls % 3
        if style == 0:
            order = list(range(1, n + 1))
            self.rng.shuffle(order)
            text = "Here you go:\n" + "\n".join(f"**[Mask_{k}]**: {answers[k - 1]}" for k in order)
        elif style == 1:
            text = "\n".join(f"[Mask_{k}]: {a}" for k, a in enumerate(answers, 1))
        else:
            filled = masked
            for k, a in enumerate(answers, 1):
                filled = filled.replace(f"[Mask_{k}]", a, 1)
            text = "The completed text reads:\n" + filled
        return Completion(text=text, tokens=None, usage=Usage(len(prompt.split()), len(text.split())))


@pytest.fixture(scope="module")
def mba(smollm):
    return MbaMethod(MbaConfig(), smollm)


def test_members_score_higher_than_nonmembers(mba):
    docs_m = [Document(f"m{i}", t) for i, t in enumerate(MEMBERS)]
    docs_n = [Document(f"n{i}", t) for i, t in enumerate(NONMEMBERS)]
    target = KnowingTarget(MEMBERS)
    obs_m = mba.probe_many(docs_m, target)
    obs_n = [mba.probe(d, target) for d in docs_n]  # the single-document path (send_all)
    assert target.calls == 8 and all(o.queries == 1 for o in obs_m + obs_n)
    assert all(o.skipped is None for o in obs_m + obs_n)

    cal = mba.prepare(obs_m[:2], obs_n[:2])
    assert cal.params["threshold_source"].startswith("shadow") and cal.shadow_auc == 1.0
    assert max(cal.nonmember_scores) < min(cal.member_scores)

    res_m = [mba.score(o, cal) for o in obs_m]
    res_n = [mba.score(o, cal) for o in obs_n]
    acc_m = [r.evidence["accuracy"] for r in res_m]
    acc_n = [r.evidence["accuracy"] for r in res_n]
    assert all(a == 1.0 for a in acc_m), [r.evidence["rows"] for r in res_m]
    assert sum(acc_m) / 4 > sum(acc_n) / 4 + 0.5
    assert min(r.score for r in res_m) > max(r.score for r in res_n)  # calibrated probabilities keep the order
    # two shadow non-members cannot promise a 5% false-positive rate: no decision, and the reason
    assert all(r.decision is None and "too few shadow non-members" in r.reason for r in res_m + res_n)
    ev = res_m[0].evidence
    assert ev["masked_text"].count("[Mask_") == 10 and len(ev["rows"]) == 10
    assert {"mask", "expected", "predicted", "correct"} <= set(ev["rows"][0])
    assert ev["raw_answer"]


def test_failed_call_and_short_document_are_inconclusive(mba):
    target = KnowingTarget(MEMBERS, fail=True)
    obs = mba.probe(Document("m0", MEMBERS[0]), target)
    assert obs.failed == 1
    res = mba.score(obs, Calibration("mba", threshold=0.5))
    assert res.score is None and res.decision is None and "rate_limited" in res.reason

    calls = target.calls
    short = mba.probe(Document("s", "Itchy eyes."), target)
    assert target.calls == calls and short.queries == 0 and short.skipped
    res = mba.score(short, Calibration("mba", threshold=0.5))
    assert res.decision is None and "too short" in res.reason


def test_no_decision_without_shadow_classes(mba):
    """The paper's gamma = 0.5 has no false-positive rate behind it: without shadow validation MBA abstains."""
    target = KnowingTarget(MEMBERS[:1])
    obs = mba.probe(Document("m0", MEMBERS[0]), target)
    cal = mba.prepare([obs], [])
    assert cal.threshold is None and cal.params["paper_default_threshold"] == 0.5 and cal.shadow_auc is None
    res = mba.score(obs, cal)
    assert res.decision is None and res.reason.startswith("uncalibrated") and res.evidence["accuracy"] == 1.0


def test_request_shape(long_plan):
    req = build_request(long_plan, MbaConfig())
    assert req.temperature == 0.0 and not req.logprobs and req.max_tokens == 8 * 10 + 32
    content = req.messages[0][1]
    assert long_plan.masked_text in content and "[Mask_1] to [Mask_10]" in content
    assert MBA_PROMPT.split("{")[0] in content and "<" not in content.replace(long_plan.masked_text, "")


class ContinuingTarget(Target):
    """A fake completion-style RAG: it continues a text it holds, and guesses otherwise."""

    name = "fake-continuing"

    def __init__(self, knowledge: list[str], fail_on: int | None = None):
        super().__init__()
        self.knowledge = knowledge
        self.fail_on = fail_on
        self.calls = 0

    def complete(self, request: ChatRequest) -> Completion:
        self.calls += 1
        if self.calls == self.fail_on:
            raise RateLimited("429 too many requests (retry budget spent)")
        prefix = request.messages[-1][1].split("\n\n", 1)[1]
        text = " the patient"
        for doc in self.knowledge:
            if doc.startswith(prefix):
                text = doc[len(prefix):len(prefix) + 30]
                break
        return Completion(text=text, tokens=None, usage=Usage(len(prefix.split()), len(text.split())))


@pytest.fixture(scope="module")
def mba_continue(smollm):
    return MbaMethod(MbaConfig(elicitation="continue"), smollm)


def test_continue_elicitation_sends_the_text_before_each_mask(mba_continue):
    doc = Document("m0", MEMBERS[0])
    plan = mba_continue.generator.plan(doc.text)
    reqs = build_requests(plan, mba_continue.config, doc.text)
    assert len(reqs) == plan.n_masks == 10
    for a, req in zip(plan.answers, reqs):
        content = req.messages[-1][1]
        assert content.startswith(MBA_CONTINUE_PROMPT.split("{")[0])
        # the prompt ends right before the hidden word and never contains it there
        assert content.endswith(doc.text[: a.start].rstrip())
        assert req.max_tokens == 6 and req.temperature == 0.0 and not req.logprobs


def test_continue_elicitation_members_score_higher(mba_continue):
    docs_m = [Document(f"m{i}", t) for i, t in enumerate(MEMBERS)]
    docs_n = [Document(f"n{i}", t) for i, t in enumerate(NONMEMBERS)]
    target = ContinuingTarget(MEMBERS)
    ticks: list[int] = []
    obs = mba_continue.probe_many(docs_m + docs_n, target, progress=ticks.append)
    assert sum(ticks) == 8  # progress counts documents, not requests
    assert target.calls == sum(o.queries for o in obs) == 80
    cal = Calibration("mba", threshold=0.5)
    res = [mba_continue.score(o, cal) for o in obs]
    assert all(r.score == 1.0 for r in res[:4]), [r.evidence["rows"] for r in res[:4]]
    assert max(r.score for r in res[4:]) < 0.5
    ev = res[0].evidence
    assert ev["elicitation"] == "continue" and len(ev["rows"]) == 10 and ev["answered"] == 10
    assert all(r["predicted"] == r["expected"][0] or r["correct"] for r in ev["rows"])


def test_continue_elicitation_one_failed_call_makes_the_document_inconclusive(mba_continue):
    obs = mba_continue.probe(Document("m0", MEMBERS[0]), ContinuingTarget(MEMBERS, fail_on=4))
    assert obs.queries == 10 and obs.failed == 1
    res = mba_continue.score(obs, Calibration("mba", threshold=0.5))
    assert res.score is None and res.decision is None and "rate_limited" in res.reason


@pytest.mark.parametrize("text,word", [("  amoxicillin, 500 mg", "amoxicillin"), ('\n"Well-known" x', "Well-known"),
                                       ("don't go", "don't"), ("...", None), ("", None)])
def test_first_word_of_a_continuation(text, word):
    assert first_word(text) == word


@pytest.mark.parametrize("text,correct", [
    ("  Chloride-", True),                 # cut by the token budget right after the compound's first part
    ("Chloride-Lido", True),               # cut inside the second part
    ("Chloride-Lidocaine, 2% gel", True),  # the whole word
    ("Chlor", False),                      # only the first letters: could be a guess
    ("Chloride solution was", False),      # not cut: the answer went on with another word
    ("Sodium-", False),                    # another word
])
def test_a_continuation_cut_inside_a_hyphenated_word_counts_when_it_reached_a_whole_part(text, correct):
    from audit_core.methods.mba import continuation_correct

    assert continuation_correct(text, ["Chloride-Lidocaine"]) is correct


def test_a_cut_continuation_of_a_plain_word_is_not_stretched():
    from audit_core.methods.mba import continuation_correct

    assert continuation_correct("amoxicillin", ["amoxicillin"]) and not continuation_correct("amox", ["amoxicillin"])
    assert not continuation_correct("Titan", ["Tigan"])


def test_unknown_elicitation_is_refused():
    with pytest.raises(ValueError, match="elicitation"):
        MbaConfig(elicitation="guess")


# --------------------------------------------------------------------------- the reference RAG


@pytest.mark.slow
def test_reference_rag_members_fill_more_masks(shared_data, smollm):
    try:
        from shadow.rag import RagConfig, RagSystem
    except ImportError as exc:
        pytest.skip(f"shadow.rag is not available yet ({exc})")
    rows = [json.loads(line) for line in (shared_data / "genmedgpt5k.jsonl").open(encoding="utf-8")]
    rng = random.Random(0)
    picked = rng.sample(rows, 60)
    members = [Document(r["id"], r["text"]) for r in picked[:30]]
    nonmembers = [Document(r["id"], r["text"]) for r in picked[30:]]
    rag = RagSystem(members, RagConfig(generator="gemma-3-270m"))
    # the reference target copies a cloze text back (BENCHMARKS.md); MBA asks it
    # the way the product asks the demo target, which is the same kind of system
    from shadow.demo import DEMO_MBA_ELICITATION

    method = MbaMethod(MbaConfig(elicitation=DEMO_MBA_ELICITATION), smollm)
    obs = method.probe_many(members + nonmembers, rag)
    cal = Calibration("mba", threshold=0.5)
    scores = [method.score(o, cal).score for o in obs]
    acc_m = [s for s in scores[:30] if s is not None]
    acc_n = [s for s in scores[30:] if s is not None]
    assert len(acc_m) >= 20 and len(acc_n) >= 20, "too many inconclusive probes"
    mean_m, mean_n = sum(acc_m) / len(acc_m), sum(acc_n) / len(acc_n)
    print(f"MBA accuracy on the reference target: members {mean_m:.3f} (n={len(acc_m)}), "
          f"non-members {mean_n:.3f} (n={len(acc_n)})")
    assert mean_m > mean_n


def test_mba_abstains_when_its_shadow_showed_no_signal(mba):
    doc = Document("m0", MEMBERS[0])
    obs = mba.probe(doc, KnowingTarget(MEMBERS))
    flat = Calibration("mba", threshold=0.0, member_scores=[0.0] * 4, nonmember_scores=[0.0] * 4, shadow_auc=0.5,
                       params={"threshold_source": "shadow"})
    res = mba.score(obs, flat)
    assert res.score == 1.0 and res.decision is None and res.reason.startswith("no signal")


# --------------------------------------------------------------------------- spelling variants (issue 20, point 2)

WRONG_VARIANTS = [("Raxar", "Radar"), ("Tigan", "Titan"), ("otologic", "oologic"), ("melena", "elena")]
TRUE_MISSPELLINGS = [("nearlt", "nearly"), ("recieve", "receive"), ("accomodate", "accommodate"),
                     ("medicaton", "medication"), ("symtpoms", "symptoms")]


@pytest.mark.parametrize("word,nearest", WRONG_VARIANTS)
def test_dictionary_neighbour_that_is_another_word_is_not_a_variant(word, nearest):
    from audit_core.methods.mba_masks import _correct

    assert not is_spelling_variant(word, nearest)
    # the spell checker does propose that word; the plan must not take it
    assert _correct(word, 1) is None
    # so the target's "Radar" for "Raxar" counts wrong
    assert not is_correct(nearest, [word] + ([_correct(word, 1)] if _correct(word, 1) else []))


@pytest.mark.parametrize("typed,meant", TRUE_MISSPELLINGS)
def test_true_misspellings_keep_their_correction(typed, meant):
    from audit_core.methods.mba_masks import _correct

    assert is_spelling_variant(typed, meant)
    assert _correct(typed, 1) == meant
    assert _correct(typed.capitalize(), 1) is None  # a capitalised unknown word is a name, left as written


def test_spelling_variant_needs_a_slip_and_a_long_enough_word():
    assert not is_spelling_variant("teh", "the")  # one edit in three letters is too much
    assert not is_spelling_variant("fevar", "fever")  # 'a' for 'e' is no neighbouring key
    assert not is_spelling_variant("headache", "headaches", known=lambda w: True)  # a word in its own right
    assert is_spelling_variant("hedache", "headache")


class BatchSensitiveTarget(ContinuingTarget):
    """Answers with the hidden word only when the batch holds one document's requests.

    Stands in for a shadow RAG in "shared" retrieval mode, which pools the
    retrievals of nested queries within one ``complete_many`` call: "continue"
    prefixes of documents that start alike nest across documents.
    """

    def __init__(self, members):
        super().__init__(members)
        self.batch_sizes: list[int] = []

    def complete_many(self, requests, progress=None):
        self.batch_sizes.append(len(requests))
        prompts = [req.messages[-1][1] for req in requests]
        longest = max(prompts, key=len)
        if not all(longest.startswith(p) for p in prompts):  # requests of more than one document
            return [Completion(text="mixed", tokens=None, usage=Usage(1, 1)) for _ in requests]
        return super().complete_many(requests, progress)


def test_a_documents_observation_does_not_depend_on_the_others_probed_with_it(mba_continue):
    docs = [Document(f"m{i}", t) for i, t in enumerate(MEMBERS[:2])] + [Document("n0", NONMEMBERS[0])]
    together = BatchSensitiveTarget(MEMBERS)
    batch = mba_continue.probe_many(docs, together)
    assert together.batch_sizes == [10, 10, 10]  # one batch per document
    for doc, obs in zip(docs, batch):
        alone = mba_continue.probe_many([doc], BatchSensitiveTarget(MEMBERS))[0]
        assert obs.to_json() == alone.to_json()
    assert mba_continue.score(batch[0], Calibration("mba", threshold=0.5)).score == 1.0


class HalfRefusingTarget(ContinuingTarget):
    """Continues the text it holds, but refuses every other request."""

    def complete(self, request: ChatRequest) -> Completion:
        comp = super().complete(request)
        if self.calls % 2 == 0:
            return Completion(text="I'm sorry, I can't help with that.", tokens=None, usage=comp.usage)
        return comp


def test_continue_elicitation_scores_the_masks_answered_not_the_refused_ones(mba_continue):
    """5 right and 5 refused read 0.5, a refusal counted as a wrong fill-in, and cleared the document."""
    res = mba_continue.score(mba_continue.probe(Document("m0", MEMBERS[0]), HalfRefusingTarget(MEMBERS)),
                             Calibration("mba", threshold=0.7))
    ev = res.evidence
    assert ev["non_answers"] == 5 and ev["correct"] == 5 and ev["accuracy"] == 1.0 and res.score == 1.0


# --------------------------------------------------------------------------- progress of the mask planning


class _FakeProxy:
    """A proxy model that never loads: words are its tokens, a word's rank is its length (``_fake_proxy``)."""

    name = "fake-proxy"


def _fake_proxy(monkeypatch, events: list) -> None:
    """Replace the proxy's tokenizer and forward pass in ``mba_masks``; each use is an event."""
    from audit_core.methods import mba_masks
    from audit_core.scoring import TextScores, TokenScore

    def encode_text(lm, text):
        events.append("proxy")
        spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
        return list(range(len(spans))), spans

    def score_texts(lm, texts, contexts, batch_size, ranks):
        assert ranks and len(texts) <= batch_size
        events.append(("forward", len(texts)))
        return [TextScores(t, [TokenScore(0, m.group(), m.start(), m.end(), -1.0, [], len(m.group()))
                               for m in re.finditer(r"\S+", t)]) for t in texts]

    monkeypatch.setattr(mba_masks, "encode_text", encode_text)
    monkeypatch.setattr(mba_masks, "score_texts", score_texts)


class _RecordingTarget(Target):
    name = "recorder"

    def __init__(self, events: list):
        super().__init__()
        self.events = events

    def complete(self, request: ChatRequest) -> Completion:
        self.events.append("request")
        return Completion("[Mask_1]: word", None, Usage(1, 1))


def test_planning_the_masks_is_a_stage_of_its_own_with_done_and_total(monkeypatch):
    """The shadow's MBA probing stood at 0 / N while the proxy planned every document's masks (minutes, the
    model loading first): the planning reports done / total itself, from 0 before the proxy is touched, after
    each forward batch the documents whose every segment is ranked, and all of it before the first request."""
    from audit_core.methods import method_label
    from audit_core.methods.mba import PLANNING_STAGE

    events: list = []
    _fake_proxy(monkeypatch, events)
    short = ["Severe headache and nausea since Monday morning.", "My left knee swells after running.",
             "A dry cough keeps me awake every night.", "The rash spread from my arms to my chest."]
    too_long = " ".join(["word"] * 250)  # over max_doc_tokens: not masked, done at once
    docs = [Document(f"s{i}", t) for i, t in enumerate(short)] + [Document("long", LONG_DOC), Document("x", too_long)]
    # LONG_DOC (about 150 tokens) is ranked in 10 subtexts of more than 64 tokens with their context: the
    # four short texts fill the first forward batch, LONG_DOC's subtexts the next three (4 + 4 + 2)
    cfg = MbaConfig(max_pass_tokens=64, max_doc_tokens=200, batch_size=4)
    method = MbaMethod(cfg, _FakeProxy())
    ticks: list[int] = []
    method.probe_many(docs, _RecordingTarget(events), progress=ticks.append,
                      stage_progress=lambda stage, done, total: events.append((stage, done, total)))
    stage = [e for e in events if isinstance(e, tuple) and e[0] == PLANNING_STAGE]
    assert PLANNING_STAGE.startswith(method_label("mba") + ": ")
    assert [(d, t) for _, d, t in stage] == [(0, 6), (5, 6), (5, 6), (5, 6), (6, 6)]
    assert [e[1] for e in events if isinstance(e, tuple) and e[0] == "forward"] == [4, 4, 4, 2]
    assert events[0] == (PLANNING_STAGE, 0, 6)  # said before the proxy model is used (and loaded)
    # each forward batch is followed by its report; all planning is over before the first request
    first_request = events.index("request")
    assert events.index((PLANNING_STAGE, 6, 6)) < first_request
    assert all(e != "proxy" and (not isinstance(e, tuple) or e[0] != "forward") for e in events[first_request:])
    assert ticks == [1] * 6  # the probing stage's ticks: one per document, as before


def test_ranking_reports_each_forward_batch_and_ranks_every_subtext(monkeypatch):
    """One document in 10 subtexts: done only when its last batch is ranked, and every word ranked (the
    batches' results all read back); ``probe`` (an audit's, one document, no stage callback) still plans."""
    events: list = []
    _fake_proxy(monkeypatch, events)
    gen = MaskGenerator(MbaConfig(max_pass_tokens=64, batch_size=4), _FakeProxy())
    seen: list = []
    ranked = gen.rank_units([LONG_DOC], lambda d, t: seen.append((d, t)))[0]
    assert seen == [(0, 1), (0, 1), (0, 1), (1, 1)]  # 10 subtexts in batches of 4, 4 and 2
    words = [u for u in ranked if u.is_word]
    assert words[0].rank is None and all(u.rank is not None for u in words[1:])  # the first word never is
    obs = MbaMethod(MbaConfig(), _FakeProxy()).probe(Document("d", LONG_DOC), _RecordingTarget(events))
    assert obs.skipped is None and obs.data["plan"]["answers"] and events[-1] == "request"


def _planning_audit(monkeypatch, events: list, cancel_at: int | None = None):
    """run_audit with MBA on the fake proxy over four documents; every progress report is an event."""
    import threading

    import audit_core.models
    from audit_core.audit import AUDIT_STAGE, AuditConfig, run_audit
    from audit_core.methods import mba_masks
    from audit_core.target.base import Capabilities

    _fake_proxy(monkeypatch, events)
    monkeypatch.setattr(mba_masks, "load_causal_lm", lambda name: _FakeProxy())
    monkeypatch.setattr(audit_core.models, "load_causal_lm", lambda name: _FakeProxy())

    class Prep:
        def __init__(self, methods):
            self.calibrations = {m.name: Calibration(m.name, 0.5, [0.9, 0.8], [0.2, 0.85], shadow_auc=0.9)
                                 for m in methods}

    texts = [MEMBERS[0], LONG_DOC, "Severe headache and nausea since Monday morning, worse after every meal "
             "and at night, with a stiff neck and a fever.", MEMBERS[1]]
    docs = [Document(f"d{i}", t) for i, t in enumerate(texts)]
    cancel = threading.Event()

    def progress(stage, done, total):
        events.append((stage, done, total))
        if cancel_at is not None and stage == AUDIT_STAGE and done == cancel_at:
            cancel.set()

    result = run_audit(docs, _RecordingTarget(events), AuditConfig(methods=["mba"]),
                       lambda methods, shadow, progress=None: Prep(methods), progress=progress,
                       capabilities=Capabilities(True, False, 0), cancel=cancel)
    return docs, result


def test_the_audit_plans_each_document_just_before_its_own_requests(monkeypatch):
    """Planning every document's masks before the first was probed (sessions 53-55) held the first verdict
    back by the whole collection's planning (about 0.3 s a document: 2.5 min for 500). Each document is now
    planned inside its probe, after the previous document's requests and before its own, as part of the
    documents stage's count (no stage of its own); the masks are the ones a probe plans alone."""
    from audit_core.audit import AUDIT_STAGE

    events: list = []
    docs, result = _planning_audit(monkeypatch, events)
    stages = {e[0] for e in events if isinstance(e, tuple) and len(e) == 3}
    assert not any("planning" in stage for stage in stages)
    proxy = [i for i, e in enumerate(events) if e == "proxy" or (isinstance(e, tuple) and e[0] == "forward")]
    requests = [i for i, e in enumerate(events) if e == "request"]
    assert proxy[-1] > requests[0]  # the first document's requests did not wait for the last one's masks
    for i in range(4):  # document i: its count, its masks (every use of the proxy), its requests, then the next
        begin, end = events.index((AUDIT_STAGE, i, 4)), events.index((AUDIT_STAGE, i + 1, 4))
        first_request = next(j for j in requests if j > begin)
        assert first_request < end
        assert any(begin < j < first_request for j in proxy) and not any(first_request < j < end for j in proxy)
    alone = MbaMethod(MbaConfig(), _FakeProxy())
    for doc in docs:
        assert result.observations[doc.id]["mba"].data["plan"] == alone.generator.plan(doc.text).to_json()


def test_a_cancel_stops_at_the_next_document_and_plans_none_it_will_not_probe(monkeypatch):
    events: list = []
    docs, result = _planning_audit(monkeypatch, events, cancel_at=1)  # set as the second document begins
    assert result.cancelled and list(result.results) == ["d0", "d1"]
    last_request = max(i for i, e in enumerate(events) if e == "request")
    assert all(e != "proxy" and (not isinstance(e, tuple) or e[0] != "forward") for e in events[last_request:])
    # the proxy did the work of the two documents probed, no more (the collection used to be planned whole)
    alone: list = []
    _fake_proxy(monkeypatch, alone)
    gen = MaskGenerator(MbaConfig(), _FakeProxy())
    for doc in docs[:2]:
        gen.plan(doc.text)
    assert alone and [e for e in events if e == "proxy" or isinstance(e, tuple) and e[0] == "forward"] == alone


def test_mbas_calibration_counts_the_shadow_documents_it_reads(mba):
    """MBA's calibration on shipped observations reads every shadow document's answers before it fits its
    threshold: one step each and one for the fit, so the calibrating stage does not stand at 0 / 1."""
    from audit_core.progress import steps_of

    target = KnowingTarget(MEMBERS)
    mem = [mba.probe(Document(f"m{i}", t), target) for i, t in enumerate(MEMBERS[:3])]
    non = [mba.probe(Document(f"n{i}", t), target) for i, t in enumerate(NONMEMBERS[:3])]
    seen: list[tuple[int, int]] = []
    with steps_of(lambda done, total: seen.append((done, total))):
        cal = mba.prepare(mem, non)
    assert seen == [(i, 7) for i in range(8)] and cal.member_scores
