"""The worker's poll loop: consume, decode, summarise, answer, commit — all from one thread.

Threads: the loop thread owns the consumer, the offset tracker and the Committer (`committer.py`:
publishing answers and committing their offsets, at-least-once or exactly-once); the producer's I/O
thread only queues acknowledgements there; the summarizer's own thread is reached through
submit/poll. What the loop holds and has done is read through `KafkaWorker.stats()` (the observer
calls it after every step), never from its parts.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import Protocol

from kafka import TopicPartition
from kafka.errors import KafkaError

from worker.dispatch import Backpressure
from worker.kafka.answered import Listed
from worker.kafka.clients import BROKER_OUTAGE_S, Consumer, Producer
from worker.kafka.committer import Committer
from worker.kafka.intake import Intake, Pending, internal_error
from worker.kafka.offsets import OffsetTracker
from worker.kafka.publish import Answers, ProducerFenced, Request, RequestId
from worker.kafka.undecodable import UndecodableBatch
from worker.settings.budgets import FULL_BINS_IN_FLIGHT
from worker.settings.kafka import KafkaSettings
from worker.messages import Summary, TelemetryRecord, failure_reason

__all__ = ["ConsumerStats", "KafkaWorker", "LoopStats", "PartitionStats", "ProducerFenced", "RequestId",
           "WorkerStats", "consumer_stats"]

log = logging.getLogger(__name__)
# While the summarizer holds work, the consumer poll is short so results are published promptly.
_BUSY_POLL_MS = 5
# While the member (re)joins its group, polls are long: kafka-python 3.0 can abandon a leader's
# SyncGroup cut short by a few-ms poll and start the rebalance over, again and again.
_REJOIN_POLL_MS = 1000
# Records a partition may read past its oldest unanswered one (answered meanwhile, or waiting): bounds the
# offsets tracked per partition and the list of answered ones a commit carries (a few KB of metadata).
MAX_READ_AHEAD = 50_000


Results = list[tuple[Hashable, Summary | Exception]]


class SummarizerLike(Protocol):
    def submit(self, request_id: Hashable, record: TelemetryRecord) -> None: ...
    def poll(self, timeout: float) -> Results: ...


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
    answered_before: int = 0   # inputs skipped on replay: a commit listed them as answered already
    aborts: int = 0            # exactly-once: aborted (and retried) transactions
    drained_cleanly: bool = False
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ConsumerStats:
    """The consumer's side of a loop, read at one moment (`consumer_stats`)."""

    stable: bool                 # the member is in a settled group (no rebalance under way)
    paused: int                  # partitions paused: backpressure, the drain, or a stuck batch
    stuck: tuple[dict, ...]      # StuckPartition.describe() of each partition paused at an undecodable batch
    undecodable_batches: int     # fetched batches that could not be decoded, retries included


def consumer_stats(consumer: Consumer) -> ConsumerStats:
    """`consumer`'s facts now (also the incident loop's, for health). Only from its owning thread."""
    return ConsumerStats(stable=consumer.is_stable(), paused=len(consumer.paused()),
                         stuck=tuple(s.describe() for s in consumer.stuck.values()),
                         undecodable_batches=consumer.undecodable_batches)


@dataclass(frozen=True)
class PartitionStats:
    topic: str
    partition: int
    in_flight: int               # polled, not yet in the done prefix
    paused: bool
    lag: int | None              # log end minus the done position; None until a fetch told the log end


@dataclass(frozen=True)
class LoopStats:
    """What a KafkaWorker holds and has done, read at one moment (`KafkaWorker.stats()`)."""

    counts: WorkerStats          # a copy of the loop's counters
    backlog: int                 # records waiting for summarizer room or in open log windows
    in_summarizer: int           # records inside the summarizer
    unfinished_answers: int      # answers not yet acknowledged (exactly-once: not yet committed)
    commit_lag: int              # polled records not yet in a done prefix: what the commit position waits on
    held_back: int               # answers ready but held back at the last commit (the commit metadata's bound)
    assigned: int                # partitions this member holds
    consumer: ConsumerStats
    partitions: tuple[PartitionStats, ...] | None  # with their lag: only from stats(lag=True)


def in_flight_records(settings: KafkaSettings, max_seqs_per_bin: int) -> int:
    """The records a worker keeps inside its summarizer: `max_in_flight`, else full bins of them, so
    one bin decodes while the next is packed."""
    return settings.max_in_flight or FULL_BINS_IN_FLIGHT * max_seqs_per_bin


class KafkaWorker:
    """Consumes `settings.input_topic` in a group, answers every record exactly once per delivery
    (a summary or a dead letter) and commits only acknowledged work. `run()` from one thread."""

    def __init__(self, settings: KafkaSettings, summarizer: SummarizerLike, model_name: str, *, max_in_flight: int,
                 consumer: Consumer | None = None, producer: Producer | None = None,
                 observer: Callable[[KafkaWorker, Results], None] | None = None) -> None:
        """max_in_flight: records inside the summarizer before partitions pause (`in_flight_records`).
        observer(worker, results): after every step, with the summarizer's results of that step, and once
        after the drain; from the loop thread (worker/ops/observer.py reads `worker.stats()`)."""
        self.settings = settings
        self.observer = observer
        self.summarizer = summarizer
        self.model_name = model_name
        self.max_in_flight = max_in_flight
        self.consumer = consumer or Consumer(settings)
        self.producer = producer or Producer(settings)
        self.tracker = OffsetTracker()
        self.counts = WorkerStats()  # cumulative; the Committer counts into it too
        self.answers = Answers(settings.output_topic, settings.dlq_topic, model_name, settings.max_request_size)
        self.committer = Committer(settings, self.consumer, self.producer, self.answers, self.tracker, self.counts)
        self.intake = Intake(settings, self._dead_letter)
        self._in_summarizer: dict[RequestId, Pending] = {}
        self._held: set[TopicPartition] = set()      # paused: their share of a full summarizer
        self._revoking: set[TopicPartition] = set()
        self._restoring: set[TopicPartition] = set()  # assigned: read what their last commit lists first
        self._ahead: set[TopicPartition] = set()      # paused: MAX_READ_AHEAD records past an unanswered one

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
            self._restoring.add(tp)
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
                self.observer(self, [])
        finally:
            self.consumer.close()
            self.producer.close()
        return self.counts

    def _step(self, fetch: bool) -> None:
        busy = bool(self._in_summarizer or self.committer.busy)
        if not self.consumer.is_stable():
            timeout_ms = _REJOIN_POLL_MS
        else:
            timeout_ms = _BUSY_POLL_MS if busy else self.settings.poll_timeout_ms
        messages = self.consumer.poll(timeout_ms)
        if self._revoking and self.consumer.is_stable():  # a revoke with no assignment after it
            self._settle_revocations(self.consumer.assignment())
        self._restore_assigned()
        for msg in messages:
            self._accept(msg)
        self.intake.close_due_windows()
        if not fetch:  # draining: partitions assigned meanwhile stay paused too
            self.consumer.pause(self.consumer.assignment() - self.consumer.paused())
        else:
            self._submit_backlog()
            self._apply_backpressure()
        results = self.summarizer.poll(self.settings.poll_timeout_ms / 1000) if self._in_summarizer else []
        for rid, result in results:
            self._on_result(rid, result)
        self.committer.handle_acks()
        self.committer.maybe_commit(force=False, revoking=self._revoking)
        if self.observer is not None:
            self.observer(self, results)

    def stats(self, *, lag: bool = False) -> LoopStats:
        """The loop's counters, queues and consumer facts now; lag=True also reads each partition's log
        end and position (a look at every assigned partition: worth it about once a second).
        Only from the loop thread."""
        counts = replace(self.counts, reasons=dict(self.counts.reasons))
        return LoopStats(counts=counts, backlog=self.intake.staged, in_summarizer=len(self._in_summarizer),
                         unfinished_answers=self.committer.unfinished, commit_lag=self.tracker.in_flight(),
                         held_back=self.committer.held_back,
                         assigned=len(self.tracker.partitions()), consumer=consumer_stats(self.consumer),
                         partitions=self._partition_stats() if lag else None)

    def _partition_stats(self) -> tuple[PartitionStats, ...]:
        client, paused = self.consumer.client, self.consumer.paused()
        out = []
        for tp in sorted(self.tracker.partitions()):
            in_flight, lag = self.tracker.in_flight(tp), None
            highwater = client.highwater(tp)
            if highwater is not None:  # known after the first fetch, when the position is too
                position = client.position(tp, timeout_ms=0)
                if position is not None:
                    lag = max(0, highwater - position) + in_flight
            out.append(PartitionStats(tp.topic, tp.partition, in_flight, tp in paused, lag))
        return tuple(out)

    def _drain(self) -> None:
        """Stop fetching; finish and publish what the summarizer holds; commit the done prefix."""
        self.consumer.pause(self.consumer.assignment())
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
        while self.committer.aborted and time.monotonic() < deadline:
            time.sleep(0.1)  # an aborted last transaction: try again while the deadline allows
            self.committer.maybe_commit(force=True, revoking=self._revoking)
        self.counts.drained_cleanly = not (self._in_summarizer or self.committer.busy or self.committer.staged)
        log.info("drained (%s): %s", "clean" if self.counts.drained_cleanly else "deadline hit", self.counts)

    def _restore_assigned(self) -> None:
        """Newly assigned partitions: the inputs their last commit lists as answered above its offset
        are skipped when they come (`answered.py`). Blocks (a committed-offset fetch per partition)."""
        for tp in sorted(self._restoring & set(self.tracker.partitions())):
            self._restore(tp)
        self._restoring.clear()

    def _restore(self, tp: TopicPartition) -> None:
        deadline = time.monotonic() + BROKER_OUTAGE_S
        while True:
            try:
                listed = Listed.from_metadata(self.consumer.committed_metadata(tp))
                break
            except KafkaError as exc:  # e.g. the coordinator moving: without the list, answers could repeat
                if time.monotonic() > deadline:
                    raise
                log.warning("%s[%d]: reading the committed metadata failed (%s); retrying", tp.topic,
                            tp.partition, exc)
                time.sleep(0.5)
        self.committer.restore(tp, listed)
        if listed is not None:
            log.info("%s[%d]: %d inputs from offset %d on were answered before: skipped", tp.topic, tp.partition,
                     len(listed), listed.start)

    def _accept(self, msg) -> None:
        tp = TopicPartition(msg.topic, msg.partition)
        if self.tracker.epoch(tp) is None:
            return  # fetched before a revocation; the new owner reads it
        if msg.offset <= self.tracker.last_tracked(tp, default=-1):
            # The position went back (a reset to the committed offset): what we held is replayed.
            self.tracker.revoke(tp)
            self.tracker.assign(tp)
            self._forget({tp})
            self._restore(tp)
        if self.tracker.was_answered(tp, msg.offset):  # its answers are out: done, not answered again
            epoch = self.tracker.track(tp, msg.offset)
            self.tracker.mark_done(tp, msg.offset, epoch)
            self.counts.consumed += 1
            self.counts.answered_before += 1
            return
        items = self.intake.decode(msg)
        epoch = self.tracker.track(tp, msg.offset, parts=len(items))
        self.counts.consumed += 1
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
        """Pause the partitions that hold their share of a full summarizer, and those read too far ahead.

        Full: records wait in the backlog, or the summarizer holds `max_in_flight`. Then a partition
        holding fewer than its share (`max_in_flight` over the partitions assigned) of the backlog and
        the summarizer keeps reading: its dead letters go out at once and its records queue in a
        backlog bounded by the shares, instead of waiting for another partition's backlog to drain.
        While not full every partition reads, so one busy partition still fills the engine."""
        assigned = self.consumer.assignment()
        # A partition that read MAX_READ_AHEAD records past its oldest unanswered one waits for it: what
        # the loop tracks, and what a commit lists, stays bounded however long one record takes.
        ahead = {tp for tp in assigned if self.tracker.in_flight(tp) >= MAX_READ_AHEAD}
        if ahead - self._ahead:
            log.warning("partitions %s read %d records past their oldest unanswered one: paused until it is "
                        "answered", sorted(map(tuple, ahead - self._ahead)), MAX_READ_AHEAD)
        held: set[TopicPartition] = set()
        if self.intake.backlog or len(self._in_summarizer) >= self.max_in_flight:
            share = max(1, -(-self.max_in_flight // max(1, len(assigned))))
            load = collections.Counter(p.rid.tp for p in self.intake.backlog)
            load.update(rid.tp for rid in self._in_summarizer)
            held = {tp for tp in assigned if load[tp] >= share}
            self.counts.backpressure_pauses += bool(held and not self._held)
        keep_paused = held | ahead
        self.consumer.resume((self._held | self._ahead) - keep_paused)
        self.consumer.pause(keep_paused - self.consumer.paused())
        self._held, self._ahead = held, ahead

    def _on_result(self, rid: RequestId, result: Summary | Exception) -> None:
        pending = self._in_summarizer.pop(rid, None)
        if pending is None or not self.tracker.is_current(rid.tp, rid.epoch):
            self.counts.stale_dropped += 1
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
