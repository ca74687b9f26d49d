"""The target-type registry is the one place target types are declared: the app, CLI and files follow it."""
from __future__ import annotations

import dataclasses
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


def test_every_type_is_offered_by_the_app():
    from app.sidebar import ENDPOINT, HTTP_FILE

    assert {s.label for s in TARGET_TYPES.values()} == {ENDPOINT, HTTP_FILE}


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
