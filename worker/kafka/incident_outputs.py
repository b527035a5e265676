"""The incident loop's pieces beside the loop: its settings, its counters, what it publishes, and how a
record becomes an alarm (`alarm_from_record`, the facts only for formats other than VES)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import msgspec
from kafka import TopicPartition

from worker.facts import extract_facts
from worker.incidents import alarm_from_record
from worker.kafka.incident_partition import InputRef
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
