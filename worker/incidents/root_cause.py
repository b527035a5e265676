"""Which alarm of an incident is its root cause, and why, in words.

With rules: the alarm type that the rules make a cause of every other type in the incident (when
several, or none explains all, the one explaining the most alarms); among that type's alarms the most
upstream one — the element nearest to all the incident's other elements — then the earliest. Without
rules: the type that most often came first in past incidents (`learn.py`), else the earliest alarm. The reason names the rule or the fallback, so an operator can check it.
"""

from __future__ import annotations

from worker.incidents.alarms import Alarm
from worker.incidents.graph import CauseRules, Topology
from worker.incidents.incident import Incident
from worker.incidents.learn import PrecedenceStats

_REASON_EFFECTS_SHOWN = 4


def choose_root(incident: Incident, rules: CauseRules | None, topology: Topology | None,
                max_hops: int, learned: PrecedenceStats | None = None) -> tuple[Alarm, str]:
    """(root alarm, reason) for the incident's alarms as they stand."""
    types = sorted(incident.types)  # sorted: ties resolve the same in every run
    firsts = incident.first_of_type
    seen = {t: n for n, t in enumerate(firsts)}  # arrival order: the tie-break below the time
    if rules is None and learned is not None and len(types) > 1:
        best = min(types, key=lambda t: (-learned.score(t, types), firsts[t].time, seen[t]))
        share = learned.score(best, types) / (len(types) - 1)
        root = _upstream(incident, best, topology, max_hops)
        where = "; upstream" if topology is not None and len(incident.elements) > 1 else ""
        return root, (f"learned: {best} came before the other types in {share:.0%} of past incidents"
                      f"{where}, earliest")
    if rules is None or len(types) == 1 or not any(rules.knows(t) for t in types):
        root = min(firsts.values(), key=lambda a: a.time)
        how = "no cause rules" if rules is None else "no rule links its types"
        if len(types) == 1:
            how = "one alarm type"
        return root, f"earliest alarm ({how})"
    explaining = [t for t in types if rules.explains(t, types)]
    if explaining:
        best = min(explaining, key=lambda t: (firsts[t].time, seen[t]))
        effects = rules.direct_effects(best, types)
        shown = ", ".join(effects[:_REASON_EFFECTS_SHOWN]) + (" …" if len(effects) > _REASON_EFFECTS_SHOWN else "")
        why = f"rule: {best} causes {shown}"
    else:  # no type explains all: the one explaining most alarms
        best = min(types, key=lambda t: (-sum(n for u, n in incident.counts.items()
                                              if u == t or rules.causes(t, u)), firsts[t].time, seen[t]))
        explained = sum(1 for u in types if u != best and rules.causes(best, u))
        why = f"rule: {best} causes {explained} of the {len(types) - 1} other types"
    root = _upstream(incident, best, topology, max_hops)
    where = "; upstream" if topology is not None and len(incident.elements) > 1 else ""
    return root, why + where + ", earliest"


def _upstream(incident: Incident, alarm_type: str, topology: Topology | None, max_hops: int) -> Alarm:
    """The alarm of `alarm_type` whose element is nearest to the incident's other elements, earliest
    as tie-break (the incident keeps the first alarm of each type per element it holds)."""
    candidates = [s.first for s in incident.keys.values() if s.first.alarm_type == alarm_type]
    if not candidates:
        return incident.first_of_type[alarm_type]
    if topology is None or len(candidates) == 1:
        return min(candidates, key=lambda a: a.time)
    elements = list(incident.elements)
    reach = 2 * max_hops + 1

    def spread(alarm: Alarm) -> int:
        ball = topology.ball(alarm.element, reach)
        return sum(ball.get(e, reach + 1) for e in elements)

    return min(candidates, key=lambda a: (spread(a), a.time))
