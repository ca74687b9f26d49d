"""Scoring primitives shared by every method: one-pass token probabilities,
top-k alternatives, generation with logprobs, and word-level views.

Rules that the rest of the code relies on:

* The probability of every token of a text given a context comes from ONE
  forward pass over ``context + text`` (teacher forcing), never from a loop
  over prefixes.
* Context and text are tokenized separately and concatenated, which is
  exactly the token sequence a model sees when it generates ``text`` after
  ``context``.
* Logprobs are those of the model's own (untempered) distribution.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Sequence

import torch

from audit_core.models import LocalLM

#: a "word" for every word-level view in the project: a maximal run of non-space
_WORD_RE = re.compile(r"\S+")


@dataclass
class TokenScore:
    """One token of a scored or generated text."""

    token_id: int
    text: str  # decoded token, with its leading space if any
    start: int  # character span in the scored / generated text
    end: int
    logprob: float | None  # None: nothing to condition on (first token, no BOS), or not asked for (generation)
    top: list[tuple[str, float]] = field(default_factory=list)  # alternatives, best first
    # 1 + number of vocabulary entries more probable than this token (1 = the
    # model's first choice); filled only when scoring with ranks=True
    rank: int | None = None


@dataclass
class WordScore:
    word: str
    start: int
    end: int
    logprob: float | None  # sum over the word's tokens; None when one is unscored
    token_indices: list[int]

    @property
    def prob(self) -> float | None:
        import math

        return None if self.logprob is None else math.exp(self.logprob)


@dataclass
class TextScores:
    text: str
    tokens: list[TokenScore]

    def words(self) -> list[WordScore]:
        """Group tokens into whitespace-delimited words of ``text``.

        A token belongs to the word that contains its first non-space
        character, so " amox" + "icillin" both land in "amoxicillin".
        """
        spans = split_words(self.text)
        out = [WordScore(w, s, e, 0.0, []) for w, s, e in spans]
        wi = 0
        for ti, tok in enumerate(self.tokens):
            pos = tok.start
            while pos < tok.end and pos < len(self.text) and self.text[pos].isspace():
                pos += 1
            while wi < len(spans) and spans[wi][2] <= pos:
                wi += 1
            if wi >= len(spans):
                break
            if spans[wi][1] <= pos < spans[wi][2] or (pos < spans[wi][1] and tok.end > spans[wi][1]):
                w = out[wi]
                w.token_indices.append(ti)
                if tok.logprob is None or w.logprob is None:
                    w.logprob = None
                else:
                    w.logprob += tok.logprob
        for w in out:
            if not w.token_indices:
                w.logprob = None
        return out


def split_words(text: str) -> list[tuple[str, int, int]]:
    """Words of ``text`` with character spans: the project's single definition of a word."""
    return [(m.group(), m.start(), m.end()) for m in _WORD_RE.finditer(text)]


#: typographic variants a model's copy may swap for the document's (or the other way round): curly quotes
#: and apostrophes become straight ones, dashes and a no-break space a space between words
_TYPOGRAPHY = str.maketrans({"\u2018": "'", "\u2019": "'", "\u02bc": "'", "\u201c": '"', "\u201d": '"',
                             "\u2012": " ", "\u2013": " ", "\u2014": " ", "\u2015": " ", "\u00a0": " "})


_ASCII_ENDS = re.compile(r"^[\W_]+|[\W_]+$")


def _strip_ends(word: str) -> str:
    """``word`` without the characters at its ends that are not letters, combining marks or digits.

    Combining marks stay: Devanagari's vowel signs are marks, and ``\\W`` would have cut "नहीं" to "नह"."""
    if word.isascii():  # the common case, the same result without a loop over characters
        return _ASCII_ENDS.sub("", word)
    i, j = 0, len(word)
    while i < j and unicodedata.category(word[i])[0] not in "LMN":
        i += 1
    while j > i and unicodedata.category(word[j - 1])[0] not in "LMN":
        j -= 1
    return word[i:j]


def norm_words(text: str) -> list[str]:
    """The words of ``text`` for overlap counts: NFKC-normalised, lower-cased, curly quotes made straight and
    dashes made spaces (``_TYPOGRAPHY``), punctuation stripped from their ends, empty ones dropped. A copy
    that writes "don't" for the document's "don’t" or "fever - cough" for "fever—cough" is the same copy."""
    text = unicodedata.normalize("NFKC", text).translate(_TYPOGRAPHY)
    out = []
    for w, _, _ in split_words(text):
        w = _strip_ends(w.lower())
        if w:
            out.append(w)
    return out


def _decode_token(lm: LocalLM, token_id: int) -> str:
    cache = lm.__dict__.setdefault("_decode_cache", {})
    s = cache.get(token_id)
    if s is None:
        s = lm.tokenizer.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        cache[token_id] = s
    return s


def encode_text(lm: LocalLM, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids of ``text`` (no special tokens) with character offsets."""
    enc = lm.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]


def encode_context(lm: LocalLM, context: str) -> list[int]:
    """Token ids of a context, starting with BOS where the model has one.

    With an empty context the first token of the text still needs something to
    be conditioned on: BOS if the tokenizer defines one, else nothing (the first
    token is then reported unscored rather than invented).
    """
    tok = lm.tokenizer
    ids = tok(context, add_special_tokens=False)["input_ids"] if context else []
    bos = tok.bos_token_id
    if bos is not None and (not ids or ids[0] != bos):
        # chat templates already start with their own markers; a BOS token in
        # front of them is what the model saw in training for Gemma, and is
        # harmless for Llama-style tokenizers that define one.
        ids = [bos] + ids
    return ids


def _top_from_logprobs(lm: LocalLM, row: torch.Tensor, k: int) -> list[tuple[str, float]]:
    if k <= 0:
        return []
    vals, idx = torch.topk(row, k)
    return [(_decode_token(lm, int(i)), float(v)) for v, i in zip(vals.tolist(), idx.tolist())]


def score_texts(
    lm: LocalLM,
    texts: Sequence[str],
    contexts: Sequence[str] | None = None,
    top_k: int = 0,
    batch_size: int = 8,
    ranks: bool = False,
) -> list[TextScores]:
    """Probability of every token of each text given its context, one forward pass per batch.

    ``contexts`` defaults to empty strings (unconditional scoring). With
    ``ranks=True`` every scored token also gets its rank in the model's full
    next-token distribution (MBA's rank score), from the same forward pass.
    """
    contexts = list(contexts) if contexts is not None else [""] * len(texts)
    if len(contexts) != len(texts):
        raise ValueError("texts and contexts must have the same length")
    items = []
    for ctx, text in zip(contexts, texts):
        cids = encode_context(lm, ctx)
        tids, offs = encode_text(lm, text)
        items.append((cids, tids, offs, text))
    return _score_encoded(lm, items, top_k, batch_size, ranks)


def _token_ranks(logp_rows: torch.Tensor, ids: list[int]) -> list[int]:
    """Rank of each true token in its row: 1 + the count of strictly more probable entries."""
    if not ids:
        return []
    true = logp_rows.gather(1, torch.tensor(ids, dtype=torch.long).unsqueeze(1))
    return ((logp_rows > true).sum(dim=1) + 1).tolist()


def _score_encoded(lm, items, top_k: int, batch_size: int, ranks: bool = False) -> list[TextScores]:
    results: list[TextScores] = []
    pad = lm.tokenizer.pad_token_id or 0
    for b in range(0, len(items), batch_size):
        chunk = items[b : b + batch_size]
        seqs = [c + t for c, t, _, _ in chunk]
        width = max(1, max(len(s) for s in seqs))
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[i, : len(s)] = 1  # right padding keeps real positions 0..n-1
        with lm.lock, torch.inference_mode():
            logits = lm.model(input_ids=ids, attention_mask=mask).logits.float()
        logp = torch.log_softmax(logits, dim=-1)
        for i, (cids, tids, offs, text) in enumerate(chunk):
            toks: list[TokenScore] = []
            n_ctx = len(cids)
            rank_of: dict[int, int] = {}
            if ranks:
                j0 = 1 if n_ctx == 0 else 0  # the first token is unscored without a context
                if j0 < len(tids):
                    rows = logp[i, n_ctx + j0 - 1 : n_ctx + len(tids) - 1]  # contiguous: a view
                    rank_of = dict(zip(range(j0, len(tids)), _token_ranks(rows, tids[j0:])))
            for j, tid in enumerate(tids):
                pos = n_ctx + j - 1  # the logits that predict token j
                if pos < 0:
                    toks.append(TokenScore(tid, _decode_token(lm, tid), offs[j][0], offs[j][1], None, []))
                    continue
                row = logp[i, pos]
                toks.append(
                    TokenScore(
                        tid, _decode_token(lm, tid), offs[j][0], offs[j][1],
                        float(row[tid]), _top_from_logprobs(lm, row, top_k), rank_of.get(j),
                    )
                )
            results.append(TextScores(text, toks))
    return results


def score_text(lm: LocalLM, text: str, context: str = "", top_k: int = 0) -> TextScores:
    return score_texts(lm, [text], [context], top_k=top_k)[0]


# --------------------------------------------------------------------------- chat + generation


#: how a chat is turned into a prompt: "chat" = the model's chat template;
#: "completion" = a plain text the model simply continues (system text, then
#: the user's messages, no reply cue), as a completion-style RAG built on a
#: base model does
PROMPT_STYLES = ("chat", "completion")


def prompt_style(lm: LocalLM, style: str | None = None) -> str:
    if style is None:
        return "chat" if lm.has_chat_template else "completion"
    if style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt style '{style}'; choose one of {', '.join(PROMPT_STYLES)}")
    if style == "chat" and not lm.has_chat_template:
        raise ValueError(f"the model '{lm.name}' has no chat template; use the 'completion' style")
    return style


def render_chat(lm: LocalLM, messages: Sequence[dict], style: str | None = None) -> str:
    """The prompt string for a chat.

    "chat" style goes through the model's chat template. "completion" style
    joins the messages as plain paragraphs and ends with the last message's
    own text, so generation continues it (earlier assistant turns keep a
    label so a multi-turn exchange stays readable).
    """
    if prompt_style(lm, style) == "chat":
        return lm.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    parts = []
    for m in messages:
        role, content = m.get("role", "user"), str(m.get("content", ""))
        parts.append(f"Assistant: {content}" if role == "assistant" else content)
    return "\n\n".join(p.strip() for p in parts if p.strip())


def encode_prompt(lm: LocalLM, prompt: str, style: str | None = None) -> list[int]:
    """Prompt ids: a rendered chat template already carries its special tokens."""
    if prompt_style(lm, style) == "chat":
        return lm.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    return encode_context(lm, prompt)


@dataclass
class Generation:
    text: str
    tokens: list[TokenScore]
    prompt_tokens: int
    finish_reason: str  # "stop" or "length"


def _sample(logits: torch.Tensor, temperature: float, gen: torch.Generator | None) -> int:
    if temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits / temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=gen))


def generate_ids(
    lm: LocalLM,
    prompt_ids: list[int],
    max_new_tokens: int = 32,
    temperature: float = 0.0,
    top_logprobs: int = 0,
    seed: int | None = 0,
    prefix_cache: "PrefixCache | None" = None,
    logprobs: bool = True,
) -> Generation:
    """Greedy (default) or sampled generation with per-token logprobs and top alternatives.

    A manual loop over the KV cache, so that logprobs come from the full
    distribution of every step. ``prefix_cache`` reuses the key/value states
    of the longest common prefix with recent prompts. ``logprobs=False``
    (greedy only): the caller reads no token's logprob, so each step computes
    only the greedy token (``greedy_head``, the same token for a third of the
    output layer's cost) and the tokens' ``logprob`` is None.
    """
    if not prompt_ids:
        raise ValueError("empty prompt")
    gen = torch.Generator().manual_seed(seed) if (temperature > 0 and seed is not None) else None
    screened = not logprobs and temperature <= 0 and not top_logprobs
    head = lm.greedy_head
    eos = set(_eos_ids(lm))
    out_ids: list[int] = []
    tokens: list[TokenScore] = []
    text = ""
    finish = "length"
    with lm.lock, torch.inference_mode():
        past, hidden = _prefill(lm, prompt_ids, prefix_cache)
        for _ in range(max_new_tokens):
            if screened:
                nxt, lp, top = head.argmax(hidden)[0], None, []
            else:
                logits = head.logits(hidden)
                logp = torch.log_softmax(logits, dim=-1)
                nxt = _sample(logits, temperature, gen)
                lp, top = float(logp[nxt]), _top_from_logprobs(lm, logp, top_logprobs)
            if nxt in eos:
                finish = "stop"
                break
            piece = _decode_token(lm, nxt)
            tokens.append(TokenScore(nxt, piece, len(text), len(text) + len(piece), lp, top))
            text += piece
            out_ids.append(nxt)
            if len(out_ids) == max_new_tokens:
                break
            res = lm.model.base_model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
            past, hidden = res.past_key_values, res.last_hidden_state[0, -1]
    # decode the whole sequence once so multi-byte characters come out right
    full = lm.tokenizer.decode(out_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    if full != text:
        text = full
    return Generation(text=text, tokens=tokens, prompt_tokens=len(prompt_ids), finish_reason=finish)


def generate_greedy_many(
    lm: LocalLM,
    prompts: Sequence[list[int]],
    max_new_tokens: Sequence[int],
    top_logprobs: Sequence[int],
    prefix_cache: "PrefixCache | None" = None,
    logprobs: Sequence[bool] | None = None,
) -> list[Generation]:
    """Greedy generation of several prompts: each prefilled alone, all decoded as one batch.

    Why: a decoding step of a small model on a CPU costs about the same for
    one sequence as for ten (it reads every weight, Gemma's 262k-row output
    layer above all), while a prefill is compute-bound and gains nothing from
    batching. So every prompt is prefilled as ``generate_ids`` does (same
    prefix reuse), their key/value states are stacked with left padding, and
    the new tokens of all of them come from one forward pass per step. Each
    result equals ``generate_ids(..., temperature=0)`` on its prompt up to
    float rounding (the keys carry their own positions; padding is masked).
    ``logprobs`` (default: all True) says per prompt whether its tokens'
    logprobs are read; a step where no active prompt needs them computes only
    the greedy tokens (``greedy_head``). Prompts that have stopped leave the
    batch once they are a quarter of it, so a long answer does not keep
    paying for the short ones beside it.
    """
    if not prompts:
        return []
    if any(not p for p in prompts):
        raise ValueError("empty prompt")
    wants = [True] * len(prompts) if logprobs is None else [bool(w) or bool(k) for w, k in zip(logprobs, top_logprobs)]
    if len(prompts) == 1:
        return [generate_ids(lm, list(prompts[0]), max_new_tokens[0], 0.0, top_logprobs[0], None, prefix_cache,
                             logprobs=wants[0])]
    head = lm.greedy_head
    eos = set(_eos_ids(lm))
    n = len(prompts)
    lengths = [len(p) for p in prompts]
    out_ids: list[list[int]] = [[] for _ in range(n)]
    tokens: list[list[TokenScore]] = [[] for _ in range(n)]
    texts = [""] * n
    finish = ["length"] * n
    active = [m > 0 for m in max_new_tokens]
    pad = lm.tokenizer.pad_token_id or 0
    with lm.lock, torch.inference_mode():
        pasts, states = [], []
        for p in prompts:
            past, hidden = _prefill(lm, list(p), prefix_cache)
            pasts.append(past)
            states.append(hidden)
        hidden = torch.stack(states)
        past, mask = _stack_left_padded(pasts, lengths)
        rows = list(range(n))  # the prompt in each row of the batch
        step = 0
        while True:
            logits, greedy = None, {}
            if any(active[r] and wants[r] for r in rows):
                # each prompt's first row as its own prefill computed it, then the batch's rows
                logits = torch.stack([head.logits(h) for h in states]) if step == 0 else head.logits(hidden)
            else:
                live = [j for j, r in enumerate(rows) if active[r]]
                greedy = dict(zip((rows[j] for j in live), head.argmax(hidden[live])))
            fed = []
            for j, r in enumerate(rows):
                if not active[r]:
                    fed.append(pad)
                    continue
                if logits is None:
                    nxt, lp, top = greedy[r], None, []
                else:
                    row = logits[j].float()
                    nxt = int(torch.argmax(row))
                    logp = torch.log_softmax(row, dim=-1)
                    lp, top = float(logp[nxt]), _top_from_logprobs(lm, logp, top_logprobs[r])
                if nxt in eos:
                    finish[r], active[r] = "stop", False
                    fed.append(pad)
                    continue
                piece = _decode_token(lm, nxt)
                tokens[r].append(TokenScore(nxt, piece, len(texts[r]), len(texts[r]) + len(piece), lp, top))
                texts[r] += piece
                out_ids[r].append(nxt)
                if len(out_ids[r]) >= max_new_tokens[r]:
                    active[r] = False
                fed.append(nxt)
            if not any(active):
                break
            keep = [j for j, r in enumerate(rows) if active[r]]
            if len(keep) <= 0.75 * len(rows):
                # a finished row would still be computed at every step: a quarter of the batch done, it leaves
                index = torch.tensor(keep, dtype=torch.long)
                past.batch_select_indices(index)
                mask, rows, fed = mask[index], [rows[j] for j in keep], [fed[j] for j in keep]
            mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype)], dim=1)
            pos = torch.tensor([[lengths[r] + step] for r in rows], dtype=torch.long)
            res = lm.model.base_model(input_ids=torch.tensor(fed, dtype=torch.long).unsqueeze(1),
                                      attention_mask=mask, position_ids=pos, past_key_values=past, use_cache=True)
            past, hidden = res.past_key_values, res.last_hidden_state[:, -1]
            step += 1
    gens = []
    for r in range(n):
        # decoded as a whole so that multi-byte characters come out right, as in generate_ids
        full = lm.tokenizer.decode(out_ids[r], skip_special_tokens=True, clean_up_tokenization_spaces=False)
        gens.append(Generation(text=full, tokens=tokens[r], prompt_tokens=lengths[r], finish_reason=finish[r]))
    return gens


def _stack_left_padded(pasts: Sequence, lengths: Sequence[int]):
    """One batched key/value cache from single-sequence caches of different lengths, padded on the left.

    Keys are stored after the rotary embedding, so a state keeps its true
    position wherever it sits; the returned attention mask hides the padding.
    """
    from transformers import DynamicCache

    width = max(lengths)
    merged = DynamicCache()
    for layer in range(len(pasts[0].layers)):
        ks, vs = [], []
        for past, length in zip(pasts, lengths):
            k, v = past.layers[layer].keys, past.layers[layer].values
            gap = width - k.shape[-2]
            ks.append(torch.nn.functional.pad(k, (0, 0, gap, 0)))
            vs.append(torch.nn.functional.pad(v, (0, 0, gap, 0)))
        merged.update(torch.cat(ks), torch.cat(vs), layer)
    mask = torch.zeros((len(lengths), width), dtype=torch.long)
    for r, length in enumerate(lengths):
        mask[r, width - length:] = 1
    return merged, mask


def _eos_ids(lm: LocalLM) -> list[int]:
    ids = []
    tok = lm.tokenizer
    if tok.eos_token_id is not None:
        ids.append(tok.eos_token_id)
    gc = getattr(lm.model, "generation_config", None)
    extra = getattr(gc, "eos_token_id", None) if gc is not None else None
    if isinstance(extra, int):
        ids.append(extra)
    elif isinstance(extra, (list, tuple)):
        ids.extend(extra)
    for special in ("<|im_end|>", "<end_of_turn>"):
        tid = tok.convert_tokens_to_ids(special)
        if isinstance(tid, int) and tid != tok.unk_token_id:
            ids.append(tid)
    return ids


def generate(
    lm: LocalLM,
    messages: Sequence[dict],
    max_new_tokens: int = 32,
    temperature: float = 0.0,
    top_logprobs: int = 0,
    seed: int | None = 0,
    prefix_cache: "PrefixCache | None" = None,
) -> Generation:
    """Chat generation: render the messages (chat template by default), then generate_ids."""
    ids = encode_prompt(lm, render_chat(lm, messages))
    return generate_ids(lm, ids, max_new_tokens, temperature, top_logprobs, seed, prefix_cache)


# --------------------------------------------------------------------------- prefix reuse


def _full_cache():
    """A key/value cache whose layers keep every state (none slides), so it can be cropped to any prefix."""
    from transformers import DynamicCache

    return DynamicCache()


def _prefill(lm: LocalLM, prompt_ids: list[int], prefix_cache: "PrefixCache | None"):
    """Run the prompt, reusing cached key/values of its longest known prefix.

    The cache is a config-less ``DynamicCache``: every layer keeps all its
    states, so a sliding-window model (Gemma 3) can be rewound to any prefix
    too (its attention masks still apply the window). Returns the last
    position's hidden state: the caller computes its logits, or only its greedy
    token (``greedy_head``); with a 262k vocabulary that is most of the saving.
    """
    reuse, past = (0, None)
    if prefix_cache is not None:
        reuse, past = prefix_cache.lookup(prompt_ids)
    # always leave at least one token to run, to get the next-token logits
    reuse = min(reuse, len(prompt_ids) - 1)
    if past is not None and reuse > 0:
        held = past.get_seq_length()
        if held > reuse:
            past.crop(reuse - held)  # a negative count removes that many tokens
    else:
        reuse, past = 0, _full_cache()
    rest = torch.tensor([prompt_ids[reuse:]], dtype=torch.long)
    res = lm.model.base_model(input_ids=rest, past_key_values=past, use_cache=True)
    past = res.past_key_values
    if prefix_cache is not None:
        prefix_cache.store(prompt_ids, past)
    return past, res.last_hidden_state[0, -1]


class PrefixCache:
    """Key/value states of recent prompts, reused for the longest common token prefix.

    Audit probes of one document share most of their prompt (system prompt,
    retrieved documents, the start of the document), as production servers
    exploit. Entries are deep-copied in and out so that generation never
    mutates a stored state.

    Why least-recently-used and bounded by bytes as well as entries: a server
    answering several documents' probes at once interleaves their prompts, so
    a short first-in-first-out list evicts a document's prompt before its next
    probe arrives (replaying session 37's benchmark slice, 8 entries could
    skip 31% of the prompt tokens, 32 entries 39%). A hit refreshes its entry;
    ``max_bytes`` keeps the states of long prompts from growing without bound.
    A prompt that another entry already covers (a prefix of it) is not stored
    again, and a stored one that the new prompt extends is replaced by it.
    """

    def __init__(self, max_entries: int = 8, max_bytes: int | None = None):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: list[tuple[list[int], object, int]] = []  # (ids, states, bytes), oldest first
        self.hits = 0
        self.reused_tokens = 0

    @property
    def stored_bytes(self) -> int:
        return sum(b for _, _, b in self._entries)

    def lookup(self, ids: list[int]) -> tuple[int, object | None]:
        import copy

        best, best_len = -1, 0
        for e, (key, _, _) in enumerate(self._entries):
            n = _common_prefix_len(key, ids)
            if n > best_len:
                best, best_len = e, n
        if best < 0:
            return 0, None
        self.hits += 1
        self.reused_tokens += best_len
        entry = self._entries.pop(best)
        self._entries.append(entry)  # most recently used last
        return best_len, copy.deepcopy(entry[1])

    def store(self, ids: list[int], past) -> None:
        import copy

        ids = list(ids)
        for e, (key, _, _) in enumerate(self._entries):
            if len(key) >= len(ids) and key[: len(ids)] == ids:
                self._entries.append(self._entries.pop(e))  # already covered: only refreshed
                return
        # entries the new prompt extends are covered by it from now on
        self._entries = [x for x in self._entries if not (len(x[0]) < len(ids) and ids[: len(x[0])] == x[0])]
        self._entries.append((ids, copy.deepcopy(past), _cache_bytes(past)))
        while len(self._entries) > max(1, self.max_entries) or (
            self.max_bytes is not None and len(self._entries) > 1 and self.stored_bytes > self.max_bytes
        ):
            self._entries.pop(0)


def _cache_bytes(past) -> int:
    """Bytes held by a key/value cache's tensors (what an entry of ``PrefixCache`` costs in memory)."""
    total = 0
    for layer in getattr(past, "layers", ()):
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def _common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def next_token_distributions(
    lm: LocalLM, prompts: Sequence[list[int]], top_k: int, batch_size: int = 16,
    prefix_cache: "PrefixCache | None" = None,
) -> list[tuple[list[tuple[str, float]], int]]:
    """First-token distribution of several prompts that share a prefix.

    Teacher forcing for a group of probes: the shared prefix runs once; a
    prompt whose ids are a prefix of a longer prompt of the group is read off
    that prompt's forward pass (the probes of one document are nested
    prefixes of it); the remaining tails run as padded batches on top of the
    shared key/value states. Logits are computed only at the positions read.
    With ``prefix_cache``, the shared prefix starts from the longest cached
    one (a served RAG's probes of one document often retrieve the same first
    document, so their prompts agree well beyond the system prompt) and is
    stored for the next group; a group of one prompt stores its whole prompt.
    Returns, per prompt, its top-k alternatives and the greedy token id.
    """
    if not prompts:
        return []
    prompts = [list(p) for p in prompts]
    # hosts: the prompts that actually run; every prompt is read from one of them
    host: dict[int, int] = {}
    runners: list[int] = []
    for i in sorted(range(len(prompts)), key=lambda j: len(prompts[j]), reverse=True):
        p = prompts[i]
        host[i] = next((h for h in runners if prompts[h][: len(p)] == p), i)
        if host[i] == i:
            runners.append(i)
    if len(runners) == 1:
        # one causal pass over the longest prompt: no split, no padding, no
        # attention mask, so attention takes its fast causal path
        shared = 0
    else:
        shared = min(_common_prefix_len(prompts[runners[0]], prompts[h]) for h in runners)
        # every read position must lie in the tail
        shared = min(shared, min(len(p) for p in prompts) - 1)
    reads: dict[int, list[int]] = {h: [] for h in runners}
    for i, h in host.items():
        reads[h].append(i)
    out: dict[int, tuple[list[tuple[str, float]], int]] = {}
    pad = lm.tokenizer.pad_token_id or 0
    first = prompts[runners[0]]
    with lm.lock, torch.inference_mode():
        base = None
        if prefix_cache is not None:
            # every read position must stay after the cached part
            limit = shared if len(runners) > 1 else min(len(p) for p in prompts) - 1
            reuse, cached = prefix_cache.lookup(first[:limit]) if limit > 0 else (0, None)
            if cached is not None and reuse > 0:
                held = cached.get_seq_length()
                if held > reuse:
                    cached.crop(reuse - held)
                if len(runners) == 1:
                    shared = reuse
                base = cached
                if shared > reuse:
                    base = lm.model.base_model(input_ids=torch.tensor([first[reuse:shared]]),
                                               past_key_values=cached, use_cache=True).past_key_values
        if base is None and shared > 0:
            base = lm.model.base_model(input_ids=torch.tensor([first[:shared]]), past_key_values=_full_cache(),
                                       use_cache=True).past_key_values
        if prefix_cache is not None and base is not None and len(runners) > 1:
            prefix_cache.store(first[:shared], base)
        for b in range(0, len(runners), batch_size):
            chunk = runners[b : b + batch_size]
            tails = [prompts[h][shared:] for h in chunk]
            width = max(len(t) for t in tails)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), shared + width), dtype=torch.long)
            mask[:, :shared] = 1
            for r, t in enumerate(tails):
                ids[r, : len(t)] = torch.tensor(t)
                mask[r, shared : shared + len(t)] = 1
            past = None
            if base is not None:
                import copy

                past = copy.deepcopy(base)
                past.batch_repeat_interleave(len(chunk))
            keep = sorted({len(prompts[i]) - 1 - shared for h in chunk for i in reads[h]})
            col = {pos: c for c, pos in enumerate(keep)}
            pos_ids = torch.arange(shared, shared + width).unsqueeze(0).expand(len(chunk), -1)
            if len(chunk) == 1 and past is None:
                mask = pos_ids = None  # a lone unpadded sequence: plain causal attention
            # a lone prompt's states are worth keeping for the next request (complete: nothing padded)
            keep_states = prefix_cache is not None and len(runners) == 1
            if keep_states and past is None:
                past = _full_cache()
            res = lm.model(input_ids=ids, attention_mask=mask, past_key_values=past, position_ids=pos_ids,
                           use_cache=past is not None, logits_to_keep=torch.tensor(keep))
            logits = res.logits
            if keep_states:
                prefix_cache.store(prompts[chunk[0]], res.past_key_values)
            for r, h in enumerate(chunk):
                for i in reads[h]:
                    row = torch.log_softmax(logits[r, col[len(prompts[i]) - 1 - shared]].float(), dim=-1)
                    out[i] = (_top_from_logprobs(lm, row, top_k), int(torch.argmax(row)))
    return [out[i] for i in range(len(prompts))]
