"""The cause→effect graph between alarm types, learned from the alarms themselves.

An alarm is a raise: a repeat of the same type on the same element within `repeat_s` of its last is
the same alarm standing and is not counted again (a standing alarm re-raised every few minutes would
otherwise count as many faults). Each alarm, once `lag_s` of event time has passed it, is counted with the types of the alarms on its
element and its topology neighbours (no topology: the same element only) within `lag_s` either side:
`near[(u, v)]`, "an alarm of v had an alarm of u near it". The same count one `shift_s` earlier
(`chance[(u, v)]`) is what chance gives on that neighbourhood at that load: bursty networks
co-occur by themselves.

A pair is related when it co-occurs clearly more than chance: `near[u, v] + near[v, u]` at least
`min_cooccurrences`, at least `min_lift` times the chance count and `min_z` standard deviations above it
(Poisson). It is oriented by which type the other needs: an effect comes with its cause, while a
cause does not always bring a given effect, so u → v when P(u near | v) > P(v near | u). Not by time:
in telecom networks an effect is often reported before its cause (detection and integration delays),
and related alarms are often raised in the same second; on the development data set the order of
first appearance disagreed with the experts' graph more often than it agreed
(docs/incidents.md#learning-the-cause-graph). The rules the room uses are these edges, read
transitively as the operator's rules are (graph.CauseRules).

Why these defaults: `repeat_s` 300 s, the room's `window_s` (the usual re-raise period of a standing
alarm); `lag_s` 60 s, the spread of one fault's alarms over an element and its neighbours
(an incident's `window_s` is for standing alarms' repeats, not for cause and effect); `shift_s` 1 h,
far enough that the fault is over, near enough that the load is alike; `min_z` 5 and `min_lift` 2 keep
a pair only when chance cannot explain it on any network of this size (hundreds of type pairs tested).

Memory is bounded: the last raise of each (element, type) within `repeat_s`, per element the alarms of the last `shift_s + 2 lag_s` (at most `max_recent` each,
silent elements dropped), the alarms of the last `lag_s` waiting to be counted, and at most
`max_pairs` type pairs (the rarest dropped beyond it). Only from one thread.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import msgspec

from worker.incidents.graph import CauseRules, Topology


@dataclass(frozen=True, slots=True)
class LearnedEdge:
    """u → v with its evidence: how often the cause was near the effect's alarms (`cause_with_effect`,
    P(u near | v)) and the effect near the cause's (`effect_with_cause`); `cooccurrences`, the effect's
    alarms with the cause near; the pair's chance count (both ways, the same alarms an hour earlier),
    and the lift and z of both ways' count over it."""

    cause: str
    effect: str
    cause_with_effect: float
    effect_with_cause: float
    cooccurrences: int
    chance: int
    lift: float
    z: float

    def evidence(self) -> str:
        return (f"{self.cause} near {self.cause_with_effect:.0%} of {self.effect}, {self.effect} near "
                f"{self.effect_with_cause:.0%} of {self.cause}; {self.cooccurrences} co-occurrences")

    def as_dict(self) -> dict[str, Any]:
        return {"cause": self.cause, "effect": self.effect, "cause_with_effect": round(self.cause_with_effect, 4),
                "effect_with_cause": round(self.effect_with_cause, 4), "cooccurrences": self.cooccurrences,
                "chance": self.chance, "lift": round(self.lift, 2), "z": round(self.z, 1)}


class LearnerState(msgspec.Struct, array_like=True):
    """What a restart needs (room snapshots)."""

    observed: int
    repeats: int
    raised: list[tuple[str, str, float]]
    first_time: float | None
    last_time: float | None
    types: dict[str, int]
    near: list[tuple[str, str, int]]
    chance: list[tuple[str, str, int]]
    recent: list[tuple[str, list[float], list[str]]]
    waiting: list[tuple[float, str, str]]


class CauseLearner:
    """Counts co-occurrence and chance per type pair from a stream of alarms; `edges()` reads the graph."""

    def __init__(self, topology: Topology | None = None, *, lag_s: float = 60.0, shift_s: float = 3600.0,
                 repeat_s: float = 300.0, min_cooccurrences: int = 10, min_lift: float = 2.0, min_z: float = 5.0,
                 max_recent: int = 64, max_pairs: int = 200_000) -> None:
        if lag_s <= 0 or shift_s <= 2 * lag_s:
            raise ValueError("the learner needs lag_s > 0 and shift_s > 2 * lag_s")
        self.topology = topology
        self.lag_s, self.shift_s, self.repeat_s = lag_s, shift_s, repeat_s
        self.min_cooccurrences, self.min_lift, self.min_z = min_cooccurrences, min_lift, min_z
        self.max_recent, self.max_pairs = max_recent, max_pairs
        self.near: Counter = Counter()
        self.chance: Counter = Counter()
        self.types: Counter = Counter()    # alarms counted, per type
        self.observed = 0
        self.repeats = 0                   # alarms not counted: repeats of a standing alarm
        self._raised: dict[tuple[str, str], float] = {}  # (element, type) -> its last alarm's time
        self.first_time: float | None = None
        self.last_time: float | None = None
        self._recent: dict[str, tuple[list[float], list[str]]] = {}  # element -> (times, types), time order
        self._waiting: list[tuple[float, str, str]] = []              # heap: (time, element, type) to count

    def observe(self, element: str, alarm_type: str, time: float) -> None:
        """One alarm, in about event-time order (the room places them so); counted `lag_s` later."""
        self.observed += 1
        if self.observed % 10_000 == 0:
            self._forget_silent()
        key = (element, alarm_type)
        last = self._raised.get(key)
        self._raised[key] = time if last is None else max(last, time)
        if last is not None and abs(time - last) <= self.repeat_s:
            self.repeats += 1
            return
        if self.first_time is None or time < self.first_time:
            self.first_time = time
        if self.last_time is None or time > self.last_time:
            self.last_time = time
        self._remember(element, alarm_type, time)
        heapq.heappush(self._waiting, (time, element, alarm_type))
        self._count_until(self.last_time - self.lag_s)
        self._trim(element)

    def flush(self) -> None:
        """Count every alarm still waiting (the end of a history: nothing more will come near them)."""
        self._count_until(float("inf"))

    def _count_until(self, horizon: float) -> None:
        waiting = self._waiting
        while waiting and waiting[0][0] <= horizon:
            time, element, alarm_type = heapq.heappop(waiting)
            self.types[alarm_type] += 1
            for u in self._types_near(element, time, time - self.lag_s, time + self.lag_s) - {alarm_type}:
                self.near[(u, alarm_type)] += 1
            earlier = time - self.shift_s
            for u in self._types_near(element, time, earlier - self.lag_s, earlier + self.lag_s) - {alarm_type}:
                self.chance[(u, alarm_type)] += 1
        if len(self.near) + len(self.chance) > self.max_pairs:
            self._drop_rare_pairs()

    def _types_near(self, element: str, time: float, low: float, high: float) -> set[str]:
        near = self.topology.ball(element, 1) if self.topology is not None else (element,)
        found: set[str] = set()
        for e in near:
            held = self._recent.get(e)
            if held is not None:
                times, kinds = held
                found.update(kinds[bisect.bisect_left(times, low):bisect.bisect_right(times, high)])
        return found

    def _remember(self, element: str, alarm_type: str, time: float) -> None:
        times, kinds = self._recent.setdefault(element, ([], []))
        at = bisect.bisect_right(times, time)
        times.insert(at, time)
        kinds.insert(at, alarm_type)

    def _trim(self, element: str) -> None:
        """Drop what no alarm still to be counted can need (its chance window reaches `shift_s + lag_s`
        back), and beyond `max_recent` the oldest."""
        times, kinds = self._recent[element]
        oldest = self._waiting[0][0] if self._waiting else times[-1]
        keep = max(bisect.bisect_left(times, oldest - self.shift_s - self.lag_s), len(times) - self.max_recent)
        if keep > 0:
            del times[:keep], kinds[:keep]

    def _forget_silent(self) -> None:
        horizon = (self.last_time or 0.0) - self.shift_s - 2 * self.lag_s
        for element in [e for e, (times, _) in self._recent.items() if not times or times[-1] < horizon]:
            del self._recent[element]
        horizon = (self.last_time or 0.0) - self.repeat_s
        for key in [k for k, t in self._raised.items() if t < horizon]:
            del self._raised[key]

    def _drop_rare_pairs(self) -> None:
        """The rarer half of the pairs goes (those counted as often as the median or less): a pair that
        rare is far from the evidence an edge needs."""
        for counts in (self.near, self.chance):
            if counts:
                median = sorted(counts.values())[len(counts) // 2]
                for pair in [p for p, n in counts.items() if n <= median]:
                    del counts[pair]

    def edges(self) -> list[LearnedEdge]:
        """The learned edges from the alarms counted so far, most co-occurrences first."""
        out = []
        for (u, v), u_near_v in self.near.items():
            if u > v and (v, u) in self.near:
                continue  # each pair once
            v_near_u = self.near.get((v, u), 0)
            n = u_near_v + v_near_u
            if n < self.min_cooccurrences:
                continue
            chance = self.chance.get((u, v), 0) + self.chance.get((v, u), 0)
            lift, z = n / max(chance, 1), (n - chance) / math.sqrt(max(chance, 1))
            if lift < self.min_lift or z < self.min_z:
                continue
            p_u, p_v = u_near_v / max(self.types[v], 1), v_near_u / max(self.types[u], 1)  # P(u|v), P(v|u)
            if p_u > p_v:
                out.append(LearnedEdge(u, v, p_u, p_v, u_near_v, chance, lift, z))
            elif p_v > p_u:
                out.append(LearnedEdge(v, u, p_v, p_u, v_near_u, chance, lift, z))
        out.sort(key=lambda e: (-e.cooccurrences, e.cause, e.effect))
        return out

    def rules(self) -> CauseRules:
        return CauseRules((e.cause, e.effect) for e in self.edges())

    def state(self) -> LearnerState:
        return LearnerState(self.observed, self.repeats, [(e, t, when) for (e, t), when in self._raised.items()],
                            self.first_time, self.last_time, dict(self.types),
                            [(u, v, n) for (u, v), n in self.near.items()],
                            [(u, v, n) for (u, v), n in self.chance.items()],
                            [(e, list(t), list(k)) for e, (t, k) in self._recent.items()],
                            list(self._waiting))

    def load(self, state: LearnerState) -> None:
        """Go on from `state` (counts added to what this learner holds)."""
        self.observed += state.observed
        self.repeats += state.repeats
        for element, alarm_type, when in state.raised:
            self._raised[(element, alarm_type)] = max(when, self._raised.get((element, alarm_type), when))
        for t in (state.first_time, state.last_time):
            if t is not None:
                self.first_time = t if self.first_time is None else min(self.first_time, t)
                self.last_time = t if self.last_time is None else max(self.last_time, t)
        self.types.update(state.types)
        self.near.update({(u, v): n for u, v, n in state.near})
        self.chance.update({(u, v): n for u, v, n in state.chance})
        for element, times, kinds in state.recent:
            self._recent[element] = (list(times), list(kinds))
        for item in state.waiting:
            heapq.heappush(self._waiting, tuple(item))


class LearnedGraph:
    """The edges the room uses now: base edges (the operator's rules, or a learned file's) and the live
    learner's edges (added, never removing or turning round a base edge); `evidence` for the reason
    text: a live edge's, else a learned file's. `learned_base`: the base edges were learned too."""

    def __init__(self, base: CauseRules | None, learned: list[LearnedEdge],
                 base_evidence: dict[tuple[str, str], LearnedEdge] | None = None, learned_base: bool = False) -> None:
        self.edges = {(e.cause, e.effect): e for e in learned}
        self.base_evidence = base_evidence or {}
        self.learned_base = learned_base
        pairs = [(c, e) for c, effects in (base.direct.items() if base is not None else ()) for e in effects]
        base_pairs = set(pairs)
        pairs += [p for p in self.edges if p not in base_pairs and (p[1], p[0]) not in base_pairs]
        self.rules = CauseRules(pairs)

    def evidence(self, cause: str, effect: str) -> LearnedEdge | None:
        return self.edges.get((cause, effect)) or self.base_evidence.get((cause, effect))


# A learned rules file's columns: the two a rules file needs, then the evidence (optional when read).
RULES_COLUMNS = ("cause_type", "effect_type", "cause_with_effect", "effect_with_cause", "cooccurrences", "chance",
                 "lift", "z")


def write_rules(path, edges: list[LearnedEdge]) -> None:
    """The learned edges as a rules file (`TELESUM_INCIDENT_RULES` and `TELESUM_INCIDENT_LEARNED_RULES`
    read it): a header, one edge a line with its evidence in the columns after the two names (a rules
    file reads only the first two; an operator may delete, add or edit lines)."""
    lines = [",".join(RULES_COLUMNS)]
    for e in edges:
        lines.append(f"{_csv(e.cause)},{_csv(e.effect)},{e.cause_with_effect:.4f},{e.effect_with_cause:.4f},"
                     f"{e.cooccurrences},{e.chance},{e.lift:.2f},{e.z:.1f}")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("# learned by telesum incidents learn: cause -> effect, then the evidence (docs/incidents.md)\n")
        handle.write("\n".join(lines) + "\n")


def read_evidence(path) -> dict[tuple[str, str], LearnedEdge]:
    """The evidence columns of a learned rules file, per edge; lines without them (an operator's own)
    have none. The rules themselves are read by graph.load_rules."""
    import csv

    found = {}
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.reader(handle):
            cells = [c.strip() for c in row]
            if len(cells) < len(RULES_COLUMNS) or cells[0].startswith("#") or cells[0] == RULES_COLUMNS[0]:
                continue
            try:
                numbers = [float(c) for c in cells[2:len(RULES_COLUMNS)]]
            except ValueError:
                continue
            found[(cells[0], cells[1])] = LearnedEdge(cells[0], cells[1], numbers[0], numbers[1], int(numbers[2]),
                                                      int(numbers[3]), numbers[4], numbers[5])
    return found


def _csv(name: str) -> str:
    return '"' + name.replace('"', '""') + '"' if any(c in name for c in ',"\n#') or name.startswith(" ") else name
