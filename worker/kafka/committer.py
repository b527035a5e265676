"""Answers from ready to committed: the poll loop hands each answer here, and the Committer
publishes it, marks the offsets it covers done and commits the done prefixes.

At-least-once: an answer is published at once (`AckPublisher`); its offsets are done when the broker
acknowledged it; done prefixes are committed every commit_interval_s. Exactly-once: an answer is done
when it is ready; a batch (closed after transaction_max_records answers or commit_interval_s)
publishes the answers of the done prefixes and commits those offsets in one transaction
(`TransactionalPublisher`), so a read-committed consumer sees each answer once however often the
worker dies. Only from the poll-loop thread.
"""

from __future__ import annotations

import logging
import time

from kafka import TopicPartition
from kafka.errors import KafkaError

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
        """At-least-once: publish now (done once acknowledged). Exactly-once: done now, published
        with its offset by the next transaction."""
        if self.transactions is None:
            self.publisher.send(request, output)
            return
        if self._mark_done(request):
            self.transactions.stage(request, output)
        else:
            self.stats.stale_dropped += 1

    def forget(self, gone: set[TopicPartition]) -> None:
        """Drop staged answers of partitions this member no longer reads from where it was."""
        if self.transactions is not None:
            self.transactions.drop(gone)

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
            due = due or self.transactions.staged >= self.settings.transaction_max_records
        if not force and not due:
            return
        self._last_commit = now
        # Never for partitions being revoked: once this member rejoined, its generation is current
        # and the broker would take the commit, while the new owner may already have read the old
        # offset and replays (in exactly-once, duplicates a read-committed consumer sees).
        offsets = {tp: o for tp, o in self.tracker.committable().items() if tp not in revoking}
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
