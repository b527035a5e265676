"""A fetched batch that cannot be decoded (its codec's library is missing, or it is corrupt) stops
only its own partition.

kafka-python raises such an error from `poll()` for the whole call, and in 3.0 it leaves the dead
record iterator in line: every later `poll()` spins on it without returning. `isolate` finds the
partition and the first offset not delivered from the fetcher's in-line records (kafka-python has
no public way to say which partition failed), drops them, pauses that partition and seeks it back
to that offset. Nothing is skipped: the partition stays stuck there, visible (log, metric, /readyz),
and is tried again after a while (the library may have been installed, the fetch may have been bad),
while the other partitions are served.

A batch that would expand beyond `max_batch_bytes` (a decompression bomb; `codecs.limit_batch_size`
stops it early) is different: it will never decode, so waiting helps nobody. `oversized_batch`
answers each of its offsets instead (an `OversizedBatchRecord` the loop turns into a dead letter
`batch_too_large`) and positions the partition after it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from kafka import KafkaConsumer, TopicPartition

from worker.kafka.codecs import BatchTooLarge

log = logging.getLogger(__name__)

# The generator in kafka-python's fetcher that checks CRCs and decompresses fetched batches.
_DECODER_FRAME = "_unpack_records"


@dataclass
class StuckPartition:
    """A partition paused at a batch that could not be decoded."""

    tp: TopicPartition
    offset: int            # the first offset not delivered: the failed batch holds it
    reason: str            # the decoder's error, e.g. "UnsupportedCodecError: Libraries for zstd ..."
    since: float           # wall-clock time of the first failure
    failures: int = 1
    retry_at: float = 0.0  # monotonic time of the next attempt

    def describe(self) -> dict:
        return {"topic": self.tp.topic, "partition": self.tp.partition, "offset": self.offset,
                "reason": self.reason, "failures": self.failures, "stuck_for_s": round(time.time() - self.since, 1)}


class UndecodableBatch(Exception):
    """The operator chose to stop on an undecodable batch (`on_undecodable_batch = "exit"`)."""

    def __init__(self, stuck: StuckPartition) -> None:
        super().__init__(f"undecodable batch at {stuck.tp.topic}[{stuck.tp.partition}] offset {stuck.offset}: "
                         f"{stuck.reason}")
        self.stuck = stuck


@dataclass(frozen=True)
class OversizedBatchRecord:
    """Stands for one offset of a batch that expands beyond `max_batch_bytes`, in place of the
    consumer record it would have been: the loop answers it with a dead letter batch_too_large."""

    topic: str
    partition: int
    offset: int
    reason: str
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple = ()
    timestamp: int | None = None


def _decoder_frame(exc: BaseException):
    """The frame of kafka-python's batch decoder that `exc` went through, or None."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name == _DECODER_FRAME:
            return tb.tb_frame
        tb = tb.tb_next
    return None


def is_decode_error(exc: BaseException) -> bool:
    """True when `exc` was raised while kafka-python checked or decompressed fetched records."""
    return _decoder_frame(exc) is not None


def _take_in_line(client: KafkaConsumer):
    """Drop kafka-python's in-line records (the failed partition's) so the next poll serves the
    others; returns them, or None."""
    fetcher = client._fetcher
    in_line = fetcher._next_partition_records
    if in_line is None:
        return None
    in_line.drain()
    fetcher._next_partition_records = None
    fetcher._next_in_line_exception_metadata = None
    return in_line


def pending_decode_error(client: KafkaConsumer) -> BaseException | None:
    """The decode error kafka-python set aside for its next poll, taken from it.

    When a poll had returned records before the error, kafka-python keeps the error for the next
    poll and raises it there only if that partition is still fetchable at the same position. A
    partition paused meanwhile (backpressure) loses it, and its dead record iterator stays in line:
    every later poll spins inside kafka-python on a generator that yields nothing (seen with the
    hostile stream's decompression bombs). Taken here, it goes where a raised one goes. A stale one
    (its partition no longer in line) is dropped. Only from the consumer's thread."""
    fetcher = client._fetcher
    kept = fetcher._next_in_line_exception_metadata
    if kept is None:
        return None
    fetcher._next_in_line_exception_metadata = None
    in_line = fetcher._next_partition_records or fetcher._paused_partition_records.get(kept.partition)
    if in_line is None or in_line.topic_partition != kept.partition or not is_decode_error(kept.exception):
        return None
    fetcher._paused_partition_records.pop(kept.partition, None)
    fetcher._next_partition_records = in_line
    return kept.exception


def oversized_batch(client: KafkaConsumer, exc: BaseException) -> list[OversizedBatchRecord] | None:
    """After `poll()` raised BatchTooLarge: one stand-in per offset of that batch from the first one not
    delivered, with the partition positioned after the batch. None for any other error (and for a
    batch of the legacy message formats, which name no offset range: `isolate` pauses it).
    Only from the consumer's thread."""
    frame = _decoder_frame(exc) if isinstance(exc, BatchTooLarge) else None
    batch = frame.f_locals.get("batch") if frame is not None else None
    if batch is None or getattr(batch, "magic", None) != 2:
        return None
    in_line = _take_in_line(client)
    if in_line is None:
        return None
    tp, first = in_line.topic_partition, max(in_line.next_fetch_offset, batch.base_offset)
    if tp in client.assignment():  # else a rebalance took it meanwhile: its new owner meets the batch
        client.seek(tp, batch.last_offset + 1)
    reason = f"{exc} (batch at offsets {batch.base_offset}-{batch.last_offset})"
    return [OversizedBatchRecord(tp.topic, tp.partition, offset, reason)
            for offset in range(first, batch.last_offset + 1)]


def isolate(client: KafkaConsumer, exc: BaseException) -> tuple[TopicPartition, int] | None:
    """After `poll()` raised `exc`: when it is a decode error, pause the failed partition at its first
    undelivered offset and clear kafka-python's in-line records so the next poll serves the others.
    Returns (partition, offset), or None when `exc` is something else. Only from the consumer's thread."""
    if not is_decode_error(exc):
        return None
    in_line = _take_in_line(client)
    if in_line is None:
        return None
    tp, offset = in_line.topic_partition, in_line.next_fetch_offset
    if tp in client.assignment():  # else a rebalance took it meanwhile: its new owner meets the batch
        client.pause(tp)
        client.seek(tp, offset)
    return tp, offset
