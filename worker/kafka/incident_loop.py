"""The incident loop: the input topic's alarms grouped into incidents, published on the incidents topic.

A loop of its own beside the summarizing one (`loop.py`): its own consumer group (`<group_id>-incidents`,
or `group_id` itself when it answers alone, TELESUM_INCIDENT_ONLY), its own producer (transactional id
`telesum.<its group>.<worker>` under exactly-once), one incidents room per input partition
(`incident_partition.py`), so the summaries' lag never waits on an open incident and one partition's
incidents never wait on another's commit. Each message is decoded by the same input layer as the
summaries'; each record that carries an alarm (`alarm_from_record`) goes to its partition's room; every
event goes out as JSON keyed by its incident id. Offsets and what they cover: see `incident_partition`.

At-least-once: events are sent at once, covered when acknowledged, offsets committed every
commit_interval_s. Exactly-once: events wait for the next transaction (commit_interval_s or
transaction_max_records), which carries them and the offsets with their metadata.

Beside the per-alarm summaries, with a state topic, each new incident's text is also asked of the model
and sent as a later `update` carrying `model_summary` (`incident_followups.py`, `use_summarizer`).

With TELESUM_ALERTMANAGER_URL, each acknowledged (exactly-once: committed) event and, every resync_s and
after partitions are assigned, the open incidents of the rooms go to the alert sender (`use_alerts`,
worker/alerting/), which never blocks this loop.

Threads: one thread owns the consumer, the rooms and the transactions; the producer's I/O thread only
queues acknowledgements.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kafka import TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from worker.incidents import RoomConfig
from worker.inputs import decoder_for
from worker.inputs.json_log import parse_field_map
from worker.kafka.clients import Consumer, Producer
from worker.kafka.incident_outputs import (IncidentProducer, IncidentStats, Out, commit_transaction, dead_letter,
                                           event_output, read_message)
from worker.kafka.incident_outputs import incident_kafka_settings  # noqa: F401 - the loop's settings, re-exported
from worker.kafka.incident_followups import FollowUps, FollowUpStats
from worker.incidents.snapshot import restore as restore_room, snapshot
from worker.kafka.incident_partition import InputRef, PartitionRoom, Restore
from worker.kafka.loop import ConsumerStats, consumer_stats
from worker.kafka.incident_state import ensure_state_topic, read_states, state_key, state_topic_of
from worker.kafka.records import Output
from worker.kafka.undecodable import UndecodableBatch
from worker.messages import IncidentEvent
from worker.settings.incidents import STATE_TOPIC_OFF, IncidentSettings
from worker.settings.kafka import KafkaSettings

if TYPE_CHECKING:  # the sender is handed in by the start-up (worker/commands/incident_thread.py)
    from worker.alerting import AlertSender, AlertStats

log = logging.getLogger(__name__)
# While the member (re)joins its group, polls are long (as in loop.py: short ones can restart the rebalance).
_REJOIN_POLL_MS = 1000
# After a failed send (at-least-once; the producer already retried for delivery_timeout_ms), wait this long.
_RESEND_S = 1.0
# The open incidents are listed for the status page this often (building the view costs a root-cause pass each).
_VIEW_S = 2.0
# After partitions are assigned the open incidents go to the alert sender at once (restored rooms) and again
# this long after (a recomputed room has rebuilt its uncommitted range in its first polls by then).
_ALERTS_AFTER_ASSIGN_S = 5.0


@dataclass(frozen=True)
class IncidentLoopStats:
    """What an IncidentLoop holds and has done, read at one moment (`IncidentLoop.stats()`, what its
    observer gets after every step). Counters count since start."""

    counts: IncidentStats
    observed: tuple[tuple[str, float], ...]     # since the last step: ("open_s", wait), ("alarms", size)
    follow_ups: FollowUpStats | None            # None: the model's text of incidents is off
    open_incidents: tuple[IncidentEvent, ...]   # the open incidents as of the last view (every _VIEW_S)
    assigned: int                               # input partitions this loop holds
    consumer: ConsumerStats
    alerts: AlertStats | None = None            # None: no Alertmanager (TELESUM_ALERTMANAGER_URL unset)


class IncidentLoop:
    """Serves the incidents of `settings.input_topic` until `stop` is set. `run()` from one thread."""

    def __init__(self, settings: KafkaSettings, incidents: IncidentSettings, config: RoomConfig,
                 consumer: Consumer | None = None, producer: Producer | None = None,
                 observer: Callable[[IncidentLoopStats], None] | None = None) -> None:
        self.settings, self.incidents, self.config = settings, incidents, config
        self.topic = incidents.topic or ""
        self.state_topic = state_topic_of(settings, incidents)  # incident_state.py; checked in run()
        self.consumer = consumer or Consumer(settings)
        self.producer = producer or IncidentProducer(settings)
        self.observer = observer
        self.decode = decoder_for(settings.input_format, parse_field_map(settings.json_log_fields),
                                  settings.max_items_per_message)
        self.parts: dict[TopicPartition, PartitionRoom] = {}
        self.counts = IncidentStats()
        self._new: set[TopicPartition] = set()
        self._revoking: set[TopicPartition] = set()
        self._outbox: list[Out] = []                      # exactly-once: for the next transaction
        self._acks: queue.SimpleQueue = queue.SimpleQueue()  # at-least-once: (out, error | None)
        self._unacked = 0
        self._resend: list[tuple[float, Out]] = []
        self._committed: dict[TopicPartition, tuple[int, str]] = {}
        self._last_commit = 0.0
        self.observed: list[tuple[str, float]] = []  # for the observer: ("open_s", wait) and ("alarms", size)
        self._open_view: tuple[IncidentEvent, ...] = ()  # the open incidents, refreshed every _VIEW_S
        self._last_view = 0.0
        self.follow_ups: FollowUps | None = None      # the model's text of new incidents (use_summarizer)
        self.alerts: AlertSender | None = None        # incidents as Alertmanager alerts (use_alerts)
        self._alerts_due = 0.0                        # monotonic time of the next sync of open incidents

    def use_summarizer(self, summarizer, opening) -> bool:
        """Ask `summarizer` (the per-alarm summaries' one, on a results channel of its own) for each new
        incident's text, sent as a later update with `model_summary` (`incident_followups.py`). Only with a
        state topic (exactly-once): recomputed rooms could not know of follow-ups' sequence numbers.
        opening: the grounded opening of its summaries (`worker.prompts.answer_opening`).
        False (said in the log) when the settings leave it off. Before `run`."""
        if self.incidents.follow_ups <= 0:
            return False
        if not self.state_topic:
            log.info("incidents: no model text for incidents (TELESUM_INCIDENT_FOLLOW_UPS): it needs exactly-once "
                     "with a state topic")
            return False
        self.follow_ups = FollowUps(summarizer, self.incidents.follow_ups, opening)
        return True

    def use_alerts(self, alerts: AlertSender) -> None:
        """Hand each acknowledged (exactly-once: committed) event to `alerts.submit`, and the open incidents
        of every room to `alerts.sync` every `alerts.resync_s` and after partitions are assigned (a restart
        re-posts them); the sender is started by `run` and closed after the drain. Before `run`."""
        self.alerts = alerts

    # Rebalance callbacks run inside poll(): no blocking calls (the committed offsets are read after it).
    def _on_revoked(self, partitions: set[TopicPartition]) -> None:
        self._revoking |= partitions

    def _on_assigned(self, partitions: set[TopicPartition]) -> None:
        self._settle_revocations(partitions)
        self._new |= partitions - self.parts.keys()
        log.info("incidents: assigned %s", sorted(map(tuple, partitions)))

    def _settle_revocations(self, assigned: set[TopicPartition]) -> None:
        gone, self._revoking = self._revoking - assigned, set()
        if gone:
            self._forget(gone)
            log.info("incidents: revoked %s; their open incidents are recomputed by the new owner",
                     sorted(map(tuple, gone)))

    def _forget(self, gone: set[TopicPartition]) -> None:
        for tp in gone:
            self.parts.pop(tp, None)
            self._committed.pop(tp, None)
        self._new -= gone
        self._outbox = [out for out in self._outbox if out.tp not in gone]
        self._resend = [item for item in self._resend if item[1].tp not in gone]
        if self.follow_ups is not None:
            self.follow_ups.forget(gone)

    def run(self, stop: threading.Event) -> IncidentStats:
        """Serve until `stop` is set, then publish and commit what is ready, and close. An undecodable
        batch with on_undecodable_batch "exit" does the same, then raises UndecodableBatch."""
        self._check_state_topic()
        self.consumer.open(self._on_revoked, self._on_assigned)
        self.producer.open()
        if self.alerts is not None:
            self.alerts.start()
        try:
            try:
                while not stop.is_set():
                    self._step()
            except UndecodableBatch:  # the operator chose to stop (on_undecodable_batch "exit"): the others first
                self._drain()
                raise
            self._drain()
        finally:
            self.consumer.close()
            self.producer.close()
            if self.alerts is not None:  # the resolves of the drain go out; open incidents' alerts stay firing
                self.alerts.close()
        return self.counts

    def _check_state_topic(self) -> None:
        """Create the state topic unless it exists. The default one, where the broker refuses to create it,
        falls back to recomputing (said in the log); a named one must be there or be created. Blocks."""
        named = self.incidents.state_topic not in (None, STATE_TOPIC_OFF)
        if named and not self.settings.exactly_once:
            log.warning("incidents: the state topic needs exactly-once; open incidents are recomputed instead")
        if not self.state_topic:
            return
        try:
            ensure_state_topic(self.settings, self.state_topic)
        except KafkaError as exc:
            if named:
                raise
            log.warning("incidents: the state topic %s cannot be created (%s): open incidents are recomputed from "
                        "the uncommitted range instead (create it compacted, or name one: "
                        "TELESUM_INCIDENT_STATE_TOPIC; 'none' says recompute)", self.state_topic, exc)
            self.state_topic = None
        else:
            log.info("incidents: open incidents kept on the state topic %s", self.state_topic)

    def _step(self) -> None:
        stable = self.consumer.is_stable()
        messages = self.consumer.poll(_REJOIN_POLL_MS if not stable else self.settings.poll_timeout_ms)
        if self._revoking and self.consumer.is_stable():
            self._settle_revocations(self.consumer.assignment())
        self._open_new()
        for msg in messages:
            self._accept(msg)
        for tp, part in list(self.parts.items()):
            self._emit(tp, part.tick())
        self._take_follow_ups()
        self._publish()
        self._maybe_commit(force=False)
        self._sync_alerts()
        if self.observer is not None:
            if time.monotonic() - self._last_view >= _VIEW_S:
                self._last_view = time.monotonic()
                self._open_view = tuple(event for part in self.parts.values() for event in part.room.open_incidents())
            self.observer(self.stats())
            self.observed.clear()

    def stats(self) -> IncidentLoopStats:
        """What the loop holds and has done, read now (copies). Only from the loop's thread."""
        follow_ups = self.follow_ups
        return IncidentLoopStats(counts=dataclasses.replace(self.counts), observed=tuple(self.observed),
                                 follow_ups=dataclasses.replace(follow_ups.stats) if follow_ups is not None else None,
                                 open_incidents=self._open_view, assigned=len(self.parts),
                                 consumer=consumer_stats(self.consumer),
                                 alerts=self.alerts.stats() if self.alerts is not None else None)

    def _open_new(self) -> None:
        """Rooms for newly assigned partitions, restored from their committed offset and metadata."""
        new = sorted(self._new & self.consumer.assignment())
        states = read_states(self.settings, self.state_topic, {state_key(tp) for tp in new}) \
            if self.state_topic and new else {}
        for tp in new:
            committed = self.consumer.client.committed(tp, metadata=True)
            metadata = committed.metadata if committed is not None else None
            data = states.get(state_key(tp))
            if data and Restore.is_snapshot(metadata):
                self.parts[tp] = PartitionRoom(tp, self.config, snapshots=True, room=restore_room(self.config, data))
                log.info("incidents: %s[%d] restored from its snapshot", tp.topic, tp.partition)
                continue
            # No snapshot that goes with the last commit: recompute from what that commit says (a commit of a
            # loop without a state topic, so switching to one lists nothing twice), then go on with snapshots.
            restore = Restore.from_metadata(metadata)
            self.parts[tp] = PartitionRoom(tp, self.config, restore, snapshots=bool(self.state_topic))
            if restore is not None:
                log.info("incidents: %s[%d] from offset %d: inputs below %d are rebuilt without events",
                         tp.topic, tp.partition, committed.offset, restore.covered_through)
            elif self.state_topic:
                log.info("incidents: %s[%d] has no snapshot: starts empty at its committed offset",
                         tp.topic, tp.partition)
        if new and self.alerts is not None:  # now, then once their first polls are placed
            self._sync_alerts(force=True)
            self._alerts_due = time.monotonic() + min(_ALERTS_AFTER_ASSIGN_S, self.alerts.resync_s)
        self._new.clear()

    def _accept(self, msg) -> None:
        tp = TopicPartition(msg.topic, msg.partition)
        part = self.parts.get(tp)
        if part is None:
            return  # fetched before a revocation
        if part.next_offset is not None and msg.offset < part.next_offset:
            # The position went back to the committed offset: recompute this partition from there.
            self._forget({tp})
            self._new.add(tp)
            self._open_new()
            part = self.parts[tp]
        self.counts.consumed += 1
        alarms, letters = read_message(self.decode, msg, answer_invalid=self.incidents.only)
        self.counts.alarms += len(alarms)
        self._emit(tp, part.feed(msg.offset, alarms, [ref for ref, _ in letters]))
        for ref, item in letters:
            if not part.is_echo(ref):
                self._queue(Out(tp, dead_letter(self.settings, msg, ref, item), (ref,)))

    def _emit(self, tp: TopicPartition, events: list[IncidentEvent]) -> None:
        for event in events:
            self._queue(Out(tp, event_output(self.topic, event), tuple(event.inputs), event))
            if event.event == "open" and self.follow_ups is not None:
                part = self.parts.get(tp)
                if part is not None and part.snapshots:  # the follow-up's sequence is kept in the snapshot
                    self.follow_ups.request(tp, event)

    def _take_follow_ups(self) -> None:
        """The model's text of incidents, back since the last step: an update each, for the next transaction."""
        if self.follow_ups is None:
            return
        for tp, incident_id, text in self.follow_ups.take():
            part = self.parts.get(tp)
            event = part.room.follow_up(incident_id, text) if part is not None else None
            if event is None:  # resolved or merged meanwhile: its resolve stays its last event
                self.follow_ups.stats.stale += 1
                continue
            self._emit(tp, [event])

    def _sync_alerts(self, force: bool = False) -> None:
        """The open incidents of every room to the alert sender, when due."""
        if self.alerts is None or not (force or time.monotonic() >= self._alerts_due):
            return
        self._alerts_due = time.monotonic() + self.alerts.resync_s
        self.alerts.sync([event for part in self.parts.values() for event in part.room.open_incidents()])

    def _queue(self, out: Out) -> None:
        if self.settings.exactly_once:
            self._outbox.append(out)
        else:
            self._send(out)

    def _send(self, out: Out) -> None:
        self._unacked += 1
        o = out.output
        self.producer.send(o.topic, o.key, o.value, o.headers, lambda error: self._acks.put((out, error)))

    def _publish(self) -> None:
        """At-least-once: take the acknowledgements, send failed outputs again after a pause."""
        now = time.monotonic()
        due = [out for at, out in self._resend if at <= now]
        self._resend = [(at, out) for at, out in self._resend if at > now]
        for out in due:
            if out.tp in self.parts:
                self._send(out)
        while True:
            try:
                out, error = self._acks.get_nowait()
            except queue.Empty:
                return
            self._unacked -= 1
            if out.tp not in self.parts:
                continue
            if error is not None:
                log.warning("incidents: publish to %s failed (%s); again in %.0f s", out.output.topic, error, _RESEND_S)
                self._resend.append((time.monotonic() + _RESEND_S, out))
            else:
                self._done(out)

    def _done(self, out: Out) -> None:
        part = self.parts.get(out.tp)
        if part is None:
            return
        self.counts.count(out.event, part.covered(out.refs), self.observed if self.observer is not None else None)
        if self.alerts is not None and out.event is not None:
            self.alerts.submit(out.event)

    def _maybe_commit(self, force: bool) -> None:
        now = time.monotonic()
        due = now - self._last_commit >= self.settings.commit_interval_s or (
            self.settings.exactly_once and len(self._outbox) >= self.settings.transaction_max_records)
        if not (force or due):
            return
        self._last_commit = now
        listing: dict[TopicPartition, set[InputRef]] = {}
        for out in self._outbox if not self.state_topic else ():  # with a state topic every input commits
            listing.setdefault(out.tp, set()).update(out.refs)
        offsets = {}
        for tp, part in self.parts.items():
            if tp in self._revoking:  # never for a partition on its way out (loop.py's Committer says why)
                continue
            position = part.position(listing.get(tp, set()))
            if position is not None and position != self._committed.get(tp):
                offsets[tp] = position
        if not offsets and not self._outbox:
            return
        if self.settings.exactly_once:
            self._transaction(offsets)
            return
        try:
            self.consumer.client.commit({tp: OffsetAndMetadata(o, m, -1) for tp, (o, m) in offsets.items()})
        except KafkaError as exc:  # e.g. a rebalance is under way: the next round commits again
            log.warning("incidents: commit of %s failed: %s", {tp: o for tp, (o, _) in offsets.items()}, exc)
            return
        self._committed.update(offsets)
        self.counts.commits += 1

    def _transaction(self, offsets: dict[TopicPartition, tuple[int, str]]) -> None:
        batch = [out for out in self._outbox if out.tp in self.parts and out.tp not in self._revoking]
        # With a state topic, every room whose events or offset go out goes out too, as it is now.
        states = [Out(tp, Output(self.state_topic, state_key(tp), snapshot(self.parts[tp].room), []), ())
                  for tp in sorted(offsets.keys() | {out.tp for out in batch})] if self.state_topic else []
        if not commit_transaction(self.producer, self.consumer, batch + states, offsets):
            self.counts.aborts += 1
            return
        sent = set(map(id, batch))  # the states are not in the outbox
        self._outbox = [out for out in self._outbox if id(out) not in sent]
        for out in batch:
            self._done(out)
        self._committed.update(offsets)
        self.counts.transactions += 1
        self.counts.commits += bool(offsets)

    def _drain(self) -> None:
        """Stop fetching; publish what is ready and commit. Open incidents stay open: their uncovered
        inputs are above the committed offset, and whoever reads next recomputes them."""
        self.consumer.pause(self.consumer.assignment())
        deadline = time.monotonic() + self.settings.drain_timeout_s
        if not self.settings.exactly_once:
            self.producer.flush(max(0.0, deadline - time.monotonic()))
            self._publish()
        self._maybe_commit(force=True)
        while self._outbox and time.monotonic() < deadline:
            time.sleep(0.1)  # an aborted last transaction: try again while the deadline allows
            self._maybe_commit(force=True)
        self.counts.drained_cleanly = not (self._outbox or self._unacked or self._resend)
        log.info("incidents: drained (%s): %s", "clean" if self.counts.drained_cleanly else "deadline hit", self.counts)
        if self.follow_ups is not None:  # those still in flight are lost: their incidents go without
            log.info("incidents: model text of incidents: %s; %d in flight left", self.follow_ups.stats,
                     self.follow_ups.in_flight)
