"""Design study, shadow only: S-RAG's probes with the document's prefix pre-filled as the answer's start.

Many chat endpoints (Anthropic's API, Ollama, llama.cpp's server, vLLM with
``continue_final_message``) let a request end with a partial assistant message
that the model continues instead of starting a new turn. If a chat RAG passed
that through, S-RAG could read the next word exactly as on a completion model:
the user turn carries the usual probe (so retrieval sees the prefix), the
assistant turn is the prefix itself, and the first generated token is the
probed word's position. OpenAI's own API and our reference ``chat`` profile do
not honour such a turn, so this script asks the question before any code is
built for it: with the packaged chat model (SmolLM2-135M-Instruct) and the
MedQuAD shadow, do the pre-filled answers separate members from non-members?

The shadow RAG of ``shadow.prepare`` in miniature: the auxiliary corpus (at most
120 words per document) shuffled with ``--seed``, the first half in the knowledge
base, chat template, documents in the system prompt, k = 4. Each document's
S-RAG probes (``segment``) are sent once, greedy, ``--tokens`` tokens with 20
alternatives per token, and read two ways:

* ``probability``: S-RAG's own reading (``observe_word`` at the first token), the
  document's score the mean over its probes;
* ``greedy``: how many of the next six words of the document the greedy
  continuation reproduces in order, as a share, averaged over the probes
  (what a text-only target would allow).

Prints per document the readings and whether retrieval put the document in
context, then each reading's AUC with its bootstrap interval.

    .venv/bin/python scripts/srag_prefill_study.py --n 20
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from audit_core.metrics import bootstrap_auc_ci, roc_auc  # noqa: E402
from audit_core.methods.srag import SRAG_PROMPT, SragConfig, normalise_word, observe_word, segment  # noqa: E402
from audit_core.scoring import encode_prompt, generate_ids  # noqa: E402
from audit_core.target.base import ChatRequest  # noqa: E402
from shadow.corpus import filter_by_words, load_corpus  # noqa: E402
from shadow.rag import RagConfig, RagSystem  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: words of the document after the probed position the greedy reading compares
GREEDY_WORDS = 6


def prefilled_prompt(rag: RagSystem, request: ChatRequest):
    """The chat template with the request's last (assistant) message left open, as a prefill endpoint renders
    it, and the retrieval record of the request's user turn."""
    record = rag.retrieve_records([request.messages[0][1]])[0]
    messages = rag.build_messages(request, record)
    return rag.lm.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False,
                                                continue_final_message=True), record


def greedy_share(answer: str, remainder: str, n: int = GREEDY_WORDS) -> float:
    """Share of the remainder's first n words the answer reproduces in order from its start."""
    truth = [normalise_word(w) for w in remainder.split()[:n]]
    got = [normalise_word(w) for w in answer.split()[:n]]
    k = 0
    for a, b in zip(truth, got):
        if a != b:
            break
        k += 1
    return k / n


def miniature_chat_shadow(seed: int, style: str = "chat"):
    """The shadow RAG of these studies (chat style unless told): (rag, members in its knowledge base, documents outside it)."""
    docs = filter_by_words(load_corpus(ROOT / "assets" / "aux_medquad.jsonl"), max_words=120)
    random.Random(seed).shuffle(docs)
    kb, outside = docs[: len(docs) // 2], docs[len(docs) // 2:]
    return RagSystem(kb, RagConfig(generator="smollm2-135m-instruct", prompt_style=style)), kb, outside


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20, help="shadow members and as many non-members")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=12, help="tokens generated per probe")
    ap.add_argument("--out", default=None, help="write the per-document readings here (JSON)")
    args = ap.parse_args(argv)

    rag, kb, outside = miniature_chat_shadow(args.seed)
    cfg = SragConfig()
    rows, t0 = [], time.time()
    for label, group in ((1, kb[: args.n]), (0, outside[: args.n])):
        for d in group:
            probs, shares, hits = [], [], 0
            for p in segment(d.text, cfg):
                req = ChatRequest.chat([{"role": "user", "content": SRAG_PROMPT.format(prefix=p.prefix)},
                                        {"role": "assistant", "content": p.prefix}],
                                       max_tokens=args.tokens, logprobs=True, top_logprobs=20)
                prompt, record = prefilled_prompt(rag, req)
                hits += d.id in record.doc_ids
                gen = generate_ids(rag.lm, encode_prompt(rag.lm, prompt, "chat"), max_new_tokens=args.tokens,
                                   temperature=0.0, top_logprobs=20)
                comp = rag._to_completion(req, gen, record)  # the in-process target's own answer shape
                probs.append(observe_word(p.word, comp, None).prob or 0.0)
                shares.append(greedy_share(gen.text, d.text[len(p.prefix):]))
            rows.append({"id": d.id, "member": label, "probability": float(np.mean(probs)),
                         "greedy": float(np.mean(shares)), "probes": len(probs), "retrieved": hits})
            r = rows[-1]
            print(f"{label} {r['probability']:.3f} {r['greedy']:.3f} retrieved {hits}/{len(probs)}", flush=True)
    y = [r["member"] for r in rows]
    for reading in ("probability", "greedy"):
        s = [r[reading] for r in rows]
        lo, hi = bootstrap_auc_ci(y, s)
        print(f"{reading}: AUC {roc_auc(y, s):.3f} [{lo:.2f}, {hi:.2f}]")
    members = [r for r in rows if r["member"]]
    print(f"members in context: {sum(r['retrieved'] for r in members)} of {sum(r['probes'] for r in members)} probes; "
          f"{time.time() - t0:.0f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
