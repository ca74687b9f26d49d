"""Design study, no queries: would Verbatim lose anything if its answers stopped near the text it asks for?

Verbatim asks for up to 128 tokens per probe, and a base model always uses them all, so its probes are
among the benchmark's longest generations (issue 18). A greedy answer capped at N tokens is the first N
tokens of the uncapped one, so this script cuts each answer stored in the SHIPPED Verbatim preparations
(SmolLM2 shadows over MedQuAD; never a test draw) at the length of the text that probe asks for -- the
remainder, plus the beginning for the "repeat" wording, which asks to restate it first -- plus a slack,
counted with SmolLM2's tokenizer (the shadow generator's), and scores it again. Per file and slack:
the AUC, its paired difference from the uncapped answers (bootstrap), and the share of generated
tokens kept.

    .venv/bin/python scripts/verbatim_cap_study.py
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from audit_core.methods.base import Observation  # noqa: E402
from audit_core.methods.verbatim import VerbatimConfig, VerbatimMethod, _text_of  # noqa: E402
from audit_core.metrics import bootstrap_auc_difference_ci, roc_auc  # noqa: E402
from shadow.shipped import load_shipped, read_manifest  # noqa: E402

SLACKS = (0, 8, 16, 32)
UNCAPPED = VerbatimConfig().max_tokens


def capped(obs: Observation, slack: int, tok) -> tuple[Observation, int, int]:
    """A copy of ``obs`` with each answer cut at its asked-for length + ``slack``; (copy, tokens kept, tokens)."""
    out, kept, total = copy.deepcopy(obs), 0, 0
    d = out.data
    n = len(d.get("templates", []))
    for i, (template, query, rest) in enumerate(zip(d["templates"], d["queries"], d["remainders"])):
        r = out.responses[len(out.responses) - n + i]
        if r is None:
            continue
        ids = tok(r["text"], add_special_tokens=False)["input_ids"]
        asked = len(tok(rest, add_special_tokens=False)["input_ids"])
        if template == "repeat":
            asked += len(tok(query, add_special_tokens=False)["input_ids"])
        cap = asked + slack
        total += min(len(ids), UNCAPPED)
        kept += min(len(ids), cap, UNCAPPED)
        if len(ids) > cap:
            r["text"] = tok.decode(ids[:cap], skip_special_tokens=True, clean_up_tokenization_spaces=False)
    return out, kept, total


def scores(observations: list[Observation], style: str) -> np.ndarray:
    """The method's own score per document (NaN where it has none), the shadow's stock phrases left out."""
    method = VerbatimMethod(VerbatimConfig(style=style))
    method.use_collection([_text_of(o) for o in observations])
    return np.array([np.nan if (s := method.observation_score(o)[0]) is None else s for o in observations])


def main() -> None:
    from audit_core.models import load_causal_lm

    tok = load_causal_lm("smollm2-135m-instruct").tokenizer
    keys = sorted((v["style"], v["size"], k) for k, v in read_manifest().items() if v["method"] == "verbatim")
    for style, size, key in keys:
        got = load_shipped(key)
        if got is None:
            continue
        mem, non = got
        observations = [*mem, *non]
        y = np.array([1] * len(mem) + [0] * len(non))
        base = scores(observations, style)
        ok = np.isfinite(base)
        print(f"\n{style} {size} ({key}): {len(mem)} + {len(non)} documents, {ok.sum()} scored; "
              f"uncapped AUC {roc_auc(y[ok], base[ok]):.3f}")
        for slack in SLACKS:
            cut = [capped(o, slack, tok) for o in observations]
            s = scores([c[0] for c in cut], style)
            both = ok & np.isfinite(s)
            diff = roc_auc(y[both], s[both]) - roc_auc(y[both], base[both])
            lo, hi = bootstrap_auc_difference_ci(y[both], s[both], base[both])
            moved = int(np.sum(np.abs(s[both] - base[both]) > 1e-12))
            kept = sum(c[1] for c in cut) / max(1, sum(c[2] for c in cut))
            print(f"  slack {slack:2d}: AUC {roc_auc(y[both], s[both]):.3f}, paired {diff:+.3f} [{lo:+.3f}, {hi:+.3f}]; "
                  f"scores moved {moved} / {both.sum()}, newly unscored {int((ok & ~np.isfinite(s)).sum())}; "
                  f"generated tokens kept {kept:.2f}", flush=True)


if __name__ == "__main__":
    main()
