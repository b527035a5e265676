"""The worker's poll loop: consume, decode, summarise, publish, commit — all from one thread.

Threads: the loop thread owns the consumer and the offset tracker; the producer's I/O thread only
puts acknowledgements on `_acks`; the summarizer's own thread is reached through submit/poll.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Protocol

import msgspec

from kafka import TopicPartition
from kafka.errors import KafkaError, MessageSizeTooLargeError

from worker.dispatch import Backpressure
from worker.kafka.clients import Consumer, Producer
from worker.kafka.offsets import OffsetTracker
from worker.kafka.records import (Output, Source, dead_letter_output, decode_message, failure_reason,
                                  summary_output)
from worker.kafka.settings import WorkerSettings
from worker.messages import DeadLetter, InvalidRecord, Summary, TelemetryRecord

log = logging.getLogger(__name__)

# After a publish fails with a retriable error (the producer already retried for
# delivery_timeout_ms), wait this long before sending it again.
_REPUBLISH_BACKOFF_S = 1.0
# While the summarizer holds work, the consumer poll is short so results are published promptly.
_BUSY_POLL_MS = 5
# While the member (re)joins its group, polls are long: kafka-python 3.0 can abandon a leader's
# SyncGroup cut short by a few-ms poll and start the rebalance over, again and again.
_REJOIN_POLL_MS = 1000


class SummarizerLike(Protocol):
    def submit(self, request_id: Hashable, record: TelemetryRecord) -> None: ...
    def poll(self, timeout: float) -> list[tuple[Hashable, Summary | Exception]]: ...


@dataclass(frozen=True)
class RequestId:
    """Names one polled record within one assignment epoch of its partition."""

    tp: TopicPartition
    offset: int
    epoch: int


@dataclass
class WorkerStats:
    consumed: int = 0
    summaries: int = 0
    dead_letters: int = 0
    stale_dropped: int = 0     # results or acks for revoked partitions, dropped
    republished: int = 0
    commits: int = 0
    backpressure_pauses: int = 0
    drained_cleanly: bool = False
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass
class _Pending:
    rid: RequestId
    source: Source
    raw: bytes
    record: TelemetryRecord


class KafkaWorker:
    """Consumes `settings.input_topic` in a group, answers every record exactly once per delivery
    (a summary or a dead letter) and commits only acknowledged work. `run()` from one thread."""

    def __init__(self, settings: WorkerSettings, summarizer: SummarizerLike, model_name: str,
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
        self._backlog: deque[_Pending] = deque()        # decoded, waiting for summarizer room
        self._in_summarizer: dict[RequestId, _Pending] = {}
        self._acks: queue.SimpleQueue = queue.SimpleQueue()  # (rid, output, error | None, compact)
        self._unacked = 0                                # sends whose callback has not been handled
        self._republish: list[tuple[float, RequestId, Output, bool]] = []
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
        log.info("revoked %s; dropped %d unfinished records (the new owner replays them)",
                 sorted(map(tuple, gone)), dropped)

    # ---- the loop ----
    def run(self, stop: threading.Event) -> WorkerStats:
        """Serve until `stop` is set, then drain within settings.drain_timeout_s, commit and close."""
        self.consumer.open(self._on_revoked, self._on_assigned)
        self.producer.open()
        try:
            while not stop.is_set():
                self._step(fetch=True)
            self._drain()
            if self.observer is not None:
                self.observer(self)
        finally:
            self.consumer.close()
            self.producer.close()
        return self.stats

    def _step(self, fetch: bool) -> None:
        busy = bool(self._in_summarizer or self._unacked)
        if not self.consumer.is_stable():
            timeout_ms = _REJOIN_POLL_MS
        else:
            timeout_ms = _BUSY_POLL_MS if busy else self.settings.poll_timeout_ms
        messages = self.consumer.poll(timeout_ms)
        if self._revoking and self.consumer.is_stable():  # a revoke with no assignment after it
            self._settle_revocations(self.consumer.assignment())
        for msg in messages:
            self._accept(msg)
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
        """(records waiting for summarizer room, records in the summarizer, unacknowledged sends).
        Only from the loop thread."""
        return len(self._backlog), len(self._in_summarizer), self._unacked

    def _drain(self) -> None:
        """Stop fetching; finish and publish what the summarizer holds; commit the done prefix."""
        self.consumer.pause(self.consumer.assignment())
        self._paused_by_us = True
        self._backlog.clear()  # not started: left uncommitted, replayed by whoever reads next
        deadline = time.monotonic() + self.settings.drain_timeout_s
        while (self._in_summarizer or self._unacked or self._republish) and time.monotonic() < deadline:
            self._step(fetch=False)
        self.producer.flush(max(0.0, deadline - time.monotonic()))
        self._handle_acks()
        self.stats.drained_cleanly = not (self._in_summarizer or self._unacked or self._republish)
        self._maybe_commit(force=True)
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
        epoch = self.tracker.track(tp, msg.offset)
        self.stats.consumed += 1
        rid = RequestId(tp, msg.offset, epoch)
        source = Source(msg.topic, msg.partition, msg.offset, msg.key)
        raw = msg.value or b""
        try:
            record = decode_message(msg.value, msg.headers)
        except InvalidRecord as exc:
            self._publish_dead_letter(rid, source, raw, exc.reason, exc.message)
            return
        self._backlog.append(_Pending(rid, source, raw, record))

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
                self._publish_dead_letter(pending.rid, pending.source, pending.raw, reason, message)
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
            self._publish_dead_letter(rid, pending.source, pending.raw, reason, message)
        else:
            self._publish(rid, summary_output(self.settings.output_topic, pending.source, result), False)

    # ---- publishing and acknowledgements ----
    def _publish_dead_letter(self, rid: RequestId, source: Source, raw: bytes, reason: str, message: str,
                             compact: bool = False) -> None:
        log.warning("dead letter %s/%d@%d: %s: %s", source.topic, source.partition, source.offset, reason,
                    message[:200])
        self._publish(rid, dead_letter_output(self.settings.dlq_topic, source, raw, reason, message,
                                              self.model_name, compact=compact), compact)

    def _publish(self, rid: RequestId, output: Output, compact: bool) -> None:
        self._unacked += 1
        self.producer.send(output.topic, output.key, output.value, output.headers,
                           lambda error: self._acks.put((rid, output, error, compact)))

    def _handle_acks(self) -> None:
        now = time.monotonic()
        due = [item for item in self._republish if item[0] <= now]
        self._republish = [item for item in self._republish if item[0] > now]
        for _, rid, output, compact in due:
            if self.tracker.is_current(rid.tp, rid.epoch):
                self.stats.republished += 1
                self._publish(rid, output, compact)
        while True:
            try:
                rid, output, error, compact = self._acks.get_nowait()
            except queue.Empty:
                return
            self._unacked -= 1
            if error is None:
                self._on_acked(rid, output)
            elif not self.tracker.is_current(rid.tp, rid.epoch):
                self.stats.stale_dropped += 1
            elif _too_large(error) and not compact:
                self._publish_too_large(rid, output, error)
            else:
                log.warning("publish of %s failed (%s); retrying in %.0fs", rid, error, _REPUBLISH_BACKOFF_S)
                self._republish.append((time.monotonic() + _REPUBLISH_BACKOFF_S, rid, output, compact))

    def _publish_too_large(self, rid: RequestId, output: Output, error: BaseException) -> None:
        # The original bytes live in the dead letter (or the pending record): rebuild a small one.
        source = Source(rid.tp.topic, rid.tp.partition, rid.offset, output.key)
        letter = _original_of(output)
        self._publish_dead_letter(rid, source, letter, "output_too_large",
                                  f"the output for this record ({len(output.value)} bytes) could not be "
                                  f"published: {type(error).__name__}: {error}", compact=True)

    def _on_acked(self, rid: RequestId, output: Output) -> None:
        if not self.tracker.mark_done(rid.tp, rid.offset, rid.epoch):
            self.stats.stale_dropped += 1
            return
        if output.topic == self.settings.dlq_topic:
            self.stats.dead_letters += 1
            reason = next((v.decode() for k, v in output.headers if k == "telesum-reason"), "unknown")
            self.stats.reasons[reason] = self.stats.reasons.get(reason, 0) + 1
        else:
            self.stats.summaries += 1

    def _maybe_commit(self, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._last_commit < self.settings.commit_interval_s:
            return
        self._last_commit = now
        offsets = self.tracker.committable()
        if not offsets:
            return
        try:
            self.consumer.commit(offsets)
        except KafkaError as exc:  # e.g. a rebalance is under way: the next round commits again
            log.warning("commit of %s failed: %s", offsets, exc)
            return
        self.tracker.committed(offsets)
        self.stats.commits += 1


def _too_large(error: BaseException) -> bool:
    return isinstance(error, MessageSizeTooLargeError) or "too large" in str(error).lower() \
        or "RecordTooLarge" in type(error).__name__


def _original_of(output: Output) -> bytes:
    """The original input bytes carried by a dead-letter output (or the output itself for a summary)."""
    try:
        return msgspec.json.decode(output.value, type=DeadLetter).original
    except msgspec.DecodeError:
        return output.value
