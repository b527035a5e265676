"""Small hand-made topologies, rules and alarm streams for the incidents room."""

from __future__ import annotations

import pytest

from worker.incidents import Alarm, CauseRules, IncidentRoom, RoomConfig, Topology


def chain(*elements: str) -> Topology:
    """a - b - c - ...: each element linked to the next."""
    return Topology(zip(elements, elements[1:]))


@pytest.fixture
def make_room():
    """make_room(topology=..., rules=[("A", "B")], **windows) -> IncidentRoom."""

    def make(topology: Topology | None = None, rules=None, **windows) -> IncidentRoom:
        return IncidentRoom(RoomConfig(topology=topology, rules=CauseRules(rules) if rules is not None else None,
                                       **windows))

    return make


def play(room: IncidentRoom, alarms: list[Alarm], close: bool = True) -> list:
    """Every alarm through the room with the clock ticking as a poll loop would; all events."""
    events = []
    for alarm in alarms:
        while (due := room.next_due()) is not None and due < alarm.time:
            events += room.advance(due)
        events += room.add(alarm)
    if close:
        events += room.close()
    return events


def owners(events) -> dict:
    """input -> the incident it ended in (merges followed)."""
    merged = {e.incident_id: e.merged_into for e in events if e.merged_into}
    out = {}
    for event in events:
        for item in event.inputs:
            assert item not in out, f"input {item} in two events"
            out[item] = event.incident_id
    for item, incident_id in out.items():
        while incident_id in merged:
            incident_id = merged[incident_id]
        out[item] = incident_id
    return out
