"""Generated controls: the owner's own documents rewritten by a local model.

The weakest kind of control (``collection.CONTROL_KINDS``), for owners with
no never-published documents and no canaries. A rewrite shares its
original's topic and voice and cannot be in the target (it did not exist),
but it is not exchangeable with the original: a small model's rewrite is
shorter, plainer and more predictable. A member-like score difference between
originals and rewrites can therefore come from the rewriting itself; the
collection result says so, with the size of that bias as BENCHMARKS.md
(evidence section, ``scripts/bench_generated_controls.py``) measured it: on
two draws of the completion profile, S-RAG's test of non-members against their
own rewrites rejected 1.8% and 12.5% of collections at 5%; members' rewrites
scored like non-members (0.24-0.27 against 0.83-0.86 for their originals), so
the rewrites themselves do not carry the membership.
"""
from __future__ import annotations

from typing import Callable, Sequence

from audit_core.documents import Document

REWRITE_MODEL = "smollm2-135m-instruct"
REWRITE_SYSTEM = "You rewrite texts in different words. You answer with the rewritten text only."
REWRITE_USER = ("Rewrite the following text in your own words. Keep the same person, facts and length, "
                "but change the wording of every sentence.\n\nText:\n{text}")


def rewrite(text: str, lm, max_new_tokens: int | None = None) -> str:
    """One greedy rewrite of ``text`` (about as many tokens as the original, at most 256)."""
    from audit_core.scoring import encode_prompt, generate_ids, render_chat

    messages = [{"role": "system", "content": REWRITE_SYSTEM},
                {"role": "user", "content": REWRITE_USER.format(text=text)}]
    n = max_new_tokens or min(256, int(len(text.split()) * 1.6) + 16)
    return generate_ids(lm, encode_prompt(lm, render_chat(lm, messages)), max_new_tokens=n, temperature=0.0,
                        logprobs=False).text.strip()


def generate_controls(docs: Sequence[Document], lm=None,
                      progress: Callable[[int, int], None] | None = None) -> list[Document]:
    """A rewritten control per document (``control-<id>``); empty rewrites are dropped.

    ``progress(done, total)``: 0 of the documents before the rewriting model loads (a minute or more the
    first time), then each document rewritten."""
    from audit_core.models import load_causal_lm

    if progress:
        progress(0, len(docs))
    lm = lm or load_causal_lm(REWRITE_MODEL)
    out = []
    for i, d in enumerate(docs):
        text = rewrite(d.text, lm)
        if text:
            out.append(Document(f"control-{d.id}", text))
        if progress:
            progress(i + 1, len(docs))
    return out
