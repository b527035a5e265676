"""The incident loop's pieces beside the loop: its settings, its counters, what it publishes, and how a
record becomes an alarm (`alarm_from_record`, the facts only for formats other than VES)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import msgspec
from kafka import TopicPartition
from kafka.errors import CommitFailedError, InvalidProducerEpochError, KafkaError, ProducerFencedError

from worker.facts import extract_facts
from worker.incidents import alarm_from_record
from worker.inputs import Message
from worker.kafka.clients import Producer, TransactionStuck
from worker.kafka.incident_partition import InputRef
from worker.kafka.publish import ProducerFenced
from worker.kafka.records import JSON, Output, Source, dead_letter_output
from worker.messages import IncidentEvent, InvalidRecord, TelemetryRecord
from worker.settings.incidents import IncidentSettings
from worker.settings.kafka import KafkaSettings

log = logging.getLogger(__name__)
_encoder = msgspec.json.Encoder()


def incident_kafka_settings(kafka: KafkaSettings, incidents: IncidentSettings) -> KafkaSettings:
    """The loop's [kafka] settings: its own group (and so its own transactional id) unless it answers alone."""
    if incidents.only:
        return kafka
    return msgspec.structs.replace(kafka, group_id=f"{kafka.group_id}-incidents", client_id=f"{kafka.client_id}-incidents")


@dataclass
class IncidentStats:
    consumed: int = 0
    alarms: int = 0
    events: int = 0              # acknowledged (exactly-once: committed) events
    opened: int = 0              # acknowledged `open` events
    resolved: int = 0            # acknowledged `resolve` events (a merged incident's included)
    dead_letters: int = 0
    commits: int = 0
    transactions: int = 0
    aborts: int = 0
    open_wait_s: float = 0.0     # summed over `opened`: wall seconds from an incident's first alarm fed to its open acknowledged
    drained_cleanly: bool = False

    def count(self, event: IncidentEvent | None, waited: list[float], observed: list | None) -> None:
        """One acknowledged output (None: a dead letter); `waited`: seconds since its inputs were read;
        `observed` collects ("open_s", wait) and ("alarms", size) for the metrics (None: nobody watches)."""
        if event is None:
            self.dead_letters += 1
            return
        self.events += 1
        if event.event == "open":
            self.opened += 1
            self.open_wait_s += waited[0] if waited else 0.0
            if observed is not None and waited:
                observed.append(("open_s", waited[0]))
        elif event.event == "resolve":
            self.resolved += 1
            if observed is not None and not event.merged_into:
                observed.append(("alarms", event.alarms))


@dataclass(frozen=True)
class Out:
    tp: TopicPartition
    output: Output
    refs: tuple[InputRef, ...]
    event: IncidentEvent | None = None


def alarm_of(record: TelemetryRecord, ref: InputRef, timestamp_ms: int | None):
    """The record's alarm, or None; a record whose alarm cannot be read carries none."""
    try:
        alarm = alarm_from_record(record, None, input=ref) if record.kind == "ves" else None
        if alarm is None:
            alarm = alarm_from_record(record, extract_facts(record), input=ref,
                                      default_time=timestamp_ms / 1000 if timestamp_ms else None)
        return alarm
    except Exception:  # noqa: BLE001 - one record never stops the loop
        log.exception("incidents: reading the alarm of %s[%d]@%d", ref.topic, ref.partition, ref.offset)
        return None


def dead_letter(settings: KafkaSettings, msg, ref: InputRef, item: InvalidRecord) -> Output:
    original = item.original if ref.index is not None else (msg.value or b"")
    source = Source(msg.topic, msg.partition, msg.offset, msg.key, ref.index)
    return dead_letter_output(settings.dlq_topic, source, original, item.reason, item.message, "incidents",
                              compact=len(original or b"") > settings.max_request_size // 2)


def event_output(topic: str, event: IncidentEvent) -> Output:
    """An incident event as published: JSON, keyed by its incident id (a compacted or keyed reader
    finds every event of one incident in one partition)."""
    headers = [("content-type", JSON), ("telesum-incident-event", event.event.encode())]
    return Output(topic, event.incident_id.encode(), _encoder.encode(event), headers)


def read_message(decode, msg, answer_invalid: bool) -> tuple[list, list[tuple[InputRef, InvalidRecord]]]:
    """(the alarms of one message's records, its invalid items when this loop answers them)."""
    alarms, letters = [], []
    try:
        items = decode(Message(msg.value or b"", tuple(msg.headers or ()), msg.topic, msg.partition, msg.offset,
                               getattr(msg, "timestamp", None)))
    except Exception as exc:  # noqa: BLE001 - one message never stops the loop
        items = [InvalidRecord("internal_error", f"{type(exc).__name__} while decoding: {exc}")]
    batch = len(items) > 1
    for index, item in enumerate(items):
        ref = InputRef(msg.topic, msg.partition, msg.offset, index if batch else None)
        if isinstance(item, TelemetryRecord):
            alarm = alarm_of(item, ref, getattr(msg, "timestamp", None))
            if alarm is not None:
                alarms.append(alarm)
        elif answer_invalid:  # no summarizing loop answers it: its dead letter is the incident loop's
            letters.append((ref, item))
    return alarms, letters


def commit_transaction(producer, consumer, batch: list[Out], offsets: dict[TopicPartition, tuple[int, str]]) -> bool:
    """`batch`'s outputs and `offsets` (offset, metadata) in one transaction; False when it was aborted
    (the caller tries the same outputs again). Raises ProducerFenced when another producer took over."""
    try:
        producer.begin_transaction()
        for out in batch:
            o = out.output
            producer.send(o.topic, o.key, o.value, o.headers, lambda error: None)  # a failed send fails the commit
        if offsets:
            producer.send_offsets({tp: o for tp, (o, _) in offsets.items()}, consumer.group_metadata(),
                                  metadata={tp: m for tp, (_, m) in offsets.items()})
        producer.commit_transaction()
        return True
    except (ProducerFencedError, InvalidProducerEpochError) as exc:
        raise ProducerFenced(f"incidents: fenced by a newer producer with this transactional id: {exc}") from exc
    except TransactionStuck as exc:  # lost in a broker restart: a new producer fences it, the broker aborts it
        log.warning("incidents: %s; reopening the producer", exc)
        producer.reopen()
        return False
    except (CommitFailedError, KafkaError) as exc:  # abortable: a rebalance, a send that failed
        log.warning("incidents: transaction aborted (%s: %s); retrying", type(exc).__name__, exc)
        try:
            producer.abort_transaction()
        except (ProducerFencedError, InvalidProducerEpochError) as fenced:
            raise ProducerFenced(f"incidents: fenced while aborting: {fenced}") from fenced
        except TransactionStuck as stuck:
            log.warning("incidents: %s; reopening the producer", stuck)
            producer.reopen()
        return False


class IncidentProducer(Producer):
    """The incident loop's producer: as `Producer`, with larger batches that wait a little longer to fill.
    Events come in bursts (hundreds per transaction) and kafka-python wakes its sender thread through a
    socket for every new batch: with the defaults that was one wake-up per two events, a third of the
    loop's time on the data set."""

    LINGER_MS = 20          # what an `open` may wait at most before it is sent (at-least-once)
    BATCH_BYTES = 512 * 1024
