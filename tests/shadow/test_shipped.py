"""The shipped default shadow preparation (assets/preparation/, issue 18).

The shipped files are raw probe results named by their preparation key. These
tests check that (1) every shipped key is the key the current code computes
for the configuration it was built for, so a changed method (probes, version,
parameters) without a rebuild fails here; (2) the README's first audit finds
its observations shipped; (3) prepare_shadow uses them instead of probing, and
probes as before when the configuration differs; (4) re-probing a few shipped
shadow documents with today's code gives the shipped observations.
"""
from __future__ import annotations

import gzip
import json
import math
from dataclasses import replace

import pytest

import shadow.prepare as prepare
from audit_core.methods import METHODS
from audit_core.methods.base import Calibration, Observation
from shadow import shipped
from shadow.prepare import ShadowConfig, prepare_shadow


@pytest.fixture(scope="module")
def corpus_hash() -> str:
    from shadow.corpus import corpus_hash as h

    return h(ShadowConfig().corpus_docs())


@pytest.fixture(scope="module")
def manifest() -> dict:
    m = shipped.read_manifest()
    if not m:
        pytest.skip("no default preparation is shipped yet (assets/preparation/manifest.json): "
                    "build it with scripts/build_default_preparation.py")
    return m


def _entry(manifest: dict, method: str, params: dict, size: str, style: str) -> str:
    for key, e in manifest.items():
        if (e["method"], e["params"], e["size"], e["style"]) == (method, params, size, style):
            return key
    pytest.fail(f"no shipped preparation for {method} {params} {size} {style}")


def test_every_shipped_key_is_the_key_of_its_configuration_today(manifest, corpus_hash):
    stale = []
    for key, entry in manifest.items():
        prep = shipped.from_manifest(entry)
        if shipped.key_of(prep, corpus_hash) != key:
            stale.append(f"{prep.label()} ({key})")
            continue
        path = shipped.shipped_file(key)
        assert path.exists(), path
        with gzip.open(path, "rt") as fh:
            raw = json.load(fh)
        assert raw["key"] == key
        n_m, n_n, n_g = shipped.SHIPPED_SIZES[entry["size"]]
        want = (n_m, n_n) if METHODS[entry["method"]].full_size_shadow else (n_g, n_g)
        assert (len(raw["members"]), len(raw["nonmembers"])) == want
    assert not stale, ("these shipped preparations no longer match the code (a method's probes, version or "
                       "defaults changed): run scripts/build_default_preparation.py -- " + "; ".join(stale))
    # nothing shipped that the manifest does not list
    listed = {shipped.shipped_file(k).name for k in manifest}
    assert {p.name for p in shipped.SHIPPED_DIR.glob("*.json.gz")} == listed


def test_the_readme_first_audit_is_shipped(manifest, corpus_hash):
    """The app's quick audit of the demo target (S-RAG + MBA) needs no shadow probing."""
    from app.sidebar import AUDIT_SIZES
    from audit_core.methods import create_method

    assert {k: tuple(v) for k, v in AUDIT_SIZES.items()} == shipped.SHIPPED_SIZES
    n_m, n_n, n_g = AUDIT_SIZES["quick"]
    cfg = ShadowConfig(n_members=n_m, n_nonmembers=n_n, n_per_class_generative=n_g, top_k_docs=4)
    # as the app's sidebar builds them (app/sidebar.py _advanced)
    from shadow.demo import mba_elicitation_for

    srag = create_method("srag", bins=10)
    mba = create_method("mba", n_masks=10, gamma=0.5, elicitation=mba_elicitation_for(True))
    for m in (srag, mba):
        key = prepare.preparation_key(m, cfg, corpus_hash)
        assert key in manifest, f"{m.name}: {key} not shipped"
        assert shipped.load_shipped(key) is not None


def _cli_audit_config(argv: list[str], monkeypatch):
    """The AuditConfig `./run cli audit <argv>` builds, without probing anything."""
    import app.cli

    got = []
    monkeypatch.setattr(app.cli, "cmd_audit", lambda args: got.append(app.cli._audit_config(args)) or 0)
    assert app.cli.main(["audit", "--docs", "x.csv", *argv]) == 0
    return got[0]


def _assert_cli_audit_shipped(argv, caps, expected, manifest, corpus_hash, monkeypatch):
    from audit_core.audit import select_methods, with_target_style

    cfg = with_target_style(_cli_audit_config(argv, monkeypatch), caps)
    assert (cfg.shadow.n_members, cfg.shadow.n_nonmembers) == shipped.SHIPPED_SIZES["standard"][:2]
    methods, _ = select_methods(cfg, caps)
    assert sorted(m.name for m in methods) == expected
    for m in methods:
        key = prepare.preparation_key(m, cfg.shadow, corpus_hash)
        assert key in manifest and shipped.load_shipped(key) is not None, f"{m.name}: {key} not shipped"


def test_the_clis_default_audit_of_the_demo_is_shipped(manifest, corpus_hash, monkeypatch):
    """`./run cli audit --target demo` (its default methods at shadow size 200, the "standard" size): every shadow is shipped."""
    from audit_core.target.base import Capabilities
    from shadow.demo import DEMO_STYLE

    _assert_cli_audit_shipped(["--target", "demo"], Capabilities(True, True, 20, style=DEMO_STYLE),
                              ["mba", "srag"], manifest, corpus_hash, monkeypatch)


@pytest.mark.parametrize("style", ["chat", "completion"])
def test_the_clis_text_only_audit_is_shipped(style, manifest, corpus_hash, monkeypatch):
    """A text-only endpoint audited with the methods the CLI suggests for it, at the CLI's default size."""
    from audit_core.methods import suggested_methods
    from audit_core.target.base import Capabilities

    names = suggested_methods(False, style=style)
    _assert_cli_audit_shipped(["--target", "https://rag.example/v1", "--model", "m", "--method", ",".join(names)],
                              Capabilities(True, False, 0, style=style), sorted(names), manifest, corpus_hash,
                              monkeypatch)


def test_a_quick_audit_of_a_chat_target_is_shipped(manifest, corpus_hash):
    """The methods suggested for a chat endpoint (with logprobs, or text only), as `with_target_style` sets them."""
    from audit_core.methods import create_method, reads_target_style, suggested_methods

    n_m, n_n, n_g = shipped.SHIPPED_SIZES["quick"]
    cfg = ShadowConfig(n_members=n_m, n_nonmembers=n_n, n_per_class_generative=n_g, prompt_style="chat")
    names = sorted(set(suggested_methods(True)) | set(suggested_methods(False)))
    assert {"srag", "mba", "verbatim"} <= set(names)
    for name in names:
        m = create_method(name, **({"style": "chat"} if reads_target_style(name) else {}))
        key = prepare.preparation_key(m, cfg, corpus_hash)
        assert key in manifest and shipped.load_shipped(key) is not None, f"{name}: {key} not shipped"
        note = prepare.mirror_note(m, cfg)
        assert note is None or note["mirrors"], f"{name}: the shadow does not answer in the style it is read in"
    # the app's path: its parameters for an endpoint, the style found by the capability probe
    from audit_core.audit import AuditConfig, select_methods, with_target_style
    from audit_core.target.base import Capabilities

    caps = Capabilities(True, True, 20, style="chat")
    app_cfg = with_target_style(AuditConfig(
        methods=["srag", "mba"], shadow=replace(cfg, prompt_style="completion"),
        method_params={"srag": {"bins": 10}, "mba": {"n_masks": 10, "gamma": 0.5, "elicitation": "fill_in"}}), caps)
    for m in select_methods(app_cfg, caps)[0]:
        key = prepare.preparation_key(m, app_cfg.shadow, corpus_hash)
        assert key in manifest, f"{m.name}: the app's chat audit would not find its shipped preparation"


def test_prepare_uses_shipped_observations_and_probes_a_different_configuration(
        corpus_hash, tmp_path, monkeypatch):
    prep_cfg = shipped.DefaultPreparation("mba", (("elicitation", "continue"),), "quick", "completion")
    key = shipped.key_of(prep_cfg, corpus_hash)
    mem = [Observation("mba", f"m{i}", data={"masks": i}) for i in range(3)]
    non = [Observation("mba", f"n{i}", data={"masks": -i}) for i in range(3)]
    folder = tmp_path / "assets"
    shipped.write_shipped(key, prep_cfg, mem, non, folder)
    monkeypatch.setattr(shipped, "SHIPPED_DIR", folder)
    assert shipped.read_manifest(folder)[key]["method"] == "mba"

    class Probed(Exception):
        pass

    def no_probing(cfg, kb, *_):
        raise Probed

    monkeypatch.setattr(prepare, "build_shadow_rag", no_probing)
    calibrated = []
    monkeypatch.setattr(prepare, "_calibrate",
                        lambda method, m, n, f, *_: calibrated.append((m, n)) or Calibration(method.name, 0.5))
    cfg = prep_cfg.shadow_config()
    got = prepare_shadow([prep_cfg.create_method()], cfg, root=tmp_path / "cache")
    assert got.keys["mba"] == key and got.from_cache["mba"]
    assert got.observations["mba"] == {"members": mem, "nonmembers": non} and calibrated == [(mem, non)]
    # copied into the cache: the next start reads the cache
    assert (tmp_path / "cache" / key / "observations.json").exists()

    # another size is another key: nothing shipped, so the shadow is probed as before
    with pytest.raises(Probed):
        prepare_shadow([prep_cfg.create_method()], ShadowConfig(n_members=60, n_nonmembers=60,
                                                                n_per_class_generative=31), root=tmp_path / "b")
    # another MBA parameter too
    with pytest.raises(Probed):
        prepare_shadow([shipped.DefaultPreparation("mba", (("n_masks", 12), ("elicitation", "continue")), "quick",
                                                   "completion").create_method()], cfg, root=tmp_path / "c")
    # and the shipped files can be ignored
    with pytest.raises(Probed):
        prepare_shadow([prep_cfg.create_method()], cfg, root=tmp_path / "d", use_shipped=False)
    # a file renamed to another key is not taken for it
    other = "0" * len(key)
    (folder / f"{other}.json.gz").write_bytes(shipped.shipped_file(key, folder).read_bytes())
    assert shipped.load_shipped(other, folder) is None and shipped.load_shipped(key, folder) == (mem, non)


def _same(a, b, path="obs") -> list[str]:
    """Differences between two JSON values; floats (log-probabilities) within 1e-3."""
    if isinstance(a, float) or isinstance(b, float):
        ok = (isinstance(a, (int, float)) and isinstance(b, (int, float))
              and (math.isclose(a, b, abs_tol=1e-3) or (math.isinf(a) and a == b)))
        return [] if ok else [f"{path}: {a!r} != {b!r}"]
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a)} != {sorted(b)}"]
        return [d for k in a for d in _same(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _same(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def _reprobe(prep_cfg: shipped.DefaultPreparation, observations, shipped_all, rags: dict | None = None) -> None:
    """Probe the documents of ``observations`` again, on the shadow prepare_shadow builds, and compare.

    ``shipped_all``: every shipped observation of the file (members, then non-members), the shadow's
    collection, which prepare_shadow gives the method while probing (``probing_collection``).
    ``rags``: shadows already built, by style (a shadow depends only on its configuration); a
    shadow built here is added to it.
    """
    from shadow.corpus import split_members

    cfg = prep_cfg.shadow_config()
    docs = cfg.corpus_docs()
    half = len(docs) // 2
    kb, outside = split_members(docs, half, len(docs) - half, cfg.seed)
    by_id = {d.id: d for d in list(kb) + list(outside)}
    rags = {} if rags is None else rags
    if prep_cfg.style not in rags:
        rags[prep_cfg.style] = prepare.build_shadow_rag(cfg, kb)
    rag = rags[prep_cfg.style]
    m = prep_cfg.create_method()
    with m.probing_collection([by_id[o.doc_id].text for o in shipped_all]):
        for shipped_obs in observations:
            fresh = prepare._probe(m, [by_id[shipped_obs.doc_id]], rag, cfg, lambda n=1: None)[0]
            diffs = _same(shipped_obs.to_json(), fresh.to_json())
            assert not diffs, f"{shipped_obs.doc_id}: " + "; ".join(diffs[:5])


#: the shipped configurations of the README's audits, re-probed with more documents
_REPROBE_CASES = [("srag", {}, 2, "completion"), ("mba", {"elicitation": "continue"}, 1, "completion"),
                  ("srag", {"style": "chat"}, 1, "chat"), ("verbatim", {"style": "chat"}, 0, "chat")]


@pytest.mark.parametrize("method,params,n_docs,style", _REPROBE_CASES)
def test_shipped_observations_are_what_the_code_probes_today(manifest, method, params, n_docs, style):
    """Re-probe shipped shadow members and a non-member with the build's own code path."""
    key = _entry(manifest, method, params, "quick", style)
    mem, non = shipped.load_shipped(key)
    _reprobe(shipped.from_manifest(manifest[key]), mem[:n_docs] + non[:1], mem + non)


def test_every_other_shipped_method_is_what_the_code_probes_today(manifest):
    """One shipped non-member per other method, re-probed with today's code (kept cheap for the default suite).

    One configuration per method (the chat style where both ship: a method's probing code is the
    same in both, the style only changes the shadow); the key test above catches a changed
    configuration or method version in every shipped file.
    """
    reprobed = [(m, p, st) for m, p, _, st in _REPROBE_CASES]
    chosen: dict[tuple, tuple[str, dict]] = {}
    for key, entry in sorted(manifest.items(), key=lambda kv: kv[1]["style"] != "chat"):
        if (entry["method"], entry["params"], entry["style"]) in reprobed or entry["size"] != "quick":
            continue
        name = (entry["method"], json.dumps({k: v for k, v in entry["params"].items() if k != "style"}))
        chosen.setdefault(name, (key, entry))
    rags: dict = {}
    for key, entry in chosen.values():
        mem, non = shipped.load_shipped(key)
        _reprobe(shipped.from_manifest(entry), non[:1], mem + non, rags)
    assert len(chosen) >= 2  # MBA's fill-in and the rest, at least


def test_the_shipped_srag_calibration_is_restored_without_a_fit(manifest, tmp_path, monkeypatch):
    """The README's first audit: S-RAG's out-of-fold scores, threshold and chosen scorer ship as data. On the
    shipped completion shadow the mean probability separates better than the classifier, so a first start
    trains nothing (a classifier that scores is trained once: tests/audit_core/test_srag.py)."""
    import audit_core.methods.srag as srag

    key = _entry(manifest, "srag", {}, "quick", "completion")
    saved = shipped.load_shipped_calibration(key)
    mem, non = shipped.load_shipped(key)
    assert saved is not None and saved["observations_sha256"] == prepare.observations_digest(mem, non)
    assert "model" not in saved and manifest[key]["calibration"]
    fits = []
    monkeypatch.setattr(srag, "train_predictor", lambda df, cfg: fits.append(len(df)) or "model")
    prep_cfg = shipped.from_manifest(manifest[key])
    got = prepare_shadow([prep_cfg.create_method()], prep_cfg.shadow_config(), root=tmp_path)
    assert saved["params"]["scorer"] == "mean_probability" and fits == []
    cal = got.calibrations["srag"]
    assert cal.params["oof_scores"] == saved["params"]["oof_scores"] and cal.threshold == saved["threshold"]
    assert cal.model is None

    # a shipped calibration that does not describe the observations is not trusted: full preparation
    fits.clear()
    monkeypatch.setattr(srag, "member_probability", lambda model, df: [(i % 7) / 7 for i in range(len(df))])
    tampered = {**saved, "observations_sha256": "0" * 64}
    monkeypatch.setattr(shipped, "read_shipped_preparation", lambda k, folder=None, progress=None, total=None: (
        [o.to_json() for o in mem], [o.to_json() for o in non], tampered))
    prepare_shadow([prep_cfg.create_method()], prep_cfg.shadow_config(), root=tmp_path / "other")
    assert len(fits) == saved["params"]["n_folds"]  # the fold models; the mean still wins, so no final one


def test_every_shipped_calibration_is_stamped_with_todays_revisions(manifest):
    """A shipped calibration fitted under another scoring revision of its method or another non-answer reader is
    fitted again on every first audit (``prepare._calibrate``), so a change in how answers are read that leaves
    the shipped files as they were fails here: recalibrate them (scripts/build_default_preparation.py
    --recalibrate)."""
    from audit_core.evidence.answers import READER_REVISION

    stale = []
    for key, entry in manifest.items():
        saved = shipped.load_shipped_calibration(key)
        if saved is None:
            continue  # none shipped: fitted locally either way
        want = (METHODS[entry["method"]].method_class().scoring_revision, READER_REVISION)
        if (saved.get("scoring_revision", ""), saved.get("reader_revision", "")) != want:
            stale.append(f"{key} ({entry['method']})")
    assert not stale, f"shipped calibrations fitted under other revisions: {', '.join(stale)}"


@pytest.mark.slow
def test_the_shipped_srag_calibration_is_what_a_fresh_fit_gives(manifest):
    """Fitting S-RAG on the shipped observations today gives the shipped out-of-fold scores and threshold."""
    key = _entry(manifest, "srag", {}, "quick", "completion")
    saved = shipped.load_shipped_calibration(key)
    mem, non = shipped.load_shipped(key)
    fresh = prepare.saved_calibration(shipped.from_manifest(manifest[key]).create_method().prepare(mem, non),
                                      mem, non)
    assert not _same(saved["params"]["oof_scores"], fresh["params"]["oof_scores"])
    assert saved["threshold"] == pytest.approx(fresh["threshold"], abs=1e-6)


@pytest.mark.slow
def test_the_build_script_ships_what_prepare_shadow_probes(tmp_path, monkeypatch):
    """The script end to end on a tiny shadow: its file is the shadow's observations, re-probing agrees."""
    import importlib.util

    monkeypatch.setitem(shipped.SHIPPED_SIZES, "tiny", (5, 5, 2))  # S-RAG trains on 4 or more per class
    spec = importlib.util.spec_from_file_location("build_default_preparation",
                                                  shipped.ROOT / "scripts" / "build_default_preparation.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out, work = tmp_path / "out", tmp_path / "work"
    assert script.main(["--sizes", "tiny", "--styles", "completion", "--methods", "srag",
                        "--out", str(out), "--work", str(work)]) == 0
    manifest = shipped.read_manifest(out)
    (key, entry), = manifest.items()
    assert entry["method"] == "srag" and entry["size"] == "tiny" and (entry["members"], entry["nonmembers"]) == (5, 5)
    mem, non = shipped.load_shipped(key, out)
    cached = json.loads((work / key / "observations.json").read_text())
    assert [o.to_json() for o in mem] == cached["members"] and [o.to_json() for o in non] == cached["nonmembers"]
    first = shipped.shipped_file(key, out).read_bytes()
    _reprobe(shipped.from_manifest(entry), mem[:1] + non[:1], mem + non)

    # a second run finds the key shipped and probes nothing; the bytes stay the same
    assert script.main(["--sizes", "tiny", "--styles", "completion", "--methods", "srag",
                        "--out", str(out), "--work", str(work)]) == 0
    assert shipped.shipped_file(key, out).read_bytes() == first

    # a stale entry (its configuration now has another key) is removed
    manifest[key]["params"] = {"bins": 12}
    (out / shipped.MANIFEST).write_text(json.dumps(manifest))
    assert script.remove_stale(out, _hash()) == [key]
    assert not shipped.shipped_file(key, out).exists() and shipped.read_manifest(out) == {}


def test_a_shipped_file_that_is_no_longer_a_default_is_removed(tmp_path):
    """An entry whose key still matches its parameters, but whose parameters no audit uses any more, goes."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_default_preparation",
                                                  shipped.ROOT / "scripts" / "build_default_preparation.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    h = _hash()
    old = shipped.DefaultPreparation("verbatim", (), "quick", "chat")  # Verbatim on chat before it had a style
    now = shipped.DefaultPreparation("verbatim", (("style", "chat"),), "quick", "chat")
    entries = {}
    for p in (old, now):
        key = shipped.key_of(p, h)
        entries[key] = {"method": p.method, "params": dict(p.params), "style": p.style, "size": p.size}
        shipped.shipped_file(key, tmp_path).write_bytes(b"")
    (tmp_path / shipped.MANIFEST).write_text(json.dumps(entries))
    defaults = {shipped.key_of(p, h) for p in shipped.default_preparations(methods=("verbatim",))}
    assert shipped.key_of(now, h) in defaults and shipped.key_of(old, h) not in defaults
    assert script.remove_stale(tmp_path, h) == []  # both keys match their parameters
    assert script.remove_stale(tmp_path, h, defaults) == [shipped.key_of(old, h)]
    assert list(shipped.read_manifest(tmp_path)) == [shipped.key_of(now, h)]
    assert not shipped.shipped_file(shipped.key_of(old, h), tmp_path).exists()


def _hash() -> str:
    from shadow.corpus import corpus_hash

    return corpus_hash(ShadowConfig().corpus_docs())


def test_parsing_an_observations_file_counts_each_observation_and_gives_what_json_gives():
    """One json.loads of S-RAG's chat observations (10-33 MB gzipped) left its reading stage at 0 until it was
    all parsed; the parse now reports each observation, and its result is json.loads's."""
    body = {"calibration": {"threshold": 0.5, "params": {"a": [1, 2]}}, "key": "k",
            "members": [{"doc_id": f"m{i}", "data": {"x": [i, "]},{"]}} for i in range(3)],
            "nonmembers": [{"doc_id": "n0", "data": {}}, {"doc_id": "n1", "data": None}]}
    for text in (json.dumps(body, sort_keys=True, separators=(",", ":")), json.dumps(body, indent=2)):
        seen: list[tuple[int, int]] = []
        assert shipped.parse_observations(text, lambda d, t: seen.append((d, t)), total=4) == body
        assert seen == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4), (5, 5), (5, 5)]
    assert shipped.parse_observations("[1, 2]", lambda d, t: None, total=3) == [1, 2]  # not an object: whole
    assert shipped.parse_observations('{"members": []}', lambda d, t: None) == {"members": []}
    with pytest.raises(ValueError):
        shipped.parse_observations('{"members": [{"a": 1}', lambda d, t: None, total=1)
    with pytest.raises(ValueError):
        shipped.parse_observations('{"members": []} x', lambda d, t: None)
    for trailing in ('{"members": [{"a": 1},], "nonmembers": []}', '{"members": [], "nonmembers": [],}'):
        with pytest.raises(ValueError):  # json.loads refuses a trailing comma, so the walk must too
            json.loads(trailing)
        with pytest.raises(ValueError):
            shipped.parse_observations(trailing, lambda d, t: None)


@pytest.mark.parametrize("damage", [b"\x1f\x8b\x08\x00cut", b"not gzip at all", gzip.compress(b"{not json")])
def test_a_damaged_shipped_file_is_prepared_afresh_instead_of_failing_the_audit(tmp_path, damage, caplog):
    """A shipped file cut short raised EOFError from prepare_shadow: the audit failed as "unexpected"."""
    key = "077fea329630e1ef5fda"
    shipped.shipped_file(key, tmp_path).write_bytes(damage)
    assert shipped.read_shipped_preparation(key, tmp_path) is None
    assert "cannot be read" in caplog.text and "prepared instead" in caplog.text


def test_a_saved_srag_calibration_is_not_restored_under_another_feature_setting(manifest, monkeypatch):
    """The reproduction n-gram and the stock-phrase rule change S-RAG's features but not the preparation's key:
    a calibration fitted under other values was restored, its out-of-fold scores and threshold those of other
    features (a review of shadow/, session 61)."""
    import audit_core.methods.srag as srag

    key = _entry(manifest, "srag", {}, "quick", "completion")
    saved = {k: v for k, v in shipped.load_shipped_calibration(key).items()
             if k not in ("observations_sha256", "scoring_revision", "reader_revision")}  # as prepare_shadow passes it
    mem, non = shipped.load_shipped(key)
    prepared = []
    monkeypatch.setattr(srag.SragMethod, "prepare", lambda self, m, n: prepared.append(self.config) or "fresh")
    monkeypatch.setattr(srag, "train_predictor", lambda df, cfg: "model")
    base = shipped.from_manifest(manifest[key]).create_method()
    assert base.restore(saved, mem, non) != "fresh" and prepared == []
    for change in ({"reproduction_ngram": 5}, {"shared_min_docs": 0}):
        other = srag.SragMethod(replace(base.config, **change))
        assert other.restore(saved, mem, non) == "fresh"
    assert len(prepared) == 2
