"""A reading stage whose file is refused after part of it was read ends at done = total: a corrupt cache file,
or a shipped file written for another key, had left its bar standing half-way while the shadow was prepared
another way (found in a review of the reading stage)."""
from __future__ import annotations

import shutil

import shadow.prepare as prepare
import shadow.shipped as shipped
from audit_core.methods.base import Calibration, Observation
from shadow.prepare import ShadowConfig, prepare_shadow
from tests.shadow.test_prepare import _shipped_rag_mia


def _record(seen: list):
    return lambda stage, done, total: seen.append((stage, done, total))


def _last(seen: list, stage: str) -> tuple[int, int]:
    return [(d, t) for s, d, t in seen if s == stage][-1]


def test_a_cache_file_that_cannot_be_read_closes_its_stage(tmp_path, monkeypatch):
    method, cfg, key, mem, non = _shipped_rag_mia(tmp_path, monkeypatch)
    monkeypatch.setattr(prepare, "_calibrate", lambda m, me, no, folder, digest=None: Calibration(m.name, 0.5))
    root = tmp_path / "cache"
    prepare_shadow([method], cfg, root=root)
    obs_file = root / key / "observations.json"
    text = obs_file.read_text()
    obs_file.write_text(text[: int(len(text) * 0.7)])  # cut: some observations parse, then it fails
    seen: list = []
    prepare_shadow([method], cfg, root=root, progress=_record(seen))
    stage = "RAG-MIA: reading the cached shadow observations"
    done, total = _last(seen, stage)
    assert any(s == stage and 0 < d < t for s, d, t in seen)  # it had got part of the way
    assert done == total
    # and the shipped file was read in its place
    assert _last(seen, "RAG-MIA: reading the shipped shadow observations") == (9, 9)


def test_a_shipped_file_for_another_key_closes_its_stage(tmp_path, monkeypatch):
    method, cfg, key, mem, non = _shipped_rag_mia(tmp_path, monkeypatch)
    other = ShadowConfig(n_members=4, n_nonmembers=4, seed=cfg.seed + 7)
    from shadow.corpus import corpus_hash

    other_key = prepare.preparation_key(method, other, corpus_hash(other.corpus_docs()))
    assert other_key != key
    shutil.copy(shipped.shipped_file(key), shipped.shipped_file(other_key))  # renamed: its content names ``key``
    monkeypatch.setattr(prepare, "_calibrate", lambda m, me, no, folder, digest=None: Calibration(m.name, 0.5))
    monkeypatch.setattr(prepare, "build_shadow_rag", lambda cfg, kb, progress=None: object())
    monkeypatch.setattr(prepare, "_probe", lambda m, docs, rag, cfg, tick, progress=None:
                        [Observation(m.name, d.id) for d in docs])
    seen: list = []
    got = prepare_shadow([method], other, root=tmp_path / "cache", progress=_record(seen))
    stage = "RAG-MIA: reading the shipped shadow observations"
    assert any(s == stage and 0 < d < t for s, d, t in seen)
    done, total = _last(seen, stage)
    assert done == total and not got.from_cache["rag_mia"]  # refused, and the shadow was probed instead
