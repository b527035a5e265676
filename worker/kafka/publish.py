"""The publish path: answers to the broker and their acknowledgements back to the poll loop.

Every output travels with a frozen `Request` — which input it answers (id, kind, reason, the
input's own bytes) — to its acknowledgement, so an output that cannot be published is rebuilt from
the request (a compact dead letter of the *input's* bytes, keeping a dead letter's own reason),
never from the output's bytes.

Two publishers, one per processing guarantee:
  - `AckPublisher` (at-least-once): sends at once; `poll()` returns the acknowledged requests,
    retries retriable failures after a backoff, and replaces too-large outputs.
  - `TransactionalPublisher` (exactly-once): `stage()` holds answers; `commit()` publishes the
    answers the Committer names (`answered.settle`) and the offsets, with the metadata listing the
    inputs answered above them, in one transaction.
Only from the poll-loop thread (the producer's I/O thread only fills `AckPublisher._acks`).
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from kafka import TopicPartition
from kafka.errors import (CommitFailedError, InvalidProducerEpochError, KafkaError, MessageSizeTooLargeError,
                          ProducerFencedError)

from worker.kafka.clients import Producer, TransactionStuck
from worker.kafka.records import Output, Source, dead_letter_output, summary_output
from worker.messages import ReasonCode, Summary

log = logging.getLogger(__name__)

# After a publish fails with a retriable error (the producer already retried for
# delivery_timeout_ms), wait this long before sending it again.
REPUBLISH_BACKOFF_S = 1.0
# Room left under max_request_size for the record's framing, key and headers.
_FRAMING_BYTES = 1024


@dataclass(frozen=True)
class RequestId:
    """Names one answer: a polled record within one assignment epoch of its partition, and which
    of its parts (a batch message is answered per item; a log window by its last offset)."""

    tp: TopicPartition
    offset: int
    epoch: int
    index: int = 0


@dataclass(frozen=True)
class Request:
    """What one output answers, carried unchanged from the answer to its acknowledgement."""

    rid: RequestId
    source: Source
    original: bytes                          # the input's bytes, as consumed
    record_id: str | None                    # the input's id when it decoded
    kind: Literal["summary", "dead_letter"]
    reason: ReasonCode | None = None         # dead letters only
    compact: bool = False                    # already the last-resort compact dead letter
    covers: tuple[int, ...] = ()             # a log window: one offset per part it answers (else rid.offset)

    def __post_init__(self) -> None:
        if self.kind == "dead_letter" and self.reason is None:
            raise ValueError("a dead letter's request names its reason")


class ProducerFenced(RuntimeError):
    """Another producer with this worker's transactional id took over: this process must stop."""


def too_large(error: BaseException) -> bool:
    return isinstance(error, MessageSizeTooLargeError) or "too large" in str(error).lower() \
        or "RecordTooLarge" in type(error).__name__


class Answers:
    """Builds outputs for requests (one place that knows topics, model name and the fallback)."""

    def __init__(self, output_topic: str, dlq_topic: str, model_name: str, max_request_size: int) -> None:
        self.output_topic, self.dlq_topic, self.model_name = output_topic, dlq_topic, model_name
        self.max_value_bytes = max_request_size - _FRAMING_BYTES

    def summary(self, request: Request, summary: Summary) -> tuple[Request, Output]:
        return self.fitting(request, summary_output(self.output_topic, request.source, summary))

    def dead_letter(self, request: Request, message: str) -> tuple[Request, Output]:
        log.warning("dead letter %s/%d@%d: %s: %s", request.source.topic, request.source.partition,
                    request.source.offset, request.reason, message[:200])
        return self.fitting(request, dead_letter_output(self.dlq_topic, request.source, request.original,
                                                        request.reason, message,
                                                        self.model_name, compact=request.compact))

    def fitting(self, request: Request, output: Output) -> tuple[Request, Output]:
        """`output`, or its compact fallback when it is over the producer's size limit."""
        if len(output.value) <= self.max_value_bytes or request.compact:
            return request, output
        return self.fallback(request, output, f"{len(output.value)} bytes, over the {self.max_value_bytes} "
                                              f"that fit one produce request")

    def fallback(self, request: Request, output: Output, why: str) -> tuple[Request, Output]:
        """A compact dead letter of the input's bytes: a summary's becomes output_too_large, a dead
        letter keeps its reason."""
        reason = request.reason if request.kind == "dead_letter" else "output_too_large"
        compact = replace(request, kind="dead_letter", reason=reason, compact=True)
        return self.dead_letter(compact, f"the {request.kind.replace('_', ' ')} for this record could not be "
                                         f"published ({why})")


class AckPublisher:
    """At-least-once: send now; acknowledged requests come back from `poll()`."""

    def __init__(self, producer: Producer, answers: Answers) -> None:
        self.producer, self.answers = producer, answers
        self._acks: queue.SimpleQueue = queue.SimpleQueue()  # (request, output, error | None)
        self.unacked = 0                                     # sends whose callback is not handled
        self._republish: list[tuple[float, Request, Output]] = []
        self.republished = 0
        self.stale_dropped = 0

    @property
    def busy(self) -> bool:
        return bool(self.unacked or self._republish)

    def send(self, request: Request, output: Output) -> None:
        self.unacked += 1
        self.producer.send(output.topic, output.key, output.value, output.headers,
                           lambda error: self._acks.put((request, output, error)))

    def poll(self, is_current: Callable[[RequestId], bool]) -> list[tuple[Request, Output]]:
        """The requests the broker acknowledged since the last call. Never blocks."""
        now = time.monotonic()
        due = [item for item in self._republish if item[0] <= now]
        self._republish = [item for item in self._republish if item[0] > now]
        for _, request, output in due:
            if is_current(request.rid):
                self.republished += 1
                self.send(request, output)
        acked = []
        while True:
            try:
                request, output, error = self._acks.get_nowait()
            except queue.Empty:
                return acked
            self.unacked -= 1
            if error is None:
                acked.append((request, output))
            elif not is_current(request.rid):
                self.stale_dropped += 1
            elif too_large(error) and not request.compact:
                self.send(*self.answers.fallback(request, output, f"{type(error).__name__}: {error}"))
            else:
                log.warning("publish of %s failed (%s); retrying in %.0fs", request.rid, error, REPUBLISH_BACKOFF_S)
                self._republish.append((time.monotonic() + REPUBLISH_BACKOFF_S, request, output))


class TransactionalPublisher:
    """Exactly-once: answers wait here until their offsets are committed, in the same transaction."""

    def __init__(self, producer: Producer, answers: Answers) -> None:
        self.producer, self.answers = producer, answers
        self._staged: dict[RequestId, tuple[Request, Output]] = {}
        self.transactions = 0
        self.aborts = 0

    @property
    def staged(self) -> int:
        return len(self._staged)

    def stage(self, request: Request, output: Output) -> None:
        self._staged[request.rid] = (request, output)

    def drop(self, partitions: set[TopicPartition]) -> None:
        """Forget staged answers of partitions this member lost (their new owner answers them)."""
        self._staged = {rid: v for rid, v in self._staged.items() if rid.tp not in partitions}

    def covers(self) -> dict[TopicPartition, dict[RequestId, tuple[int, ...]]]:
        """Per partition, each staged answer and the offsets it covers."""
        out: dict[TopicPartition, dict[RequestId, tuple[int, ...]]] = {}
        for rid, (request, _) in self._staged.items():
            out.setdefault(rid.tp, {})[rid] = request.covers or (rid.offset,)
        return out

    def commit(self, offsets: dict[TopicPartition, int], group_metadata,
               metadata: dict[TopicPartition, str] | None = None,
               publish: list[RequestId] | None = None) -> list[tuple[Request, Output]] | None:
        """Publish the staged answers `publish` (default: those below `offsets`) and commit `offsets`
        with their `metadata`, in one transaction. Returns what was published, or None when the
        transaction was aborted (retry later). Raises ProducerFenced when this producer was fenced."""
        if publish is None:
            batch = [(rid, v) for rid, v in self._staged.items()
                     if rid.tp in offsets and rid.offset < offsets[rid.tp]]
        else:
            batch = [(rid, self._staged[rid]) for rid in publish]
        errors: dict[RequestId, BaseException] = {}
        try:
            self.producer.begin_transaction()
            for rid, (_, output) in batch:
                self.producer.send(output.topic, output.key, output.value, output.headers,
                                   lambda error, rid=rid: error is not None and errors.setdefault(rid, error))
            if offsets:
                self.producer.send_offsets(offsets, group_metadata, metadata)
            self.producer.commit_transaction()
        except (ProducerFencedError, InvalidProducerEpochError) as exc:
            raise ProducerFenced(f"fenced by a newer producer with this transactional id: {exc}") from exc
        except TransactionStuck as exc:  # lost in a broker restart: a new producer fences it, the broker aborts it
            self.aborts += 1
            log.warning("%s; reopening the producer, the answers go in the next transaction", exc)
            self.producer.reopen()
            return None
        except (CommitFailedError, KafkaError) as exc:  # abortable: e.g. a rebalance, a send that failed
            self._abort(exc, errors)
            return None
        for rid, _ in batch:
            del self._staged[rid]
        self.transactions += 1
        return [v for _, v in batch]

    def _abort(self, exc: BaseException, errors: dict[RequestId, BaseException]) -> None:
        self.aborts += 1
        log.warning("transaction aborted (%s: %s); retrying with the next batch", type(exc).__name__, exc)
        try:
            self.producer.abort_transaction()
        except (ProducerFencedError, InvalidProducerEpochError) as fenced:
            raise ProducerFenced(f"fenced while aborting: {fenced}") from fenced
        except TransactionStuck as stuck:
            log.warning("%s; reopening the producer", stuck)
            self.producer.reopen()
        for rid, error in errors.items():  # rebuild answers the broker refused as too large
            if too_large(error) and rid in self._staged and not self._staged[rid][0].compact:
                request, output = self._staged[rid]
                self._staged[rid] = self.answers.fallback(request, output, f"{type(error).__name__}: {error}")
