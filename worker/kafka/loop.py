"""The worker's poll loop: consume, decode, summarise, answer, commit — all from one thread.

Threads: the loop thread owns the consumer, the offset tracker and the publisher (`publish.py`);
the producer's I/O thread only queues acknowledgements there; the summarizer's own thread is
reached through submit/poll.

At-least-once: an answer is published at once; its offset is done when the broker acknowledged it;
done prefixes are committed every commit_interval_s. Exactly-once: an answer is done when it is
ready; a batch (closed after transaction_max_records answers or commit_interval_s) publishes the
answers of the done prefixes and commits those offsets in one transaction, so a read-committed
consumer sees each answer once however often the worker dies.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Protocol

from kafka import TopicPartition
from kafka.errors import KafkaError

from worker.dispatch import Backpressure
from worker.kafka.clients import Consumer, Producer
from worker.kafka.offsets import OffsetTracker
from worker.kafka.publish import (AckPublisher, Answers, Request, RequestId, TransactionalPublisher,
                                  ProducerFenced)
from worker.inputs import FORMAT_ATTRIBUTE, Message, decoder_for
from worker.inputs.json_log import parse_field_map
from worker.inputs.windows import Window, Windows
from worker.kafka.records import Output, Source
from worker.kafka.undecodable import UndecodableBatch
from worker.kafka.windowing import is_windowed, merged, window_key
from worker.settings.kafka import KafkaSettings
from worker.messages import InvalidRecord, ReasonCode, Summary, TelemetryRecord, failure_reason

__all__ = ["KafkaWorker", "ProducerFenced", "RequestId", "WorkerStats"]

log = logging.getLogger(__name__)
# While the summarizer holds work, the consumer poll is short so results are published promptly.
_BUSY_POLL_MS = 5
# While the member (re)joins its group, polls are long: kafka-python 3.0 can abandon a leader's
# SyncGroup cut short by a few-ms poll and start the rebalance over, again and again.
_REJOIN_POLL_MS = 1000


class SummarizerLike(Protocol):
    def submit(self, request_id: Hashable, record: TelemetryRecord) -> None: ...
    def poll(self, timeout: float) -> list[tuple[Hashable, Summary | Exception]]: ...


@dataclass
class WorkerStats:
    consumed: int = 0
    summaries: int = 0
    dead_letters: int = 0
    stale_dropped: int = 0     # results or acks for revoked partitions, dropped
    republished: int = 0
    commits: int = 0
    backpressure_pauses: int = 0
    transactions: int = 0      # exactly-once: committed transactions
    aborts: int = 0            # exactly-once: aborted (and retried) transactions
    drained_cleanly: bool = False
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass
class _Pending:
    rid: RequestId
    source: Source
    raw: bytes
    record: TelemetryRecord
    covers: tuple[int, ...] = ()  # a log window: the offset of each part

    def request(self, kind, reason: ReasonCode | None = None) -> Request:
        return Request(self.rid, self.source, self.raw, self.record.id, kind, reason, covers=self.covers)


class KafkaWorker:
    """Consumes `settings.input_topic` in a group, answers every record exactly once per delivery
    (a summary or a dead letter) and commits only acknowledged work. `run()` from one thread."""

    def __init__(self, settings: KafkaSettings, summarizer: SummarizerLike, model_name: str,
                 consumer: Consumer | None = None, producer: Producer | None = None,
                 observer: Callable[[KafkaWorker], None] | None = None) -> None:
        self.settings = settings
        self.observer = observer  # e.g. metrics: called after every step, from the loop thread
        self.summarizer = summarizer
        self.model_name = model_name
        # Unset: two full bins of records, so one bin decodes while the next is packed.
        self.max_in_flight = settings.max_in_flight or 2 * getattr(summarizer, "max_seqs_per_bin", 128)
        self.consumer = consumer or Consumer(settings)
        self.producer = producer or Producer(settings)
        self.tracker = OffsetTracker()
        self.input_format = settings.input_format
        self.inputs = decoder_for(settings.input_format, parse_field_map(settings.json_log_fields))
        self.stats = WorkerStats()
        self.answers = Answers(settings.output_topic, settings.dlq_topic, model_name, settings.max_request_size)
        self.publisher = AckPublisher(self.producer, self.answers)
        self.transactions = TransactionalPublisher(self.producer, self.answers) if settings.exactly_once else None
        self._backlog: deque[_Pending] = deque()        # decoded, waiting for summarizer room
        # Log lines waiting for their window to close (window_s 0: every record is answered alone).
        self.windows: Windows[_Pending] | None = Windows(settings.window_s, settings.window_max_lines,
                                                         settings.window_max_bytes) if settings.window_s > 0 else None
        self._in_summarizer: dict[RequestId, _Pending] = {}
        self._paused_by_us = False
        self._revoking: set[TopicPartition] = set()
        self._last_commit = 0.0

    # ---- rebalance callbacks: run inside consumer.poll(); no blocking calls here ----
    # kafka-python keeps a partition's position (and paused flag) when a rebalance hands it back to
    # the same member, so only partitions that really left are dropped: revocation is settled once
    # the new assignment is known (in `_on_assigned`, or after the poll for a revoke without one).
    def _on_revoked(self, partitions: set[TopicPartition]) -> None:
        self._revoking |= partitions

    def _on_assigned(self, partitions: set[TopicPartition]) -> None:
        self._settle_revocations(partitions)
        for tp in partitions - self.tracker.partitions():
            self.tracker.assign(tp)
        log.info("assigned %s", sorted(map(tuple, partitions)))

    def _settle_revocations(self, assigned: set[TopicPartition]) -> None:
        gone = self._revoking - assigned
        self._revoking = set()
        if not gone:
            return
        dropped = sum(self.tracker.revoke(tp) for tp in gone)
        self._backlog = deque(p for p in self._backlog if p.rid.tp not in gone)
        if self.windows is not None:
            self.windows.drop(lambda key: key[0] in gone)
        if self.transactions is not None:
            self.transactions.drop(gone)
        log.info("revoked %s; dropped %d unfinished records (the new owner replays them)",
                 sorted(map(tuple, gone)), dropped)

    # ---- the loop ----
    def run(self, stop: threading.Event) -> WorkerStats:
        """Serve until `stop` is set, then drain within settings.drain_timeout_s, commit and close."""
        self.consumer.open(self._on_revoked, self._on_assigned)
        self.producer.open()
        try:
            try:
                while not stop.is_set():
                    self._step(fetch=True)
            except UndecodableBatch:  # the operator chose to stop: finish the other partitions' work first
                self._drain()
                raise
            self._drain()
            if self.observer is not None:
                self.observer(self)
        finally:
            self.consumer.close()
            self.producer.close()
        return self.stats

    def _step(self, fetch: bool) -> None:
        busy = bool(self._in_summarizer or self.publisher.busy)
        if not self.consumer.is_stable():
            timeout_ms = _REJOIN_POLL_MS
        else:
            timeout_ms = _BUSY_POLL_MS if busy else self.settings.poll_timeout_ms
        messages = self.consumer.poll(timeout_ms)
        if self._revoking and self.consumer.is_stable():  # a revoke with no assignment after it
            self._settle_revocations(self.consumer.assignment())
        for msg in messages:
            self._accept(msg)
        if self.windows is not None:
            self._backlog.extend(map(self._window_pending, self.windows.due()))
        if not fetch:  # draining: partitions assigned meanwhile stay paused too
            self.consumer.pause(self.consumer.assignment() - self.consumer.paused())
        else:
            self._submit_backlog()
            self._apply_backpressure()
        if self._in_summarizer:
            for rid, result in self.summarizer.poll(self.settings.poll_timeout_ms / 1000):
                self._on_result(rid, result)
        self._handle_acks()
        self._maybe_commit(force=False)
        if self.observer is not None:
            self.observer(self)

    @property
    def pending(self) -> tuple[int, int, int]:
        """(records waiting for summarizer room or in open log windows, records in the summarizer, answers not yet
        acknowledged or, exactly-once, not yet committed). Only from the loop thread."""
        staged = self.transactions.staged if self.transactions is not None else 0
        windowed = self.windows.parts if self.windows is not None else 0
        return len(self._backlog) + windowed, len(self._in_summarizer), self.publisher.unacked + staged

    def _drain(self) -> None:
        """Stop fetching; finish and publish what the summarizer holds; commit the done prefix."""
        self.consumer.pause(self.consumer.assignment())
        self._paused_by_us = True
        self._backlog.clear()  # not started: left uncommitted, replayed by whoever reads next
        if self.windows is not None:  # open windows are closed and answered before the drain ends
            for pending in map(self._window_pending, self.windows.close_all()):
                try:
                    self.summarizer.submit(pending.rid, pending.record)
                except Exception as exc:  # noqa: BLE001 - e.g. backpressure: left uncommitted, replayed
                    log.warning("open window %s not answered in the drain (%s)", pending.record.id, exc)
                    continue
                self._in_summarizer[pending.rid] = pending
        deadline = time.monotonic() + self.settings.drain_timeout_s
        while (self._in_summarizer or self.publisher.busy) and time.monotonic() < deadline:
            self._step(fetch=False)
        if self.transactions is None:
            self.producer.flush(max(0.0, deadline - time.monotonic()))
        self._handle_acks()
        self._maybe_commit(force=True)
        while self.transactions is not None and self.transactions.staged and time.monotonic() < deadline:
            time.sleep(0.1)  # an aborted last transaction: try again while the deadline allows
            self._maybe_commit(force=True)
        staged = self.transactions.staged if self.transactions is not None else 0
        self.stats.drained_cleanly = not (self._in_summarizer or self.publisher.busy or staged)
        log.info("drained (%s): %s", "clean" if self.stats.drained_cleanly else "deadline hit", self.stats)

    def _accept(self, msg) -> None:
        tp = TopicPartition(msg.topic, msg.partition)
        if self.tracker.epoch(tp) is None:
            return  # fetched before a revocation; the new owner reads it
        if msg.offset <= self.tracker.last_tracked(tp, default=-1):
            # The position went back (a reset to the committed offset): what we held is replayed.
            self.tracker.revoke(tp)
            self.tracker.assign(tp)
            self._backlog = deque(p for p in self._backlog if p.rid.tp != tp)
            if self.windows is not None:
                self.windows.drop(lambda key: key[0] == tp)
            if self.transactions is not None:
                self.transactions.drop({tp})
        raw = msg.value or b""
        items = self.inputs(Message(raw, tuple(msg.headers or ()), msg.topic, msg.partition, msg.offset,
                                    getattr(msg, "timestamp", None)))
        epoch = self.tracker.track(tp, msg.offset, parts=len(items))
        self.stats.consumed += 1
        batch = len(items) > 1
        for index, item in enumerate(items):
            rid = RequestId(tp, msg.offset, epoch, index)
            if isinstance(item, InvalidRecord):
                fmt = None if self.input_format == "auto" else self.input_format
                source = Source(msg.topic, msg.partition, msg.offset, msg.key, index if batch else None, fmt)
                why = f"item {index} of {len(items)}: {item.message}" if batch else item.message
                self._answer(*self.answers.dead_letter(Request(rid, source, raw, None, "dead_letter", item.reason),
                                                       why))
                continue
            source = Source(msg.topic, msg.partition, msg.offset, msg.key, index if batch else None,
                            item.attributes.get(FORMAT_ATTRIBUTE))
            pending = _Pending(rid, source, raw, item)
            if self.windows is None or not is_windowed(item):
                self._backlog.append(pending)
            elif (full := self.windows.add(window_key(tp, item), pending, item.body_text())) is not None:
                self._backlog.append(self._window_pending(full))

    @staticmethod
    def _window_pending(window: Window[_Pending]) -> _Pending:
        """A closed window as one piece of work, answered under its last part's id."""
        source, raw, record, covers = merged(window)
        return _Pending(window.parts[-1].rid, source, raw, record, covers)

    def _submit_backlog(self) -> None:
        while self._backlog and len(self._in_summarizer) < self.max_in_flight:
            pending = self._backlog[0]
            try:
                self.summarizer.submit(pending.rid, pending.record)
            except Backpressure:
                return
            except Exception as exc:  # noqa: BLE001 - e.g. SequenceTooLong: this record's problem only
                self._backlog.popleft()
                reason, message = failure_reason(exc)
                self._answer(*self.answers.dead_letter(pending.request("dead_letter", reason), message))
                continue
            self._backlog.popleft()
            self._in_summarizer[pending.rid] = pending

    def _apply_backpressure(self) -> None:
        full = bool(self._backlog) or len(self._in_summarizer) >= self.max_in_flight
        if full:
            unpaused = self.consumer.assignment() - self.consumer.paused()  # incl. newly assigned ones
            if unpaused:
                self.consumer.pause(unpaused)
                self.stats.backpressure_pauses += not self._paused_by_us
            self._paused_by_us = True
        elif self._paused_by_us:
            self.consumer.resume(self.consumer.assignment())
            self._paused_by_us = False

    def _on_result(self, rid: RequestId, result: Summary | Exception) -> None:
        pending = self._in_summarizer.pop(rid, None)
        if pending is None or not self.tracker.is_current(rid.tp, rid.epoch):
            self.stats.stale_dropped += 1
            return
        if isinstance(result, Exception):
            reason, message = failure_reason(result)
            self._answer(*self.answers.dead_letter(pending.request("dead_letter", reason), message))
        else:
            self._answer(*self.answers.summary(pending.request("summary"), result))

    # ---- answers, acknowledgements and commits ----
    def _answer(self, request: Request, output: Output) -> None:
        """At-least-once: publish now (done once acknowledged). Exactly-once: done now, published
        with its offset by the next transaction."""
        if self.transactions is None:
            self.publisher.send(request, output)
            return
        if self._mark_done(request):
            self.transactions.stage(request, output)
        else:
            self.stats.stale_dropped += 1

    def _mark_done(self, request: Request) -> bool:
        """Every offset this answer covers has one more part answered; False when it is stale."""
        rid = request.rid
        if not self.tracker.is_current(rid.tp, rid.epoch):
            return False
        for offset in request.covers or (rid.offset,):
            self.tracker.mark_done(rid.tp, offset, rid.epoch)
        return True

    def _is_current(self, rid: RequestId) -> bool:
        return self.tracker.is_current(rid.tp, rid.epoch)

    def _handle_acks(self) -> None:
        for request, output in self.publisher.poll(self._is_current):
            if self._mark_done(request):
                self._count(request)
            else:
                self.stats.stale_dropped += 1
        self.stats.republished = self.publisher.republished
        self.stats.stale_dropped += self.publisher.stale_dropped
        self.publisher.stale_dropped = 0

    def _count(self, request: Request) -> None:
        if request.kind == "dead_letter":
            self.stats.dead_letters += 1
            reason = request.reason or "summarize_failed"
            self.stats.reasons[reason] = self.stats.reasons.get(reason, 0) + 1
        else:
            self.stats.summaries += 1

    def _maybe_commit(self, force: bool) -> None:
        now = time.monotonic()
        due = now - self._last_commit >= self.settings.commit_interval_s
        if self.transactions is not None:
            due = due or self.transactions.staged >= self.settings.transaction_max_records
        if not force and not due:
            return
        self._last_commit = now
        # Never for partitions being revoked: once this member rejoined, its generation is current
        # and the broker would take the commit, while the new owner may already have read the old
        # offset and replays (in exactly-once, duplicates a read-committed consumer sees).
        offsets = {tp: o for tp, o in self.tracker.committable().items() if tp not in self._revoking}
        if not offsets:
            return
        if self.transactions is not None:
            self._commit_transaction(self.transactions.unsplit(offsets))
            return
        try:
            self.consumer.commit(offsets)
        except KafkaError as exc:  # e.g. a rebalance is under way: the next round commits again
            log.warning("commit of %s failed: %s", offsets, exc)
            return
        self.tracker.committed(offsets)
        self.stats.commits += 1

    def _commit_transaction(self, offsets: dict[TopicPartition, int]) -> None:
        assert self.transactions is not None
        published = self.transactions.commit(offsets, self.consumer.group_metadata())
        self.stats.transactions, self.stats.aborts = self.transactions.transactions, self.transactions.aborts
        if published is None:  # aborted: the same answers go into the next transaction
            return
        self.tracker.committed(offsets)
        self.stats.commits += 1
        for request, _ in published:
            self._count(request)
