"""Target files for every registered type, and a minimal target type registered only inside tests.

``minimal_target_file`` writes a file of the fewest settings for any type from its config
dataclass alone, so a test that walks ``TARGET_TYPES`` needs no line for a new type.
The dummy type (``registered``) has exactly what the target registry asks of a type
(a ``Target`` subclass with ``from_config``, a config dataclass with a ``url`` and
``env_vars()``) and nothing the two shipped types happen to share (no ``timeout_s``,
no ``max_retries``), so a part of the app or the CLI that assumes more of a type than
the registry promises fails on it.
"""
from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass
from typing import Any, Mapping

from audit_core.target import TargetSpec
from audit_core.target.base import ChatRequest, Completion, Target, Usage

#: what the dummy target answers to every request
ANSWER = "OK"


@dataclass(frozen=True)
class DummyConfig:
    """The fewest fields a target type can have."""

    url: str

    def env_vars(self) -> list[str]:
        return []


class DummyTarget(Target):
    """Answers every request with the same short text, without logprobs or sources."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.name = f"dummy {url}"

    @classmethod
    def from_config(cls, config: DummyConfig, environ: Mapping[str, str] | None = None) -> "DummyTarget":
        return cls(config.url)

    def complete(self, request: ChatRequest) -> Completion:
        return Completion(ANSWER, None, Usage(1, 1))


def dummy_spec() -> TargetSpec:
    """The registry entry of the dummy type: ``type: dummy`` in a target file."""
    return TargetSpec("dummy", "Dummy target (tests only)", __name__, "DummyTarget", "DummyConfig", "text")


def registered(monkeypatch: Any) -> TargetSpec:
    """Register the dummy type for one test; monkeypatch removes it afterwards."""
    from audit_core.target import TARGET_TYPES

    spec = dummy_spec()
    monkeypatch.setitem(TARGET_TYPES, spec.name, spec)
    return spec


#: a value for a required setting, by its name: where requests go, and the request template and answer path of
#: a JSON API (required unless the file says its service answers in plain text); any other required text
#: setting gets ``TEXT``
URL = "http://127.0.0.1:9/v1"
_BY_NAME: dict[str, Any] = {"url": URL, "base_url": URL, "body": {"question": "{{prompt}}"}, "answer_path": "$.answer"}
TEXT = "m"


def minimal_target_file(spec: TargetSpec) -> str:
    """A target file of ``spec``'s type with only its required settings (JSON, which a target file may be).

    A required setting this cannot fill (not named above and not text) fails the test with its name: give it a
    value in ``_BY_NAME``.
    """
    cls = spec.config_class()
    hints = typing.get_type_hints(cls)
    data: dict[str, Any] = {"type": spec.name}
    for f in dataclasses.fields(cls):
        optional = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        # a setting with a default that stands for "not given" may still be required by the rest of the file
        # (an http file's answer_path, unless it says response_json: false): named in _BY_NAME, it is given
        if optional and not (f.name in _BY_NAME and not f.default):
            continue
        if f.name in _BY_NAME:
            data[f.name] = _BY_NAME[f.name]
        elif hints[f.name] is str:
            data[f.name] = TEXT
        else:
            raise AssertionError(f"no example value for the required setting {f.name!r} of type {spec.name}")
    return json.dumps(data)
