"""Shadow preparation bookkeeping: what is probed, what is shared, what is cached."""
from __future__ import annotations

import shadow.prepare as prepare
from audit_core.methods.base import Calibration, Observation
from audit_core.methods.rag_mia import RagMiaMethod
from audit_core.methods.s2mia import S2miaModelMethod, S2miaThresholdMethod
from shadow.prepare import ShadowConfig, prepare_shadow


def _fake_shadow(monkeypatch) -> list[tuple[str, int]]:
    """Replace the RAG, the probing and the calibration; record every probing call."""
    calls: list[tuple[str, int]] = []

    def fake_probe(method, docs, rag, cfg, tick, progress=None):
        calls.append((method.name, len(docs)))
        return [Observation(method.probe_scope, d.id, data={"by": method.name}) for d in docs]

    monkeypatch.setattr(prepare, "build_shadow_rag", lambda cfg, kb, *_: object())
    monkeypatch.setattr(prepare, "_probe", fake_probe)
    monkeypatch.setattr(prepare, "_calibrate", lambda method, mem, non, folder, *_: Calibration(method.name, 0.5))
    return calls


def test_methods_sending_the_same_probes_probe_the_shadow_once(tmp_path, monkeypatch):
    calls = _fake_shadow(monkeypatch)
    cfg = ShadowConfig(n_members=6, n_nonmembers=6, n_per_class_generative=4)
    prep = prepare_shadow([S2miaThresholdMethod(), S2miaModelMethod(), RagMiaMethod()], cfg, root=tmp_path)

    # S2MIA-T probed members and non-members; S2MIA-M reused them; RAG-MIA probed its own
    assert calls == [("s2mia_t", 4), ("s2mia_t", 4), ("rag_mia", 6), ("rag_mia", 6)]
    t, m = prep.observations["s2mia_t"], prep.observations["s2mia_m"]
    assert [o.doc_id for o in t["members"]] == [o.doc_id for o in m["members"]]
    assert all(o.data["by"] == "s2mia_t" for o in m["members"] + m["nonmembers"])
    # both preparations are cached under their own key: a second call probes nothing
    assert prep.keys["s2mia_t"] != prep.keys["s2mia_m"]
    calls.clear()
    again = prepare_shadow([S2miaModelMethod()], cfg, root=tmp_path)
    assert calls == [] and again.from_cache["s2mia_m"]


def test_a_changed_probe_configuration_is_probed_again(tmp_path, monkeypatch):
    from audit_core.methods.s2mia import S2miaConfig

    calls = _fake_shadow(monkeypatch)
    cfg = ShadowConfig(n_members=6, n_nonmembers=6, n_per_class_generative=4)
    prepare_shadow([S2miaThresholdMethod(), S2miaModelMethod(S2miaConfig(use_logprobs=False))], cfg,
                   root=tmp_path)
    assert [name for name, _ in calls] == ["s2mia_t", "s2mia_t", "s2mia_m", "s2mia_m"]


def srag_with_a_logistic_classifier(monkeypatch):
    """S-RAG whose classifier is a logistic fit of one feature, over 30 + 30 shadow observations that separate:
    (method, observations, sizes of the tables it was fitted on). Its calibration runs in a second."""
    import numpy as np
    import pandas as pd
    from sklearn.linear_model import LogisticRegression

    from audit_core.methods import srag

    rng = np.random.default_rng(1)
    obs = [Observation("srag", f"s{i}", data={"f": {"a": float(rng.normal(1.5 * (i < 30), 1))}}) for i in range(60)]

    class Model:
        def __init__(self, df):
            self.m = LogisticRegression().fit(df[["a"]], df["member"])

        def predict_proba(self, X):
            return pd.DataFrame(self.m.predict_proba(X[["a"]]), columns=[0, 1])

    fits: list[int] = []
    monkeypatch.setattr(srag, "train_predictor", lambda df, cfg: fits.append(len(df)) or Model(df))
    monkeypatch.setattr(srag, "_best_model_name", lambda p: "logistic")
    monkeypatch.setattr(srag, "_mean_hist", lambda df, label, bins: [])
    method = srag.SragMethod()
    monkeypatch.setattr(method, "features", lambda o: (o.data["f"], None, []))
    return method, obs, fits


def test_a_cached_srag_calibration_refits_only_the_final_model(tmp_path, monkeypatch):
    """Loading a preparation fits one classifier (the stored out-of-fold scores are reused), never k + 1;
    a calibration file written for other observations is not trusted."""
    method, obs, fits = srag_with_a_logistic_classifier(monkeypatch)
    from audit_core.progress import steps_of

    steps: list[tuple[int, int]] = []
    with steps_of(lambda done, total: steps.append((done, total))):
        first = prepare._calibrate(method, obs[:30], obs[30:], tmp_path)
    assert fits == [48] * 5 + [60]
    # the calibration stage counts its six fits (it read 0 / 1 for minutes, with no time left)
    assert steps[-1] == (6, 6) and {t for _, t in steps} == {6}
    assert sorted({d for d, _ in steps}) == [0, 1, 2, 3, 4, 5, 6]
    fits.clear()
    again = prepare._calibrate(method, obs[:30], obs[30:], tmp_path)
    assert fits == [60]  # the final model only
    assert again.threshold == first.threshold and again.params["oof_scores"] == first.params["oof_scores"]
    assert again.model is not None
    fits.clear()
    other = obs[:29] + [Observation("srag", "x", data={"f": {"a": 9.0}})]
    prepare._calibrate(method, other, obs[30:], tmp_path)
    assert fits == [48] * 5 + [60]  # other observations: calibrated from scratch


def test_a_scoring_only_setting_keeps_the_preparation_key_and_a_probing_one_changes_it():
    """Scoring the same answers another way must not send the shadow's queries again."""
    from audit_core.methods import create_method

    cfg, chash = ShadowConfig(), "corpus"
    base = prepare.preparation_key(create_method("verbatim"), cfg, chash)
    assert prepare.preparation_key(create_method("verbatim", shared_min_docs=3), cfg, chash) == base
    assert prepare.preparation_key(create_method("verbatim", max_tokens=64), cfg, chash) != base


def test_a_chat_only_setting_keys_chat_preparations_and_leaves_completion_ones_alone():
    """S-RAG's prefix tail shapes chat-style probes only: the shipped completion preparation keeps its key."""
    from audit_core.methods import create_method

    cfg, chash = ShadowConfig(), "corpus"
    completion = prepare.preparation_key(create_method("srag"), cfg, chash)
    assert prepare.preparation_key(create_method("srag", chat_tail_words=10), cfg, chash) == completion
    chat = prepare.preparation_key(create_method("srag", style="chat"), cfg, chash)
    assert prepare.preparation_key(create_method("srag", style="chat", chat_tail_words=10), cfg, chash) != chat
    # at its default (off) the field leaves the key as it was before it existed: the shipped chat file stands
    from dataclasses import asdict

    from audit_core.methods.srag import SragConfig

    before = {k: v for k, v in asdict(SragConfig(style="chat")).items()
              if k not in ("chat_tail_words", "reproduction_ngram", "shared_min_docs", "scorer", "model_dir",
                           "continuation_check_tokens")}  # the audit-only continuation check probes no shadow
    assert prepare._config_of(create_method("srag", style="chat")) == before
    # scoring the reproduction another way sends nothing again
    assert prepare.preparation_key(create_method("srag", style="chat", shared_min_docs=3), cfg, chash) == chat
    assert prepare.preparation_key(create_method("srag", style="chat", scorer="autogluon"), cfg, chash) == chat


def test_the_shadow_leads_its_questions_with_its_own_documents_never_the_owners(tmp_path, monkeypatch):
    """Cited sources leads each question with a neighbouring document of the collection: on the shadow,
    the shadow's own; the owner's collection, set before the preparation, is back after it."""
    from audit_core.methods.cited_sources import CitedSourcesMethod

    seen: list[list[str]] = []

    def fake_probe(method, docs, rag, cfg, tick, progress=None):
        seen.append(list(method.collection))
        return [Observation(method.probe_scope, d.id) for d in docs]

    monkeypatch.setattr(prepare, "build_shadow_rag", lambda cfg, kb, *_: object())
    monkeypatch.setattr(prepare, "_probe", fake_probe)
    monkeypatch.setattr(prepare, "_calibrate", lambda method, mem, non, folder, *_: Calibration(method.name, 0.5))
    method = CitedSourcesMethod()
    owner = ["the owner's first post", "the owner's second post"]
    method.use_collection(owner)
    cfg = ShadowConfig(n_members=5, n_nonmembers=5)
    prepare_shadow([method], cfg, root=tmp_path, use_shipped=False)
    shadow_texts = {d.text for d in cfg.corpus_docs()}
    assert len(seen) == 2 and seen[0] == seen[1] and len(seen[0]) == 10
    assert set(seen[0]) <= shadow_texts and not set(seen[0]) & set(owner)
    assert list(method.collection) == owner


def test_a_decoy_file_keys_the_shadow_by_its_contents_not_its_path(tmp_path):
    """Two projects' q.txt (or one edited in place) shared one cached shadow and calibration."""
    from audit_core.methods.verbatim import VerbatimConfig, VerbatimMethod

    a, b = tmp_path / "a" / "q.txt", tmp_path / "b" / "q.txt"
    for p, text in ((a, "What is a good dose?\n"), (b, "How do I file a tax return?\n")):
        p.parent.mkdir()
        p.write_text(text)
    cfg = ShadowConfig()
    key = lambda path: prepare.preparation_key(VerbatimMethod(VerbatimConfig(decoy_questions=str(path))), cfg, "c")  # noqa: E731
    assert key(a) != key(b)
    b.write_text(a.read_text())
    assert key(a) == key(b)


def test_an_unreadable_cached_observations_file_is_prepared_again(tmp_path):
    """A torn file failed every later audit with that key until someone ran prepare --force."""
    broken = tmp_path / "observations.json"
    broken.write_text('{"members": [')
    assert prepare._read_observations(broken) is None and prepare._read_observations(tmp_path / "none") is None
    for step in (None, lambda done, total: None):  # bytes that are not UTF-8 (one byte changed on disk)
        broken.write_bytes(b'{"members": [\xff], "nonmembers": []}')
        assert prepare._read_observations(broken, step) is None
    prepare._write_observations(broken, [], [])
    assert prepare._read_observations(broken) == {"members": [], "nonmembers": []}


def _counting_fits(monkeypatch):
    """A RAG-MIA method whose fits are counted in ``calls`` (a restore is not), with one observation per class."""
    calls: list[int] = []
    method = RagMiaMethod()
    monkeypatch.setattr(method, "prepare", lambda m, n: calls.append(1) or Calibration("rag_mia", threshold=0.5))
    monkeypatch.setattr(method, "restore", lambda saved, m, n: Calibration("rag_mia", threshold=0.5))
    return method, calls, [Observation("rag_mia", "a")], [Observation("rag_mia", "b")]


def test_a_calibration_saved_under_another_scoring_revision_is_fitted_again(tmp_path, monkeypatch):
    """A cache made before session 48 kept thresholds fitted on scores that counted refusals: reused by the
    observations' digest alone, they no longer matched how the method scores."""
    method, calls, mem, non = _counting_fits(monkeypatch)
    prepare._calibrate(method, mem, non, tmp_path)
    prepare._calibrate(method, mem, non, tmp_path)
    assert len(calls) == 1  # the same revision: reused
    monkeypatch.setattr(type(method), "scoring_revision", "older")
    prepare._calibrate(method, mem, non, tmp_path)
    assert len(calls) == 2  # saved under revision 2, the method now scores as "older": fitted again


def test_a_calibration_saved_under_another_non_answer_reader_is_fitted_again(tmp_path, monkeypatch):
    """Session 55 read "I'm unable to help" as a refusal where the reader before it read an answer: a cache
    fitted with the older reader was reused by the observations' digest and the method's revision alone."""
    import json

    method, calls, mem, non = _counting_fits(monkeypatch)
    prepare._calibrate(method, mem, non, tmp_path)
    saved = json.loads((tmp_path / "calibration.json").read_text())
    assert saved["reader_revision"] == prepare.READER_REVISION
    prepare._calibrate(method, mem, non, tmp_path)
    assert len(calls) == 1  # the same reader: reused
    monkeypatch.setattr(prepare, "READER_REVISION", "a newer reader")
    prepare._calibrate(method, mem, non, tmp_path)
    assert len(calls) == 2  # fitted again, and saved under the new reader
    assert json.loads((tmp_path / "calibration.json").read_text())["reader_revision"] == "a newer reader"
    prepare._calibrate(method, mem, non, tmp_path)
    assert len(calls) == 2
    (tmp_path / "calibration.json").write_text(json.dumps({k: v for k, v in saved.items() if k != "reader_revision"}))
    monkeypatch.setattr(prepare, "READER_REVISION", saved["reader_revision"])
    prepare._calibrate(method, mem, non, tmp_path)
    assert len(calls) == 3  # saved before readers had revisions: fitted again


def test_progress_names_methods_by_their_labels(tmp_path, monkeypatch):
    from audit_core.methods import LABELS

    _fake_shadow(monkeypatch)
    stages: list[str] = []
    prepare_shadow([RagMiaMethod()], ShadowConfig(n_members=4, n_nonmembers=4), root=tmp_path,
                   progress=lambda stage, done, total: stages.append(stage))
    assert f"{LABELS['rag_mia']}: calibrating" in stages and not any(s.startswith("rag_mia") for s in stages)


def test_building_the_shadow_rag_counts_the_documents_embedded(tmp_path, monkeypatch):
    """It ran as "0 / 1" for minutes: now done / total over the knowledge base's documents."""
    from audit_core.documents import Document

    monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path))
    kb = [Document(f"d{i}", f"document number {i} about a knee operation and physiotherapy") for i in range(5)]
    seen: list[tuple[str, int, int]] = []
    prepare.build_shadow_rag(ShadowConfig(), kb, lambda stage, done, total: seen.append((stage, done, total)))
    assert seen[0] == (prepare.BUILD_STAGE, 0, 5) and seen[-1] == (prepare.BUILD_STAGE, 5, 5)


def test_a_method_that_reports_a_stage_before_its_first_probe_gets_the_preparations_progress():
    """MBA plans every document's masks with its proxy model before it sends anything: that stage reaches the
    preparation's progress (it had sat at 0 / N of "probing the shadow" meanwhile)."""
    from audit_core.documents import Document

    class Stub:
        requires_sources = requires_logprobs = False

        def __init__(self, with_stage):
            self.got = None
            if with_stage:
                self.probe_many = self._with_stage

        def probe_many(self, docs, target, progress=None):
            return []

        def _with_stage(self, docs, target, progress=None, stage_progress=None):
            self.got = stage_progress
            return []

    class Rag:
        cite_sources = False

    seen = []
    report = lambda stage, done, total: seen.append(stage)  # noqa: E731
    m = Stub(with_stage=True)
    prepare._probe(m, [Document("a", "text")], Rag(), prepare.ShadowConfig(), lambda n=1: None, report)
    assert m.got is report
    plain = Stub(with_stage=False)  # a method without the parameter is called as before
    assert prepare._probe(plain, [Document("a", "text")], Rag(), prepare.ShadowConfig(), lambda n=1: None,
                          report) == []


def test_a_methods_own_stage_counts_on_across_the_shadows_members_and_non_members(tmp_path, monkeypatch):
    """MBA plans its masks once for the shadow's members and once for its non-members: reported from 0 again,
    the CLI's bar (closed at the first total) said nothing of the second half and the app's time left ran from
    the first half's rate. The two halves are one count now."""
    _fake_shadow(monkeypatch)

    def planning_probe(method, docs, rag, cfg, tick, progress=None):
        for i in range(len(docs) + 1):
            progress("planning", i, len(docs))
        return [Observation(method.probe_scope, d.id) for d in docs]

    monkeypatch.setattr(prepare, "_probe", planning_probe)
    seen: list[tuple[int, int]] = []
    cfg = ShadowConfig(n_members=6, n_nonmembers=6)
    prepare_shadow([RagMiaMethod()], cfg, root=tmp_path,
                   progress=lambda stage, done, total: seen.append((done, total)) if stage == "planning" else None)
    assert seen == [(i, 12) for i in range(7)] + [(i, 12) for i in range(6, 13)]


def _shipped_rag_mia(tmp_path, monkeypatch, n: int = 4):
    """A shipped preparation of RAG-MIA on ``n`` + ``n`` shadow documents, in a folder of the test's own."""
    import shadow.shipped as shipped
    from shadow.corpus import corpus_hash

    cfg = ShadowConfig(n_members=n, n_nonmembers=n)
    method = RagMiaMethod()
    key = prepare.preparation_key(method, cfg, corpus_hash(cfg.corpus_docs()))
    mem = [Observation("rag_mia", f"m{i}", data={"text": "a reply " * i}) for i in range(n)]
    non = [Observation("rag_mia", f"n{i}", errors=[None], data={"nested": {"x": [i, 0.5]}}) for i in range(n)]
    folder = tmp_path / "shipped"
    shipped.write_shipped(key, shipped.DefaultPreparation("rag_mia", (), "quick", "completion"), mem, non, folder)
    monkeypatch.setattr(shipped, "SHIPPED_DIR", folder)
    return method, cfg, key, mem, non


def test_reading_a_shipped_preparation_is_a_stage_counted_in_observations(tmp_path, monkeypatch):
    """Check calibration on a shipped preparation sat silent, then at 0 / 1 of "calibrating", while the shipped
    observations were parsed, serialised again for the cache and serialised once more for their digest (most of
    a minute for S-RAG's chat observations on a fast machine): reading them is a stage now, one step per
    observation and the last once the cache is written, and they are written and hashed as they were read."""
    method, cfg, key, mem, non = _shipped_rag_mia(tmp_path, monkeypatch)
    digests: list = []
    monkeypatch.setattr(prepare, "_calibrate", lambda m, me, no, folder, digest=None: digests.append(digest)
                        or Calibration(m.name, 0.5))
    root = tmp_path / "cache"
    obs_file = root / key / "observations.json"
    seen: list[tuple[str, int, int, bool]] = []
    prepare_shadow([method], cfg, root=root,
                   progress=lambda stage, done, total: seen.append((stage, done, total, obs_file.exists())))
    stage = "RAG-MIA: reading the shipped shadow observations"
    reading = [(d, t) for s, d, t, _ in seen if s == stage]
    assert reading[0] == (0, 9) and reading[1:9] == [(i, 9) for i in range(1, 9)] and reading[-1] == (9, 9)
    assert [written for s, d, t, written in seen if s == stage and d == t] == [True]  # done once cached
    assert [s for s, *_ in seen].index("RAG-MIA: calibrating") > max(i for i, x in enumerate(seen) if x[0] == stage)
    # the cache holds what serialising the observations gives, and its digest is theirs
    import json

    assert json.loads(obs_file.read_text()) == {"members": [o.to_json() for o in mem],
                                                "nonmembers": [o.to_json() for o in non]}
    assert digests == [prepare.observations_digest(mem, non)]

    # loaded again from the cache: a reading stage of its own, counted the same way, with the same digest
    seen.clear()
    again = prepare_shadow([method], cfg, root=root,
                           progress=lambda stage, done, total: seen.append((stage, done, total, True)))
    cached = [(d, t) for s, d, t, _ in seen if s == "RAG-MIA: reading the cached shadow observations"]
    assert cached == [(i, 8) for i in range(9)] + [(8, 8)] and again.from_cache["rag_mia"]
    assert digests[-1] == digests[0] and again.observations["rag_mia"]["nonmembers"][2].data == non[2].data


def test_observations_read_as_written_are_hashed_only_when_they_are_exactly_observations():
    mem, non = [Observation("m", "a", data={"k": [1, 2.5]})], [Observation("m", "b", skipped="short")]
    as_written = [o.to_json() for o in mem], [o.to_json() for o in non]
    assert prepare._digest_as_written(*as_written) == prepare.observations_digest(mem, non)
    older = {k: v for k, v in as_written[0][0].items() if k != "skipped"}  # a file from before a field existed
    assert prepare._digest_as_written([older], as_written[1]) is None
