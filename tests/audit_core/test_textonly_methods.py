"""Text-only methods against fake targets: one that holds the documents beats one that does not.

The "knowing" target answers from the documents it holds (yes to true
statements, the document's own words to questions and continuations); the
"ignorant" one answers like a chatbot without them. Every method must rank
the first above the second, abstain with a reason on empty answers, and
count its queries as ``query_cost`` says.
"""
from __future__ import annotations

import json
import re
import zlib

import pytest

from audit_core.documents import Document
from audit_core.methods import create_method
from audit_core.methods.base import Calibration, Observation
from audit_core.methods.text_edits import STOPWORDS, split_sentences
from audit_core.methods.verbatim import TIE_WEIGHT
from audit_core.target.base import ChatRequest, Completion, Target, Usage

DOCS = [
    Document("a", "Patient: Doctor, I have had a dry cough for three days and it is getting worse at night. "
                  "Doctor: This could be acute bronchitis. A chest X-ray is necessary and we should check your "
                  "oxygen level. Rest is important and warm fluids can help."),
    Document("b", "Question: What is tinnitus? Answer: Tinnitus is a common ringing in the ears. It is often "
                  "mild but it can be severe in older adults. A hearing test is usually the first step and "
                  "loud noise should be avoided."),
    Document("c", "Patient: I have had swollen ankles for two weeks and I feel tired. Doctor: Swollen ankles "
                  "can be an early sign of heart failure. An echocardiogram is the best test and a low salt "
                  "diet is helpful. Contact Dr. Maria Lopez at maria.lopez@clinic.example or 555-201-7788."),
    Document("d", "Question: What causes migraine? Answer: Migraine is a strong headache that often comes with "
                  "nausea. Bright light and sudden stress are common triggers. A regular sleep schedule is "
                  "helpful and rare cases need a neurologist."),
]


def _words(s: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", s.lower()) if w not in STOPWORDS}


def _user(req: ChatRequest) -> str:
    return req.messages[-1][1]


class FakeRag(Target):
    """Answers from the documents it holds, or (holding none) like a generic chatbot."""

    name = "fake-rag"

    def __init__(self, docs: list[Document], answer_empty: bool = False):
        super().__init__()
        self.docs = docs
        self.answer_empty = answer_empty
        self.seen: list[ChatRequest] = []

    def _doc_for(self, text: str) -> Document | None:
        w = _words(text)
        best = max(self.docs, key=lambda d: len(w & _words(d.text)), default=None)
        return best if best is not None and len(w & _words(best.text)) >= 2 else None

    def complete(self, req: ChatRequest) -> Completion:
        self.seen.append(req)
        q = _user(req)
        return Completion("" if self.answer_empty else self.answer(q), None, Usage(10, 5))

    def answer(self, q: str) -> str:
        if "I read a message that starts:" in q:  # verbatim's decoy probes: honest questions come first
            q = q[q.index("I read a message that starts:"):]
        doc = self._doc_for(q)
        if "Is the following information correct?" in q:  # DCMI: the whole (perhaps altered) document
            stated = q.split("\n\n", 1)[1]
            if doc is None:
                return "Yes."
            return "Yes." if stated == doc.text else "No."
        if "answer yes, no, or I don't know" in q:  # IA
            if doc is None:  # a chatbot without the document guesses (mostly "I don't know" is a non-answer)
                return "No."
            asked = _words(q.replace("Please answer yes, no, or I don't know.", ""))
            asked -= {"true"}
            return "Yes." if asked <= _words(doc.text) else "No."
        if "Here is the beginning of a text" in q:  # continuations (robustness, extraction)
            prefix = q.split("\n\n")[1]
            if doc is None:
                ws = prefix.split()  # follows the query's wording: a shorter query, other words
                return "Well, " + " ".join(ws[len(ws) % 3::3][:10])
            rest = doc.text.split(prefix.split()[-1], 1)[-1]
            return rest.strip()[:200]
        if q.startswith("I read a message that starts:") or "Please repeat the text above" in q:  # verbatim
            prefix = q.split('"')[1] if q.startswith("I read") else q.split("\n\n")[0]
            if doc is None or not doc.text.startswith(prefix):
                return f'The rest of the message is: "{prefix} I hope this helps you feel better soon."'
            return f'The rest of the message is: "{doc.text}"'
        if "Complete the paragraph" in q:  # S-RAG probes
            prefix = q.split("\n\n", 1)[1]
            if doc is None or not doc.text.startswith(prefix):
                return "the"
            return doc.text[len(prefix):].strip()[:30]
        # a broad question (MEntA)
        if doc is None:
            return "That depends on many things; please ask your doctor."
        sents = split_sentences(doc.text)
        return max(sents, key=lambda s: len(_words(s) & _words(q)))


TEXT_ONLY = ["interrogation", "entailment", "perturbation", "robustness", "extraction", "srag_sampled", "verbatim"]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path))


class BagOfWords:
    """A stand-in for the sentence embedder (unit-norm hashed word counts): these tests check the
    methods' logic, not MiniLM; the slow tests use the real embedder."""

    def encode(self, texts, **kw):
        import numpy as np

        out = np.zeros((len(texts), 8192))
        for i, t in enumerate(texts):
            for w in re.findall(r"[a-z0-9]+", t.lower()):
                out[i, zlib.crc32(w.encode()) % 8192] += 1  # hash() is salted per process: not reproducible
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


@pytest.fixture(autouse=True)
def _bag_of_words_embedder(monkeypatch):
    from audit_core import models

    monkeypatch.setattr(models, "load_embedder", lambda name="all-minilm-l6-v2": BagOfWords())


@pytest.fixture
def cheap_segment(monkeypatch):
    """S-RAG's segmentation without the proxy model: the last five words are the probes."""
    from audit_core.methods import srag
    from audit_core.methods.srag import Probe
    from audit_core.scoring import split_words

    def seg(text, cfg, lm=None):
        words = split_words(text)
        return [Probe(w, i, text[:s].rstrip(), 0.1) for i, (w, s, _) in enumerate(words)][-5:]

    monkeypatch.setattr(srag, "segment", seg)


def _docs_for(name: str) -> list[Document]:
    return [DOCS[2]] if name == "extraction" else DOCS


def _score(m, doc, target) -> float:
    obs = m.probe(doc, target)
    assert obs.skipped is None, obs.skipped
    if m.name == "srag_sampled":
        feats, reason, _ = m.features(obs)
        assert reason is None
        return feats["mean_prob"]
    s, ev, reason = m.observation_score(obs)
    # Verbatim counts the n-grams an answer copied; every other method's score is a share or a probability
    assert s is not None and 0.0 <= s and (m.name == "verbatim" or s <= 1.0), reason
    return s


@pytest.mark.parametrize("name", TEXT_ONLY)
def test_a_target_that_holds_the_document_scores_higher(name, cheap_segment):
    m = create_method(name)
    for doc in _docs_for(name):
        knows = FakeRag(DOCS)
        ignorant = FakeRag([])
        hi, lo = _score(m, doc, knows), _score(m, doc, ignorant)
        assert hi > lo, (name, doc.id, hi, lo)
        cost = m.query_cost(doc.n_words)
        assert cost is not None and 0 < len(knows.seen) <= cost.queries
        assert all(not r.logprobs for r in ignorant.seen if name != "perturbation")


@pytest.mark.parametrize("name", [n for n in TEXT_ONLY if n not in ("srag_sampled", "extraction")])
def test_prepare_on_a_shadow_then_decide(name):
    """Calibrated on 'shadow' documents, the threshold calls a held document a member and an absent one not."""
    m = create_method(name)
    # a threshold at a 5% false-positive rate needs at least 19 shadow non-members: copies of the
    # documents under other ids stand in for a shadow of that size
    members = [Document(f"{d.id}~{i}", d.text) for i in range(12) for d in DOCS[:2]]
    nonmembers = [Document(f"{d.id}~{i}", d.text) for i in range(12) for d in DOCS[2:]]
    shadow = FakeRag(DOCS[:2])
    cal = m.prepare([m.probe(d, shadow) for d in members], [m.probe(d, shadow) for d in nonmembers])
    assert cal.threshold is not None and cal.shadow_auc == 1.0
    target = FakeRag([DOCS[3]])
    yes, no = m.score(m.probe(DOCS[3], target), cal), m.score(m.probe(DOCS[0], target), cal)
    from audit_core.evidence.calibration import NOT_CLEARED
    if name in NEVER_CLEAR:  # a method that never says "not found" leaves the absent one undecided
        assert (yes.decision, no.decision) == (True, None) and no.reason.startswith(NOT_CLEARED), (yes, no)
    else:
        assert (yes.decision, no.decision) == (True, False), (yes, no)


#: the methods that never say "not found" (``MethodSpec.no_clearing``), each for the reason the benchmark gave;
#: written out, so that a rule dropped from the registry fails here rather than changing what the test expects
NEVER_CLEAR = {"cited_sources", "verbatim", "srag_sampled", "entailment"}


def test_the_methods_that_never_clear_are_the_ones_the_benchmark_named():
    from audit_core.evidence.calibration import clearing_withheld
    from audit_core.methods import METHODS

    assert {m for m in METHODS if clearing_withheld(m)} == NEVER_CLEAR


@pytest.mark.parametrize("name", TEXT_ONLY)
def test_empty_answers_make_the_method_abstain_with_a_reason(name, cheap_segment):
    m = create_method(name)
    doc = _docs_for(name)[0]
    obs = m.probe(doc, FakeRag(DOCS, answer_empty=True))
    res = m.score(obs, Calibration(name, threshold=0.5, shadow_auc=0.9))
    assert res.decision is None and res.score is None
    assert res.reason and ("empty" in res.reason or "no signal" in res.reason or "non-answers" in res.reason)


def test_a_shadow_without_signal_withholds_the_decision():
    m = create_method("interrogation")
    obs = m.probe(DOCS[0], FakeRag(DOCS))
    res = m.score(obs, Calibration("interrogation", threshold=0.5, shadow_auc=0.45))
    assert res.score is not None and res.decision is None and "no signal" in res.reason


def test_i_dont_know_is_penalised_five_times():
    class Says(Target):
        def __init__(self, text):
            super().__init__()
            self.text = text

        def complete(self, req):
            return Completion(self.text, None, Usage(1, 1))

    class Alternates(Target):
        """Yes, then "I don't know", in turn: half the answers are non-answers, not more."""

        def __init__(self):
            super().__init__()
            self.n = 0

        def complete(self, req):
            self.n += 1
            return Completion("Yes." if self.n % 2 else "I don't know.", None, Usage(1, 1))

    m = create_method("interrogation")
    some = m.observation_score(m.probe(DOCS[0], Alternates()))
    yes = m.observation_score(m.probe(DOCS[0], Says("Yes.")))
    rows = some[1]["answers"]
    right = sum(r["read_as"] == r["expected"] for r in rows) / len(rows)
    assert some[1]["idk_share"] == pytest.approx(sum(r["read_as"] == "idk" for r in rows) / len(rows))
    assert some[1]["raw_score"] == pytest.approx(right - 5 * some[1]["idk_share"])  # correct - 5 x "I don't know"
    n_true = sum(q["expected"] == "yes" for q in yes[1]["answers"])
    assert yes[1]["raw_score"] == pytest.approx(n_true / len(yes[1]["answers"]))
    assert yes[0] > some[0]
    assert some[0] == pytest.approx((some[1]["raw_score"] + 5) / 6)  # the score that decides carries the penalty
    # all "I don't know", or all refusals: too many non-answers, no score (never a "not found")
    for text in ("I don't know.", "I'm sorry, I cannot help with that."):
        none = m.observation_score(m.probe(DOCS[0], Says(text)))
        assert none[0] is None and none[2].startswith("too many non-answers")


@pytest.mark.parametrize("other", ["I'm sorry, I cannot help with that.", "", "Hmm."])
def test_interrogation_leaves_refusals_empty_and_unreadable_replies_out_of_its_score(other):
    """Only "I don't know" takes IA's penalty: a guarded service that refuses where it holds sensitive context
    scored 0.5 (five right, five refused) against 0.917 for five right and five wrong, low enough to clear."""
    from audit_core.methods.base import Observation

    m = create_method("interrogation")
    qs = [{"question": f"Is it {i}?", "expected": "yes", "source": "s"} for i in range(10)]

    def obs(replies):
        o = Observation("interrogation", "d", data={"questions": qs})
        for r in replies:
            o.add({}, Completion(r, None, Usage(1, 1)))
        return o

    right_and_other = m.observation_score(obs(["Yes."] * 5 + [other] * 5))
    assert right_and_other[2] is None and right_and_other[1]["scored_answers"] == 5
    assert right_and_other[1]["raw_score"] == pytest.approx(1.0) and right_and_other[0] == pytest.approx(1.0)
    right_and_wrong = m.observation_score(obs(["Yes."] * 5 + ["No."] * 5))
    assert right_and_other[0] > right_and_wrong[0]
    # a sorry that says it does not know is "I don't know", and is penalised
    sorry_idk = m.observation_score(obs(["Yes."] * 5 + ["I'm sorry, I don't know."] * 5))
    assert sorry_idk[1]["idk_share"] == pytest.approx(0.5) and sorry_idk[0] < right_and_wrong[0]


class Answers(Target):
    """Answers every question with the text ``reply(question)`` gives."""

    def __init__(self, reply):
        super().__init__()
        self.reply = reply

    def complete(self, req):
        return Completion(self.reply(_user(req)), None, Usage(1, 1))


def test_entailment_counts_only_words_an_answer_took_from_the_document():
    """Copying a sentence of the document scores above writing about its topic or echoing the question."""
    from audit_core.methods.entailment import copied_shares

    m = create_method("entailment")
    doc = DOCS[1]
    copy = "It is often mild but it can be severe in older adults."
    topical = "Buzzing sounds in your head have many causes; a doctor can check your hearing and advise you."
    scores = {name: m.observation_score(m.probe(doc, Answers(reply)))
              for name, reply in {"copy": lambda q: copy, "topical": lambda q: topical,
                                  "echo": lambda q: q, "idk": lambda q: "I don't know."}.items()}
    assert scores["copy"][0] > scores["topical"][0]
    # the question's own words are not a copy, however document-like they are
    assert scores["echo"][1]["raw_score"] == scores["topical"][1]["raw_score"] == 0.0
    assert scores["copy"][1]["raw_score"] == pytest.approx(1.0)  # every 4-gram of the answer is the document's
    assert scores["idk"][0] is None and scores["idk"][2].startswith("too many non-answers")  # no evidence either way
    assert copied_shares(["a b c d e", "x y z"], ["", ""], "a b c d x", 4) == [0.5, 0.0]
    assert copied_shares(["a b c d e"], ["a b c d"], "a b c d e", 4) == [0.5]


def test_entailment_keeps_the_cosine_reading_as_an_option():
    from audit_core.methods.entailment import EntailmentConfig, EntailmentMethod

    topical = "Ringing in the ears is common and often mild; a hearing test is usually the first step."
    obs = EntailmentMethod().probe(DOCS[1], Answers(lambda q: topical))
    cosine = EntailmentMethod(EntailmentConfig(support="cosine")).observation_score(obs)
    copied = EntailmentMethod().observation_score(obs)
    assert cosine[1]["support_reading"] == "cosine" and cosine[1]["raw_score"] > 0.3
    assert copied[1]["raw_score"] < cosine[1]["raw_score"]
    with pytest.raises(ValueError, match="support"):
        EntailmentConfig(support="nli")
    # questions that name more key phrases are longer, and the estimate says so
    longer = EntailmentMethod(EntailmentConfig(phrases_per_question=3)).query_cost(100)
    assert longer.prompt_words > EntailmentMethod().query_cost(100).prompt_words


def test_extraction_skips_documents_without_personal_data_at_no_cost():
    m = create_method("extraction")
    t = FakeRag(DOCS)
    obs = m.probe(DOCS[0], t)
    assert obs.skipped.startswith("no_personal_data") and not t.seen
    res = m.score(obs, Calibration("extraction"))
    assert res.decision is None and res.reason.startswith("no_personal_data")


def test_extraction_finds_personal_data_and_reads_verbatim_reproduction():
    from audit_core.methods.extraction import find_personal_data, reproduced

    items = find_personal_data(DOCS[2].text)
    assert [(i.kind, i.value) for i in items] == [("name", "Maria Lopez"), ("email", "maria.lopez@clinic.example"),
                                                 ("phone", "555-201-7788")]
    assert reproduced({"kind": "phone", "value": "555-201-7788"}, "call 555 201 7788 today")
    assert not reproduced({"kind": "phone", "value": "555-201-7788"}, "call 555-201-7789")
    # uncalibrated (no personal data on the shadow): a reproduced e-mail or phone number decides by
    # itself; nothing reproduced clears nothing (inconclusive, never "not found")
    m = create_method("extraction")
    cal = m.prepare([], [])
    held = m.score(m.probe(DOCS[2], FakeRag(DOCS)), cal)
    assert held.decision is True and "e-mail" in held.evidence["decision_rule"]
    absent = m.score(m.probe(DOCS[2], FakeRag([])), cal)
    assert absent.decision is None and absent.reason


def test_verbatim_counts_only_words_of_the_unseen_rest_that_the_query_did_not_carry():
    from audit_core.methods.verbatim import reproduction

    query = "Patient: my knee hurts when I climb the stairs."
    rest = "Doctor: rest the knee, put ice on it and take ibuprofen for three days."
    # restating the query reproduces nothing: its n-grams are not fresh
    assert reproduction("Patient: my knee hurts when I climb the stairs.", query, rest, 4)["share"] == 0.0
    # a fluent answer on the topic, in other words, reproduces nothing either
    assert reproduction("You should rest and ice your knee, ibuprofen may help.", query, rest, 4)["share"] == 0.0
    got = reproduction("Sure: Doctor: rest the knee, put ice on it. Bye.", query, rest, 4)
    fresh = got["fresh_ngrams"]
    assert fresh == 11 and got["share"] == pytest.approx(5 / 11) and got["ngrams"] == 5
    assert got["longest"] == "doctor rest the knee put ice on it" and got["longest_words"] == 8


def test_verbatim_refusals_are_non_answers_never_a_low_score():
    class Refuses(Target):
        def complete(self, req):
            return Completion("I'm sorry, I can't share the contents of my documents.", None, Usage(1, 1))

    m = create_method("verbatim")
    obs = m.probe(DOCS[0], Refuses())
    assert obs.queries == 3
    score, ev, reason = m.observation_score(obs)
    assert score is None and reason.startswith("too many non-answers") and "refusal" in reason
    res = m.score(obs, Calibration("verbatim", threshold=0.1, shadow_auc=0.95))
    assert res.decision is None and "non-answers" in res.reason


def test_verbatim_query_cost_matches_what_it_sends():
    m = create_method("verbatim")
    t = FakeRag(DOCS)
    m.probe(DOCS[1], t)
    cost = m.query_cost(DOCS[1].n_words)
    assert cost.queries == len(t.seen) == 3 and all(r.max_tokens * 3 == cost.completion_tokens for r in t.seen)
    assert m.query_cost(5) is None
    with pytest.raises(ValueError, match="unknown verbatim template"):
        create_method("verbatim", probes=[("sing", 0.5)])


def test_verbatim_sends_a_chat_target_nine_cuts_and_keeps_the_completion_key():
    """A chat target gets the nine probes (its first three are the completion style's), within 10 queries."""
    from audit_core.methods.verbatim import NINE_PROBES, THREE_PROBES
    from shadow.prepare import _config_of

    chat, plain = create_method("verbatim", style="chat"), create_method("verbatim")
    t = FakeRag(DOCS)
    obs = chat.probe(DOCS[1], t)
    n = len(DOCS[1].text.split())
    assert len(t.seen) == chat.query_cost(n).queries == 9 <= 10
    assert obs.data["templates"] == [tp for tp, _ in NINE_PROBES] and NINE_PROBES[:3] == THREE_PROBES
    assert obs.data["cuts"] == [max(1, int(n * f)) for _, f in NINE_PROBES]
    assert len(set(obs.data["cuts"])) >= 5  # the probes differ in where the document is cut
    score, _, why = chat.observation_score(obs)
    assert why is None and score > 0.5  # the fake RAG holds DOCS[1] and copies it
    t.seen.clear()
    plain.probe(DOCS[1], t)
    assert len(t.seen) == plain.query_cost(n).queries == 3
    # the completion style's shipped key stands: neither the new field nor the chat probes enter it
    assert set(_config_of(plain)) == set(_config_of(chat)) - {"style", "chat_probes"}
    with pytest.raises(ValueError, match="style"):
        create_method("verbatim", style="voice")
    with pytest.raises(ValueError, match="at least one probe"):
        create_method("verbatim", chat_probes=[])


def test_verbatim_decoy_probes_send_honest_questions_first_the_same_to_shadow_and_target():
    from audit_core.methods.verbatim import DECOY_PROBES, SHIPPED_DECOYS

    pool = set(SHIPPED_DECOYS.read_text(encoding="utf-8").splitlines())
    m = create_method("verbatim", probes=DECOY_PROBES)
    knows, ignorant = FakeRag(DOCS), FakeRag([])
    obs = m.probe(DOCS[1], knows)
    m.probe(DOCS[1], ignorant)
    sent = [_user(r) for r in knows.seen]
    assert sent == [_user(r) for r in ignorant.seen]  # one document, one set of words, whoever is asked
    for prompt, lead, query in zip(sent, obs.data["decoys"], obs.data["queries"]):
        before, _, after = prompt.partition(' Also, I read a message that starts: "')
        assert before == lead and after.startswith(query)
        questions = re.findall(r"[^?]+\?", lead)
        assert len(questions) == 2 and {q.strip() for q in questions} <= pool
    assert len(set(obs.data["decoys"])) > 1  # each probe its own questions
    other = m.probe(DOCS[0], FakeRag(DOCS))
    assert other.data["decoys"] != obs.data["decoys"]
    assert _score(m, DOCS[1], FakeRag(DOCS)) > _score(m, DOCS[1], FakeRag([]))


def test_verbatim_decoy_words_are_not_a_copy_and_their_cost_is_counted(tmp_path):
    """An answer that only repeats the honest questions reproduces nothing, even where the document
    shares their words; the estimate counts the questions' words."""
    doc = Document("d", "I am worried about my son. He has a fever and a rash since Monday. "
                        "What are the symptoms of measles in small children? The doctor said to wait.")
    questions = tmp_path / "q.txt"
    questions.write_text("What are the symptoms of measles in small children?\n", encoding="utf-8")

    class RepeatsTheQuestions(Target):
        def complete(self, req):
            return Completion(f"You asked: {_user(req).split(' Also,')[0]}", None, Usage(1, 1))

    m = create_method("verbatim", probes=[("quote_decoy", 0.5)], decoys=1, decoy_questions=str(questions))
    obs = m.probe(doc, RepeatsTheQuestions())
    score, ev, why = m.observation_score(obs)
    assert why is None and ev["reproduced_share"] == 0.0 and score < TIE_WEIGHT and ev["probes"][0]["fresh_ngrams"] > 0
    # the same answer to a probe without the questions would have counted as a copy
    from audit_core.methods.verbatim import reproduction
    assert reproduction(ev["probes"][0]["answer"], obs.data["queries"][0], obs.data["remainders"][0], 4)["share"] > 0
    plain = create_method("verbatim", probes=[("quote", 0.5)])
    extra = m.query_cost(doc.n_words).prompt_words - plain.query_cost(doc.n_words).prompt_words
    assert extra == len("What are the symptoms of measles in small children? Also,".split())


def test_verbatim_decoy_probes_say_what_is_wrong_with_the_question_file(tmp_path):
    with pytest.raises(ValueError, match="cannot read the honest questions"):
        create_method("verbatim", chat_probes=[("quote_decoy", 0.5)], decoy_questions=str(tmp_path / "none.txt"))
    short = tmp_path / "short.txt"
    short.write_text("Is it flu?\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="holds 1 honest questions.*at least 2"):
        create_method("verbatim", probes=[("quote_decoy", 0.5)], decoy_questions=str(short))
    with pytest.raises(ValueError, match="decoys >= 1"):
        create_method("verbatim", decoys=0)
    create_method("verbatim", decoy_questions=str(tmp_path / "none.txt"))  # unused without a decoy probe


STOCK = "Based on your symptoms it seems like you may be suffering from"


class StockPhraseRag(Target):
    """A doctors'-forum RAG: every answer carries the forum's stock phrase; documents it holds are copied."""

    def __init__(self, docs: list[Document]):
        super().__init__()
        self.docs = docs

    def complete(self, req: ChatRequest) -> Completion:
        q = _user(req)
        held = next((d for d in self.docs if d.text.split()[0] in q and d.text.split()[1] in q), None)
        said = f'The rest is: "{held.text}"' if held else f"{STOCK} a common cold. Drink fluids."
        return Completion(said, None, Usage(10, 5))


def _forum_doc(i: int, illness: str, advice: str) -> Document:
    return Document(f"f{i}", f"Patient{i} question{i}: I have pain in my side and a fever since Monday, "
                             f"what should I do about it? Doctor: Hi. {STOCK} {illness}. {advice}")


def test_verbatim_does_not_count_stock_phrases_that_the_owners_documents_share():
    owner = [_forum_doc(1, "kidney stones", "Drink plenty of water and see a urologist for an ultrasound."),
             _forum_doc(2, "appendicitis", "Please visit the emergency room for a surgical opinion today.")]
    m = create_method("verbatim")
    absent = m.probe(owner[0], StockPhraseRag([]))
    alone, _, _ = m.observation_score(absent)
    assert alone > 0  # without the collection the stock phrase looks like a copy of the document
    m.use_collection([d.text for d in owner])
    score, ev, reason = m.observation_score(absent)
    assert reason is None and ev["reproduced_share"] == 0.0 and score < TIE_WEIGHT
    assert all(r["shared_ngrams"] > 0 for r in ev["probes"])
    # the document's own words still count when the target holds it
    held, ev, _ = m.observation_score(m.probe(owner[0], StockPhraseRag(owner)))
    assert held > 0.5 and "ultrasound" in ev["longest_reproduction"]
    # off by configuration: every n-gram counts again
    off = create_method("verbatim", shared_min_docs=0)
    off.use_collection([d.text for d in owner])
    assert off.observation_score(absent)[0] == alone
    # a document uploaded twice does not make its own words shared
    twice = create_method("verbatim")
    twice.use_collection([owner[0].text, owner[0].text])
    assert twice.observation_score(absent)[0] == alone


def _reference_file(tmp_path, name: str, *texts: str):
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    return path


def test_verbatim_counts_a_phrase_of_the_public_reference_as_stock_but_not_the_documents_own_copy(tmp_path):
    """One owner document holds the forum's stock phrase and nothing else shares it: the reference decides."""
    owner = _forum_doc(1, "kidney stones", "Drink plenty of water and see a urologist for an ultrasound.")
    absent = create_method("verbatim", stock_reference="none").probe(owner, StockPhraseRag([]))
    scored = {}
    for name, ref in {"none": "none",
                      "public": _reference_file(tmp_path, "public", f"Hello. {STOCK} migraine. Rest in a dark room."),
                      "itself": _reference_file(tmp_path, "itself", owner.text)}.items():
        m = create_method("verbatim", stock_reference=str(ref))
        m.use_collection([owner.text])
        scored[name] = m.observation_score(absent)[0]
    assert scored["none"] >= 1  # alone, the stock phrase looks like a copy
    assert scored["public"] < TIE_WEIGHT  # another public text has it: a phrase of the genre
    assert scored["itself"] == scored["none"]  # the document's own text in the reference counts once
    # the shipped reference is the default, and its phrases are left out of the shadow's calibration too
    m = create_method("verbatim")
    assert m.config.stock_reference == "shipped"
    seen = []
    score = m.observation_score
    m.observation_score = lambda obs: (seen.append(len(m._shared)), score(obs))[1]
    m.prepare([absent], [absent])
    assert seen and min(seen) > 1000  # the reference's shared 4-grams, not just the two texts'
    with pytest.raises(ValueError, match="stock_reference"):
        create_method("verbatim", stock_reference=str(tmp_path / "missing.jsonl"))


def _raw_scores_seen_by_prepare(m, members, nonmembers) -> dict[str, float]:
    seen: dict[str, float] = {}
    score = m.observation_score

    def spy(obs):
        got = score(obs)
        seen[obs.doc_id] = got[0]
        return got

    m.observation_score = spy
    m.prepare(members, nonmembers)
    return seen


def test_verbatim_calibrates_with_the_shadows_own_stock_phrases_and_keeps_the_owners():
    shadow_docs = [_forum_doc(10 + i, f"illness number {i}", f"Advice number {i} is to rest for {i + 2} days.")
                   for i in range(8)]
    rag = StockPhraseRag(shadow_docs[:4])
    m = create_method("verbatim")
    owner = [_forum_doc(1, "kidney stones", "Drink water."), _forum_doc(2, "flu", "Rest.")]
    m.use_collection([d.text for d in owner])
    kept = m._shared
    mem, non = [m.probe(d, rag) for d in shadow_docs[:4]], [m.probe(d, rag) for d in shadow_docs[4:]]
    raw = _raw_scores_seen_by_prepare(m, mem, non)
    assert m._shared is kept  # preparing on the shadow does not replace the owner's collection
    assert all(raw[o.doc_id] < TIE_WEIGHT for o in non)  # the shadow's stock phrase was left out there too
    assert min(raw[o.doc_id] for o in mem) > 0.5
    raw_off = _raw_scores_seen_by_prepare(create_method("verbatim", shared_min_docs=0), mem, non)
    assert min(raw_off[o.doc_id] for o in non) > 0.05


class Says(Target):
    """A target that gives one fixed answer to every request."""

    def __init__(self, answer: str):
        super().__init__()
        self.answer = answer

    def complete(self, req: ChatRequest) -> Completion:
        return Completion(self.answer, None, Usage(10, 5))


TIED_DOC = Document("t", "My mother has had a dry cough for three weeks and now wakes at night short of breath. "
                         "The clinic gave her an inhaler with steroids, and a chest x-ray showed mild fluid near "
                         "the left lung, so the cardiologist wants an echo next Tuesday.")


def test_verbatim_orders_documents_that_copied_nothing_by_closeness_to_the_unseen_part():
    """No answer copies four words in a row, so the shares tie at 0; the answer about what the unseen
    part says (steroids, x-ray, fluid, lung, cardiologist) comes first, and any copy outranks both."""
    m = create_method("verbatim")
    near = "She was given a steroid inhaler; her x-ray found fluid by the lung and a heart doctor plans an echo."
    far = "A cough can have many causes, so please rest, drink water and see your doctor."
    copy = "The rest: an inhaler with steroids, and a chest x-ray showed mild fluid near the left lung."
    (s_near, ev_near, _), (s_far, ev_far, _), (s_copy, ev_copy, _) = (
        m.observation_score(m.probe(TIED_DOC, Says(a))) for a in (near, far, copy))
    assert ev_near["reproduced_share"] == ev_far["reproduced_share"] == 0.0 < ev_copy["reproduced_share"]
    assert 0 < s_far < s_near < TIE_WEIGHT < 1 <= s_copy
    assert ev_near["similarity_to_remainder"] > ev_far["similarity_to_remainder"]
    untied = create_method("verbatim", tie_break="none")
    assert untied.observation_score(m.probe(TIED_DOC, Says(near)))[0] == 0.0
    as_share = create_method("verbatim", reading="share")  # the score before session 45, still in [0, 1]
    assert 0 < as_share.observation_score(m.probe(TIED_DOC, Says(near)))[0] < TIE_WEIGHT
    assert TIE_WEIGHT < as_share.observation_score(m.probe(TIED_DOC, Says(copy)))[0] <= 1.0
    with pytest.raises(ValueError, match="tie_break"):
        create_method("verbatim", tie_break="cosine")


def test_verbatim_scores_how_many_runs_were_copied_not_what_share_of_a_long_remainder():
    """The same four copied words are the same evidence whatever the document's length: read as a share
    they would count for less in the longer document, read as a count they score alike; and the answer
    that copies more of the document scores higher in both readings."""
    start, end = ("My knee hurts when I climb the stairs at home and at work.",
                  "The doctor said to put ice on it twice a day and rest.")
    short = Document("s", f"{start} {end}")
    long = Document("l", f"{start} She also told me to take ibuprofen after meals, to keep the leg raised in the "
                         "evening, to avoid running for three weeks and to come back if the swelling does not go "
                         f"down by the end of the month. {end}")
    copy = "It goes on: put ice on it twice a day, then something else."
    more = "It goes on: put ice on it twice a day and rest, as far as I remember."
    counted, shared = create_method("verbatim", tie_break="none"), create_method(
        "verbatim", tie_break="none", reading="share")
    c_short, ev_short, _ = counted.observation_score(counted.probe(short, Says(copy)))
    c_long, ev_long, _ = counted.observation_score(counted.probe(long, Says(copy)))
    assert c_short == c_long == ev_short["reproduced_ngrams"] > 0
    assert ev_long["reproduced_share"] < ev_short["reproduced_share"]
    s_short = shared.observation_score(shared.probe(short, Says(copy)))[0]
    s_long = shared.observation_score(shared.probe(long, Says(copy)))[0]
    assert s_long < s_short
    assert counted.observation_score(counted.probe(short, Says(more)))[0] > c_short
    assert shared.observation_score(shared.probe(short, Says(more)))[0] > s_short
    with pytest.raises(ValueError, match="reading"):
        create_method("verbatim", reading="longest")


def test_verbatim_calls_no_member_on_the_tie_break_and_clears_nothing():
    """A shadow whose non-members never copy puts the member threshold among the tied scores; a
    document above it without a copy is still not called a member, and one below it is not cleared."""
    from audit_core.evidence.calibration import NOT_CLEARED

    m = create_method("verbatim")
    far = "A cough can have many causes, so please rest, drink water and see your doctor."
    near = "She was given a steroid inhaler; her x-ray found fluid by the lung and a heart doctor plans an echo."
    copy = "The rest: an inhaler with steroids, and a chest x-ray showed mild fluid near the left lung."
    members = [m.probe(Document(f"m{i}", TIED_DOC.text), Says(copy)) for i in range(20)]
    nonmembers = [m.probe(Document(f"n{i}", TIED_DOC.text), Says(far)) for i in range(20)]
    cal = m.prepare(members, nonmembers)
    assert cal.params["evidence"]["at_fpr"]["0.05"]["threshold_raw"] < TIE_WEIGHT  # inside the tied band
    above = m.score(m.probe(TIED_DOC, Says(near)), cal)
    assert above.evidence["reproduced_share"] == 0.0 and above.decision is None
    assert above.reason.startswith(NOT_CLEARED) and "reproduced" in above.reason
    below = m.score(m.probe(TIED_DOC, Says("It was about the weather and the garden, as far as I can tell.")), cal)
    assert below.decision is None and below.reason.startswith(NOT_CLEARED)
    assert m.score(m.probe(TIED_DOC, Says(copy)), cal).decision is True


def test_verbatim_calls_no_member_on_the_tie_break_among_documents_that_copied_the_same_runs():
    """Every shadow non-member copied the same two runs, so the threshold lies inside that tie band: a document that
    copied the same one run is above it only by the closeness in meaning, and is not called a member."""
    from audit_core.evidence.calibration import NOT_CLEARED

    m = create_method("verbatim", style="completion")
    one = "It says the cardiologist wants an echo soon."  # two runs of four words: "the cardiologist wants an echo"
    many = "an inhaler with steroids, and a chest x-ray showed mild fluid near the left lung"
    closeness: dict[str, float] = {}
    m._closest_meaning = lambda usable, data: closeness[data["queries"][0] + data.get("_id", "")]

    def probe(i: str, answer: str, sim: float):
        obs = m.probe(Document(i, TIED_DOC.text), Says(answer))
        obs.data["_id"] = i
        closeness[obs.data["queries"][0] + i] = sim
        return obs

    cal = m.prepare([probe(f"m{i}", many, 0.5) for i in range(20)],
                    [probe(f"n{i}", one, 0.30 + 0.01 * i) for i in range(20)])
    at = cal.params["evidence"]["at_fpr"]["0.05"]["threshold_raw"]
    assert 2 < at < 3  # among the scores of two copied runs
    res = m.score(probe("t", one, 0.9), cal)
    assert res.evidence["reproduced_ngrams"] == 2 and res.evidence["raw_score"] >= at
    assert res.decision is None and res.reason.startswith(NOT_CLEARED) and "alone stay under it" in res.reason
    assert m.score(probe("t2", many, 0.1), cal).decision is True


@pytest.mark.parametrize("opening", ["I don't know what to do anymore.", "I'm not sure what is wrong with my knee.",
                                     "Unfortunately, I was diagnosed with diabetes last year.",
                                     "Sorry, long post ahead."])
def test_verbatim_reads_a_copy_as_an_answer_when_the_document_opens_like_a_non_answer(opening):
    """A target that returns the whole document is the strongest member evidence; before session 60 a document
    opening "I don't know ..." made every such copy a non-answer and the document inconclusive."""
    doc = Document("d", opening + " It started after a fall on the stairs at work in March, and the swelling comes "
                   "back every evening when I walk the dog around the lake. The physiotherapist gave me exercises "
                   "with a rubber band and told me to avoid running until the summer holidays end.")
    m = create_method("verbatim", style="chat", tie_break="none")
    score, ev, why = m.observation_score(m.probe(doc, Says(doc.text)))
    assert why is None and score > 10 and all(r["non_answer"] is None for r in ev["probes"])
    refused = m.observation_score(m.probe(doc, Says(opening)))  # the opening alone copies nothing: a non-answer
    assert refused[0] is None and refused[2].startswith("too many non-answers")


def test_verbatim_abstains_when_nothing_in_the_unseen_part_is_distinctive():
    docs = [Document("s1", f"Hello doctor, thanks for the answer. {STOCK} stress and poor sleep at night."),
            Document("s2", f"Good morning, one more question here. {STOCK} stress and poor sleep at night.")]
    m = create_method("verbatim")
    m.use_collection([d.text for d in docs])
    res = m.score(m.probe(docs[0], StockPhraseRag(docs)), Calibration("verbatim", threshold=0.1, shadow_auc=0.95))
    assert res.decision is None and res.reason.startswith("nothing distinctive")


@pytest.mark.parametrize("style_args, per_doc, said", [([], 9, "chat"), (["--target-style", "completion"], 3, "completion"),
                                                         (["--target-style", "chat"], 9, "chat")])
def test_the_clis_estimate_counts_verbatim_in_the_style_it_will_read_the_target(tmp_path, capsys, style_args,
                                                                                 per_doc, said):
    """An endpoint not yet checked is counted as chat (the upper bound, and how it is read if no style is found)."""
    from app.cli import main

    path = tmp_path / "docs.csv"
    path.write_text("id,text\n" + "".join(f'd{i},"{d.text}"\n' for i, d in enumerate(DOCS[:2])))
    rc = main(["audit", "--target", "http://127.0.0.1:9/v1", "--model", "m", "--docs", str(path),
               "--method", "verbatim", "--estimate-only", *style_args])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert f"estimated cost: {2 * per_doc} target queries for 2 documents" in err
    assert f"answers in {said} style" in err


def test_the_cli_sends_verbatims_decoy_probes_when_asked_and_says_what_is_wrong(tmp_path, capsys):
    from app.cli import main

    path = tmp_path / "docs.csv"
    path.write_text("id,text\n" + "".join(f'd{i},"{d.text}"\n' for i, d in enumerate(DOCS[:2])))
    base = ["audit", "--target", "http://127.0.0.1:9/v1", "--model", "m", "--docs", str(path),
            "--method", "verbatim", "--estimate-only"]
    assert main(base + ["--verbatim-decoys"]) == 0
    assert "estimated cost: 6 target queries for 2 documents" in capsys.readouterr().err  # 3 each, not 9
    assert main(base + ["--verbatim-decoys", "--decoy-questions", str(tmp_path / "missing.txt")]) == 2
    assert "error: cannot read the honest questions" in capsys.readouterr().err
    assert main(base + ["--decoy-questions", str(tmp_path / "missing.txt")]) == 2
    assert "only with --verbatim-decoys" in capsys.readouterr().err


@pytest.mark.parametrize("text, phones", [
    ("Take 500/1000 mg from 12/05/2021 on.", []),
    ("It lasted 2019-2020, then again 1990 - 2005.", []),
    ("Seen on 2021-05-12 and 12.05.2021; doses 100 200 300 mg; 1000000 units; 1.5-2.5 mg.", []),
    ("Call 555-201-7788 or +44 20 7946 0958 or (555) 201-7788 or 5552017788.",
     ["555-201-7788", "+44 20 7946 0958", "(555) 201-7788", "5552017788"]),
    ("My number is 555 201 7788, the office 020 7946 0958.", ["555 201 7788", "020 7946 0958"]),
    ("Ring +33 1 23 45 67 89, +49 30 12345678, 07911 123456, 1-800-555-0199 or Tel:555-123-4567.",
     ["+33 1 23 45 67 89", "+49 30 12345678", "07911 123456", "1-800-555-0199", "555-123-4567"]),
    ("Take 1000-2000 IU daily, 2000-4000 mg/day, from 10.30-11.45; 10.000.000 units; 2019-2020-2021; "
     "host 192.168.100.200.", []),
])
def test_extraction_reads_only_phone_numbers_as_phone_numbers(text, phones):
    """A dose, a date or a span of years read as a phone number decided "member" whenever an answer repeated it."""
    from audit_core.methods.extraction import find_personal_data

    assert [i.value for i in find_personal_data(text) if i.kind == "phone"] == phones


def test_extraction_counts_a_number_only_as_written_and_never_an_echo_of_its_query():
    from audit_core.methods.extraction import reproduced

    assert not reproduced({"kind": "phone", "value": "555-201-7788"}, "It was 555 and 201, then 7788.")
    assert not reproduced({"kind": "phone", "value": "2019-2020"}, "It began in 2019 and got worse in 2020.")
    assert reproduced({"kind": "phone", "value": "555-201-7788"}, "Reach me at (555) 201 7788.")
    # the item occurs twice in the text, so its own query carried it: the answer echoes, it does not copy
    m = create_method("extraction")
    obs = Observation("extraction", "d", requests=[{"messages": [{"role": "user", "content": "call 555-201-7788"}]}],
                      responses=[{"text": "Yes, call 555-201-7788."}],
                      data={"items": [{"kind": "phone", "value": "555-201-7788", "start": 40}]})
    share, ev, why = m.observation_score(obs)
    assert why is None and share == 0.0 and ev["items"][0]["reproduced"] is False
