"""The default shadow preparation that ships with the repository (issue 18).

Probing the shadow RAG is the slow part of a first audit, and with the
default settings it is the same computation on every machine. The raw probe
results (``Observation`` lists, plain JSON, never a pickled model) for the
default configurations are therefore built once by
``scripts/build_default_preparation.py`` and stored under
``assets/preparation/<key>.json.gz``, where ``<key>`` is
``shadow.prepare.preparation_key`` of the configuration they were probed
with. ``prepare_shadow`` uses them when its own cache has nothing for a key;
the classifier and thresholds are still fitted locally, from the observations.

A configuration that differs in anything the key covers (corpus, sizes, top-k,
prompt style, models, a method's parameters or version) has another key, finds
no shipped file and is probed as before.
"""
from __future__ import annotations

import gzip
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from audit_core.methods.base import MembershipMethod, Observation

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_DIR = ROOT / "assets" / "preparation"
MANIFEST = "manifest.json"

#: shadow sizes shipped, (members, non-members, per class for generative
#: methods); the same numbers as the app's "quick" and "standard" audit sizes
#: (app/sidebar.py AUDIT_SIZES) and the CLI's default (200 + 200, 60)
SHIPPED_SIZES: dict[str, tuple[int, int, int]] = {"quick": (60, 60, 30), "standard": (200, 200, 60)}
#: target styles the shadow mirrors (ShadowConfig.prompt_style)
SHIPPED_STYLES = ("completion", "chat")


@dataclass(frozen=True)
class DefaultPreparation:
    """One shipped configuration: which method (with which parameters) on which shadow."""

    method: str
    params: tuple[tuple[str, object], ...]
    size: str
    style: str

    def create_method(self) -> MembershipMethod:
        from audit_core.methods import create_method

        return create_method(self.method, **dict(self.params))

    def shadow_config(self):
        from shadow.prepare import ShadowConfig

        n_m, n_n, n_g = SHIPPED_SIZES[self.size]
        return ShadowConfig(n_members=n_m, n_nonmembers=n_n, n_per_class_generative=n_g, prompt_style=self.style)

    def label(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in self.params)
        return f"{self.method}{'(' + extra + ')' if extra else ''} {self.style} {self.size}"


def method_variants() -> list[tuple[str, tuple[tuple[str, object], ...]]]:
    """Every method at its default configuration, plus MBA as the demo target is audited.

    The app and the CLI ask the demo target for MBA's hidden words with the
    "continue" elicitation and an endpoint with the paper's fill-in
    (shadow.demo.mba_elicitation_for): both are defaults, both are shipped.
    """
    from audit_core.methods import METHODS
    from shadow.demo import mba_elicitation_for

    demo = mba_elicitation_for(True)
    out: list[tuple[str, tuple[tuple[str, object], ...]]] = []
    for name in METHODS:
        if name == "mba" and demo != mba_elicitation_for(False):
            out.append(("mba", (("elicitation", demo),)))  # first: the app's first audit needs it
        out.append((name, ()))
    return out


def default_preparations(sizes=tuple(SHIPPED_SIZES), styles=SHIPPED_STYLES,
                         methods: tuple[str, ...] | None = None) -> list[DefaultPreparation]:
    """The configurations the build script ships (in the order it builds them)."""
    return [DefaultPreparation(m, _in_style(m, p, style), size, style)
            for size in sizes for style in styles
            for m, p in method_variants() if methods is None or m in methods]


def _in_style(method: str, params: tuple[tuple[str, object], ...], style: str) -> tuple[tuple[str, object], ...]:
    """A method's parameters for a target of ``style``: S-RAG reads a chat target in its own style.

    An audit of a chat target (found by the capability probe, or chosen) sets
    both the shadow's prompt style and S-RAG's reading style
    (``audit_core.audit.with_target_style``); S-RAG read in completion style on
    a chat shadow is a mismatch nobody audits with, so it is not shipped.
    """
    from audit_core.methods import reads_target_style

    if reads_target_style(method) and style != "completion":
        return tuple(sorted({**dict(params), "style": style}.items()))
    return params


def key_of(prep: DefaultPreparation, corpus_hash: str) -> str:
    from shadow.prepare import preparation_key

    return preparation_key(prep.create_method(), prep.shadow_config(), corpus_hash)


def shipped_file(key: str, folder: Path | None = None) -> Path:
    return (folder or SHIPPED_DIR) / f"{key}.json.gz"


def read_manifest(folder: Path | None = None) -> dict[str, dict]:
    """key -> what it was built for (method, parameters, style, size, counts)."""
    path = (folder or SHIPPED_DIR) / MANIFEST
    return json.loads(path.read_text()) if path.exists() else {}


def _read_shipped(key: str, folder: Path | None = None,
                  progress: Callable[[int, int], None] | None = None, total: int | None = None) -> dict | None:
    """The shipped file of ``key`` as written, or None (missing, or renamed from another key).

    ``progress(done, total)`` counts the observations as they are parsed (``parse_observations``)."""
    path = shipped_file(key, folder)
    if not path.exists():
        return None
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            raw = parse_observations(fh.read(), progress, total)
    except (OSError, EOFError, ValueError) as exc:  # cut short, not gzip, not JSON: prepared afresh instead
        log.warning("the shipped preparation %s cannot be read (%s: %s); the shadow is prepared instead",
                    path.name, type(exc).__name__, exc)
        return None
    return raw if isinstance(raw, dict) and raw.get("key") == key else None  # renamed or copied: not its key


#: the lists of observations in a shipped or cached observations file
OBSERVATION_LISTS = ("members", "nonmembers")


def parse_observations(text: str, progress: Callable[[int, int], None] | None = None,
                       total: int | None = None) -> dict:
    """``json.loads(text)`` of an observations file, reporting ``progress(done, total)`` per observation parsed.

    Parsing is most of reading such a file (S-RAG's chat observations are 10-33 MB gzipped): one
    ``json.loads`` would leave its stage at 0 for all of it. The top-level object is walked and each element
    of its ``members`` and ``nonmembers`` lists is decoded on its own; ``total`` is the count expected (the
    shadow's sizes), raised to the count found. Anything the walk does not expect is parsed whole (the same
    result, or ``json.loads``'s error).
    """
    if progress is None:
        return json.loads(text)
    done = [0]

    def parsed() -> None:
        done[0] += 1
        progress(done[0], max(total or 0, done[0]))

    progress(0, total or 0)
    try:
        out = _walk_object(text, parsed)
    except (ValueError, IndexError):
        out = json.loads(text)
        done[0] = sum(len(out.get(k) or ()) for k in OBSERVATION_LISTS) if isinstance(out, dict) else 0
    progress(done[0], done[0])
    return out


_SPACE = re.compile(r"[ \t\n\r]*")


def _walk_object(text: str, parsed: Callable[[], None]) -> dict:
    """The top-level JSON object of ``text``, its observation lists decoded element by element."""
    dec = json.JSONDecoder()
    i = _SPACE.match(text, 0).end()
    if text[i] != "{":
        raise ValueError("not an object")
    out: dict = {}
    i = _SPACE.match(text, i + 1).end()
    while text[i] != "}":
        key, i = dec.raw_decode(text, i)
        i = _SPACE.match(text, i).end()
        if not isinstance(key, str) or text[i] != ":":
            raise ValueError("not a key")
        i = _SPACE.match(text, i + 1).end()
        if key in OBSERVATION_LISTS and text[i] == "[":
            items: list = []
            i = _SPACE.match(text, i + 1).end()
            while text[i] != "]":
                item, i = dec.raw_decode(text, i)
                items.append(item)
                parsed()
                i = _SPACE.match(text, i).end()
                if text[i] == ",":
                    i = _SPACE.match(text, i + 1).end()
                    if text[i] == "]":  # json.loads refuses a trailing comma: so does the walk
                        raise ValueError("trailing comma")
                elif text[i] != "]":
                    raise ValueError("not a list")
            value, i = items, i + 1
        else:
            value, i = dec.raw_decode(text, i)
        out[key] = value
        i = _SPACE.match(text, i).end()
        if text[i] == ",":
            i = _SPACE.match(text, i + 1).end()
            if text[i] == "}":
                raise ValueError("trailing comma")
        elif text[i] != "}":
            raise ValueError("not an object")
    if text[_SPACE.match(text, i + 1).end():]:
        raise ValueError("extra data")
    return out


def load_shipped_preparation(
        key: str, folder: Path | None = None) -> tuple[list[Observation], list[Observation], dict | None] | None:
    """The shipped (members, non-members, calibration) for ``key`` from one read of its file, or None.

    The calibration is plain JSON written by ``Calibration.to_json`` (out-of-fold
    scores, threshold, Platt fit; never a model) plus ``observations_sha256``,
    the digest of the observations it was fitted on: ``shadow.prepare`` puts it
    in the cache, where a method's ``restore`` trusts it only for those very
    observations. S-RAG then trains one classifier on load instead of k + 1.
    """
    got = read_shipped_preparation(key, folder)
    if got is None:
        return None
    mem, non, cal = got
    return [Observation.from_json(o) for o in mem], [Observation.from_json(o) for o in non], cal


def read_shipped_preparation(key: str, folder: Path | None = None, progress: Callable[[int, int], None] | None = None,
                             total: int | None = None) -> tuple[list[dict], list[dict], dict | None] | None:
    """As ``load_shipped_preparation``, the observations as written (``Observation.to_json`` dicts), parsed with
    ``progress(done, total)`` per observation: ``shadow.prepare`` writes them to its cache and hashes them as
    they are, instead of serialising the ``Observation`` objects twice more (most of a large shipped shadow's load)."""
    raw = _read_shipped(key, folder, progress, total)
    if raw is None:
        return None
    cal = raw.get("calibration")
    return raw["members"], raw["nonmembers"], cal if isinstance(cal, dict) else None


def load_shipped(key: str, folder: Path | None = None) -> tuple[list[Observation], list[Observation]] | None:
    """The shipped (members, non-members) observations for ``key``, or None."""
    got = load_shipped_preparation(key, folder)
    return None if got is None else (got[0], got[1])


def load_shipped_calibration(key: str, folder: Path | None = None) -> dict | None:
    """The calibration shipped beside ``key``'s observations, or None (see ``load_shipped_preparation``)."""
    raw = _read_shipped(key, folder)
    cal = raw.get("calibration") if raw is not None else None
    return cal if isinstance(cal, dict) else None


def write_shipped(key: str, prep: DefaultPreparation, mem: list[Observation], non: list[Observation],
                  folder: Path | None = None, calibration: dict | None = None) -> Path:
    """Store one configuration's observations (gzip JSON, reproducible bytes) and list it in the manifest.

    ``calibration``: what ``shadow.prepare`` saves for these observations
    (``Calibration.to_json`` with ``observations_sha256``), shipped as data.
    """
    folder = folder or SHIPPED_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = shipped_file(key, folder)
    body = {"key": key, "members": [o.to_json() for o in mem], "nonmembers": [o.to_json() for o in non]}
    if calibration is not None:
        body["calibration"] = calibration
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    tmp = path.with_suffix(".tmp")
    # mtime=0: the same observations give the same bytes (no spurious diffs)
    with open(tmp, "wb") as raw_fh, gzip.GzipFile(fileobj=raw_fh, mode="wb", compresslevel=9, mtime=0) as fh:
        fh.write(blob.encode("utf-8"))
    tmp.replace(path)
    manifest = read_manifest(folder)
    manifest[key] = {"method": prep.method, "params": dict(prep.params), "style": prep.style, "size": prep.size,
                     "sizes": list(SHIPPED_SIZES[prep.size]), "members": len(mem), "nonmembers": len(non),
                     "calibration": calibration is not None}
    (folder / MANIFEST).write_text(json.dumps(dict(sorted(manifest.items())), indent=1, sort_keys=True) + "\n")
    return path


def from_manifest(entry: dict) -> DefaultPreparation:
    return DefaultPreparation(entry["method"], tuple(sorted(entry["params"].items())), entry["size"], entry["style"])


__all__ = ["SHIPPED_DIR", "SHIPPED_SIZES", "SHIPPED_STYLES", "DefaultPreparation", "default_preparations",
           "key_of", "load_shipped", "load_shipped_calibration", "load_shipped_preparation", "parse_observations",
           "read_shipped_preparation", "write_shipped", "read_manifest", "from_manifest"]
