"""The committed shadow seed covers every preparation key a reliability audit uses.

A key the seed lacks does not fail any reliability test: the audit then probes a
shadow of its own, and each CLI test takes minutes instead of seconds (as every
one did once endpoints were read in chat style and the seed held only the
completion-style keys). This test makes such a gap visible.
"""
from __future__ import annotations

from tests.reliability.support import SEED, SEED_STYLES, current_keys


def test_the_committed_seed_holds_every_key_an_audit_of_a_reliability_target_uses():
    keys = current_keys()
    assert {k.split("@")[1] for k in keys} == set(SEED_STYLES)
    missing = {name: key for name, key in keys.items() if not (SEED / key / "observations.json").exists()}
    assert not missing, ("tests/reliability/shadow_seed is stale; refresh it with "
                         f"python -m tests.reliability.make_shadow_seed (missing: {missing})")
