"""Target types, declared in one registry, and the target files that describe them.

``TARGET_TYPES`` is the single place that says which kinds of remote RAG the
auditor can reach: each entry names the module and class that implement it,
the configuration dataclass a target file is read into, the label a person
reads, and what such a target can return. Adding a type is one new module in
this package (a ``Target`` subclass with ``from_config(config, environ)``, and
its configuration dataclass with a ``url`` or ``base_url`` field, where the
requests go, and ``env_vars()``, the environment variables it sends, which the
app asks consent for, one box per variable, and the CLI reads only when
``--allow-env NAME`` allows them) and one line in ``TARGET_TYPES``.

A target file is a small YAML or JSON mapping: ``type`` picks the entry, the
other keys are the fields of its configuration dataclass. Files name
environment variables, never keys. The in-process RAG systems of ``shadow``
(the demo, the shadow RAG) are not listed: they are built in code, not
described by a file.
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib
import types
import typing
from collections import abc
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping


@dataclass(frozen=True)
class TargetSpec:
    """What the rest of the project knows about a target type without importing it."""

    name: str  # the value of ``type:`` in a target file
    label: str  # what a person reads in the app and the CLI
    module: str
    cls: str
    config: str  # the configuration dataclass a target file is read into
    #: what such a target can return, for help texts (the capability probe finds the truth)
    returns: str

    def config_class(self) -> type:
        return getattr(importlib.import_module(self.module), self.config)

    def target_class(self) -> type:
        return getattr(importlib.import_module(self.module), self.cls)


_T = "audit_core.target."

#: every target type a user can describe, in the order the app lists them
TARGET_TYPES: dict[str, TargetSpec] = {s.name: s for s in (
    TargetSpec("openai", "OpenAI-compatible endpoint", _T + "openai_compat", "OpenAITarget", "OpenAITargetConfig",
               "text, and token logprobs with up to 20 alternatives when the endpoint sends them"),
    TargetSpec("http", "Any HTTP API (target file)", _T + "http_api", "HttpTarget", "HttpTargetConfig",
               "text (JSON, or plain text with response_json: false); token logprobs only when the target "
               "file names a logprobs_path"),
)}


class TargetFileError(ValueError):
    """A target file that cannot be used; the message says what to change."""


def target_spec(name: str) -> TargetSpec:
    if name not in TARGET_TYPES:
        raise TargetFileError(f"unknown target type {name!r}; known types: {', '.join(TARGET_TYPES)}")
    return TARGET_TYPES[name]


def _check_type(value: Any, hint: Any, key: str) -> Any:
    """The value converted to the field's type where that is lossless, or a clear error."""
    if hint is Any:
        return value
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        hint = next(a for a in args if a is not type(None))
    base = typing.get_origin(hint) or hint
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if base is tuple and isinstance(value, list):
        return tuple(value)
    if not isinstance(value, base) or (base in (int, float) and isinstance(value, bool)):
        want = {str: "text", int: "a whole number", float: "a number", bool: "true or false",
                tuple: "a list", abc.Mapping: "a mapping"}.get(base, getattr(base, "__name__", str(base)))
        hint = ""
        if base in (int, float) and isinstance(value, str):
            try:
                float(value)
                hint = " (YAML reads a number such as 1e3 as text: write 1000 or 1.0e+3)"
            except ValueError:
                pass
        # the kind of value only, never the value: a header written as one line ("Authorization: Bearer
        # sk-live-...") would repeat the key on screen, in the CLI's output and wherever errors are kept
        raise TargetFileError(f"{key!r} must be {want}, got {_kind_of(value)}{hint}")
    return value


def _kind_of(value: Any) -> str:
    """What kind of value a target file gave, in a person's words, without the value itself."""
    import datetime

    if value is None:
        return "nothing (null)"
    for kind, said in ((bool, "true or false"), (str, "text"), (int, "a whole number"), (float, "a number"),
                       (list, "a list"), (abc.Mapping, "a mapping"), (datetime.datetime, "a date and time"),
                       (datetime.date, "a date"), (bytes, "binary data")):
        if isinstance(value, kind):
            return said
    return f"a value of type {type(value).__name__}"


def target_config(data: Mapping[str, Any], source: str = "the target file") -> tuple[TargetSpec, Any]:
    """The target type and its configuration from a decoded target file, fully validated."""
    if not isinstance(data, Mapping):
        raise TargetFileError(f"{source} must be a mapping of settings (type: ..., url: ...)")
    kind = data.get("type")
    if kind is None:
        raise TargetFileError(f"{source} has no 'type'; use one of: {', '.join(TARGET_TYPES)}")
    spec = target_spec(str(kind))
    cls = spec.config_class()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key == "type":
            continue
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TargetFileError(f"{source}: unknown setting {key!r} for type {spec.name}{hint}; "
                                  f"settings: {', '.join(fields)}")
        try:
            values[key] = _check_type(value, hints[key], key)
        except TargetFileError as exc:
            raise TargetFileError(f"{source}: {exc}") from None
        except OverflowError:  # a 400-digit whole number where a float goes
            raise TargetFileError(f"{source}: {key!r} is far too large") from None
    required = [n for n, f in fields.items() if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING]  # type: ignore[misc]
    missing = [n for n in required if n not in values]
    if missing:
        raise TargetFileError(f"{source}: type {spec.name} needs {', '.join(missing)}")
    try:
        return spec, cls(**values)
    except TargetFileError:
        raise
    except (TypeError, ValueError) as exc:
        raise TargetFileError(f"{source}: {exc}") from None


def _unique_key_loader() -> type:
    """YAML's safe loader, refusing a key given twice in one mapping (YAML keeps the last one silently:
    a second ``url`` or header would replace the first without a word)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            # an alias ("*a") repeats a node; nested aliases grow a 400-byte file into 10^8 values, decoded
            # again on every rerun of the app: a target file has no need of them
            if self.check_event(yaml.events.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in a target file; "
                                                  "write the value out", event.start_mark)
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} is given twice",
                                                            key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def parse_target_file(text: str, source: str = "the target file") -> tuple[TargetSpec, Any]:
    """A target file's text (YAML, or JSON, which YAML reads too) -> (spec, config)."""
    import yaml

    try:
        data = yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise TargetFileError(f"{source} is not valid YAML or JSON{at}: "
                              f"{getattr(exc, 'problem', None) or exc}") from None
    except TypeError:  # a list or mapping used as a key ("? [a]"): YAML allows it, a target file has no use for it
        raise TargetFileError(f"{source} uses a list or mapping as a key; keys are plain names such as url "
                              "or headers") from None
    except RecursionError:
        raise TargetFileError(f"{source} is nested too deeply to be a target file") from None
    except (ValueError, OverflowError) as exc:  # a scalar YAML types but cannot build: "2024-02-30", "!!float abc"
        raise TargetFileError(f"{source} holds a value YAML cannot read ({exc}); quote it to send it as text") \
            from None
    return target_config(data, source)


def load_target_file(path: str | Path) -> tuple[TargetSpec, Any]:
    """Read and validate a target file from disk."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise TargetFileError(f"cannot read the target file {p}: {exc.strerror or exc}") from None
    return parse_target_file(target_file_text(data, f"target file {p.name}"), f"target file {p.name}")


def target_file_text(data: bytes, source: str = "the target file") -> str:
    """A target file's bytes as text: UTF-8 (with or without a BOM) or UTF-16 with a BOM, else a clear error.

    Decoding with replacement characters changed "Réponds" into "R\ufffdponds" in every request sent.
    """
    import codecs

    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    else:
        encoding = "utf-8-sig"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        raise TargetFileError(f"{source} is not UTF-8 text; save it as UTF-8") from None


def create_target(spec: TargetSpec, config: Any, environ: Mapping[str, str] | None = None):
    """The target a configuration describes; ``environ`` is where named secrets are read.

    Callers pass only the variables the user agreed to send to the file's host (the app's boxes, the CLI's
    ``--allow-env``): None reads the whole process environment, which a file from someone else could name.
    """
    return spec.target_class().from_config(config, environ)
