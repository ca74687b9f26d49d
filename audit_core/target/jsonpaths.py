"""JSONPath expressions in target files, and the cited sources they point at.

Shared by the connectors that read parts of a response by a path the user
declares (the generic HTTP target's ``answer_path``, ``logprobs_path`` and
``sources_path``; the OpenAI-compatible target's ``sources_path``, for
services such as Azure OpenAI "on your data" that put citations beside the
message). Parsing is jsonpath-ng's; this module only says which field is wrong.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from jsonpath_ng.exceptions import JSONPathError
from jsonpath_ng.ext import parse as parse_jsonpath

from audit_core.target.base import BadResponse


def compile_jsonpath(expr: Any, what: str):
    """A parsed JSONPath, or a ValueError that says which field is wrong and why."""
    if not isinstance(expr, str) or not expr.strip():
        raise ValueError(f"{what} must be a JSONPath such as $.answer")
    try:
        return parse_jsonpath(expr)
    except (JSONPathError, Exception) as exc:  # the parser raises several types for bad syntax
        raise ValueError(f"{what} {expr!r} is not a valid JSONPath ({exc}); for example $.answer or "
                         "$.choices[0].message.content") from None


def source_text(item: Any) -> str:
    """The text of one cited source: a string as it is, an object's or list's text values joined in order.

    Numbers, booleans and nulls (scores, page numbers) are left out: only text
    can be compared with a document.
    """
    if isinstance(item, str):
        return item.strip()
    values = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
    return "\n".join(t for t in (source_text(v) for v in values) if t)


def read_sources(expr: Any, documents: Iterable[Any], scrub: Callable[[str], str], source: str) -> list[str] | None:
    """The cited sources' texts that ``expr`` finds in ``documents`` (a response, or its events), scrubbed.

    None when the path finds no field at all: an API that does not say what it
    cited, which the cited-sources method reads as no signal. An empty list is an
    answer that cites nothing. A path that cannot be applied to this answer (a sort
    over values of mixed types) is a BadResponse naming ``sources_path`` and
    ``source`` (who answered): one answer fails, not the audit.
    """
    try:
        found = [m.value for d in documents for m in expr.find(d)]
    except Exception as exc:  # noqa: BLE001 - jsonpath-ng's filters and sorts raise what the data makes them
        raise BadResponse(f"the sources_path could not be applied to the answer from {source} "
                          f"({type(exc).__name__}); check sources_path against what the service sends") from None
    if not found:
        return None
    items = [x for v in found for x in (v if isinstance(v, list) else [v])]
    return [t for t in (scrub(source_text(x)) for x in items) if t]
