"""How a target's model answers: continuing the text (a base model) or as a chat model.

S-RAG reads the target's next-word probabilities. A base ("completion") model
continues the text at its first token, so one token per probe is enough; a
chat (instruct) model often restates the paragraph or opens with a reply
first, so its answer has to be aligned with the document, and the shadow RAG
must answer in the same style. Reading a chat model's first token as if it
continued the text gives probability 0 for nearly every word: every member
"not found" (issue 19's opening measurement, AUC 0.45).

The capability probe therefore asks the target to complete a few neutral
sentences, cut right before a common lower-case word, with S-RAG's own audit
prompt, and looks at how each answer begins:

* "continues" -- it goes on with the sentence at once (its first letter is
  lower case, and it does not repeat the text);
* "restates" -- it opens by repeating words of the text;
* "reply" -- it opens a new sentence or a reply ("Sure! ...").

A majority of "continues" makes the target a completion model; anything else
a chat model. When no probe is answered the style stays unknown, and the
audit reads the target as a chat model (``resolve_style``): chat-style reading
also reads an answer that continues at once, while completion-style reading of
a chat model clears its members silently.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from audit_core.target.base import Target

STYLES = ("completion", "chat")

#: Neutral sentences cut right before a word that is almost always a lower-case
#: common noun, so that a real continuation begins with a lower-case letter.
STYLE_PROBES = (
    "Every morning before work she makes herself a large cup of",
    "After the storm had passed, the farmers walked out to check on their",
    "The recipe says to bake the bread for forty minutes in a hot",
)
#: tokens asked for per probe: enough to see a restatement or a reply begin
STYLE_PROBE_TOKENS = 12

_WORD = re.compile(r"[a-z0-9']+")
#: shortest run of the text's words that counts as a restatement
_RESTATED_WORDS = 3


@dataclass(frozen=True)
class StyleFinding:
    """What the style probe found: "completion", "chat" or None (unknown), and why."""

    style: str | None
    detail: str
    shapes: tuple[str, ...] = ()


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def answer_shape(prefix: str, answer: str) -> str:
    """How an answer to "complete this text" begins: "continues", "restates", "reply" or "empty"."""
    text = answer.strip()
    if not text:
        return "empty"
    aw, pw = _words(text)[:_RESTATED_WORDS], _words(prefix)
    runs = {tuple(pw[i : i + _RESTATED_WORDS]) for i in range(len(pw) - _RESTATED_WORDS + 1)}
    if len(aw) == _RESTATED_WORDS and tuple(aw) in runs:
        return "restates"
    first = next((c for c in text if c.isalpha()), "")
    # the probes stop before a lower-case word: a capital opens a new sentence or a reply
    return "reply" if not first or first.isupper() else "continues"


def classify(shapes: Sequence[str]) -> StyleFinding:
    """The style from the shapes of the probe answers (majority of "continues": completion)."""
    answered = [s for s in shapes if s != "empty"]
    if not answered:
        return StyleFinding(None, "the target answered none of the style probes with text", tuple(shapes))
    n_cont = sum(s == "continues" for s in answered)
    how = ", ".join(f"{n} {s}" for s in ("continues", "restates", "reply") if (n := answered.count(s)))
    if n_cont * 2 > len(answered):
        return StyleFinding("completion", f"it continued the text at once in {n_cont} of {len(answered)} "
                                          f"style probes ({how})", tuple(shapes))
    return StyleFinding("chat", f"it answered like a chat model in {len(answered) - n_cont} of {len(answered)} "
                                f"style probes ({how})", tuple(shapes))


def detect_style(target: "Target", probes: Sequence[str] = STYLE_PROBES) -> StyleFinding:
    """Ask the target to complete ``probes`` with S-RAG's audit prompt (text only, greedy) and classify.

    The requests are the audit's own kind (the same prompt S-RAG sends), so
    the style found is the one S-RAG's probes will meet. A failed request is
    left out; when all fail, the style is unknown with the reason.
    """
    from audit_core.methods.srag import SRAG_PROMPT
    from audit_core.target.base import ChatRequest, TargetError

    reqs = [ChatRequest.chat([{"role": "user", "content": SRAG_PROMPT.format(prefix=p)}],
                             max_tokens=STYLE_PROBE_TOKENS, temperature=0.0) for p in probes]
    answers = target.complete_many(reqs)
    shapes = [answer_shape(p, a.text) for p, a in zip(probes, answers) if not isinstance(a, TargetError)]
    if not shapes:
        first = next(a for a in answers if isinstance(a, TargetError))
        return StyleFinding(None, f"the style probes failed ({first.reason})")
    return classify(shapes)


def resolve_style(chosen: str | None, found: str | None, found_detail: str = "") -> tuple[str, str]:
    """The style an audit reads the target in, and where it comes from.

    The user's choice wins; then what the capability probe found; when neither
    is known the target is read as a chat model (module docstring: it also
    reads an answer that continues at once, and never clears a chat model's
    members by reading the wrong token).
    """
    if chosen is not None:
        if chosen not in STYLES:
            raise ValueError(f"target style must be one of {', '.join(STYLES)}")
        return chosen, "chosen by the user"
    if found in STYLES:
        return found, f"found by the capability probe: {found_detail}" if found_detail else "found by the capability probe"
    why = f" ({found_detail})" if found_detail else ""
    return "chat", (f"not found by the capability probe{why}: read as a chat model, which also reads an answer "
                    "that continues the text at once")
