"""Design study, shadow only: S-RAG's probes on a chat model asked for the next word alone.

A chat model given S-RAG's "complete the paragraph" probe restates the text
before it goes on, so most of its answers never reach the probed word within
the token budget (BENCHMARKS.md, "S-RAG on chat targets"). This asks instead
for the one next word ("What is the next word? Reply with that word only"):
if the model complies, the probed word is the answer's first token and S-RAG
reads its probability there as on a completion model, with no restatement to
align. The question is whether SmolLM2-135M-Instruct complies and whether the
reading separates members from non-members.

The shadow RAG of ``shadow.prepare`` in miniature (``srag_prefill_study.miniature_chat_shadow``):
the auxiliary corpus (at most 120 words per document) shuffled with ``--seed``,
half in the knowledge base, chat template with the documents in the system
prompt, k = 4, retrieval on the user turn. Each document's S-RAG probes
(``segment``) are sent greedy, ``--tokens`` tokens with 20 alternatives, and
read two ways: ``first`` -- S-RAG's reading at the first token
(``observe_word``); ``any`` -- the largest such reading over the answer's first
``--tokens`` positions (credit for "The next word is X"). A document's score is
the mean over its probes. Prints each reading's AUC with its bootstrap
interval and how often the answer's first word was the probed word.

    .venv/bin/python scripts/srag_next_word_study.py --n 20
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from audit_core.metrics import bootstrap_auc_ci, roc_auc  # noqa: E402
from audit_core.methods.srag import SragConfig, normalise_word, observe_word, segment  # noqa: E402
from audit_core.target.base import ChatRequest, Completion  # noqa: E402
from srag_prefill_study import miniature_chat_shadow  # noqa: E402  (this folder: the studies' one shadow)

PROMPTS = {
    "next_word": ('Here is the start of a passage from the context:\n"{prefix}"\n'
                  "What is the next word of the passage? Reply with that one word only."),
    "next_words": ('Here is the start of a passage from the context:\n"{prefix}"\n'
                   "Write the next few words of the passage, exactly as in the context, and nothing else."),
}


def best_reading(word: str, comp: Completion) -> float:
    """The largest first-token reading of ``word`` at any position of the answer."""
    best = 0.0
    for i in range(len(comp.tokens)):
        shifted = dataclasses.replace(comp, tokens=comp.tokens[i:])
        best = max(best, observe_word(word, shifted, None).prob or 0.0)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20, help="shadow members and as many non-members")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=6, help="tokens generated per probe")
    ap.add_argument("--prompts", default="next_word", help="comma-separated: " + ",".join(PROMPTS))
    ap.add_argument("--out", default=None, help="write the per-document readings here (JSON)")
    args = ap.parse_args(argv)

    rag, kb, outside = miniature_chat_shadow(args.seed)
    cfg = SragConfig()
    out = {}
    for name in args.prompts.split(","):
        rows, t0, firsts, n_probes = [], time.time(), 0, 0
        for label, group in ((1, kb[: args.n]), (0, outside[: args.n])):
            for d in group:
                probes = segment(d.text, cfg)
                reqs = [ChatRequest.chat([{"role": "user", "content": PROMPTS[name].format(prefix=p.prefix)}],
                                         max_tokens=args.tokens, temperature=0.0, logprobs=True, top_logprobs=20)
                        for p in probes]
                comps = rag.complete_many(reqs)
                first = [observe_word(p.word, c, None).prob or 0.0 for p, c in zip(probes, comps)]
                anyp = [best_reading(p.word, c) for p, c in zip(probes, comps)]
                said = [normalise_word((c.text.split() or [""])[0]) == normalise_word(p.word)
                        for p, c in zip(probes, comps)]
                firsts += sum(said)
                n_probes += len(probes)
                rows.append({"id": d.id, "member": label, "first": float(np.mean(first)),
                             "any": float(np.mean(anyp)), "said": sum(said), "probes": len(probes),
                             "answers": [c.text for c in comps[:2]]})
                r = rows[-1]
                print(f"{name} {label} first {r['first']:.3f} any {r['any']:.3f} said {r['said']}/{r['probes']} "
                      f"| {r['answers'][0][:60]!r}", flush=True)
        y = [r["member"] for r in rows]
        for reading in ("first", "any", "said"):
            s = [r[reading] for r in rows]
            lo, hi = bootstrap_auc_ci(y, s)
            print(f"{name} {reading}: AUC {roc_auc(y, s):.3f} [{lo:.2f}, {hi:.2f}]")
        print(f"{name}: answer's first word is the probed word in {firsts} of {n_probes} probes; "
              f"{time.time() - t0:.0f} s", flush=True)
        out[name] = rows
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
