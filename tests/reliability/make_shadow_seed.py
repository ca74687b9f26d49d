"""Regenerate ``tests/reliability/shadow_seed/`` with the real shadow preparation.

    .venv/bin/python -m tests.reliability.make_shadow_seed

Runs ``prepare_shadow`` for the reliability tests' methods and shadow size, in
each style an audit may read their fake target in (``support.SEED_STYLES``;
about 10 minutes on 2 cores), and keeps the result (observations and
calibration per preparation key). Run it after a change that alters a
preparation key, so the reliability tests stay fast.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from tests.reliability.support import SEED, prepare_seed


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="rpa-seed-") as tmp:
        os.environ["RPA_CACHE_DIR"] = tmp  # models and the shadow's knowledge base are built there too
        keys = prepare_seed(Path(tmp) / "shadow")
        if SEED.exists():
            shutil.rmtree(SEED)
        for name, key in keys.items():
            shutil.copytree(Path(tmp) / "shadow" / key, SEED / key)
            print(f"{name}: {SEED / key}")


if __name__ == "__main__":
    main()
