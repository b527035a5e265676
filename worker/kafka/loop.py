"""The worker's poll loop: consume, decode, summarise, answer, commit — all from one thread.

Threads: the loop thread owns the consumer, the offset tracker and the Committer (`committer.py`:
publishing answers and committing their offsets, at-least-once or exactly-once); the producer's I/O
thread only queues acknowledgements there; the summarizer's own thread is reached through
submit/poll.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Protocol

from kafka import TopicPartition

from worker.dispatch import Backpressure
from worker.kafka.clients import Consumer, Producer
from worker.kafka.committer import Committer
from worker.kafka.intake import Intake, Pending, internal_error
from worker.kafka.offsets import OffsetTracker
from worker.kafka.publish import Answers, ProducerFenced, Request, RequestId
from worker.kafka.undecodable import UndecodableBatch
from worker.settings.budgets import FULL_BINS_IN_FLIGHT
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


def in_flight_records(settings: KafkaSettings, max_seqs_per_bin: int) -> int:
    """The records a worker keeps inside its summarizer: `max_in_flight`, else full bins of them, so
    one bin decodes while the next is packed."""
    return settings.max_in_flight or FULL_BINS_IN_FLIGHT * max_seqs_per_bin


class KafkaWorker:
    """Consumes `settings.input_topic` in a group, answers every record exactly once per delivery
    (a summary or a dead letter) and commits only acknowledged work. `run()` from one thread."""

    def __init__(self, settings: KafkaSettings, summarizer: SummarizerLike, model_name: str, *, max_in_flight: int,
                 consumer: Consumer | None = None, producer: Producer | None = None,
                 observer: Callable[[KafkaWorker], None] | None = None) -> None:
        """max_in_flight: records inside the summarizer before partitions pause (`in_flight_records`)."""
        self.settings = settings
        self.observer = observer  # e.g. metrics: called after every step, from the loop thread
        self.summarizer = summarizer
        self.model_name = model_name
        self.max_in_flight = max_in_flight
        self.consumer = consumer or Consumer(settings)
        self.producer = producer or Producer(settings)
        self.tracker = OffsetTracker()
        self.stats = WorkerStats()
        self.answers = Answers(settings.output_topic, settings.dlq_topic, model_name, settings.max_request_size)
        self.committer = Committer(settings, self.consumer, self.producer, self.answers, self.tracker, self.stats)
        self.intake = Intake(settings, self._dead_letter)
        self._in_summarizer: dict[RequestId, Pending] = {}
        self._paused_by_us = False
        self._revoking: set[TopicPartition] = set()

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
        busy = bool(self._in_summarizer or self.committer.busy)
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
        self.committer.handle_acks()
        self.committer.maybe_commit(force=False, revoking=self._revoking)
        if self.observer is not None:
            self.observer(self)

    @property
    def pending(self) -> tuple[int, int, int]:
        """(records waiting for summarizer room or in open log windows, records in the summarizer, answers not yet
        acknowledged or, exactly-once, not yet committed). Only from the loop thread."""
        return self.intake.staged, len(self._in_summarizer), self.committer.unfinished

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
        while (self._in_summarizer or self.committer.busy) and time.monotonic() < deadline:
            self._step(fetch=False)
        self.committer.flush(max(0.0, deadline - time.monotonic()))
        self.committer.handle_acks()
        self.committer.maybe_commit(force=True, revoking=self._revoking)
        while self.committer.staged and time.monotonic() < deadline:
            time.sleep(0.1)  # an aborted last transaction: try again while the deadline allows
            self.committer.maybe_commit(force=True, revoking=self._revoking)
        self.stats.drained_cleanly = not (self._in_summarizer or self.committer.busy or self.committer.staged)
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
        self.committer.forget(gone)

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
            return
        try:
            answer = self.answers.summary(pending.request("summary"), result)
        except Exception as exc:  # noqa: BLE001 - a summary that cannot be written is this record's answer
            error = internal_error(exc, "writing the summary", pending.source.topic, pending.source.partition,
                                   pending.source.offset)
            self._dead_letter(pending.request("dead_letter", error.reason), error.message)
            return
        self.committer.answer(*answer)

    def _dead_letter(self, request: Request, message: str) -> None:
        self.committer.answer(*self.answers.dead_letter(request, message))
