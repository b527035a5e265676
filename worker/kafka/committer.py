"""Answers from ready to committed: the poll loop hands each answer here, and the Committer
publishes it, marks the offsets it covers done and commits the done prefixes.

No answer waits on a slower input of its partition. At-least-once: an answer is published at once
(`AckPublisher`); its offsets are done when the broker acknowledged it; every commit_interval_s each
partition's done prefix is committed, with the inputs acknowledged above it listed in the commit's
metadata (`answered.py`). Exactly-once: an answer is done when it is ready; a batch (closed after
transaction_max_records answers or commit_interval_s) publishes every ready answer whose inputs are
complete, and commits the done prefixes with the list of the inputs answered above them, in one
transaction (`TransactionalPublisher`); whoever reads the partition next skips the listed inputs, so a
read-committed consumer sees each answer once however often the worker dies. Only from the poll-loop
thread.
"""

from __future__ import annotations

import logging
import time

from kafka import TopicPartition
from kafka.errors import KafkaError

from worker.kafka.answered import Listed, Settlement, settle
from worker.kafka.clients import Consumer, Producer
from worker.kafka.offsets import OffsetTracker
from worker.kafka.publish import AckPublisher, Answers, Request, RequestId, TransactionalPublisher
from worker.kafka.records import Output
from worker.settings.kafka import KafkaSettings

log = logging.getLogger(__name__)


class Committer:
    def __init__(self, settings: KafkaSettings, consumer: Consumer, producer: Producer, answers: Answers,
                 tracker: OffsetTracker, stats) -> None:
        """tracker: the loop's offsets (this marks them done and committed); stats: the loop's
        WorkerStats (this counts answers, commits and transactions)."""
        self.settings = settings
        self.consumer = consumer
        self.tracker = tracker
        self.stats = stats
        self.publisher = AckPublisher(producer, answers)
        self.transactions = TransactionalPublisher(producer, answers) if settings.exactly_once else None
        self._last_commit = 0.0
        # What the last commit of each partition listed as answered above its offset, and its metadata.
        self._listed: dict[TopicPartition, frozenset[int]] = {}
        self._metadata: dict[TopicPartition, str] = {}
        self.aborted = False      # exactly-once: the last transaction was aborted; its answers wait for the next
        self.held_back = 0        # answers ready but held back at the last commit (the metadata's bound)
        self._answered = 0        # exactly-once: answers staged since the last commit

    @property
    def busy(self) -> bool:
        """Answers sent and not yet acknowledged, or waiting to be sent again."""
        return self.publisher.busy

    @property
    def unfinished(self) -> int:
        """Answers not yet acknowledged or, exactly-once, not yet committed."""
        return self.publisher.unacked + self.staged

    @property
    def staged(self) -> int:
        """Exactly-once: answers waiting for the next transaction."""
        return self.transactions.staged if self.transactions is not None else 0

    def answer(self, request: Request, output: Output) -> None:
        """At-least-once: publish now (done once acknowledged). Exactly-once: done now, published by
        the next transaction whose commit covers or lists every input it answers."""
        if self.transactions is None:
            self.publisher.send(request, output)
            return
        if self._mark_done(request):
            self.transactions.stage(request, output)
            self._answered += 1
        else:
            self.stats.stale_dropped += 1

    def forget(self, gone: set[TopicPartition]) -> None:
        """Drop staged answers of partitions this member no longer reads from where it was."""
        if self.transactions is not None:
            self.transactions.drop(gone)
        for tp in gone:
            self._listed.pop(tp, None)
            self._metadata.pop(tp, None)

    def restore(self, tp: TopicPartition, listed: Listed | None) -> None:
        """`tp` was just assigned; its committed metadata lists `listed` as answered: skipped when
        they come (the loop asks `tracker.was_answered`), and listed by every commit until the
        offset passes them."""
        self.tracker.restore(tp, listed)
        self._listed[tp] = frozenset(o for o in range(listed.start, listed.start + len(listed.bits) * 8)
                                     if o in listed) if listed is not None else frozenset()
        self._metadata.pop(tp, None)

    def handle_acks(self) -> None:
        for request, _ in self.publisher.poll(self._is_current):
            if self._mark_done(request):
                self._count(request)
            else:
                self.stats.stale_dropped += 1
        self.stats.republished = self.publisher.republished
        self.stats.stale_dropped += self.publisher.stale_dropped
        self.publisher.stale_dropped = 0

    def flush(self, timeout_s: float) -> None:
        """At-least-once: wait up to timeout_s for the sends in flight (nothing to do exactly-once)."""
        if self.transactions is None:
            self.publisher.producer.flush(timeout_s)

    def maybe_commit(self, force: bool, revoking: set[TopicPartition]) -> None:
        """Commit the done prefixes when commit_interval_s has passed (exactly-once: or a batch is
        full), or now with `force`; never for partitions in `revoking`."""
        now = time.monotonic()
        due = now - self._last_commit >= self.settings.commit_interval_s
        if self.transactions is not None:
            due = due or self._answered >= self.settings.transaction_max_records
        if not force and not due:
            return
        self._last_commit, self._answered = now, 0
        # Never for partitions being revoked: once this member rejoined, its generation is current
        # and the broker would take the commit, while the new owner may already have read the old
        # offset and replays (in exactly-once, duplicates a read-committed consumer sees).
        staged = self.transactions.covers() if self.transactions is not None else {}
        settlements: dict[TopicPartition, Settlement] = {}
        held = 0
        for tp in self.tracker.partitions() - revoking:
            next_commit, pending, done = self.tracker.view(tp)
            found = settle(next_commit, pending, done.__contains__, staged.get(tp, {}), self._listed.get(tp, ()))
            if found is None:
                continue
            held += found.held_back
            if found.publish or found.position != self.tracker.committed_position(tp) \
                    or found.metadata != self._metadata.get(tp):
                settlements[tp] = found
        self.held_back = held
        if not settlements:
            self.aborted = False  # e.g. what an aborted transaction carried belongs to a revoked partition now
            return
        offsets = {tp: s.position for tp, s in settlements.items()}
        metadata = {tp: s.metadata for tp, s in settlements.items()}
        if self.transactions is not None:
            self._commit_transaction(offsets, metadata, [rid for s in settlements.values() for rid in s.publish])
        else:
            try:
                self.consumer.commit(offsets, metadata)
            except KafkaError as exc:  # e.g. a rebalance is under way: the next round commits again
                log.warning("commit of %s failed: %s", offsets, exc)
                return
            self.stats.commits += 1
        if self.aborted:
            return
        self.tracker.committed(offsets)
        for tp, found in settlements.items():
            self._listed[tp], self._metadata[tp] = found.listed, found.metadata

    def _commit_transaction(self, offsets: dict[TopicPartition, int], metadata: dict[TopicPartition, str],
                            publish: list[RequestId]) -> None:
        assert self.transactions is not None
        published = self.transactions.commit(offsets, self.consumer.group_metadata(), metadata, publish)
        self.stats.transactions, self.stats.aborts = self.transactions.transactions, self.transactions.aborts
        self.aborted = published is None
        if published is None:  # aborted: the same answers go into the next transaction
            return
        self.stats.commits += 1
        for request, _ in published:
            self._count(request)

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

    def _count(self, request: Request) -> None:
        if request.kind == "dead_letter":
            self.stats.dead_letters += 1
            self.stats.reasons[request.reason] = self.stats.reasons.get(request.reason, 0) + 1
        else:
            self.stats.summaries += 1
