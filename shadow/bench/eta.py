"""The whole benchmark's time left, from the legs it has measured so far.

Each leg (profile x defense x method) has its own progress bar with its own
time left, but a full run is dozens of legs and hours long, and a person
starting it wants to know when the whole of it ends. A leg not yet run is
estimated from the same method's seconds per document in the legs already
run (a method costs about the same under each defense; the paraphrasing
defense, which also rewrites every query, costs more, so early estimates are
low until a paraphrasing leg has run). A method not yet measured is estimated
from the seconds per generated token of the legs so far times the tokens it
asks for per document (``weigh``), since decoding is most of a leg's time: a
flat mean of the legs so far said "about 2 min left" before Verbatim's nine
answers per document, which took several times that. Without its tokens, from
the mean of the legs so far.
"""
from __future__ import annotations

from audit_core.progress import format_duration

Leg = tuple[str, str, str]  # (profile, defense, method)


class RunEstimate:
    """Documents left per leg, seconds per document of each finished leg, and the run's time left."""

    def __init__(self, todo: dict[Leg, int]) -> None:
        self._left = {leg: n for leg, n in todo.items() if n > 0}
        self._total_legs = len(self._left)
        self._total_docs = sum(self._left.values())
        self._per_doc: dict[Leg, float] = {}
        self._tokens: dict[tuple[str, str], float] = {}  # (profile, method): completion tokens per document

    def weigh(self, profile: str, method: str, tokens_per_document: float) -> None:
        """The most completion tokens a method asks for per document on a profile (its ``QueryCost``)."""
        if tokens_per_document > 0:
            self._tokens[(profile, method)] = float(tokens_per_document)

    def drop(self, profile: str, method: str) -> None:
        """Legs that will not run (the method cannot run on the profile): nothing to wait for."""
        for leg in [leg for leg in self._left if leg[0] == profile and leg[2] == method]:
            self._total_docs -= self._left.pop(leg)
            self._total_legs -= 1

    def finished(self, leg: Leg, documents: int, seconds: float) -> None:
        if documents > 0:
            self._per_doc[leg] = seconds / documents
        self._left.pop(leg, None)

    def _rate(self, profile: str, method: str) -> float | None:
        same = [s for (_, _, m), s in self._per_doc.items() if m == method]
        if same:
            return sum(same) / len(same)
        per_token = [s / self._tokens[(p, m)] for (p, _, m), s in self._per_doc.items() if (p, m) in self._tokens]
        if per_token and (profile, method) in self._tokens:
            return sum(per_token) / len(per_token) * self._tokens[(profile, method)]
        pool = list(self._per_doc.values())
        return sum(pool) / len(pool) if pool else None

    def seconds_left(self) -> float | None:
        """Estimated seconds until every leg is done; None before any leg has finished."""
        if not self._per_doc:
            return None
        return sum(n * self._rate(profile, method) for (profile, _, method), n in self._left.items())

    def line(self) -> str:
        """"run: 3 of 24 legs done (300 of 2,400 documents); about 1 h 20 min left at the rates so far"."""
        legs_done = self._total_legs - len(self._left)
        docs_done = self._total_docs - sum(self._left.values())
        left = self.seconds_left()
        when = ("all done" if not self._left else "measuring the rate..." if left is None
                else f"about {format_duration(left)} left at the rates so far")
        return (f"run: {legs_done} of {self._total_legs} legs done ({docs_done:,} of {self._total_docs:,} "
                f"documents); {when}")
