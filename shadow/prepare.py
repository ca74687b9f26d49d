"""Shadow preparation: build a shadow RAG from public auxiliary data, probe its
members and non-members exactly as a target is probed, and calibrate every
method on those labelled results (S-RAG section 4.2; DESIGN.md "Data flow").

Everything expensive is cached under ``cache_dir()/shadow/<key>`` where the
key is made of the corpus hash, the models, the shadow's parameters (top-k,
defense, sizes, seed) and each method's name, version and configuration:

* ``observations.json`` -- raw shadow probe results (the expensive part);
* ``calibration.json`` -- thresholds, shadow score lists, validation AUC.

A second preparation with the same key loads them in seconds; S-RAG's
classifier is re-trained from the observations then (no pickle is ever read
from the cache: ``_calibrate``). When the cache has no observations for a
key, the default preparation shipped with the repository (``shadow.shipped``:
assets/preparation/<key>.json.gz, probe results only) supplies them if it has
that key; the calibration is then fitted locally from them, as after probing.
"""
from __future__ import annotations

import functools

import hashlib
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Callable, Sequence

from audit_core.documents import Document
from audit_core.evidence.answers import READER_REVISION
from audit_core.io import private_dir
from audit_core.methods.base import Calibration, MembershipMethod, Observation
from audit_core.models import cache_dir
from audit_core.progress import steps_of

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_AUX_CORPUS = ROOT / "assets" / "aux_medquad.jsonl"

#: progress(stage, done, total)
Progress = Callable[[str, int, int], None]


@dataclass
class ShadowConfig:
    """How the shadow RAG is built and how much of it is probed."""

    aux_corpus: str = str(DEFAULT_AUX_CORPUS)
    #: shadow members / non-members probed for calibration (issue default 200 + 200)
    n_members: int = 200
    n_nonmembers: int = 200
    #: smaller sizes for methods whose probes are long generations (MBA, S2MIA):
    #: a threshold needs fewer examples than a classifier
    n_per_class_generative: int = 60
    seed: int = 0
    generator: str = "smollm2-135m-instruct"
    embedder: str = "all-minilm-l6-v2"
    top_k_docs: int = 4  # retrieved documents per query (paper: k = 4)
    defense: str | None = None  # simulate a defended target on the shadow too
    top_logprobs: int = 20
    #: auxiliary documents longer than this are left out of the shadow (our
    #: choice). Personal documents are short (the benchmark's target corpus,
    #: genmedgpt5k: mean 63 words, median 58); at 120 words the shipped
    #: MedQuAD subset keeps 487 documents (mean 89 words) against 701 (mean
    #: 104) at 160, the shadow's documents are closer to the audited ones, and
    #: every shadow probe, a forward pass over four retrieved documents, is
    #: about 15% shorter (cold 200 + 200 preparation: BENCHMARKS.md)
    max_doc_words: int | None = 120
    #: how the shadow's generator sees a request: "completion" (it continues the
    #: user's text) mimics a target that follows S-RAG's "complete the paragraph"
    #: instruction; "chat" (its chat template, documents in the system prompt)
    #: mirrors an instruct-model target, which often restates the paragraph
    #: before going on: S-RAG then reads its answers in chat style too
    #: (SragConfig.style), and a mismatch is noted in the calibration ("mirror")
    prompt_style: str = "completion"
    #: "shared": the probes of one shadow document share one (consensus)
    #: retrieval and one teacher-forced forward pass; "per_request" retrieves
    #: per probe as a served target does (several passes per document). See
    #: RagConfig.probe_retrieval; the shared mode is what makes 200 + 200
    #: shadow documents fit in minutes on a laptop CPU (BENCHMARKS.md).
    probe_retrieval: str = "shared"

    def corpus_docs(self) -> list[Document]:
        from shadow.corpus import filter_by_words, load_corpus

        return filter_by_words(load_corpus(self.aux_corpus), max_words=self.max_doc_words)


@dataclass
class ShadowPreparation:
    calibrations: dict[str, Calibration]
    observations: dict[str, dict[str, list[Observation]]]
    keys: dict[str, str]
    seconds: dict[str, float] = field(default_factory=dict)
    from_cache: dict[str, bool] = field(default_factory=dict)


def _config_of(method: MembershipMethod) -> dict:
    cfg = getattr(method, "config", None)
    if cfg is None:
        return {}
    d = asdict(cfg) if is_dataclass(cfg) else dict(vars(cfg))
    d.pop("model_dir", None)  # where to write, not what to compute
    if is_dataclass(cfg):  # how the answers are scored, not what is sent: the same observations serve
        for f in fields(cfg):
            # a field that shapes only chat-style probes says nothing about completion-style ones; a field
            # added later, at its default, sends the probes made before it existed (their keys stand)
            # an audit-only field changes what an audited document is sent, never the shadow's probes
            if (f.metadata.get("scoring_only") or f.metadata.get("audit_only")
                    or (f.metadata.get("chat_only") and d.get("style") != "chat")
                    or (f.metadata.get("added_later") and d.get(f.name) == f.default)):
                d.pop(f.name, None)
    if isinstance(d.get("decoy_questions"), str):  # what the questions say, not where the file lies
        d["decoy_questions"] = _file_digest(d["decoy_questions"])
    return d


def _file_digest(path: str) -> str:
    """``sha256:<hex>`` of a file a configuration names, so that a key follows its contents (two projects'
    files of one name, or one file edited in place, are two shadows); the path itself where it is unreadable."""
    try:
        return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return path


def preparation_key(method: MembershipMethod, cfg: ShadowConfig, corpus_hash: str) -> str:
    blob = json.dumps(
        {
            "corpus": corpus_hash,
            "shadow": {k: v for k, v in asdict(cfg).items() if k != "aux_corpus"},
            "method": method.name,
            "version": method.version,
            "method_config": _config_of(method),
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def corpus_allows(cfg: ShadowConfig) -> tuple[int, int]:
    """The most shadow members and non-members the auxiliary corpus gives: half its texts go into the shadow's
    knowledge base, the rest stay out (``prepare_shadow``), and a size asked for beyond that is cut to it."""
    path = Path(cfg.aux_corpus)
    stat = path.stat()  # the file's identity: an edit or a new upload is read again
    n = _usable_texts(str(path), stat.st_mtime_ns, stat.st_size, cfg.max_doc_words)
    return n // 2, n - n // 2


@functools.lru_cache(maxsize=8)
def _usable_texts(path: str, mtime_ns: int, size: int, max_words: int) -> int:
    """How many texts of the corpus the shadow may use; the Run tab asks on every rerun of the page."""
    return len(ShadowConfig(aux_corpus=path, max_doc_words=max_words).corpus_docs())


def shadow_sizes(name: str, cfg: ShadowConfig) -> tuple[int, int]:
    """How many shadow members and non-members method ``name`` is prepared on.

    The full ``n_members`` + ``n_nonmembers`` where its registry entry says so
    (``MethodSpec.full_size_shadow``: probes of one or a few answer tokens);
    ``n_per_class_generative`` per class for the methods that decode whole answers
    (and for a method outside the registry, as a test's).
    """
    from audit_core.methods import METHODS

    spec = METHODS.get(name)
    if spec is not None and spec.full_size_shadow:
        return cfg.n_members, cfg.n_nonmembers
    n = cfg.n_per_class_generative
    return min(n, cfg.n_members), min(n, cfg.n_nonmembers)


#: the progress stage of embedding the shadow's knowledge base
BUILD_STAGE = "building the shadow RAG"


def build_shadow_rag(cfg: ShadowConfig, kb: Sequence[Document], progress: Progress | None = None):
    """The shadow RAG over ``kb``; ``progress`` sees "building the shadow RAG" as its documents are embedded
    (minutes the first time on 2 cores; a collection built before is reused at once)."""
    from shadow.rag import RagConfig, RagSystem

    rc = RagConfig(generator=cfg.generator, embedder=cfg.embedder, top_k=cfg.top_k_docs, defense=cfg.defense,
                   prompt_style=cfg.prompt_style, probe_retrieval=cfg.probe_retrieval)
    done = [0]

    def embedded(n: int) -> None:
        done[0] += n
        if progress:
            progress(BUILD_STAGE, done[0], len(kb))

    if progress:
        progress(BUILD_STAGE, 0, len(kb))
    return RagSystem(list(kb), rc, embedded)


def prepare_shadow(
    methods: Sequence[MembershipMethod],
    cfg: ShadowConfig | None = None,
    progress: Progress | None = None,
    root: Path | None = None,
    force: bool = False,
    use_shipped: bool = True,
    calibrate: bool = True,
) -> ShadowPreparation:
    """Probe the shadow with each method (or load cached results) and calibrate.

    Observations come from the cache, else from the shipped default
    preparation (``shadow.shipped``, same key; ``use_shipped=False`` ignores
    it), else from probing. ``calibrate=False`` only gathers observations
    (the build script of the shipped preparation).
    """
    from audit_core.methods import method_label
    from shadow.corpus import corpus_hash, split_members
    from shadow.shipped import read_shipped_preparation

    cfg = cfg or ShadowConfig()
    root = Path(root) if root else private_dir(cache_dir() / "shadow")
    docs = cfg.corpus_docs()
    chash = corpus_hash(docs)
    # D_s,i (knowledge base of the shadow) and D_s,o (never in it): seeded halves
    half = len(docs) // 2
    kb, outside = split_members(docs, half, len(docs) - half, cfg.seed)

    prep = ShadowPreparation({}, {}, {})
    rag = None
    #: observations probed in this call, by what determines the probes
    probed: dict[str, tuple[list[Observation], list[Observation]]] = {}
    for method in methods:
        sizes = shadow_sizes(method.name, cfg)
        probe_key = json.dumps([method.probe_scope, method.version, _config_of(method), sizes],
                               sort_keys=True, default=str)
        key = preparation_key(method, cfg, chash)
        prep.keys[method.name] = key
        folder = root / key
        t0 = time.time()
        if force and folder.exists():
            shutil.rmtree(folder)
        obs_file = folder / "observations.json"
        n_m, n_n = shadow_sizes(method.name, cfg)
        expected = min(n_m, len(kb)) + min(n_n, len(outside))
        #: the digest of the observations read as written (``observations_digest``), where they were
        digest: str | None = None
        # reading a large preparation is mostly parsing it: a stage counted in observations, not a silent wait
        cached_reader = _reading(progress, f"{method_label(method.name)}: reading the cached shadow observations")
        shipped_reader = _reading(progress, shipped_stage := f"{method_label(method.name)}: reading the shipped "
                                                             "shadow observations", extra=1)
        raw = _read_observations(obs_file, cached_reader, expected)
        cached = (None if raw is None else
                  _cached_observations(raw, obs_file, min(n_m, len(kb)), min(n_n, len(outside))))
        if cached is None and cached_reader is not None:
            cached_reader.close()  # a file that could not be read leaves no bar standing half-way
        shipped = (read_shipped_preparation(key, progress=shipped_reader, total=expected)
                   if cached is None and use_shipped and not force else None)
        if shipped is None and shipped_reader is not None:
            shipped_reader.close()  # a file for another key was parsed, then refused
        if cached is not None:
            mem, non = cached
            digest = _digest_as_written(raw["members"], raw["nonmembers"])
            prep.from_cache[method.name] = True
        elif shipped is not None:
            raw_mem, raw_non, shipped_cal = shipped
            mem = [Observation.from_json(o) for o in raw_mem]
            non = [Observation.from_json(o) for o in raw_non]
            private_dir(folder)
            digest = _digest_as_written(raw_mem, raw_non)
            if digest is not None:  # as written: serialising the Observations again would give the same bytes
                _write_json(obs_file, {"members": raw_mem, "nonmembers": raw_non})
            else:
                _write_observations(obs_file, mem, non)
            if shipped_cal is not None and calibrate:
                # the fit shipped with them (data; restored only if its digest names these observations)
                _write_json(folder / "calibration.json", shipped_cal)
            if progress:  # the last step: the cache written
                progress(shipped_stage, len(raw_mem) + len(raw_non) + 1, len(raw_mem) + len(raw_non) + 1)
            prep.from_cache[method.name] = True
        elif probe_key in probed:  # a sibling method sent the very same probes
            mem, non = probed[probe_key]
            private_dir(folder)
            _write_observations(obs_file, mem, non)
            prep.from_cache[method.name] = False
        else:
            if rag is None:
                rag = build_shadow_rag(cfg, kb, progress)
            import random

            rnd = random.Random(cfg.seed + 1)
            mem_docs = rnd.sample(list(kb), min(n_m, len(kb)))
            non_docs = rnd.sample(list(outside), min(n_n, len(outside)))
            stage = f"{method_label(method.name)}: probing the shadow"
            total = len(mem_docs) + len(non_docs)
            done = [0]

            def tick(n: int = 1) -> None:
                done[0] += n
                if progress:
                    progress(stage, done[0], total)

            def stage_of(offset: int):
                """A method's own stage (MBA's mask planning) counted on across both halves of the shadow:
                reported from 0 again for the non-members, a CLI bar closed at the members' total said nothing
                more, and the app's time left ran from the members' rate."""
                if progress is None:
                    return None
                return lambda name, done, _total: progress(name, offset + done, total)

            # probes that draw on the documents audited together draw on the shadow's, never the owner's
            with method.probing_collection([d.text for d in [*mem_docs, *non_docs]]):
                mem = _probe(method, mem_docs, rag, cfg, tick, stage_of(0))
                non = _probe(method, non_docs, rag, cfg, tick, stage_of(len(mem_docs)))
            private_dir(folder)
            _write_observations(obs_file, mem, non)
            prep.from_cache[method.name] = False
        probed[probe_key] = (mem, non)
        prep.observations[method.name] = {"members": mem, "nonmembers": non}
        if not calibrate:
            prep.seconds[method.name] = time.time() - t0
            continue
        cal_stage = f"{method_label(method.name)}: calibrating"
        finished = [False]

        def cal_step(done: int, total: int) -> None:
            finished[0] = done >= total
            if progress:
                progress(cal_stage, done, total)

        cal_step(0, 1)
        # a method that fits several models (S-RAG: a classifier per fold, then the final one) counts them
        with steps_of(cal_step):
            prep.calibrations[method.name] = _calibrate(method, mem, non, folder, digest)
        note = mirror_note(method, cfg)
        if note is not None:
            prep.calibrations[method.name].params["mirror"] = note
        if not finished[0]:
            cal_step(1, 1)
        prep.seconds[method.name] = time.time() - t0
    return prep


class _ReadingStage:
    """``progress`` of one reading stage: (done, total) in observations parsed, and ``extra`` steps after them
    that the caller reports (writing them to the cache). ``close`` finishes a stage whose file was refused
    after some of it was read, so that no bar stays half-way while the shadow is prepared another way."""

    def __init__(self, progress: Progress, stage: str, extra: int) -> None:
        self.progress, self.stage, self.extra = progress, stage, extra
        self.total: int | None = None

    def __call__(self, done: int, total: int) -> None:
        self.total = total + self.extra
        self.progress(self.stage, done, self.total)

    def close(self) -> None:
        if self.total is not None:
            self.progress(self.stage, self.total, self.total)


def _reading(progress: Progress | None, stage: str, extra: int = 0) -> _ReadingStage | None:
    return None if progress is None else _ReadingStage(progress, stage, extra)


def _read_observations(obs_file: Path, step: Callable[[int, int], None] | None = None,
                       expected: int | None = None) -> dict | None:
    """A cached observations file, or None where there is none or it cannot be read (it is then made again
    rather than failing every later audit with this key). ``step(done, total)`` counts the observations
    parsed (``shipped.parse_observations``, ``expected`` of them); nothing is reported where there is no file."""
    from shadow.shipped import parse_observations

    try:
        text = obs_file.read_text()
    except FileNotFoundError:
        return None
    except (OSError, ValueError):  # ValueError: bytes that are not UTF-8 (UnicodeDecodeError)
        log.warning("%s could not be read; the shadow is prepared again", obs_file)
        return None
    try:
        raw = parse_observations(text, step, expected)
    except ValueError:
        log.warning("%s could not be read; the shadow is prepared again", obs_file)
        return None
    return raw if isinstance(raw, dict) and "members" in raw and "nonmembers" in raw else None


def _cached_observations(raw: dict, obs_file: Path, n_members: int,
                         n_nonmembers: int) -> tuple[list[Observation], list[Observation]] | None:
    """The observations of a cached file read as JSON, or None where they are not what this configuration
    probes (the shadow is then prepared again, and the file replaced).

    A member that is no observation (a number, a dict with a field more or less: a file edited, damaged, or
    written by another version) had ended every later audit with this key as an "unexpected failure"; a
    file with fewer observations than the configuration probes (cut down by hand, or left by an older
    version's smaller sizes under the same key) was reused for ever, its calibration fitted on them.
    """
    try:
        mem = [Observation.from_json(o) for o in raw["members"]]
        non = [Observation.from_json(o) for o in raw["nonmembers"]]
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        log.warning("%s could not be read (%s: %s); the shadow is prepared again", obs_file, type(exc).__name__, exc)
        return None
    if (len(mem), len(non)) != (n_members, n_nonmembers):
        log.warning("%s holds %d member and %d non-member observations where %d and %d are probed; the shadow "
                    "is prepared again", obs_file, len(mem), len(non), n_members, n_nonmembers)
        return None
    return mem, non


def _write_observations(obs_file: Path, mem: Sequence[Observation], non: Sequence[Observation]) -> None:
    _write_json(obs_file, {"members": [o.to_json() for o in mem], "nonmembers": [o.to_json() for o in non]})


def _write_json(path: Path, data: dict) -> None:
    """Write atomically: a crash leaves the old file or none, never half of one. Each writer has a temporary
    file of its own, so two processes preparing the same key cannot rename each other's half-written file."""
    from audit_core.io import write_private_atomic

    write_private_atomic(path, json.dumps(data, default=str))


def shadow_top_logprobs(method: MembershipMethod, cfg: ShadowConfig) -> int:
    """Alternatives per token the shadow is asked for: never more than the method's
    configuration allows, which ``audit_core.audit.select_methods`` lowers to the
    target's cap -- the shadow is probed with the target's request parameters, and
    the cap is part of the preparation key (through the method's configuration)."""
    return min(cfg.top_logprobs, getattr(getattr(method, "config", None), "top_logprobs", cfg.top_logprobs))


def _probe(method, docs, rag, cfg: ShadowConfig, tick, progress: Progress | None = None) -> list[Observation]:
    """Probe the shadow with the method's own code; ``progress`` reaches a method that reports a stage of its
    own before its first probe (MBA plans every document's masks with its proxy model first)."""
    import inspect

    from audit_core.methods.base import takes_top_logprobs

    # the shadow cites the passages it puts in context only for a method that reads them: the
    # other methods' stored observations stay as they were
    rag.cite_sources = method.requires_sources
    kw: dict = {}
    if method.requires_logprobs and takes_top_logprobs(method.probe_many):
        kw["top_logprobs"] = shadow_top_logprobs(method, cfg)
    if progress is not None and "stage_progress" in inspect.signature(method.probe_many).parameters:
        kw["stage_progress"] = progress
    return method.probe_many(docs, rag, progress=tick, **kw)


def mirror_note(method: MembershipMethod, cfg: ShadowConfig) -> dict | None:
    """How the shadow mirrors the target for a method that reads the target's answer style.

    S-RAG's readings depend on how the target answers (continuing the text, or a
    chat model restating it first); a shadow answering in another style is
    calibrated on readings unlike the target's. The note goes into the
    calibration's params, so the result JSON says it beside the verdict.
    """
    style = getattr(getattr(method, "config", None), "style", None)
    if style is None:
        return None
    note = {"target_style": style, "shadow_style": cfg.prompt_style, "shadow_generator": cfg.generator,
            "top_logprobs": shadow_top_logprobs(method, cfg), "mirrors": style == cfg.prompt_style}
    if style != cfg.prompt_style:
        note["note"] = (f"the shadow answers in {cfg.prompt_style} style but the target was read in {style} "
                        "style: the calibration may not transfer")
    return note


def _calibrate(method, mem, non, folder: Path, digest: str | None = None) -> Calibration:
    """Calibrate on the shadow's observations and write calibration.json (data only).

    S-RAG's final classifier is trained again from the cached observations on
    every load (seconds: RELIABILITY.md "Security") and kept in memory only;
    its out-of-fold scores and threshold are data in calibration.json, reused
    (``method.restore``) when the file names these very observations by hash.
    Loading a trained predictor from the cache would mean unpickling files
    that whoever can write to the cache directory could replace, i.e. running
    their code; an old ``predictor/`` folder left by earlier versions is
    removed unread. ``digest``: ``observations_digest(mem, non)`` where the caller has it already.
    """
    cal_file = folder / "calibration.json"
    if method.name == "srag":
        legacy = folder / "predictor"
        if legacy.is_symlink() or legacy.is_file():
            legacy.unlink()
        elif legacy.exists():
            shutil.rmtree(legacy)
    digest = digest or observations_digest(mem, non)
    if cal_file.exists():
        try:
            saved = json.loads(cal_file.read_text())
        except (OSError, ValueError):
            saved = None
        if (isinstance(saved, dict) and saved.pop("observations_sha256", None) == digest
                and saved.pop("scoring_revision", "") == method.scoring_revision
                and saved.pop("reader_revision", "") == READER_REVISION):
            try:
                cal = method.restore(saved, mem, non)
            except (TypeError, KeyError, AttributeError, ValueError) as exc:
                # a key it does not know, a value of another type: fitted again (a fault of the fit itself
                # then recurs in ``prepare`` below, and is reported as what it is)
                log.warning("%s could not be read (%s: %s); the calibration is fitted again", cal_file,
                            type(exc).__name__, exc)
            else:
                if cal.to_json() != saved:  # restored in a newer form (S-RAG's scorer chosen since): the file follows
                    _write_json(cal_file, saved_calibration(cal, mem, non, digest))
                return cal
    cal = method.prepare(mem, non)
    _write_json(cal_file, saved_calibration(cal, mem, non, digest))
    return cal


def saved_calibration(cal: Calibration, mem: Sequence[Observation], non: Sequence[Observation],
                      digest: str | None = None) -> dict:
    """What is stored of a calibration (cache and shipped preparation): its data, the digest of its
    observations (``digest`` where the caller has it), the method's ``scoring_revision`` where it has one, and
    the revision of the non-answer reader it was fitted under (``_calibrate`` reuses it only for the same
    observations, method revision and reader; a method that reads no answer text, as Min-k% Prob, is then fitted
    again for nothing, in seconds, which is cheaper than a list of who reads what that could go stale)."""
    from audit_core.methods import METHODS

    spec = METHODS.get(cal.method)
    revision = spec.method_class().scoring_revision if spec is not None else ""
    return {**cal.to_json(), "observations_sha256": digest or observations_digest(mem, non),
            **({"scoring_revision": revision} if revision else {}), "reader_revision": READER_REVISION}


def observations_digest(mem: Sequence[Observation], non: Sequence[Observation]) -> str:
    """SHA-256 of the observations a calibration was fitted on: a saved calibration is reused only for them."""
    return _digest_of([o.to_json() for o in mem], [o.to_json() for o in non])


def _digest_of(mem: Sequence[dict], non: Sequence[dict]) -> str:
    blob = json.dumps([list(mem), list(non)], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


_OBSERVATION_FIELDS = frozenset(f.name for f in fields(Observation))


def _digest_as_written(mem: Sequence, non: Sequence) -> str | None:
    """``observations_digest`` of observations read as written (``Observation.to_json`` dicts), without making
    and serialising the objects again (most of reading a large shadow: S-RAG's chat observations); None where
    a dict is not exactly an observation's fields (an older file: its objects would serialise differently)."""
    if not all(isinstance(o, dict) and o.keys() == _OBSERVATION_FIELDS for o in [*mem, *non]):
        return None
    return _digest_of(mem, non)
