"""What a verdict's row says in a table of verdicts: its own reason, without what every row shares.

A verdict's reason joins the reasons of all its methods (``verdict.decide``).
Two parts of it are the same on every row of an audit: a method's standing
reason for never saying "not found" (``MethodSpec.no_clearing``), and the
reason of a method that abstains for the whole audit (it cannot run on the
target, or its shadow showed no signal). Repeated on every row they buried
what differs: a text-only chat target's rows were about 900 characters, all
alike but a score. The CLI, the app's Results tab and the PDF's tables put
each of those once beside the table (``never_clears_notes``; the abstentions
are said above it already) and give each row a short reference instead. The
whole reason stays in the stored verdict, the exports and each document's
own paragraph under "Evidence per document".
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

#: what a row says in place of a method's reason for never saying "not found" (``never_clears_notes`` gives it
#: once, under the table)
NEVER_CLEARS_SHORT = 'it never says "not found" (why: in the notes)'
#: what a row says in place of the reason of a method that abstains for the whole audit (said once, before the
#: table in the CLI, the app and the PDF's summary)
ABSTAINS_SHORT = "(abstains in this audit: why in the notes)"


def _field(verdict: Any, name: str, default: Any = None) -> Any:
    """A field of a verdict, whether a ``verdict.Verdict`` or its JSON (the app and the PDF read stored audits)."""
    if isinstance(verdict, Mapping):
        return verdict.get(name, default)
    return getattr(verdict, name, default)


def silent_reasons(result: Mapping) -> dict[str, str]:
    """The methods that abstain for the whole audit of a stored result, with why: those that could not run on
    the target (``not_run``) and those without signal on their shadow (``no_signal``)."""
    return {**{str(m): str(w) for m, w in (result.get("not_run") or {}).items()},
            **{str(m): str(w) for m, w in (result.get("no_signal") or {}).items()}}


def row_reason(verdict: Any, silent: Mapping[str, str]) -> str:
    """A verdict's reason for its row (module docstring), in words (``plain_reason``).

    Where no method decided only because every one abstains for the whole audit, one short line
    instead of their reasons; elsewhere each standing "never not found" reason and each whole-audit
    abstention's brief reason is replaced by a reference. A method whose reason for this document is
    its own (run anyway without signal, say, and failing on this document) keeps it.
    """
    from audit_core.evidence.calibration import clearing_withheld
    from audit_core.methods import method_label
    from audit_core.verdict import brief_reason, plain_reason

    methods = _field(verdict, "methods") or {}
    own = [m for m, info in methods.items()
           if m not in silent or not str((info or {}).get("reason") or "").startswith(silent[m])]
    if _field(verdict, "rule") == "R1" and methods and not own:
        names = ", ".join(method_label(m) for m in methods)
        verb = "abstains" if len(methods) == 1 else "abstain"
        return f"no method could decide: {names} {verb} for the whole audit (why: in the notes)"
    text = plain_reason(_field(verdict, "reason", ""))  # a stored audit's reason may still carry machine codes
    for m in methods:
        why = clearing_withheld(m)
        if why:
            text = text.replace(why, NEVER_CLEARS_SHORT)
    for m in set(methods) - set(own):
        reason = str((methods[m] or {}).get("reason") or "")
        # leading, a method's reason is whole ("S-RAG: no logprobs (...)"); following, brief ("S-RAG (no logprobs)")
        text = text.replace(f"{method_label(m)}: {plain_reason(reason)}", f"{method_label(m)} {ABSTAINS_SHORT}")
        brief = brief_reason(reason)
        if brief:
            text = text.replace(f" ({brief})", f" {ABSTAINS_SHORT}")
    return text


def never_clears_notes(verdicts: Iterable[Any]) -> list[str]:
    """Once beside the table: why each method that rows refer to (``NEVER_CLEARS_SHORT``) never says "not
    found", in the order of the methods' labels."""
    from audit_core.evidence.calibration import clearing_withheld
    from audit_core.methods import method_label

    standing = {m: why for v in verdicts for m in (_field(v, "methods") or {})
                if (why := clearing_withheld(m)) and why in str(_field(v, "reason") or "")}
    return [standing[m] for m in sorted(standing, key=method_label)]
