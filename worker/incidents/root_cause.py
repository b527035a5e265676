"""Which alarm of an incident is its root cause, and why, in words.

With rules (the operator's, learned ones, or both): the alarm type that the rules make a cause of every
other type in the incident (when several, or none explains all, the one explaining the most alarms);
among that type's alarms the most upstream one — the element nearest to all the incident's other
elements — then the earliest. Without rules, or when no rule links its types: the earliest alarm. The
reason names the rule and, for a learned edge, its evidence, so an operator can check it:
`learned: A3 → A7 (A3 near 93% of A7, A7 near 61% of A3; 412 co-occurrences); upstream, earliest`.
"""

from __future__ import annotations

from worker.incidents.alarms import Alarm
from worker.incidents.graph import CauseRules, Topology
from worker.incidents.incident import Incident
from worker.incidents.learn import LearnedGraph

_REASON_EFFECTS_SHOWN = 4
_REASON_EVIDENCE_SHOWN = 2


def choose_root(incident: Incident, rules: CauseRules | None, topology: Topology | None,
                max_hops: int, learned: LearnedGraph | None = None) -> tuple[Alarm, str]:
    """(root alarm, reason) for the incident's alarms as they stand; `learned` gives the evidence of
    learned edges among `rules`."""
    types = sorted(incident.types)  # sorted: ties resolve the same in every run
    firsts = incident.first_of_type
    seen = {t: n for n, t in enumerate(firsts)}  # arrival order: the tie-break below the time
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
        why = _because(best, effects, learned, f"causes {_listed(effects)}")
    else:  # no type explains all: the one explaining most alarms
        best = min(types, key=lambda t: (-sum(n for u, n in incident.counts.items()
                                              if u == t or rules.causes(t, u)), firsts[t].time, seen[t]))
        effects = [u for u in types if u != best and rules.causes(best, u)]
        why = _because(best, effects, learned, f"causes {len(effects)} of the {len(types) - 1} other types")
    root = _upstream(incident, best, topology, max_hops)
    where = "; upstream" if topology is not None and len(incident.elements) > 1 else ""
    return root, why + where + ", earliest"


def _listed(names: list[str]) -> str:
    return ", ".join(names[:_REASON_EFFECTS_SHOWN]) + (" …" if len(names) > _REASON_EFFECTS_SHOWN else "")


def _because(cause: str, effects: list[str], learned: LearnedGraph | None, rule_text: str) -> str:
    """'rule: A3 causes A7, A9', or with learned edges among them their evidence:
    'learned: A3 → A7 (A3 near 93% of A7, …), A3 → A9 (…); A3 causes 3 of the 4 other types'."""
    found = [learned.evidence(cause, e) for e in effects] if learned is not None else []
    shown = [e for e in found if e is not None]
    if not shown:
        return f"{'learned' if learned is not None and learned.learned_base else 'rule'}: {cause} {rule_text}"
    shown.sort(key=lambda e: -e.cooccurrences)
    text = ", ".join(f"{e.cause} → {e.effect} ({e.evidence()})" for e in shown[:_REASON_EVIDENCE_SHOWN])
    if len(shown) > _REASON_EVIDENCE_SHOWN or len(shown) < len(effects):
        text += f"; {cause} {rule_text}"
    return f"learned: {text}"


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
