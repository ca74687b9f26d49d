import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# the app's background model warm-up (app/resources.py) stays off in tests unless a test turns it on
os.environ.setdefault("RPA_WARMUP", "0")

SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def smollm():
    from audit_core.models import load_causal_lm

    return load_causal_lm("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def gemma():
    from audit_core.models import load_causal_lm

    return load_causal_lm("gemma-3-270m")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "genmedgpt5k.jsonl").exists():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA
