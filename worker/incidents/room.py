"""The incidents room: alarms in, incident events out, in the alarms' own time.

    room = IncidentRoom(RoomConfig(topology=..., rules=...))
    events = room.add(alarm)          # per alarm, in arrival order
    events += room.advance(now)       # per poll: `now` in event time (see below)

Event time: the room's clock is the latest alarm time seen, or a later `now` given to `advance`.
An alarm waits `late_s` behind the clock (alarms arriving a little out of order are sorted in), then
is placed: as a repeat or clear of its standing alarm, into an open incident (`correlate.py`), or as
a new incident whose `open` event is emitted at once. Timers fire on the clock: an incident's
changes go out as one `update` per `update_interval_s`; it resolves when all its alarms are cleared or
after `idle_s` without an alarm. Nothing depends on the wall clock, so a replay at any speed forms the
same incidents. Only from one thread.

How the Kafka layer commits (one room per input partition, so a partition never waits on another;
every alarm's `input` is its {topic, partition, offset}):

1. Hand the room every input up to offset X (`add`; a message that carries no alarm needs nothing),
   take its events, and take `snapshot.snapshot(room)`.
2. Publish the events and the snapshot (to a compacted topic, keyed by the partition) and commit
   X + 1 — exactly-once: all three in one transaction; at-least-once: commit once both are
   acknowledged. The committed offset never waits for an incident to resolve.
3. A new owner (after a SIGKILL or a rebalance) restores the partition's last snapshot
   (`snapshot.restore(config, data)`) and goes on with `add` from the committed offset: the same
   incidents, standing alarms, pending inputs and event sequences. At-least-once, the events since
   the last commit are sent again: a consumer keeps the first event listing an input (ids and
   groupings come out the same when `advance` only follows the alarms' own times; wall-clock ticks
   can move when a waiting alarm is placed, hence when an update goes out).

Without a compacted topic, the state can be recomputed instead: commit no further than the lowest
input of `retained_inputs()` (the alarms of open incidents and those waiting), and after a restart
`add` everything from the committed offset again — at-least-once, events re-sent as above, learned
statistics only from that range. `rebuild` re-adds inputs without events, for inputs known covered.
Clears of unknown alarms belong to no incident: `take_settled()` hands them over, covered at once.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from worker.incidents.alarms import Alarm, AlarmState
from worker.incidents.config import RoomConfig
from worker.incidents.correlate import CAUSE, Grouping
from worker.incidents.incident import Incident, State
from worker.incidents.learn import CauseLearner, LearnedEdge, LearnedGraph
from worker.incidents.root_cause import choose_root
from worker.incidents.text import build_event
from worker.messages import IncidentEvent, IncidentEventKind

_IDLE, _UPDATE = 0, 1
# How often the learned graph is read again: every RELEARN_EVERY alarms observed or RELEARN_S of event
# time, whichever comes first. Reading it is a pass over the type pairs and makes every open incident's root be
# chosen again, so not per alarm (every 60 s halved the six-day replay's rate); this often, a
# new network's graph forms within its first storm.
RELEARN_EVERY = 500
RELEARN_S = 600.0


class IncidentRoom:
    """Groups alarms into incidents; see the module docstring for time and commits."""

    def __init__(self, config: RoomConfig | None = None) -> None:
        self.config = config or RoomConfig()
        self.grouping = Grouping(self.config)
        self.state = AlarmState()
        self.learner = CauseLearner(self.config.topology, repeat_s=self.config.window_s) if self.config.learns else None
        self.graph: LearnedGraph | None = None   # the learned edges in use, with their evidence
        self.rules = self.config.rules            # the rules in use: the operator's, learned, or both
        self._rules_version = 0
        self._relearned_at = float("-inf")   # event time of the last reading
        if self.learner is not None or self.config.learned_rules is not None:
            self.relearn()
        self.clock = float("-inf")
        self._order = itertools.count()
        self._waiting: list[tuple[float, int, Alarm]] = []     # (time, arrival, alarm): the late-alarm wait
        self._open: dict[str, Incident] = {}
        self._at: dict[str, set[str]] = {}                      # element -> ids of open incidents holding it
        self._owner: dict[tuple[str, str], Incident] = {}       # reduction key -> its incident
        self._timers: list[tuple[float, int, int, str]] = []    # (due, order, kind, incident id)
        self._update_armed: set[str] = set()
        self._events: list[IncidentEvent] = []
        self._settled: list[Any] = []   # inputs that belong to no incident (clears of unknown alarms)
        self.alarms_in = 0
        self.incidents_opened = 0
        self.incidents_merged = 0

    # The API for the Kafka layer.

    def add(self, alarm: Alarm) -> list[IncidentEvent]:
        """One alarm, in arrival order; the events it makes due (often none: it waits `late_s`)."""
        self.alarms_in += 1
        heapq.heappush(self._waiting, (alarm.time, next(self._order), alarm))
        if alarm.time > self.clock:
            self.clock = alarm.time
        return self._run()

    def advance(self, now: float) -> list[IncidentEvent]:
        """Move the clock to `now` (event time: e.g. the last alarm time plus the wall time since)."""
        if now > self.clock:
            self.clock = now
        return self._run()

    def next_due(self) -> float | None:
        """The clock value at which `advance` next has work (a waiting alarm or a timer), or None."""
        heads = [self._waiting[0][0]] if self._waiting else []
        if self._timers:
            heads.append(self._timers[0][0])
        return min(heads) + self.config.late_s if heads else None

    def rebuild(self, alarms: Iterable[Alarm]) -> None:
        """Re-add alarms whose events were already sent (after a restart): same state, no events."""
        for alarm in alarms:
            self.add(alarm)

    def close(self) -> list[IncidentEvent]:
        """Place every waiting alarm and resolve every open incident (end of an offline replay)."""
        events = self.advance(self.clock + self.config.late_s)
        for incident in sorted(self._open.values(), key=lambda i: i.first_time):
            self._resolve(incident)
        return events + self._take()

    def relearn(self, edges: list[LearnedEdge] | None = None) -> None:
        """Read the learned graph again (or take `edges`, a restored room's) and group and name roots by
        it from now on."""
        base = self.config.rules if self.config.rules is not None else self.config.learned_rules
        if edges is None:
            edges = self.learner.edges() if self.learner is not None else []
        self.graph = LearnedGraph(base, edges, self.config.learned_evidence,
                                  learned_base=self.config.rules is None and self.config.learned_rules is not None)
        self.rules = self.graph.rules
        self.grouping.rules = self.rules
        self._rules_version += 1

    @property
    def grouping_name(self) -> str:
        """How alarms are grouped, as the events say it: the configuration's, or "learned" once learned
        rules are in use without the operator's."""
        if self.config.rules is None and self.rules is not None and len(self.rules):
            return "learned+topology" if self.config.topology is not None else "learned"
        return self.config.grouping

    def take_settled(self) -> list[Any]:
        """Inputs placed since the last call that belong to no incident (clears of alarms the room
        does not know): nothing will list them, so they count as covered."""
        settled, self._settled = self._settled, []
        return settled

    def open_incidents(self) -> list[IncidentEvent]:
        """A view of each open incident as an `update` (no inputs; nothing is marked sent)."""
        out = []
        for incident in self._open.values():
            root, reason = self._root(incident)
            out.append(build_event(incident, root, reason, self.grouping_name, "update", [], [],
                                   self.clock))
        return out

    def follow_up(self, incident_id: str, model_summary: str) -> IncidentEvent | None:
        """An `update` of an open incident carrying the model's text (`model_summary`), with the incident's
        next sequence number and no inputs (its pending inputs and merges wait for its next update);
        None when the incident is no longer open (its `resolve` stays its last event) or the text is empty."""
        incident = self._open.get(incident_id)
        if incident is None or not model_summary.strip():
            return None
        root, reason = self._root(incident)
        incident.sequence += 1
        return build_event(incident, root, reason, self.grouping_name, "update", [], [], self.clock,
                           model_summary=model_summary.strip())

    def retained_inputs(self) -> Iterator[Any]:
        """Inputs a rebuild needs: the alarms of open incidents and those still waiting."""
        for _, _, alarm in self._waiting:
            yield alarm.input
        for incident in self._open.values():
            yield from incident.held

    def uncovered_inputs(self) -> Iterator[Any]:
        """Inputs given to the room that no event has listed yet."""
        for _, _, alarm in self._waiting:
            yield alarm.input
        for incident in self._open.values():
            yield from incident.pending

    # Placing alarms.

    def _run(self) -> list[IncidentEvent]:
        """Waiting alarms and timers up to the watermark, in event-time order (a timer before an alarm
        of the same time), so how far one call moves the clock never changes what happens."""
        watermark = self.clock - self.config.late_s
        waiting, timers = self._waiting, self._timers
        while True:
            alarm_at = waiting[0][0] if waiting and waiting[0][0] <= watermark else None
            timer_at = timers[0][0] if timers and timers[0][0] <= watermark else None
            if timer_at is not None and (alarm_at is None or timer_at <= alarm_at):
                self._fire(*heapq.heappop(timers))
            elif alarm_at is not None:
                self._place(heapq.heappop(waiting)[2])
            else:
                return self._take()

    def _fire(self, due: float, _order: int, kind: int, incident_id: str) -> None:
        incident = self._open.get(incident_id)
        if incident is None:
            return
        if kind == _IDLE:
            if incident.idle_due(due, self.config.idle_s):
                self._resolve(incident)
            else:
                self._arm(incident.last_time + self.config.idle_s, _IDLE, incident)
        else:
            self._update_armed.discard(incident_id)
            if incident.dirty:
                self._emit(incident, "update")

    def _place(self, alarm: Alarm) -> None:
        if self.learner is not None and not alarm.cleared:
            self.learner.observe(alarm.element, alarm.alarm_type, alarm.time)
            if self.learner.observed % RELEARN_EVERY == 0 or alarm.time >= self._relearned_at + RELEARN_S:
                self.relearn()
                self._relearned_at = alarm.time
        standing, is_new = self.state.apply(alarm)
        if standing is None:  # a clear of an alarm the room does not know
            self._settled.append(alarm.input)
            return
        if not is_new:  # a repeat or a clear: its standing alarm's incident
            incident = self._owner[standing.key]
            incident.add(alarm, standing if not alarm.cleared else None, incident.elements[alarm.element])
            if alarm.cleared and incident.all_cleared():
                self._resolve(incident)
            else:
                self._changed(incident)
            return
        joins = []
        for incident_id in {i for e in self.grouping.neighbourhood(alarm.element) for i in self._at.get(e, ())}:
            join = self.grouping.relation(alarm, self._open[incident_id])
            if join is not None:
                joins.append(join)
        if not joins:
            self._start(alarm, standing)
            return
        joins.sort(key=self.grouping.rank)
        best = joins[0]
        incident = best.incident
        if best.relation == CAUSE:
            self._reanchor(incident, alarm)
        incident.add(alarm, standing, best.hops)
        if self.grouping.is_link(alarm, best):
            incident.last_link_time = max(incident.last_link_time, alarm.time)
        self._hold(incident, alarm.element, standing.key)
        for other in joins[1:]:
            if other.incident.is_open and self.grouping.can_absorb(incident, other.incident):
                self._merge(incident, other.incident)
        self._changed(incident)

    def _start(self, alarm: Alarm, standing) -> None:
        incident = Incident.start(alarm, standing)
        self._open[incident.incident_id] = incident
        self._hold(incident, alarm.element, standing.key)
        self.incidents_opened += 1
        self._emit(incident, "open")
        self._arm(alarm.time + self.config.idle_s, _IDLE, incident)

    def _hold(self, incident: Incident, element: str, key: tuple[str, str]) -> None:
        self._at.setdefault(element, set()).add(incident.incident_id)
        self._owner[key] = incident

    def _reanchor(self, incident: Incident, alarm: Alarm) -> None:
        incident.anchor = alarm
        topology, reach = self.config.topology, self.config.max_hops
        ball = topology.ball(alarm.element, reach) if topology is not None else {alarm.element: 0}
        incident.elements = {e: ball.get(e, reach) for e in incident.elements}

    def _merge(self, survivor: Incident, other: Incident) -> None:
        topology, reach = self.config.topology, self.config.max_hops
        ball = topology.ball(survivor.anchor.element, reach) if topology is not None else {}
        self._emit(other, "resolve", merged_into=survivor.incident_id)
        survivor.absorb(other, lambda e: ball.get(e, reach))
        for key in other.keys:
            self._owner[key] = survivor
        for element in other.elements:
            held = self._at.get(element)
            if held is not None:
                held.discard(other.incident_id)
                held.add(survivor.incident_id)
        del self._open[other.incident_id]
        self.incidents_merged += 1

    def _resolve(self, incident: Incident) -> None:
        self._emit(incident, "resolve")
        incident.state = State.RESOLVED
        del self._open[incident.incident_id]
        for element in incident.elements:
            held = self._at.get(element)
            if held is not None:
                held.discard(incident.incident_id)
                if not held:
                    del self._at[element]
        for key in incident.keys:
            if self._owner.get(key) is incident:
                del self._owner[key]
                self.state.forget(key)

    # Timers and events.

    def _changed(self, incident: Incident) -> None:
        if incident.incident_id not in self._update_armed:
            self._update_armed.add(incident.incident_id)
            self._arm(incident.last_event_time + self.config.update_interval_s, _UPDATE, incident)

    def _arm(self, due: float, kind: int, incident: Incident) -> None:
        heapq.heappush(self._timers, (due, next(self._order), kind, incident.incident_id))

    def _root(self, incident: Incident) -> tuple[Alarm, str]:
        """The root as `choose_root` names it; it depends on the incident and the rules in use alone, so
        it is chosen again only when its types, standing alarms, elements or anchor or the rules changed."""
        shape = (incident.shape, self._rules_version)
        if incident.root_memo is not None and incident.root_memo[0] == shape:
            return incident.root_memo[1], incident.root_memo[2]
        root, reason = choose_root(incident, self.rules, self.config.topology, self.config.max_hops,
                                   self.graph)
        if self.grouping_name == "element+time":
            reason += "; no topology and no rules: grouped per element and time (Alertmanager-style)"
        incident.root_memo = (shape, root, reason)
        return root, reason

    def _emit(self, incident: Incident, kind: IncidentEventKind, merged_into: str | None = None) -> None:
        root, reason = self._root(incident)
        inputs, absorbed = incident.take_pending(self.clock)
        self._events.append(build_event(incident, root, reason, self.grouping_name, kind, inputs, absorbed,
                                        self.clock, merged_into))

    def _take(self) -> list[IncidentEvent]:
        events, self._events = self._events, []
        return events
