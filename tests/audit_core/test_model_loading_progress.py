"""A model's first load de-quantizes its packaged weights (13-32 s on 2 cores): the tensors are counted as a
stage of their own, where "loading the methods' models" had stood at 0 / 1 with no time left."""
from __future__ import annotations

from audit_core import audit
from audit_core.progress import step, steps_of


def test_the_de_quantizing_loop_counts_its_tensors_while_a_gguf_loads():
    from transformers import modeling_gguf_pytorch_utils as hf_gguf

    from audit_core.models import _gguf_parsed_once

    real = hf_gguf.tqdm
    seen: list[tuple[int, int]] = []
    with steps_of(lambda done, total: seen.append((done, total))):
        with _gguf_parsed_once():
            got = list(hf_gguf.tqdm(iter(["a", "b", "c"]), desc="Converting and de-quantizing GGUF tensors..."))
    assert got == ["a", "b", "c"] and seen == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert hf_gguf.tqdm is real  # put back after the load


def test_loading_the_methods_models_shows_each_first_load_as_its_own_counted_stage(monkeypatch):
    from audit_core import models

    def fake_load(name):  # a first load: two tensors de-quantized
        step(0, 2)
        step(2, 2)

    monkeypatch.setattr(models, "load_causal_lm", fake_load)

    class M:
        def local_models(self):
            return ["smollm2-135m-instruct"]

    seen: list[tuple[str, int, int]] = []
    audit.load_local_models([M()], lambda stage, done, total: seen.append((stage, done, total)))
    stage = audit.dequantizing_stage("smollm2-135m-instruct")
    assert seen == [(audit.LOADING_STAGE, 0, 1), (stage, 0, 2), (stage, 2, 2), (audit.LOADING_STAGE, 1, 1)]


def test_a_first_load_names_its_stage_before_the_slow_parse(tmp_path, monkeypatch):
    """Parsing the tokenizer and metadata takes most of a first load (17 s of 20 for SmolLM2 here) before any
    tensor is counted: the stage is reported at once, so the wait has its name."""
    import transformers

    from audit_core import models

    monkeypatch.setenv("RPA_CACHE_DIR", str(tmp_path / "cache"))
    seen: list[tuple[int, int]] = []
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: seen.append(("tok",)))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: seen.append(("model",)))
    monkeypatch.setattr(models, "_write_cache", lambda model, tok, target: None)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    with steps_of(lambda done, total: seen.append((done, total))):
        models._load_from_gguf("m", gguf)
    assert seen[:2] == [(0, 1), ("tok",)]


def test_a_load_from_the_local_cache_draws_no_console_bar_of_its_own(capfd):
    """transformers drew "Loading weights: 0/272" on every load, even from the de-quantized cache in a tenth of
    a second, and it broke into the CLI's bars ("loading the methods' models" had one drawn inside it)."""
    from transformers.utils import logging as hf_logging

    from audit_core import models

    hf_logging.enable_progress_bar()  # as transformers starts
    models.load_causal_lm.cache_clear()
    try:
        models.load_causal_lm("smollm2-135m-instruct")
        models.load_embedder()
    finally:
        models.load_causal_lm.cache_clear()  # the other tests' loads get a copy of their own again
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "it/s" not in err, err[-500:]
