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
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Protocol

from kafka import TopicPartition
from kafka.errors import KafkaError

from worker.dispatch import Backpressure
from worker.kafka.clients import Consumer, Producer
from worker.kafka.intake import Intake, Pending
from worker.kafka.offsets import OffsetTracker
from worker.kafka.publish import (AckPublisher, Answers, Request, RequestId, TransactionalPublisher,
                                  ProducerFenced)
from worker.kafka.records import Output
from worker.kafka.undecodable import UndecodableBatch
from worker.settings.kafka import KafkaSettings
from worker.messages import Summary, TelemetryRecord, failure_reason

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
        self.stats = WorkerStats()
        self.answers = Answers(settings.output_topic, settings.dlq_topic, model_name, settings.max_request_size)
        self.publisher = AckPublisher(self.producer, self.answers)
        self.transactions = TransactionalPublisher(self.producer, self.answers) if settings.exactly_once else None
        self.intake = Intake(settings, self._dead_letter)
        self._in_summarizer: dict[RequestId, Pending] = {}
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
        self._forget(gone)
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
        self.intake.close_due_windows()
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
        return self.intake.staged, len(self._in_summarizer), self.publisher.unacked + staged

    def _drain(self) -> None:
        """Stop fetching; finish and publish what the summarizer holds; commit the done prefix."""
        self.consumer.pause(self.consumer.assignment())
        self._paused_by_us = True
        self.intake.backlog.clear()  # not started: left uncommitted, replayed by whoever reads next
        for pending in self.intake.close_all_windows():  # open windows are answered before the drain ends
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
            self._forget({tp})
        items = self.intake.decode(msg)
        epoch = self.tracker.track(tp, msg.offset, parts=len(items))
        self.stats.consumed += 1
        self.intake.stage(msg, epoch, items)

    def _forget(self, gone: set[TopicPartition]) -> None:
        """Drop the unanswered work of partitions this member no longer reads from where it was."""
        self.intake.forget(gone)
        if self.transactions is not None:
            self.transactions.drop(gone)

    def _submit_backlog(self) -> None:
        backlog = self.intake.backlog
        while backlog and len(self._in_summarizer) < self.max_in_flight:
            pending = backlog[0]
            try:
                self.summarizer.submit(pending.rid, pending.record)
            except Backpressure:
                return
            except Exception as exc:  # noqa: BLE001 - e.g. SequenceTooLong: this record's problem only
                backlog.popleft()
                reason, message = failure_reason(exc)
                self._dead_letter(pending.request("dead_letter", reason), message)
                continue
            backlog.popleft()
            self._in_summarizer[pending.rid] = pending

    def _apply_backpressure(self) -> None:
        full = bool(self.intake.backlog) or len(self._in_summarizer) >= self.max_in_flight
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
            self._dead_letter(pending.request("dead_letter", reason), message)
        else:
            self._answer(*self.answers.summary(pending.request("summary"), result))

    # ---- answers, acknowledgements and commits ----
    def _dead_letter(self, request: Request, message: str) -> None:
        self._answer(*self.answers.dead_letter(request, message))

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
