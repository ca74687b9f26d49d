"""End to end through ``run_audit`` and the verdict rules: a completion target that refuses one document and
continues another. With the continuation check the refused document is inconclusive with the reason; without
it, its one-token probes read probability 0 for every word and S-RAG cleared it ("not found") -- the silent
clearing the check exists to prevent. Model-free: fixed probes, a shadow of stored one-token readings."""
from __future__ import annotations

import math

import numpy as np
import pytest

from audit_core.audit import AuditConfig, run_audit
from audit_core.documents import Document
from audit_core.methods import srag
from audit_core.methods.base import Observation
from audit_core.target.base import Capabilities, ChatRequest, Completion, Target, TokenLogprob, Usage
from audit_core.verdict import VerdictConfig

WORDS = ["ibuprofen", "stretching", "spreads", "thigh", "tingling"]
TEXT = ("Note {n}: I have had a dull ache in my lower back for three weeks, mostly after long drives. My doctor suggested "
        "ibuprofen and gentle stretching, but the pain now spreads into my left thigh and I feel tingling in my "
        "toes at night, and rest did not help.")
CAPS = Capabilities(True, True, 5, style="completion")


def _probes(text: str, cfg=None, lm=None) -> list[srag.Probe]:
    return [srag.Probe(w, len(text[:text.index(" " + w)].split()), text[:text.index(" " + w)], 0.01) for w in WORDS]


def _reading(word: str, p: float) -> Completion:
    """A one-token reply: the word with probability ``p``, or another token."""
    tok = f" {word}" if p > 0 else " the"
    return Completion(tok, [TokenLogprob(tok, math.log(max(p, 0.5)), [(tok, math.log(max(p, 0.5)))])], Usage(50, 1))


def _shadow() -> tuple[list[Observation], list[Observation]]:
    """40 + 40 shadow documents: members read their words with high probability, non-members mostly not."""
    rng = np.random.default_rng(0)
    out: dict[int, list[Observation]] = {1: [], 0: []}
    for label in (1, 0):
        for i in range(40):
            o = Observation("srag", f"s{label}{i}", data={"probes": [
                {"word": w, "word_index": 0, "prefix": "x", "proxy_prob": 0.01} for w in WORDS]})
            for w in WORDS:
                hit = rng.random() < (0.85 if label else 0.2)
                o.add({}, _reading(w, float(rng.uniform(0.6, 0.99)) if hit else 0.0))
            out[label].append(o)
    return out[1], out[0]


class _CompletionTarget(Target):
    """Continues every document's text, except ``refused``, whose every reply is a refusal."""

    name = "http://fake.local/v1 completion"

    def __init__(self, refused: str) -> None:
        super().__init__()
        self.refused = refused

    def complete(self, request: ChatRequest) -> Completion:
        refuse = self.refused in request.messages[-1][1]
        if request.max_tokens == 1:
            tok = " I" if refuse else " the"  # neither starts the probed word: probability 0 either way
            return Completion(tok, [TokenLogprob(tok, -0.2, [(tok, -0.2)])], Usage(50, 1))
        return Completion("I'm sorry, but I can't help with that." if refuse else " and the pain is worse.",
                          None, Usage(50, 8))


def _prepare(methods, shadow, progress=None):
    mem, non = _shadow()

    class Prep:
        calibrations = {m.name: m.prepare(mem, non) for m in methods}

    return Prep()


@pytest.mark.parametrize("check_tokens", [8, 0])
def test_a_refused_document_is_inconclusive_never_not_found(check_tokens, monkeypatch):
    monkeypatch.setattr(srag, "segment", _probes)
    docs = [Document("refused", TEXT.format(n="two")), Document("continued", TEXT.format(n="three"))]
    cfg = AuditConfig(methods=["srag"], verdict=VerdictConfig(retrieval_as_sent=True),
                      method_params={"srag": {"scorer": "mean_probability", "continuation_check_tokens": check_tokens}})
    result = run_audit(docs, _CompletionTarget(refused="Note two"), cfg, _prepare, capabilities=CAPS)
    verdicts = {v.doc_id: v for v in result.verdicts}
    assert verdicts["continued"].verdict == "not found"  # the check costs nothing where the target continues
    if check_tokens:
        assert verdicts["refused"].verdict == "inconclusive"
        assert "cannot confirm that the target continues" in verdicts["refused"].reason
        assert "a refusal" in result.results["refused"]["srag"].reason
    else:  # what the check prevents: every word read as probability 0, and the document cleared
        assert verdicts["refused"].verdict == "not found"
