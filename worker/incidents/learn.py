"""The cause→effect graph between alarm types, learned from the alarms themselves.

For every alarm (in event-time order) the learner looks at the alarms of the same element and its
topology neighbours (no topology: the same element only) in the `lag_s` before it, and counts, for
each other type seen there, "that type came first" (`before[(u, v)]`: an alarm of v had u before it).
The same count an hour earlier (`null[(u, v)]`: u in the lag window one `shift_s` before the alarm)
is what chance gives on that neighbourhood at that load: bursty networks co-occur by themselves.

An edge u → v is kept when the pair co-occurs clearly more than chance —
`n = before[u, v] + before[v, u]` at least `min_cooccurrences`, at least `min_lift` times the chance
count and `min_z` standard deviations above it (Poisson) — and u came first in most of those
co-occurrences (`strength`, the share where it did). Ties are not edges. The rules the room uses are
these edges, read transitively as the operator's rules are (graph.CauseRules); a cycle makes its types
causes of each other, and the room then names the earliest.

Why these defaults: `lag_s` 60 s, the spread of one fault's alarms over an element and its neighbours
(an incident's `window_s` is for standing alarms' repeats, not for cause and effect); `shift_s` 1 h,
far enough that the fault is over, near enough that the load is alike; `min_z` 5 and `min_lift` 2 keep
a pair only when chance cannot explain it on any network of this size (hundreds of type pairs tested).

Memory is bounded: per element the alarms of the last `shift_s + lag_s` (at most `max_recent` each,
silent elements dropped), and at most `max_pairs` type pairs (the rarest dropped beyond it).
Only from one thread.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import msgspec

from worker.incidents.graph import CauseRules, Topology


@dataclass(frozen=True, slots=True)
class LearnedEdge:
    """u → v with its evidence: co-occurrences on neighbouring elements, the share where the cause came
    first, the chance count (the same alarms an hour earlier), lift and z over it."""

    cause: str
    effect: str
    strength: float
    cooccurrences: int
    chance: int
    lift: float
    z: float

    def evidence(self) -> str:
        return f"strength {self.strength:.2f}, {self.cooccurrences} co-occurrences"

    def as_dict(self) -> dict[str, Any]:
        return {"cause": self.cause, "effect": self.effect, "strength": round(self.strength, 4),
                "cooccurrences": self.cooccurrences, "chance": self.chance, "lift": round(self.lift, 2),
                "z": round(self.z, 1)}


class LearnerState(msgspec.Struct, array_like=True):
    """What a restart needs (room snapshots, `telesum incidents learn --report`)."""

    observed: int
    first_time: float | None
    last_time: float | None
    types: dict[str, int]
    before: list[tuple[str, str, int]]
    null: list[tuple[str, str, int]]
    recent: list[tuple[str, list[float], list[str]]]


class CauseLearner:
    """Counts precedence and chance per type pair from a stream of alarms; `edges()` reads the graph."""

    def __init__(self, topology: Topology | None = None, *, lag_s: float = 60.0, shift_s: float = 3600.0,
                 min_cooccurrences: int = 10, min_lift: float = 2.0, min_z: float = 5.0,
                 max_recent: int = 64, max_pairs: int = 200_000) -> None:
        if lag_s <= 0 or shift_s <= lag_s:
            raise ValueError("the learner needs lag_s > 0 and shift_s > lag_s")
        self.topology = topology
        self.lag_s, self.shift_s = lag_s, shift_s
        self.min_cooccurrences, self.min_lift, self.min_z = min_cooccurrences, min_lift, min_z
        self.max_recent, self.max_pairs = max_recent, max_pairs
        self.before: Counter = Counter()
        self.null: Counter = Counter()
        self.types: Counter = Counter()
        self.observed = 0
        self.first_time: float | None = None
        self.last_time: float | None = None
        self._recent: dict[str, tuple[list[float], list[str]]] = {}  # element -> (times, types), time order

    def observe(self, element: str, alarm_type: str, time: float) -> None:
        """One alarm; alarms should come in event-time order (the room places them so)."""
        self.observed += 1
        self.types[alarm_type] += 1
        if self.first_time is None or time < self.first_time:
            self.first_time = time
        if self.last_time is None or time > self.last_time:
            self.last_time = time
        near = self.topology.ball(element, 1) if self.topology is not None else (element,)
        first, chance = set(), set()
        for e in near:
            held = self._recent.get(e)
            if held is None:
                continue
            times, kinds = held
            first.update(kinds[bisect.bisect_left(times, time - self.lag_s):bisect.bisect_left(times, time)])
            chance.update(kinds[bisect.bisect_left(times, time - self.shift_s - self.lag_s):
                                bisect.bisect_left(times, time - self.shift_s)])
        first.discard(alarm_type)
        chance.discard(alarm_type)
        for u in first:
            self.before[(u, alarm_type)] += 1
        for u in chance:
            self.null[(u, alarm_type)] += 1
        self._remember(element, alarm_type, time)
        if len(self.before) + len(self.null) > self.max_pairs:
            self._drop_rare_pairs()
        if self.observed % 10_000 == 0:
            self._forget_silent(time)

    def _remember(self, element: str, alarm_type: str, time: float) -> None:
        times, kinds = self._recent.setdefault(element, ([], []))
        at = bisect.bisect_right(times, time)
        times.insert(at, time)
        kinds.insert(at, alarm_type)
        keep = bisect.bisect_left(times, time - self.shift_s - self.lag_s)
        keep = max(keep, len(times) - self.max_recent)
        if keep > 0:
            del times[:keep], kinds[:keep]

    def _forget_silent(self, now: float) -> None:
        horizon = now - self.shift_s - self.lag_s
        for element in [e for e, (times, _) in self._recent.items() if not times or times[-1] < horizon]:
            del self._recent[element]

    def _drop_rare_pairs(self) -> None:
        for counts in (self.before, self.null):
            for pair in [p for p, n in counts.items() if n <= 1]:
                del counts[pair]

    def edges(self) -> list[LearnedEdge]:
        """The learned edges, strongest evidence first."""
        out = []
        for (u, v), ahead in self.before.items():
            behind = self.before.get((v, u), 0)
            if ahead <= behind:
                continue
            n = ahead + behind
            if n < self.min_cooccurrences:
                continue
            chance = self.null.get((u, v), 0) + self.null.get((v, u), 0)
            spread = math.sqrt(max(chance, 1))
            lift, z = n / max(chance, 1), (n - chance) / spread
            if lift >= self.min_lift and z >= self.min_z:
                out.append(LearnedEdge(u, v, ahead / n, n, chance, lift, z))
        out.sort(key=lambda e: (-e.cooccurrences, e.cause, e.effect))
        return out

    def rules(self) -> CauseRules:
        return CauseRules((e.cause, e.effect) for e in self.edges())

    def state(self) -> LearnerState:
        return LearnerState(self.observed, self.first_time, self.last_time, dict(self.types),
                            [(u, v, n) for (u, v), n in self.before.items()],
                            [(u, v, n) for (u, v), n in self.null.items()],
                            [(e, list(t), list(k)) for e, (t, k) in self._recent.items()])

    def load(self, state: LearnerState) -> None:
        """Go on from `state` (counts added to what this learner holds)."""
        self.observed += state.observed
        for t in (state.first_time, state.last_time):
            if t is not None:
                self.first_time = t if self.first_time is None else min(self.first_time, t)
                self.last_time = t if self.last_time is None else max(self.last_time, t)
        self.types.update(state.types)
        self.before.update({(u, v): n for u, v, n in state.before})
        self.null.update({(u, v): n for u, v, n in state.null})
        for element, times, kinds in state.recent:
            self._recent[element] = (list(times), list(kinds))


class LearnedGraph:
    """The edges the room uses now: the operator's or a learned file's base edges, and the live
    learner's edges (added, never removing a base edge); `evidence` for the reason text."""

    def __init__(self, base: CauseRules | None, learned: list[LearnedEdge]) -> None:
        self.edges = {(e.cause, e.effect): e for e in learned}
        pairs = [(c, e) for c, effects in (base.direct.items() if base is not None else ()) for e in effects]
        base_pairs = set(pairs)
        pairs += [p for p in self.edges if p not in base_pairs and (p[1], p[0]) not in base_pairs]
        self.rules = CauseRules(pairs)

    def evidence(self, cause: str, effect: str) -> LearnedEdge | None:
        return self.edges.get((cause, effect))


def write_rules(path, edges: list[LearnedEdge]) -> None:
    """The learned edges as a rules file (`TELESUM_INCIDENT_RULES` reads it): a header, one edge a line,
    each with its evidence as a comment an operator can read and edit."""
    lines = ["cause_type,effect_type"]
    for e in edges:
        lines.append(f"{_csv(e.cause)},{_csv(e.effect)}")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("# learned by telesum incidents learn; one cause -> effect a line, evidence in the report\n")
        handle.write("\n".join(lines) + "\n")


def _csv(name: str) -> str:
    return '"' + name.replace('"', '""') + '"' if any(c in name for c in ',"\n#') or name.startswith(" ") else name
