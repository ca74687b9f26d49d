"""The target-type registry is the one place target types are declared: the app, CLI and files follow it."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from audit_core.target import TARGET_TYPES, create_target, load_target_file, target_config
from audit_core.target.base import AuthenticationFailed, Target

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", list(TARGET_TYPES))
def test_every_type_resolves_to_a_target_class_and_a_config_dataclass(name):
    spec = TARGET_TYPES[name]
    cls, config = spec.target_class(), spec.config_class()
    assert spec.name == name and issubclass(cls, Target) and callable(cls.from_config)
    assert dataclasses.is_dataclass(config) and callable(config.env_vars)
    # where the requests go: the CLI and the app name this host before any secret is sent
    assert {"url", "base_url"} & {f.name for f in dataclasses.fields(config)}
    assert config.__module__ == cls.__module__ == spec.module and spec.label and spec.returns


def test_the_apps_kinds_of_target_are_named_by_the_registry():
    """The endpoint's fields build the openai type; every type, that one included, comes in by a target file."""
    from app.sidebar import ENDPOINT, HTTP_FILE, TARGET_KINDS

    assert ENDPOINT == TARGET_TYPES["openai"].label and HTTP_FILE == TARGET_TYPES["http"].label
    assert {ENDPOINT, HTTP_FILE} <= set(TARGET_KINDS)
    # taken from the registry, not typed again: a label changed there is the app's (a fresh interpreter, so
    # that no module of this one is imported twice)
    code = ("import dataclasses; from audit_core.target import TARGET_TYPES as T; "
            "T['openai'] = dataclasses.replace(T['openai'], label='Renamed endpoint'); "
            "from app.sidebar import ENDPOINT; print(ENDPOINT)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "Renamed endpoint"


@pytest.mark.parametrize("name", list(TARGET_TYPES) + ["dummy"])
def test_every_type_loads_from_a_target_file_and_gets_the_connection_checks_limits(name, monkeypatch):
    """What the app's target-file option does with any registered type: parse the file, shorten the limits the
    config has for a connection check, and build the target. The dummy type has no timeout or retry setting:
    the check copied both onto every config and stopped on it with an AttributeError."""
    from app.target_file import CHECK_LIMITS, with_check_limits
    from audit_core.target import parse_target_file
    from tests.target_fixtures import minimal_target_file, registered

    registered(monkeypatch)
    spec, cfg = parse_target_file(minimal_target_file(TARGET_TYPES[name]))
    assert spec is TARGET_TYPES[name] and isinstance(cfg, spec.config_class())
    checked = with_check_limits(cfg)
    have = {f.name for f in dataclasses.fields(cfg)}
    for field, limit in CHECK_LIMITS.items():
        assert field not in have or getattr(checked, field) == min(limit, getattr(cfg, field))
    assert dataclasses.replace(checked, **{f: getattr(cfg, f) for f in CHECK_LIMITS if f in have}) == cfg
    assert isinstance(create_target(spec, checked, {v: "test-secret" for v in cfg.env_vars()}), Target)


def test_an_openai_target_file_builds_the_connector_with_the_named_variable_only():
    from audit_core.target.openai_compat import OpenAITarget

    spec, cfg = target_config({"type": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m",
                               "api_key_env": "MY_KEY"})
    t = create_target(spec, cfg, {"MY_KEY": "sk-abc", "OPENAI_API_KEY": "sk-other"})
    assert isinstance(t, OpenAITarget) and t.model == "m" and cfg.env_vars() == ["MY_KEY"]
    with pytest.raises(AuthenticationFailed, match="MY_KEY"):
        create_target(spec, cfg, {"OPENAI_API_KEY": "sk-other"})


def test_every_shipped_target_file_loads_into_a_registered_type():
    shipped = sorted((ROOT / "assets" / "targets").glob("*.yaml"))
    assert len(shipped) >= 2
    for p in shipped:
        spec, cfg = load_target_file(p)
        assert spec.name in TARGET_TYPES and isinstance(cfg, spec.config_class())


def test_a_url_is_shown_without_its_credentials_or_query_and_a_non_url_as_such():
    from audit_core.target.base import display_url

    assert display_url("https://user:pw@api.example.com:8443/v1?api_key=x") == "https://api.example.com:8443/v1"
    assert display_url("not a url") == "(not a valid URL)"  # it was shown as "://not a url"
    assert display_url("http://[::1") == "(not a valid URL)"
