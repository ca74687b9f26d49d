"""Fixtures of the reliability tests: a seeded cache dir per test (see support.py)."""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from tests.reliability.support import SEED, current_keys, prepare_seed, seed_cache


@pytest.fixture(scope="session")
def shadow_seed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every test's shadow cache is copied from.

    The committed seed when its keys are the code's current ones; otherwise a
    real preparation made once for this session (slow: see support.py).
    """
    keys = current_keys()
    if all((SEED / key / "observations.json").exists() for key in keys.values()):
        return SEED
    warnings.warn("tests/reliability/shadow_seed is stale (preparation keys changed); preparing the shadow "
                  "once for this session. Refresh it with: python -m tests.reliability.make_shadow_seed")
    cache = tmp_path_factory.mktemp("seed-cache")
    folder = cache / "shadow"
    old = os.environ.get("RPA_CACHE_DIR")
    os.environ["RPA_CACHE_DIR"] = str(cache)
    try:
        prepare_seed(folder)
    finally:
        if old is None:
            os.environ.pop("RPA_CACHE_DIR", None)
        else:
            os.environ["RPA_CACHE_DIR"] = old
    return folder


@pytest.fixture
def rel_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shadow_seed: Path) -> Path:
    """A private RPA_CACHE_DIR with the shadow preparation, set for this process too."""
    cache = seed_cache(tmp_path / "cache", shadow_seed)
    monkeypatch.setenv("RPA_CACHE_DIR", str(cache))
    monkeypatch.delenv("RPA_AUDIT_DB", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return cache
