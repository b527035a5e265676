"""A room's whole state as bytes (MessagePack), for a compacted topic keyed by partition.

`snapshot(room)` after the room was given every input up to offset X (and its events were taken);
`restore(config, data)` gives a room that goes on from X exactly as the first would have: the same
incidents, standing alarms, waiting alarms, pending inputs, event sequences and the cause learner's counts (the learned graph);
the timers are re-armed from the incidents. Not in it: the inputs of open incidents already sent
(`retained_inputs` after a restore lists only what came since; it serves the recompute fallback,
which does not use snapshots), so its size follows the open incidents, not their history. Inputs must be MessagePack-encodable (dicts, lists,
strings, numbers). The configuration (topology, rules, windows) is not in the snapshot: restore
with the same one.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import msgspec

from worker.incidents.alarms import Alarm, StandingAlarm
from worker.incidents.config import RoomConfig
from worker.incidents.incident import Incident
from worker.incidents.learn import LearnedEdge, LearnerState
from worker.incidents.room import _IDLE, IncidentRoom

VERSION = 2
# Version 1 held precedence counts of another kind: it restores without them (learning starts over).
_READS = (1, 2)


class _IncidentState(msgspec.Struct, array_like=True):
    incident_id: str
    anchor: Alarm
    first_time: float
    last_time: float
    last_link_time: float
    elements: dict[str, int]
    counts: dict[str, int]
    keys: list[StandingAlarm]
    alarms: int
    first_of_type: dict[str, Alarm]
    pending: list[Any]
    absorbed: list[str]
    sequence: int
    last_event_time: float
    dirty: bool


class _Learned(msgspec.Struct, array_like=True):
    learner: LearnerState
    in_use: list[tuple[str, str, float, float, int, int, float, float]]  # the edges the room used (LearnedEdge)
    relearned_at: float                                                  # when it last read them (event time)


class _RoomState(msgspec.Struct, array_like=True):
    version: int
    clock: float
    order: int
    waiting: list[tuple[float, int, Alarm]]
    incidents: list[_IncidentState]
    owners: list[tuple[str, str, str]]          # element, alarm type, incident id
    learned: Any                                # _Learned (version 2) or None
    settled: list[Any]
    counters: tuple[int, int, int]              # alarms in, incidents opened, incidents merged


def snapshot(room: IncidentRoom) -> bytes:
    """The room's state; take it only between calls (never while an event list is being built)."""
    order = next(room._order)
    room._order = itertools.count(order + 1)
    incidents = [_IncidentState(
        i.incident_id, i.anchor, i.first_time, i.last_time, i.last_link_time, dict(i.elements), dict(i.counts),
        list(i.keys.values()), i.alarms, dict(i.first_of_type), list(i.pending), list(i.absorbed),
        i.sequence, i.last_event_time, i.dirty) for i in room._open.values()]
    owners = [(key[0], key[1], incident.incident_id) for key, incident in room._owner.items()]
    learned = None
    if room.learner is not None:
        in_use = [(e.cause, e.effect, e.cause_with_effect, e.effect_with_cause, e.cooccurrences, e.chance, e.lift, e.z)
                  for e in (room.graph.edges.values() if room.graph is not None else ())]
        learned = _Learned(room.learner.state(), in_use, room._relearned_at)
    state = _RoomState(VERSION, room.clock, order, list(room._waiting), incidents, owners, learned,
                       list(room._settled), (room.alarms_in, room.incidents_opened, room.incidents_merged))
    return msgspec.msgpack.encode(state)


def restore(config: RoomConfig, data: bytes) -> IncidentRoom:
    """A room from `snapshot` bytes and the configuration it ran with. Raises ValueError when the
    bytes are not a snapshot of this version."""
    try:
        state = msgspec.msgpack.decode(data, type=_RoomState)
    except msgspec.DecodeError as exc:
        raise ValueError(f"not an incidents room snapshot: {exc}") from None
    if state.version not in _READS:
        raise ValueError(f"incidents room snapshot version {state.version}, this worker reads {_READS}")
    room = IncidentRoom(config)
    room.clock = state.clock
    room._order = itertools.count(state.order)
    room._waiting = [tuple(w) for w in state.waiting]
    for s in state.incidents:
        incident = Incident(s.incident_id, s.anchor, s.first_time, s.last_time, s.last_link_time,
                            elements=s.elements, counts=Counter(s.counts),
                            keys={k.key: k for k in s.keys}, alarms=s.alarms, first_of_type=s.first_of_type,
                            pending=s.pending, held=list(s.pending), absorbed=s.absorbed, sequence=s.sequence,
                            last_event_time=s.last_event_time, dirty=s.dirty)
        room._open[incident.incident_id] = incident
        for element in incident.elements:
            room._at.setdefault(element, set()).add(incident.incident_id)
    for element, alarm_type, incident_id in state.owners:
        incident = room._open[incident_id]
        room._owner[(element, alarm_type)] = incident
        room.state.standing[(element, alarm_type)] = incident.keys[(element, alarm_type)]
    for incident in sorted(room._open.values(), key=lambda i: i.first_time):
        room._arm(incident.last_time + config.idle_s, _IDLE, incident)
        if incident.dirty:
            room._changed(incident)
    if room.learner is not None and state.version >= 2 and state.learned is not None:
        learned = msgspec.convert(state.learned, _Learned)
        room.learner.load(learned.learner)
        room.relearn([LearnedEdge(*e) for e in learned.in_use])  # the graph it used, not one read anew
        room._relearned_at = learned.relearned_at
    room._settled = list(state.settled)
    room.alarms_in, room.incidents_opened, room.incidents_merged = state.counters
    return room
