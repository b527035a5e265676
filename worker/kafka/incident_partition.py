"""One input partition's incidents room and what of it is covered, for the incident loop.

An input is *covered* once an acknowledged output lists it: an incident event's `inputs` (exactly-once:
the event is in the committed transaction), or, when the incident loop answers alone, a dead letter.
Messages that carry no alarm, and clears the room settles at once, are covered when fed.

What is committed per partition (the room's docstring, worker/incidents/room.py, gives the rule):

1. offset = min(first uncovered offset, lowest input the room retains), so the open incidents can
   always be recomputed from the uncommitted range;
2. metadata = {"covered_through": first uncovered offset, "listed": ...}. `covered_through` alone is
   not enough: an incident's `open` lists its first alarm at once while an earlier alarm still waits
   in another incident's batched update, so covered inputs lie above the first uncovered one.
   `listed` is a bitmap (zlib, base64) over the answered inputs from `covered_through` on, in feed
   order: which of them are covered already.
3. A new owner (after a SIGKILL or a rebalance) feeds inputs below `covered_through` to `rebuild` (their
   events are dropped: they were sent) and the rest to `add`; every input below `covered_through` or
   set in `listed` is removed from the events that come out (an event left with nothing new to say is
   dropped, a `resolve` never). So each input is listed once, whatever the room decides the second time.

Only from the incident loop's thread.
"""

from __future__ import annotations

import json
import logging
import time
import zlib
from collections import deque
from collections.abc import Iterable

import msgspec
from kafka import TopicPartition

from worker.incidents import Alarm, IncidentRoom, RoomConfig
from worker.kafka.answered import MAX_METADATA_CHARS, Listed, pack_bits, unpack_bits
from worker.messages import IncidentEvent

log = logging.getLogger(__name__)

wall_clock = time.monotonic  # the wall time the room's clock moves on by between alarms (a test replaces it)


class InputRef(msgspec.Struct, frozen=True, omit_defaults=True):
    """Where an alarm came from, as events list it; `index` only for an item of a batch message."""

    topic: str
    partition: int
    offset: int
    index: int | None = None


class Restore(msgspec.Struct, frozen=True):
    """What the last commit says of a partition: everything below `covered_through` is listed, and
    of the answered inputs from there on, those whose bit is set in `listed`."""

    covered_through: int
    listed: bytes = b""

    @staticmethod
    def is_snapshot(metadata: str | None) -> bool:
        """Committed with a state topic: the partition's snapshot there goes with this offset."""
        try:
            return bool(metadata) and json.loads(metadata).get("snapshot") is True
        except (ValueError, AttributeError):
            return False

    @classmethod
    def from_metadata(cls, metadata: str | None) -> Restore | None:
        if not metadata:
            return None
        try:
            found = json.loads(metadata)
            if found.get("snapshot"):  # committed with a state topic: nothing to rebuild from here
                return None
            listed = unpack_bits(found["listed"]) if found.get("listed") else b""
            return cls(int(found["covered_through"]), listed)
        except (ValueError, KeyError, TypeError, zlib.error) as exc:
            log.warning("commit metadata %r is not the incident loop's (%s): nothing is taken as listed",
                        metadata[:80], exc)
            return None


class PartitionRoom:
    """The room of one partition and the coverage of its inputs."""

    def __init__(self, tp: TopicPartition, config: RoomConfig, restore: Restore | None = None, *,
                 snapshots: bool = False, room: IncidentRoom | None = None) -> None:
        """`snapshots`: the room's state goes to the state topic with every commit (`incident_state.py`),
        which then commits every input fed: nothing is tracked here but what `restore` (a commit made
        without a state topic) says was listed; `room`: the room restored from its snapshot."""
        self.tp = tp
        self.snapshots = snapshots
        self.room = room or IncidentRoom(config)
        self.next_offset: int | None = None          # after the last message fed
        self.fed: deque[InputRef] = deque()           # answered inputs in feed order, from the first uncovered on
        self.uncovered: dict[InputRef, float] = {}    # -> monotonic time it was fed
        self.restored_through = restore.covered_through if restore else -1
        self._listed = restore.listed if restore else b""
        self._answered_since_restore = 0              # index into `_listed`
        self.echo: set[InputRef] = set()              # at or above restored_through, listed before the restore
        self.last_time: float | None = None           # the latest alarm time fed (event time)
        self.last_wall = 0.0                          # monotonic time of that feed
        if room is not None and room.clock > float("-inf"):  # restored: its clock goes on from here
            self.last_time, self.last_wall = room.clock, wall_clock()
        self.events_dropped = 0                       # events that only repeated what was listed before

    @property
    def rebuilding(self) -> bool:
        """Still feeding inputs whose events were sent before the restore."""
        return self.next_offset is not None and self.next_offset < self.restored_through

    def feed(self, offset: int, alarms: list[Alarm], letters: Iterable[InputRef] = ()) -> list[IncidentEvent]:
        """One message's alarms (and its dead-lettered items, answered by the caller): the events to publish."""
        now = wall_clock()
        self.next_offset = offset + 1
        rebuilding = offset < self.restored_through
        for ref in letters:
            self._track(ref, now, rebuilding)
        events: list[IncidentEvent] = []
        for alarm in alarms:
            self._track(alarm.input, now, rebuilding)
            if self.last_time is None or alarm.time >= self.last_time:
                self.last_time, self.last_wall = alarm.time, now
            if rebuilding:
                self.room.rebuild([alarm])
            else:
                events += self.room.add(alarm)
        self._settle()
        return [] if rebuilding else self._unechoed(events)

    def tick(self) -> list[IncidentEvent]:
        """Move the room's clock on by the wall time since its latest alarm (a quiet partition's alarms
        still open and its incidents still resolve); nothing while rebuilding, which must decide as before."""
        if self.last_time is None or self.rebuilding:
            return []
        events = self.room.advance(self.last_time + wall_clock() - self.last_wall)
        self._settle()
        return self._unechoed(events)

    def close(self) -> list[IncidentEvent]:
        """Place every waiting alarm and resolve every incident (the end of a replay, not of a worker)."""
        events = self.room.close()
        self._settle()
        return self._unechoed(events)

    def is_echo(self, ref: InputRef) -> bool:
        """Listed before the restore: a dead letter already published, or an alarm already in an event."""
        return ref.offset < self.restored_through or ref in self.echo

    def covered(self, refs: Iterable[InputRef]) -> list[float]:
        """These inputs' outputs were acknowledged: the seconds since each was fed."""
        now = wall_clock()
        # A room restored from the state topic lists its earlier inputs as plain mappings: never tracked.
        waited = [now - fed for fed in (self.uncovered.pop(ref, None) for ref in refs if isinstance(ref, InputRef))
                  if fed is not None]
        if not self.snapshots:
            self._trim()
        return waited

    def position(self, listing: set[InputRef] = frozenset()) -> tuple[int, str] | None:
        """(offset, metadata) to commit once the outputs listing `listing` are acknowledged too; None
        before anything was fed."""
        if self.next_offset is None:
            return None
        if self.snapshots:  # while rebuilding (a commit without a snapshot restored) the snapshot would lack the map
            return None if self.rebuilding else (self.next_offset, '{"snapshot":true}')
        refs = list(self.fed)
        first = next((k for k, ref in enumerate(refs) if ref in self.uncovered and ref not in listing), None)
        if first is None:
            covered_through, bits = self.next_offset, []
        else:
            covered_through = refs[first].offset
            while first > 0 and refs[first - 1].offset == covered_through:
                first -= 1
            bits = [ref not in self.uncovered or ref in listing for ref in refs[first:]]
            while bits and not bits[-1]:
                bits.pop()
        retained = min((ref.offset for ref in self.room.retained_inputs()), default=covered_through)
        return min(covered_through, retained), _metadata(covered_through, bits, self.tp)

    # Internals.

    def _track(self, ref: InputRef, now: float, rebuilding: bool) -> None:
        if rebuilding:
            return
        if self._listed:
            k = self._answered_since_restore
            self._answered_since_restore += 1
            if k in Listed(0, self._listed):
                self.echo.add(ref)
                if not self.snapshots:
                    self.fed.append(ref)  # covered: counted in the next commit's map as listed
                return
        if not self.snapshots:  # with snapshots only for the time to open: the commit does not wait on it
            self.fed.append(ref)
        self.uncovered[ref] = now

    def _settle(self) -> None:
        settled = self.room.take_settled()
        if settled:
            self.covered(settled)

    def _trim(self) -> None:
        """Forget answered inputs below the first uncovered offset."""
        first = next((ref.offset for ref in self.fed if ref in self.uncovered), None)
        while self.fed and (first is None or self.fed[0].offset < first):
            self.fed.popleft()

    def _unechoed(self, events: list[IncidentEvent]) -> list[IncidentEvent]:
        if self.restored_through < 0 and not self.echo:
            return events
        out = []
        for event in events:
            kept = [ref for ref in event.inputs if not self.is_echo(ref)]
            if len(kept) == len(event.inputs):
                out.append(event)
            elif kept or event.event == "resolve" or event.merged_into or event.absorbed:
                out.append(msgspec.structs.replace(event, inputs=kept, correlatedNotifications=[
                    ref for ref in event.correlatedNotifications if not self.is_echo(ref)]))
            else:
                self.events_dropped += 1
        return out


def _metadata(covered_through: int, bits: list[bool], tp: TopicPartition) -> str:
    found = {"covered_through": covered_through}
    if bits:
        found["listed"] = pack_bits(Listed.of(0, (k for k, bit in enumerate(bits) if bit)).bits)
    text = json.dumps(found, separators=(",", ":"))
    if len(text) > MAX_METADATA_CHARS:
        # Inputs listed above covered_through would be listed again after a crash: say so, keep committing.
        log.warning("%s[%d]: the covered map (%d inputs) is over %d characters; committed without it, so a "
                    "crash before the next commit may list up to %d inputs twice", tp.topic, tp.partition,
                    len(bits), MAX_METADATA_CHARS, sum(bits))
        text = json.dumps({"covered_through": covered_through}, separators=(",", ":"))
    return text
