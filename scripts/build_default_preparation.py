"""Build the shipped default shadow preparation (assets/preparation/, issue 18).

Probes the shadow RAG built from the shipped auxiliary corpus
(assets/aux_medquad.jsonl) with every method's default configuration, for the
default target styles and audit sizes (shadow/shipped.py), exactly as
``shadow.prepare.prepare_shadow`` does on a user's machine, and stores the raw
observations as gzip JSON named by their preparation key, with the
calibration fitted on them as data (out-of-fold scores, threshold; what
``shadow.prepare`` caches). Nothing is pickled: the app trains the one
classifier it scores with from these files. A shipped file without a
calibration gets one without probing again.

    nice -n 10 .venv/bin/python scripts/build_default_preparation.py            # everything
    nice -n 10 .venv/bin/python scripts/build_default_preparation.py --sizes quick --styles completion
    nice -n 10 .venv/bin/python scripts/build_default_preparation.py --methods srag --recalibrate  # no probing

Probe results are cached under ``--work`` (by key) so that an interrupted
build resumes where it stopped. Shipped files whose key no longer matches the
current code (a method's probes or version changed), or that are no longer a
default configuration, are removed.
"""
from __future__ import annotations

import argparse
import sys
import time
from itertools import groupby
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _progress():
    """A done / total line with the time left from the rate so far, per stage (``audit_core.progress``)."""
    from audit_core.progress import ProgressClock

    clock = ProgressClock()

    def show(stage: str, done: int, total: int) -> None:
        clock.update(stage, done, total)
        print(f"  {stage}: {clock.describe(stage)}", flush=True)

    return show


def remove_stale(folder: Path, corpus_hash: str, defaults: set[str] | None = None) -> list[str]:
    """Drop shipped files whose manifest entry no longer gives their key with the current code.

    With ``defaults`` (the keys of every configuration shipped today), also drop
    entries that are none of them: a default that changed (Verbatim's probes for
    a chat target) leaves its old file consistent with its old parameters, but no
    audit asks for it any more.
    """
    import json

    from shadow.shipped import MANIFEST, from_manifest, key_of, read_manifest, shipped_file

    manifest = read_manifest(folder)
    stale = []
    for key, entry in list(manifest.items()):
        try:
            current = key_of(from_manifest(entry), corpus_hash)
        except Exception:  # a method or parameter that no longer exists
            current = None
        if current != key or (defaults is not None and key not in defaults):
            stale.append(key)
            shipped_file(key, folder).unlink(missing_ok=True)
            del manifest[key]
    if stale:
        (folder / MANIFEST).write_text(json.dumps(dict(sorted(manifest.items())), indent=1, sort_keys=True) + "\n")
    return stale


def _unique_names(group: list) -> list[list]:
    """Split a group so that no call prepares one method twice (prepare_shadow keys its results by name)."""
    batches: list[list] = []
    for p in group:
        for b in batches:
            if all(q.method != p.method for q in b):
                b.append(p)
                break
        else:
            batches.append([p])
    return batches


def _calibration(method, mem, non) -> dict:
    """The calibration shipped beside the observations (data only; shadow.prepare.saved_calibration)."""
    from shadow.prepare import saved_calibration

    return saved_calibration(method.prepare(mem, non), mem, non)


def add_calibrations(folder: Path, todo: list, chash: str, again: bool = False) -> None:
    """Fit and add the calibration to shipped files that lack one, or with ``again`` to every one (no probing)."""
    from shadow.shipped import key_of, load_shipped_preparation, write_shipped

    for p in todo:
        key = key_of(p, chash)
        shipped = load_shipped_preparation(key, folder)
        if shipped is None or (shipped[2] is not None and not again):
            continue
        t0 = time.time()
        mem, non, _ = shipped
        write_shipped(key, p, mem, non, folder, calibration=_calibration(p.create_method(), mem, non))
        print(f"  calibrated {key} ({p.label()}, {time.time() - t0:.0f} s)", flush=True)


def main(argv: list[str] | None = None) -> int:
    from audit_core.models import cache_dir
    from shadow.corpus import corpus_hash
    from shadow.prepare import prepare_shadow
    from shadow.shipped import (SHIPPED_DIR, SHIPPED_SIZES, SHIPPED_STYLES, default_preparations, key_of,
                                shipped_file, write_shipped)

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(SHIPPED_SIZES), help="audit sizes (default: %(default)s)")
    ap.add_argument("--styles", default=",".join(SHIPPED_STYLES), help="target styles (default: %(default)s)")
    ap.add_argument("--methods", default="", help="only these methods (comma-separated; default: all)")
    ap.add_argument("--out", type=Path, default=SHIPPED_DIR, help="where the files go (default: %(default)s)")
    ap.add_argument("--work", type=Path, default=None,
                    help="probe cache, to resume an interrupted build (default: <cache dir>/build-preparation)")
    ap.add_argument("--force", action="store_true", help="probe again even when a file for the key exists")
    ap.add_argument("--recalibrate", action="store_true",
                    help="only fit the calibration of the chosen shipped files again from their observations "
                         "(nothing is probed, no missing file is built), e.g. after a change in how a method scores")
    args = ap.parse_args(argv)

    sizes = [s for s in args.sizes.split(",") if s]
    styles = [s for s in args.styles.split(",") if s]
    unknown = [s for s in sizes if s not in SHIPPED_SIZES] + [s for s in styles if s not in SHIPPED_STYLES]
    if unknown:
        ap.error(f"unknown size or style: {', '.join(unknown)}")
    methods = tuple(m for m in args.methods.split(",") if m) or None
    work = args.work or cache_dir() / "build-preparation"

    todo = default_preparations(sizes, styles, methods)
    chash = corpus_hash(todo[0].shadow_config().corpus_docs()) if todo else ""
    for key in remove_stale(args.out, chash, {key_of(p, chash) for p in default_preparations()}):
        print(f"removed stale {key} (its configuration now has another key, or is no longer a default)")
    t_all = time.time()
    add_calibrations(args.out, todo, chash, again=args.recalibrate)
    if args.recalibrate:  # calibrations only: nothing is probed
        print(f"done in {time.time() - t_all:.0f} s")
        return 0
    for (size, style), group in groupby(todo, key=lambda p: (p.size, p.style)):
        group = [p for p in group if args.force or not shipped_file(key_of(p, chash), args.out).exists()]
        if not group:
            print(f"{size} / {style}: already shipped")
            continue
        print(f"{size} / {style}: {', '.join(p.label() for p in group)}", flush=True)
        t0 = time.time()
        for batch in _unique_names(group):
            methods_ = [p.create_method() for p in batch]
            prep = prepare_shadow(methods_, batch[0].shadow_config(), _progress(), root=work, force=args.force,
                                  use_shipped=False, calibrate=False)
            for p, m in zip(batch, methods_):
                obs = prep.observations[m.name]
                path = write_shipped(prep.keys[m.name], p, obs["members"], obs["nonmembers"], args.out,
                                     calibration=_calibration(m, obs["members"], obs["nonmembers"]))
                print(f"  wrote {path.name} ({path.stat().st_size / 1e6:.2f} MB, {p.label()}, "
                      f"{prep.seconds[m.name]:.0f} s)", flush=True)
        print(f"  {size} / {style}: {time.time() - t0:.0f} s", flush=True)
    print(f"done in {time.time() - t_all:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
