"""One incident: its alarms, its root, its state (`open` → `update`* → `resolve`) and its named timers.

The incident knows nothing of Kafka or of the other incidents: the room decides who joins, the
root-cause module names the root, and the incident keeps what its next event must say (the inputs
added since the last event) and when that event is due.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from worker.incidents.alarms import Alarm, StandingAlarm


class State(Enum):
    OPEN = "open"          # opened; updates follow
    RESOLVED = "resolved"  # every alarm cleared, or idle too long; no more events
    MERGED = "merged"      # absorbed by another incident; its last event names it


def incident_id_of(first: Alarm) -> str:
    """Stable across a replay: derived from the first alarm (its input, key and time), so a room
    rebuilt from the same inputs names its incidents the same."""
    digest = hashlib.blake2b(repr((first.input, first.element, first.alarm_type, first.time)).encode(),
                             digest_size=8).hexdigest()
    return f"inc-{digest}"


@dataclass(slots=True)
class Incident:
    """Alarms that belong together. `anchor` bounds the spread (hops are measured from its element):
    the first alarm, or a later one the rules make a cause of all the others; the root cause named in
    the events is chosen apart (`root_cause.py`). Only from the room's thread."""

    incident_id: str
    anchor: Alarm
    first_time: float
    last_time: float
    last_link_time: float            # the last growth through a root-cause link or the anchor
    state: State = State.OPEN
    elements: dict[str, int] = field(default_factory=dict)   # element -> hops from the anchor
    counts: Counter = field(default_factory=Counter)          # alarm type -> alarms (repeats included)
    keys: dict[tuple[str, str], StandingAlarm] = field(default_factory=dict)
    alarms: int = 0
    first_of_type: dict[str, Alarm] = field(default_factory=dict)
    pending: list[Any] = field(default_factory=list)         # inputs not yet in an event
    held: list[Any] = field(default_factory=list)            # every input, for a rebuild's range
    absorbed: list[str] = field(default_factory=list)        # incidents merged into this one, not yet told
    sequence: int = 0                                          # events sent
    last_event_time: float = 0.0
    dirty: bool = False                                        # something changed since the last event
    root_memo: tuple | None = None                             # (shape when chosen, root, reason)

    @property
    def shape(self) -> tuple:
        """What the root choice depends on in the incident: it is chosen again when this changes."""
        return (len(self.counts), len(self.keys), len(self.elements), self.first_time, self.anchor.time,
                self.anchor.element)

    @classmethod
    def start(cls, alarm: Alarm, standing: StandingAlarm) -> Incident:
        incident = cls(incident_id_of(alarm), alarm, alarm.time, alarm.time, alarm.time)
        incident.add(alarm, standing, hops=0)
        return incident

    @property
    def is_open(self) -> bool:
        return self.state is State.OPEN

    @property
    def types(self) -> set[str]:
        return set(self.counts)

    @property
    def active(self) -> int:
        return sum(1 for s in self.keys.values() if not s.cleared)

    def add(self, alarm: Alarm, standing: StandingAlarm | None, hops: int) -> None:
        """One more alarm (a raise, a repeat or a clear) and its input."""
        if not alarm.cleared:
            self.alarms += 1
            self.counts[alarm.alarm_type] += 1
            self.first_of_type.setdefault(alarm.alarm_type, alarm)
            if alarm.time < self.first_of_type[alarm.alarm_type].time:
                self.first_of_type[alarm.alarm_type] = alarm
        if standing is not None:
            self.keys[standing.key] = standing
        if alarm.element not in self.elements or hops < self.elements[alarm.element]:
            self.elements[alarm.element] = hops
        self.first_time = min(self.first_time, alarm.time)
        self.last_time = max(self.last_time, alarm.time)
        self.pending.append(alarm.input)
        self.held.append(alarm.input)
        self.dirty = True

    def absorb(self, other: Incident, hops_of) -> None:
        """Take every alarm of `other` (which ends as merged); `hops_of(element)` re-measures spread."""
        for element in other.elements:
            hops = hops_of(element)
            if element not in self.elements or hops < self.elements[element]:
                self.elements[element] = hops
        self.counts.update(other.counts)
        self.alarms += other.alarms
        for alarm_type, alarm in other.first_of_type.items():
            mine = self.first_of_type.get(alarm_type)
            if mine is None or alarm.time < mine.time:
                self.first_of_type[alarm_type] = alarm
        self.keys.update(other.keys)
        self.first_time = min(self.first_time, other.first_time)
        self.last_time = max(self.last_time, other.last_time)
        self.last_link_time = max(self.last_link_time, other.last_link_time)
        self.pending.extend(other.pending)
        self.held.extend(other.held)
        other.pending = []
        self.absorbed.append(other.incident_id)
        other.state = State.MERGED
        self.dirty = True

    def all_cleared(self) -> bool:
        return bool(self.keys) and all(s.cleared for s in self.keys.values())

    # Named timers, in event time.

    def update_due(self, now: float, update_interval_s: float) -> bool:
        """`update_interval`: changes are batched into one update at most this often."""
        return self.dirty and now >= self.last_event_time + update_interval_s

    def idle_due(self, now: float, idle_s: float) -> bool:
        """`idle`: resolved when no alarm joined for this long (alarms without clears age out)."""
        return now >= self.last_time + idle_s

    def take_pending(self, now: float) -> tuple[list[Any], list[str]]:
        """The inputs and merged incidents the next event reports; marks the event sent."""
        inputs, absorbed = self.pending, self.absorbed
        self.pending, self.absorbed = [], []
        self.sequence += 1
        self.last_event_time = now
        self.dirty = False
        return inputs, absorbed
