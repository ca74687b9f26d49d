"""The whole benchmark's time left, from the legs it has measured so far.

Each leg (profile x defense x method) has its own progress bar with its own
time left, but a full run is dozens of legs and hours long, and a person
starting it wants to know when the whole of it ends. A leg not yet run is
estimated from the same method's seconds per document in the legs already
run (a method costs about the same under each defense; the paraphrasing
defense, which also rewrites every query, costs more, so early estimates are
low until a paraphrasing leg has run). A method not yet measured is estimated
from the seconds per unit of work of the legs so far times its units per
document (``weigh``): a query plus one unit per ``TOKENS_PER_QUERY`` completion
tokens it asks for. A flat mean of the legs so far said "about 2 min left"
before Verbatim's nine answers per document, which took 20 minutes; seconds per
generated token alone overshot by hours after a one-word method (its time is
the query, not the decoding). On the 33 legs of sessions 40 and 41 (twelve
methods, four defenses, two profiles; the tokens actually generated) a query
plus 1/64 unit per token came to 0.2-1.0 s per unit, where seconds per query
ranged 0.2-1.8 and seconds per document 0.4-12 (S2MIA-M aside: it reuses
S2MIA-T's answers). The estimate can only use the most tokens a method asks
for, so it runs high for methods whose answers stop early. Without a method's
cost, from the mean of the legs so far.
"""
from __future__ import annotations

from audit_core.progress import format_duration

Leg = tuple[str, str, str]  # (profile, defense, method)

#: completion tokens that cost about as much as sending one query, on the 2-core machine (see above)
TOKENS_PER_QUERY = 64


class RunEstimate:
    """Documents left per leg, seconds per document of each finished leg, and the run's time left."""

    def __init__(self, todo: dict[Leg, int]) -> None:
        self._left = {leg: n for leg, n in todo.items() if n > 0}
        self._total_legs = len(self._left)
        self._total_docs = sum(self._left.values())
        self._per_doc: dict[Leg, float] = {}
        self._units: dict[tuple[str, str], float] = {}  # (profile, method): units of work per document

    def weigh(self, profile: str, method: str, queries: float, completion_tokens: float) -> None:
        """A method's queries and most completion tokens per document on a profile (its ``QueryCost``)."""
        units = queries + completion_tokens / TOKENS_PER_QUERY
        if units > 0:
            self._units[(profile, method)] = float(units)

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
        per_unit = [s / self._units[(p, m)] for (p, _, m), s in self._per_doc.items() if (p, m) in self._units]
        if per_unit and (profile, method) in self._units:
            return sum(per_unit) / len(per_unit) * self._units[(profile, method)]
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
