"""The grouping rule: which open incident a new alarm joins, and when two incidents are one.

A new alarm (not a repeat: repeats stay with their standing alarm's incident) may join an open
incident whose last alarm is at most `window_s` older, holding an element within `link_hops` of the
alarm's element. How it relates to the incident's anchor (the alarm whose element the spread is
measured from) decides:

- `effect`: the rules make the anchor's type a cause of the alarm's type (or it is the same type), and
  the alarm is within `max_hops` of the anchor;
- `cause`: the alarm's type is a cause of every type in the incident, and every element of the
  incident is within `max_hops` of the alarm: the alarm becomes the anchor (a new root-cause link);
- `near` (no rules, or a type the rules do not know): within `max_hops` of the anchor, and at most
  `window_s` after the incident's last root-cause link (an alarm of the anchor's type or a rule link):
  an incident does not grow on proximity alone.

No topology: the same element stands for "near" (hops 0). No topology and no rules: alarms of one
element, each within `window_s` of the last (Alertmanager's `group_by: [element]`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from worker.incidents.alarms import Alarm
from worker.incidents.config import RoomConfig
from worker.incidents.incident import Incident

EFFECT, NEAR, CAUSE = "effect", "near", "cause"
_PREFERENCE = {EFFECT: 0, NEAR: 1, CAUSE: 2}


@dataclass(frozen=True, slots=True)
class Join:
    incident: Incident
    relation: str
    hops: int  # from the anchor after joining (a cause becomes the anchor: 0)


class Grouping:
    """Decides joins and merges; holds no state of its own but the configuration."""

    def __init__(self, config: RoomConfig) -> None:
        self.config = config
        self.topology = config.topology
        self.rules = config.rules

    def neighbourhood(self, element: str) -> Iterable[str]:
        """Elements whose incidents a new alarm on `element` may join."""
        if self.topology is None:
            return (element,)
        return self.topology.ball(element, self.config.link_hops).keys()

    def _hops(self, anchor: str, element: str) -> int | None:
        if anchor == element:
            return 0
        if self.topology is None:
            return None
        return self.topology.hops(anchor, element, self.config.max_hops)

    def _within(self, element: str, elements: Iterable[str]) -> bool:
        if self.topology is None:
            return all(e == element for e in elements)
        ball = self.topology.ball(element, self.config.max_hops)
        return all(e in ball for e in elements)

    def relation(self, alarm: Alarm, incident: Incident) -> Join | None:
        """How `alarm` relates to `incident`, or None when it does not join it."""
        window = self.config.window_s
        if alarm.time > incident.last_time + window or alarm.time < incident.first_time - window:
            return None
        anchor = incident.anchor
        hops = self._hops(anchor.element, alarm.element)
        rules = self.rules
        t, r = alarm.alarm_type, anchor.alarm_type
        if rules is not None and rules.knows(t) and rules.knows(r):
            if hops is not None and (t == r or rules.causes(r, t)):
                return Join(incident, EFFECT, hops)
            if rules.explains(t, incident.counts) and self._within(alarm.element, incident.elements):
                return Join(incident, CAUSE, 0)
            return None
        if hops is None:
            return None
        if t != r and alarm.time > incident.last_link_time + window:
            return None
        return Join(incident, NEAR, hops)

    @staticmethod
    def rank(join: Join) -> tuple:
        """Preferred join first: explained by the root, then nearest the anchor, then the oldest."""
        return (_PREFERENCE[join.relation], join.hops, join.incident.first_time, join.incident.incident_id)

    @staticmethod
    def is_link(alarm: Alarm, join: Join) -> bool:
        """Growth through a root-cause link (resets the incident's proximity-growth clock)."""
        return join.relation != NEAR or alarm.alarm_type == join.incident.anchor.alarm_type

    def can_absorb(self, survivor: Incident, other: Incident) -> bool:
        """Whether `other` turns out to be part of `survivor`: the rules make the survivor's anchor type a
        cause of every type of the other, whose elements are all within `max_hops` of the anchor, and
        their times overlap within the window."""
        rules = self.rules
        if rules is None or not rules.knows(survivor.anchor.alarm_type):
            return False
        if other.first_time > survivor.last_time + self.config.window_s or \
                survivor.first_time > other.last_time + self.config.window_s:
            return False
        return rules.explains(survivor.anchor.alarm_type, other.counts) and \
            self._within(survivor.anchor.element, other.elements)
