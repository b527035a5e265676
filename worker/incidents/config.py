"""The room's configuration: the operator's topology and rules, and the named time windows."""

from __future__ import annotations

from dataclasses import dataclass

from worker.incidents.graph import CauseRules, Topology, load_rules, load_topology
from worker.incidents.learn import read_evidence


@dataclass(frozen=True)
class RoomConfig:
    """Why each default:

    - `late_s` 1 s: the wait for alarms arriving out of event-time order before they are grouped; an
      incident's `open` comes at most this long after its first alarm (the goal is 2 s).
    - `window_s` 300 s: an alarm joins an incident whose last alarm is at most this old — Alertmanager's
      5-minute `group_interval`/`resolve_timeout`, the usual re-raise period of a standing alarm.
    - `link_hops` 1: a new element joins only when linked to an element already in the incident, so
      an incident's elements stay one connected piece of the topology.
    - `max_hops` 2: the spread bound, hops from the incident's root (anchor) element: a fault reaches
      the element, its neighbours and theirs; beyond that it is another incident's job to explain.
    - `idle_s` 3600 s: resolve after an hour without an alarm; all alarms cleared resolves at once.
      Alarms that never clear (many sources send no clears) are taken as standing until silent this
      long: shorter, and a standing alarm's periodic repeats keep opening new incidents.
    - `update_interval_s` 10 s: updates are batched, one per incident at most this often.
    - `learn_causes`: with no rules file, learn the cause→effect graph from the alarms the room sees
      (`learn.py`) and group and name roots by it as by rules; off: the earliest alarm.
    - `learned_rules`: a graph learned before (`telesum incidents learn`) to start from; live learning
      adds to it.
    - `extend_rules`: with the operator's rules, learned edges may add to them (never override one).
    """

    topology: Topology | None = None
    rules: CauseRules | None = None
    late_s: float = 1.0
    window_s: float = 300.0
    link_hops: int = 1
    max_hops: int = 2
    idle_s: float = 3600.0
    update_interval_s: float = 10.0
    learn_causes: bool = True
    learned_rules: CauseRules | None = None
    learned_evidence: dict | None = None   # (cause, effect) -> LearnedEdge, from the learned file
    extend_rules: bool = False

    def __post_init__(self) -> None:
        if self.late_s < 0 or self.window_s <= 0 or self.idle_s <= 0 or self.update_interval_s < 0:
            raise ValueError("incident windows must be positive (late_s and update_interval_s may be 0)")
        if self.link_hops < 1 or self.max_hops < self.link_hops:
            raise ValueError("link_hops must be at least 1 and max_hops at least link_hops")

    @property
    def learns(self) -> bool:
        """Whether the room keeps learning the cause graph from its alarms."""
        return self.learn_causes and (self.rules is None or self.extend_rules)

    @property
    def grouping(self) -> str:
        """How alarms are grouped by the operator's files, as the events say it (the room says "learned"
        instead once learned rules are in use)."""
        if self.topology is not None and self.rules is not None:
            return "rules+topology"
        if self.topology is not None:
            return "topology"
        if self.rules is not None:
            return "rules"
        return "element+time"

    @classmethod
    def from_settings(cls, settings) -> RoomConfig:
        """From the `[incidents]` settings section (worker.settings.incidents.IncidentSettings)."""
        return cls(topology=load_topology(settings.topology) if settings.topology else None,
                   rules=load_rules(settings.rules) if settings.rules else None,
                   late_s=settings.late_s, window_s=settings.window_s, link_hops=settings.link_hops,
                   max_hops=settings.max_hops, idle_s=settings.idle_s,
                   update_interval_s=settings.update_interval_s, learn_causes=settings.learn_causes,
                   learned_rules=load_rules(settings.learned_rules) if settings.learned_rules else None,
                   learned_evidence=read_evidence(settings.learned_rules) if settings.learned_rules else None,
                   extend_rules=settings.extend_rules)
