"""Cause→effect statistics learned from the stream itself, for rooms without a rules file.

When an alarm type first appears in an incident that already holds other types, the room counts, for
each pair, which type came first. A type that usually comes before another is likely its cause: with
no rules, the root is the type that most often came first against the incident's other types
(Laplace-smoothed, so an unseen pair counts as a coin toss), the earliest alarm as the tie-break
(then arrival order: types first seen in the same second are frequent, and their order tells nothing
to the statistics).
Only past incidents count: the figures are those a live worker would have had at that moment.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


class PrecedenceStats:
    """Pair counts `before[(u, v)]`: how often type u first appeared before type v in one incident."""

    def __init__(self) -> None:
        self.before: Counter = Counter()

    def __len__(self) -> int:
        return len(self.before)

    def observe(self, new_type: str, time: float, firsts: dict[str, float]) -> None:
        """A type joins an incident whose other types first appeared at `firsts` (type -> time)."""
        for other, seen in firsts.items():
            if other == new_type or seen == time:  # the same time tells no order
                continue
            if seen < time:
                self.before[(other, new_type)] += 1
            else:
                self.before[(new_type, other)] += 1

    def p_before(self, u: str, v: str) -> float:
        ahead, behind = self.before[(u, v)], self.before[(v, u)]
        return (ahead + 1) / (ahead + behind + 2)

    def score(self, candidate: str, types: Iterable[str]) -> float:
        """How strongly `candidate` reads as the cause of the other types."""
        return sum(self.p_before(candidate, t) for t in types if t != candidate)
