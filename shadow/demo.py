"""The built-in demo target: the reference RAG over the shipped demo knowledge base.

It needs no key and runs in-process; the app and the CLI offer it so a new
user can try an audit (with assets/sample_documents.csv) before pointing the
tool at a real endpoint.
"""
from __future__ import annotations

import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO_KB = ROOT / "assets" / "demo_kb.jsonl"
SAMPLE_CSV = ROOT / "assets" / "sample_documents.csv"
#: the demo target uses another model family than the auditor's shadow (SmolLM2),
#: as a real auditor faces
DEMO_GENERATOR = "gemma-3-270m"
#: how MBA asks the demo target (and the benchmark's reference target, the same
#: kind of system) for hidden words: this small completion-style model copies a
#: cloze text back instead of filling it in, but continues text it retrieved
#: (MbaConfig.elicitation; BENCHMARKS.md, "MBA with small target models")
DEMO_MBA_ELICITATION = "continue"
#: how the demo target answers: a base model continuing plain text (no chat template)
DEMO_STYLE = "completion"


def mba_elicitation_for(is_demo: bool) -> str:
    """MBA's default elicitation for a target: the demo's, or the paper's fill-in for an endpoint."""
    from audit_core.methods.mba_masks import MbaConfig

    return DEMO_MBA_ELICITATION if is_demo else MbaConfig().elicitation


@functools.lru_cache(maxsize=4)
def demo_target(defense: str | None = None, generator: str = DEMO_GENERATOR):
    """A RagSystem over assets/demo_kb.jsonl (cached per process)."""
    from shadow.corpus import load_corpus
    from shadow.rag import RagConfig, RagSystem

    rag = RagSystem(load_corpus(DEMO_KB), RagConfig(generator=generator, defense=defense,
                                                    prompt_style=DEMO_STYLE if generator == DEMO_GENERATOR else None))
    return rag
