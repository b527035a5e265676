"""Thin wrappers that own the kafka-python clients. No network I/O happens in a constructor:
`open()` creates the client. The domain layer (`loop.py`) only talks to these."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from kafka.structs import MemberState, OffsetAndMetadata

from worker.settings.kafka import KafkaSettings
from worker.kafka.codecs import limit_batch_size
from worker.kafka.parked import release_parked
from worker.kafka.undecodable import StuckPartition, UndecodableBatch, isolate, oversized_batch, pending_decode_error

log = logging.getLogger(__name__)

# kafka-python 3 raises from poll() while the group coordinator cannot be reached: a broker restart or
# a leader election takes seconds to a minute, so the worker polls on through that; an outage longer
# than this is one its orchestrator should see as a failed process.
BROKER_OUTAGE_S = 120.0

Headers = list[tuple[str, bytes]]


class _Listener(ConsumerRebalanceListener):
    """Forwards rebalance callbacks. They run inside `poll()`: they must not block (no commit)."""

    def __init__(self, on_revoked: Callable[[set[TopicPartition]], None],
                 on_assigned: Callable[[set[TopicPartition]], None]) -> None:
        self._on_revoked, self._on_assigned = on_revoked, on_assigned

    def on_partitions_revoked(self, revoked) -> None:
        self._on_revoked(set(revoked))

    def on_partitions_assigned(self, assigned) -> None:
        self._on_assigned(set(assigned))

    def on_partitions_lost(self, lost) -> None:
        self._on_revoked(set(lost))


class Consumer:
    """One consumer-group member on one topic. Only from the thread that owns it."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self._client: KafkaConsumer | None = None
        self.stuck: dict[TopicPartition, StuckPartition] = {}  # paused at an undecodable batch
        self.undecodable_batches = 0                             # decode failures, retries included
        self.oversized_batches = 0                               # batches answered as batch_too_large
        self._unreachable_since: float | None = None             # monotonic time poll first failed to connect

    def open(self, on_revoked: Callable[[set[TopicPartition]], None],
             on_assigned: Callable[[set[TopicPartition]], None]) -> None:
        """Connect and subscribe; offsets are only ever committed explicitly."""
        s = self.settings
        limit_batch_size(s.max_batch_bytes)
        self._client = KafkaConsumer(
            **s.security_config, group_id=s.group_id, enable_auto_commit=False,
            auto_offset_reset=s.auto_offset_reset, session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.heartbeat_interval_ms, max_poll_interval_ms=s.max_poll_interval_ms,
            max_poll_records=s.max_poll_records,
            # Exactly-once reads only committed input too (an upstream transactional producer's aborts stay unread).
            isolation_level="read_committed" if s.exactly_once else "read_uncommitted",
            # A single record may be larger than the default 1 MB partition fetch.
            max_partition_fetch_bytes=max(s.max_request_size, 1024 * 1024))
        self._client.subscribe([s.input_topic], listener=_Listener(on_revoked, on_assigned))

    @property
    def client(self) -> KafkaConsumer:
        if self._client is None:
            raise RuntimeError("Consumer.open() has not been called")
        return self._client

    def poll(self, timeout_ms: int) -> list:
        """Records from all unpaused partitions, in offset order per partition. Blocks up to timeout_ms.
        A batch that cannot be decoded pauses its partition (`stuck`) and this poll returns nothing;
        with on_undecodable_batch "exit" it then raises UndecodableBatch. A batch that expands beyond
        max_batch_bytes comes back as one `OversizedBatchRecord` per offset (answered, not waited on)."""
        self._retry_stuck()
        release_parked(self.client)
        try:
            kept = pending_decode_error(self.client)
            if kept is not None:  # kafka-python would drop it for a paused partition and spin
                raise kept
            batches = self.client.poll(timeout_ms=timeout_ms)
            self._unreachable_since = None
        except KafkaConnectionError as exc:  # a broker restarting: poll again, for a while
            return self._on_unreachable(exc)
        except Exception as exc:
            oversized = oversized_batch(self.client, exc)
            if oversized:
                self.oversized_batches += 1
                first = oversized[0]
                log.error("partition %s[%d]: %s; its %d offsets from %d are answered with dead letters "
                          "batch_too_large", first.topic, first.partition, exc, len(oversized), first.offset)
                return oversized
            failed = isolate(self.client, exc)
            if failed is None:
                raise
            stuck = self._on_undecodable(*failed, exc)
            if self.settings.on_undecodable_batch == "exit":
                raise UndecodableBatch(stuck) from exc
            return []
        for tp in self.stuck.keys() & batches.keys():
            log.info("partition %s[%d] decodes again from offset %d; no longer stuck", tp.topic, tp.partition,
                     self.stuck.pop(tp).offset)
        return [record for records in batches.values() for record in records]

    def _on_unreachable(self, exc: KafkaConnectionError) -> list:
        """Nothing, while the broker has been unreachable for less than BROKER_OUTAGE_S; then the error."""
        now = time.monotonic()
        if self._unreachable_since is None:
            self._unreachable_since = now
            log.warning("broker unreachable (%s); polling again for up to %.0f s", exc, BROKER_OUTAGE_S)
        elif now - self._unreachable_since > BROKER_OUTAGE_S:
            raise exc
        time.sleep(0.2)  # kafka-python fails fast while no node answers: do not spin
        return []

    def _on_undecodable(self, tp: TopicPartition, offset: int, exc: Exception) -> StuckPartition:
        self.undecodable_batches += 1
        reason = f"{type(exc).__name__}: {exc}"
        retry_at = time.monotonic() + self.settings.undecodable_retry_s
        known = self.stuck.get(tp)
        if known is not None and known.offset == offset:
            known.failures, known.reason, known.retry_at = known.failures + 1, reason, retry_at
            log.warning("partition %s[%d] still stuck at offset %d (attempt %d): %s", tp.topic, tp.partition,
                        offset, known.failures, reason)
            return known
        self.stuck[tp] = stuck = StuckPartition(tp, offset, reason, time.time(), retry_at=retry_at)
        log.error("partition %s[%d] stuck: the batch at offset %d cannot be decoded (%s); the partition is "
                  "paused there, nothing after it is read or committed; the other partitions are served. "
                  "Retried every %.0fs (on_undecodable_batch=%s)", tp.topic, tp.partition, offset, reason,
                  self.settings.undecodable_retry_s, self.settings.on_undecodable_batch)
        return stuck

    def _retry_stuck(self) -> None:
        """Forget stuck partitions no longer assigned; resume those due for another attempt unless
        the caller holds other partitions paused (backpressure, drain)."""
        if not self.stuck:
            return
        assigned = self.client.assignment()
        self.stuck = {tp: s for tp, s in self.stuck.items() if tp in assigned}
        if set(self.client.paused()) - set(self.stuck):
            return
        now = time.monotonic()
        due = [tp for tp, s in self.stuck.items() if s.retry_at <= now]
        if due:
            self.client.resume(*due)

    def group_metadata(self):
        """The member's group metadata (id, generation, member id): what a transaction's offsets
        carry so the broker fences a stale member (KIP-447). Non-blocking."""
        return self.client.group_metadata()

    def is_stable(self) -> bool:
        """True when the member has joined the group and holds a settled assignment. Non-blocking."""
        return self.client.group_metadata().state == MemberState.STABLE

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        parts = [tp for tp in partitions if tp in self.client.assignment()]
        if parts:
            self.client.pause(*parts)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Resume `partitions`, except those stuck at an undecodable batch (they resume on their retry)."""
        parts = [tp for tp in partitions if tp in self.client.assignment() and tp not in self.stuck]
        if parts:
            self.client.resume(*parts)

    def assignment(self) -> set[TopicPartition]:
        return set(self.client.assignment())

    def paused(self) -> set[TopicPartition]:
        return set(self.client.paused())

    def commit(self, offsets: dict[TopicPartition, int], metadata: dict[TopicPartition, str] | None = None) -> None:
        """Commit `offsets` (the next offset to read per partition), each with its metadata if any.
        Blocks; never from a listener."""
        metadata = metadata or {}
        self.client.commit({tp: OffsetAndMetadata(off, metadata.get(tp, ""), -1) for tp, off in offsets.items()})

    def committed_metadata(self, tp: TopicPartition) -> str | None:
        """The metadata of `tp`'s committed offset (None: nothing committed). Blocks; never from a listener."""
        committed = self.client.committed(tp, metadata=True)
        return committed.metadata if committed is not None else None

    def close(self) -> None:
        """Leave the group without committing anything more."""
        if self._client is not None:
            self._client.close(autocommit=False)
            self._client = None


class TransactionStuck(KafkaError):
    """A transactional request got no answer within the transaction timeout."""


class Producer:
    """Idempotent producer with acks=all; transactional (settings.transactional_id) when the
    processing guarantee is exactly-once. Thread-safe, but transactions only from one thread."""

    LINGER_MS = 5             # a few ms of batching; summaries come out in bursts
    BATCH_BYTES: int | None = None  # None: kafka-python's default batch size

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self._client: KafkaProducer | None = None

    def open(self) -> None:
        """Connect; with exactly-once, also fence this id's previous life (init_transactions)."""
        s = self.settings
        extra = {"transactional_id": s.transactional_id, "transaction_timeout_ms": s.transaction_timeout_ms} \
            if s.exactly_once else {}
        if self.BATCH_BYTES is not None:
            extra["batch_size"] = min(self.BATCH_BYTES, s.max_request_size)
        self._client = KafkaProducer(
            **s.security_config, acks="all", enable_idempotence=True,
            max_request_size=s.max_request_size, delivery_timeout_ms=s.delivery_timeout_ms,
            linger_ms=self.LINGER_MS, **extra)
        if s.exactly_once:
            self._client.init_transactions()

    # -- transactions (exactly-once only; blocking) --
    def begin_transaction(self) -> None:
        self.client.begin_transaction()

    def send_offsets(self, offsets: dict[TopicPartition, int], group_metadata,
                     metadata: dict[TopicPartition, str] | None = None) -> None:
        """Add the consumer's next offsets (with each one's commit metadata, if any) to the open
        transaction. Blocks, up to the transaction timeout."""
        manager = self.client._transaction_manager
        self._wait(manager.send_offsets_to_transaction(
            {tp: OffsetAndMetadata(off, (metadata or {}).get(tp, ""), -1) for tp, off in offsets.items()},
            group_metadata), "send_offsets")

    def commit_transaction(self) -> None:
        """Flush the transaction's sends and commit it. Blocks, up to the transaction timeout; raises on
        any failed send."""
        self._wait(self.client._transaction_manager.begin_commit(), "commit")

    def abort_transaction(self) -> None:
        self._wait(self.client._transaction_manager.begin_abort(), "abort")

    def _wait(self, result, what: str) -> None:
        """kafka-python's own transactional calls wait without a bound; a request lost in a broker
        restart then holds the worker forever (seen: send_offsets, minutes after the broker was back).
        Raises TransactionStuck after transaction_timeout_ms, when the broker aborts it anyway."""
        self.client._sender.wakeup()
        if not result.wait(self.settings.transaction_timeout_ms):
            raise TransactionStuck(f"the transaction's {what} got no answer in {self.settings.transaction_timeout_ms} ms")

    def reopen(self) -> None:
        """A new client with the same transactional id: its init_transactions fences the stuck one and
        the broker aborts what that one left open. Exactly-once only."""
        old, self._client = self._client, None
        if old is not None:
            try:
                old.close(timeout_ms=0)
            except Exception as exc:  # noqa: BLE001 - a client stuck mid-transaction: it is dropped anyway
                log.warning("closing the stuck producer: %s", exc)
        self.open()

    @property
    def client(self) -> KafkaProducer:
        if self._client is None:
            raise RuntimeError("Producer.open() has not been called")
        return self._client

    def send(self, topic: str, key: bytes | None, value: bytes, headers: Headers,
             on_done: Callable[[Exception | None], None]) -> None:
        """Queue one record; `on_done(None | error)` runs later on the producer's I/O thread.
        Errors raised synchronously by kafka-python (e.g. record too large) go to on_done too."""
        try:
            future = self.client.send(topic, key=key, value=value, headers=headers)
        except Exception as exc:  # noqa: BLE001 - every failure is reported the same way
            on_done(exc)
            return
        future.add_callback(lambda _meta: on_done(None))
        future.add_errback(on_done)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait up to timeout_s for every queued send; False when some are still unacknowledged then
        (kafka-python raises a timeout error; the caller decides what an unfinished drain means)."""
        try:
            self.client.flush(timeout=timeout_s)
        except KafkaTimeoutError:
            return False
        return True

    def close(self, timeout_s: float = 10.0) -> None:
        if self._client is not None:
            self._client.close(timeout=timeout_s)
            self._client = None
