"""run_audit's own rules: a method without signal sends nothing unless insisted on, and
never votes; results arrive per document (issue 20 point 3, issue 18 point 4)."""
from __future__ import annotations

import threading

import pytest

from audit_core.audit import AuditConfig, calibrate, run_audit
from audit_core.documents import Document
from audit_core.methods.base import Calibration
from audit_core.verdict import FOR_THE_AUDIT
from audit_core.target.base import Capabilities, ChatRequest, Completion, Target, TokenLogprob, Usage

CAPS = Capabilities(True, True, 5)
DOCS = [Document(f"d{i}", f"Record {i}: my knee hurts when I climb the stairs at work, mostly in the evening "
                         f"after a long shift, and ice helps a little but not for long.") for i in range(3)]


class CountingTarget(Target):
    """Answers every question 'Yes' with logprobs; counts what it was sent."""

    name = "http://fake.local/v1 counting"

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []
        self._lock = threading.Lock()

    def complete(self, request: ChatRequest) -> Completion:
        with self._lock:
            self.sent.append(request.key())
        self.account.record(Usage(10, 1))
        return Completion("Yes", [TokenLogprob("Yes", -0.1, [("Yes", -0.1), ("No", -2.5)])], Usage(10, 1), "m")


def _prepare(auc: float):
    class Prep:
        def __init__(self, methods):
            self.calibrations = {m.name: Calibration(m.name, 0.5, [0.9, 0.8], [0.2, 0.85], shadow_auc=auc)
                                 for m in methods}

    return lambda methods, shadow, progress=None: Prep(methods)


def test_a_method_without_signal_sends_nothing_and_says_why():
    target = CountingTarget()
    cfg = AuditConfig(methods=["rag_mia"])
    assert calibrate(cfg, CAPS, _prepare(0.52)).no_signal.keys() == {"rag_mia"}
    result = run_audit(DOCS, target, cfg, _prepare(0.52), capabilities=CAPS)
    assert target.sent == [] and result.account["queries"] == 0
    assert set(result.no_signal) == {"rag_mia"} and "0.52" in result.no_signal["rag_mia"]
    for v in result.verdicts:
        assert v.verdict == "inconclusive"
        assert "none of its queries were sent" in v.reason and "agree" not in v.reason
    assert result.to_json()["no_signal"]["rag_mia"].startswith("no signal")
    # marked as the whole audit's abstention, which a "not found" does not name as a failure on its document
    assert all(result.results[d.id]["rag_mia"].evidence == {FOR_THE_AUDIT: True} for d in DOCS)


def test_insisting_sends_the_queries_but_the_method_still_does_not_vote():
    target = CountingTarget()
    cfg = AuditConfig(methods=["rag_mia"], run_without_signal=["rag_mia"])
    result = run_audit(DOCS, target, cfg, _prepare(0.52), capabilities=CAPS)
    assert len(target.sent) == len(DOCS)
    for doc in DOCS:
        res = result.results[doc.id]["rag_mia"]
        assert res.score is not None and res.decision is None and res.reason.startswith("no signal")


def test_a_method_with_signal_votes_and_results_arrive_per_document():
    target = CountingTarget()
    partial: list[list[str]] = []
    result = run_audit(DOCS, target, AuditConfig(methods=["rag_mia"]), _prepare(0.9), capabilities=CAPS,
                       on_document=lambda r: partial.append([v.doc_id for v in r.verdicts]))
    assert len(target.sent) == len(DOCS) and not result.no_signal
    assert all(v.verdict == "member" for v in result.verdicts)
    # every document but the last is announced as it is decided; the last one is the final result
    assert partial == [["d0"], ["d0", "d1"]]
    assert result.created <= result.finished


def test_with_controls_to_probe_the_last_documents_verdict_is_announced_before_them():
    """Probing controls takes as long as the documents: the last verdict must not wait for them."""
    from audit_core.documents import Document

    partial: list[list[str]] = []
    controls = [Document(f"control-{i}", f"a never published text number {i} " * 4) for i in range(2)]
    run_audit(DOCS, CountingTarget(), AuditConfig(methods=["rag_mia"]), _prepare(0.9), capabilities=CAPS,
              controls=controls, on_document=lambda r: partial.append([v.doc_id for v in r.verdicts]))
    assert partial[-1] == [d.id for d in DOCS]


def test_every_stage_before_the_documents_reports_progress(monkeypatch):
    """Loading the methods' local models is a stage of its own, with a count, before the shadow is prepared:
    it had been a stage around creating the methods (which loads nothing), and the models then loaded inside
    the first probe, a stage stuck at 0 whose rate they skewed."""
    import audit_core.models
    from audit_core.methods.rag_mia import RagMiaMethod

    loaded: list[str] = []
    monkeypatch.setattr(audit_core.models, "load_causal_lm", lambda name: loaded.append(name))
    monkeypatch.setattr(RagMiaMethod, "local_models", lambda self: ["proxy-a", "proxy-b"])
    seen: list[tuple[str, int, int]] = []
    run_audit(DOCS, CountingTarget(), AuditConfig(methods=["rag_mia"]), _prepare(0.9),
              progress=lambda stage, done, total: seen.append((stage, done, total)))
    assert loaded == ["proxy-a", "proxy-b"]
    assert [x for x in seen if x[0] == "loading the methods' models"] == [
        ("loading the methods' models", i, 2) for i in range(3)]
    stages = list(dict.fromkeys(s for s, _, _ in seen))
    assert stages[:2] == ["asking the target what it supports", "loading the methods' models"]
    assert stages[-1] == "auditing documents" and ("auditing documents", 3, 3) in seen
    for stage in stages:  # each stage ends done
        assert max(d for s, d, t in seen if s == stage) == max(t for s, d, t in seen if s == stage)


def test_methods_that_read_logprobs_when_they_can_ask_a_text_only_target_without_them():
    """RAG-MIA and perturbation on a text-only endpoint: no logprobs request (which would be refused
    once per document), and their shadow preparation key follows, so the shadow is asked the same way."""
    from audit_core.audit import select_methods
    from shadow.prepare import ShadowConfig, preparation_key

    cfg = AuditConfig(methods=["rag_mia", "perturbation", "srag"])
    text_only, why = select_methods(cfg, Capabilities(True, False, 0))
    assert [m.name for m in text_only] == ["rag_mia", "perturbation"] and "no logprobs" in why["srag"]
    assert not any(m.config.use_logprobs for m in text_only)
    doc = Document("d", "The quick brown fox is very happy and jumps over the lazy dog near the quiet river bank today.")
    assert text_only[0].request(doc, text_only[0].config.use_logprobs).logprobs is False
    with_lp, _ = select_methods(cfg, Capabilities(True, True, 5))
    assert all(m.config.use_logprobs for m in with_lp[:2])
    # the target's cap of 5 alternatives reaches them too: the shadow then sums P(yes) over the same 5
    assert [m.config.top_logprobs for m in with_lp] == [5, 5, 5]
    shadow = ShadowConfig()
    assert preparation_key(text_only[0], shadow, "h") != preparation_key(with_lp[0], shadow, "h")


class StockAnswerTarget(Target):
    """Whatever it is asked, it quotes the same sentence (text only)."""

    name = "http://fake.local/v1 stock"

    def complete(self, request: ChatRequest) -> Completion:
        return Completion('It goes on: "after a long shift, and ice helps a little but not for long."', None,
                          Usage(10, 1), "m")


def test_the_audit_gives_verbatim_the_owners_collection_so_shared_phrases_are_not_evidence():
    caps = Capabilities(True, False, 0)
    alone = run_audit(DOCS[:1], StockAnswerTarget(), AuditConfig(methods=["verbatim"]), _prepare(0.9),
                      capabilities=caps)
    ev = alone.results["d0"]["verbatim"].evidence
    assert ev["reproduced_share"] > 0 and "ice helps a little" in ev["longest_reproduction"]
    together = run_audit(DOCS, StockAnswerTarget(), AuditConfig(methods=["verbatim"]), _prepare(0.9),
                         capabilities=caps)
    for d in DOCS:  # the sentence ends every one of the owner's documents: it proves nothing about one
        res = together.results[d.id]["verbatim"]
        assert res.decision is None and res.reason.startswith("nothing distinctive"), res


def test_a_repeated_id_among_documents_and_controls_is_refused_before_anything_is_sent():
    """Results are kept by id: a control id used twice counted one control's score twice in the test."""
    import pytest

    target = CountingTarget()
    controls = [Document("c1", DOCS[0].text + " one"), Document("c1", DOCS[0].text + " two")]
    with pytest.raises(ValueError, match="distinct ids; repeated: c1"):
        run_audit(DOCS, target, AuditConfig(methods=["rag_mia"]), _prepare(0.9), capabilities=CAPS,
                  controls=controls)
    assert target.sent == []


def test_cited_sources_leads_no_question_with_a_never_published_control(monkeypatch):
    """Its leads are other audited documents; a control's text went out inside a document's question (and into
    unredacted exports). Verbatim still gets the controls, whose phrases tell the genre's from a document's."""
    import audit_core.audit as audit_mod
    from audit_core.methods import create_method

    given: dict[str, list[str]] = {}
    real = audit_mod.create_method

    def spying(name, **kw):
        m = real(name, **kw)
        keep = m.use_collection
        monkeypatch.setattr(m, "use_collection", lambda texts: given.setdefault(name, list(texts)) and keep(texts))
        return m

    monkeypatch.setattr(audit_mod, "create_method", spying)
    secret = "A never published draft about my knee, the stairs at work and the ice that helps a little at night."
    caps = Capabilities(True, False, 0, sources=True)
    run_audit(DOCS, StockAnswerTarget(), AuditConfig(methods=["cited_sources", "verbatim"],
                                                     run_without_signal=["cited_sources", "verbatim"]),
              _prepare(0.9), capabilities=caps, controls=[Document("c1", secret)])
    assert secret not in given["cited_sources"] and secret in given["verbatim"]
    assert create_method("cited_sources").collection_takes_controls is False


def test_a_cancel_during_the_shadow_preparation_stops_it_at_its_next_step_and_sends_nothing():
    """It went on probing the shadow for minutes (a calibration check had no cancel at all)."""
    from audit_core.audit import Cancelled

    cancel = threading.Event()
    ticks: list[int] = []

    def prepare(methods, shadow, progress=None):
        for i in range(100):
            progress("S-RAG: probing the shadow", i, 100)
            ticks.append(i)
            if i == 3:
                cancel.set()
        raise AssertionError("the preparation was not stopped")

    with pytest.raises(Cancelled, match="nothing was sent"):
        calibrate(AuditConfig(methods=["rag_mia"]), CAPS, prepare, cancel=cancel)
    assert ticks == [0, 1, 2, 3]
    cancel.clear()
    target = CountingTarget()
    ticks.clear()
    with pytest.raises(Cancelled):
        run_audit(DOCS, target, AuditConfig(methods=["rag_mia"]), prepare, capabilities=CAPS, cancel=cancel)
    assert target.sent == [] and ticks == [0, 1, 2, 3]


def test_the_methods_name_the_local_models_they_probe_with():
    from audit_core.methods import create_method
    from audit_core.methods.mba_masks import MbaConfig
    from audit_core.methods.srag import SragConfig

    assert create_method("srag").local_models() == [SragConfig().proxy_model]
    assert create_method("mba").local_models() == [MbaConfig().proxy_model]
    assert create_method("rag_mia").local_models() == [] and create_method("verbatim").local_models() == []


def test_dear_snapshots_of_the_result_so_far_are_spaced_cheap_ones_are_not():
    """A snapshot after every one of 4,000 documents cost hours (session 55): each is the whole result so far,
    and the app serialises it. Cheap snapshots still come after every document; dear ones wait until ten times
    their cost has passed; the first document and the last one before the controls are always announced."""
    from audit_core.audit import _Snapshots

    now = [0.0]
    snaps = _Snapshots(clock=lambda: now[0])
    sent: list[float] = []

    def slow(cost: float):
        def on_document(result) -> None:
            sent.append(now[0])
            now[0] += cost
        return on_document

    snaps.send(slow(0.01), lambda: None)
    assert snaps.due()  # 10 ms: cheap, due again at once
    snaps.send(slow(0.5), lambda: None)
    assert not snaps.due()
    now[0] += 4.9
    assert not snaps.due()
    now[0] += 0.2  # 5.1 s after a snapshot of 0.5 s
    assert snaps.due()

    docs = [Document(f"d{i}", DOCS[0].text.replace("Record 0", f"Record {i}")) for i in range(40)]
    controls = [Document("control-0", "a never published text about a sore shoulder and a long night shift " * 2)]
    announced: list[int] = []

    def dear(result) -> None:  # a consumer whose snapshot costs 0.2 s (of an instant target's audit)
        announced.append(len(result.verdicts))
        import time
        time.sleep(0.2)

    run_audit(docs, CountingTarget(), AuditConfig(methods=["rag_mia"]), _prepare(0.9), capabilities=CAPS,
              controls=controls, on_document=dear)
    assert announced[0] == 1 and announced[-1] == len(docs)  # the first verdict, and the last before controls
    assert len(announced) < 10  # not 40


def test_the_result_so_far_can_leave_out_the_raw_answers():
    """The app's view of a running audit never reads the target's raw answers, most of a large result's size."""
    result = run_audit(DOCS, CountingTarget(), AuditConfig(methods=["rag_mia"]), _prepare(0.9), capabilities=CAPS)
    full, light = result.to_json(), result.to_json(observations=False)
    assert set(full["observations"]) == {d.id for d in DOCS} and light["observations"] == {}
    assert {k: v for k, v in full.items() if k != "observations"} == \
        {k: v for k, v in light.items() if k != "observations"}


def test_the_collection_tests_method_asks_about_each_document_before_the_other_methods():
    """Controls are probed by the collection test's method alone; documents were probed by every method, that
    one not first, so a target that caches or remembers what it was just asked about a text saw documents
    and controls differently. Now that method asks about each document first, as it asks about each control."""
    calls: list[tuple[str, str]] = []
    controls = [Document(f"c{i}", f"Never published {i}: my elbow aches after tennis on cold mornings, and a "
                                  "brace helps a little on long days at the office.") for i in range(3)]
    result = run_audit(DOCS, CountingTarget(), AuditConfig(methods=["mink", "rag_mia"]), _prepare(0.9),
                       capabilities=CAPS, controls=controls, on_result=lambda d, m, o, r: calls.append((d, m)))
    chosen = result.collection["method"]
    ran = [m for d, m in calls if d == "d0"]
    assert set(ran) == {"mink", "rag_mia"} and chosen in ran
    assert list(result.results["d0"]) == ["mink", "rag_mia"]  # results keep the methods' own order
    for doc in DOCS:
        assert [m for d, m in calls if d == doc.id][0] == chosen
    assert set(result.collection["control_scores"]) == {"c0", "c1", "c2"}
