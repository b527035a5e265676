"""Which records go into log-line windows, and one closed window as one record to summarise.

The window's record: kind syslog, the lines of its parts in arrival order as the body, an id naming
host and offsets, `window_records` and the offsets it covers. Its answer carries the first offset in
`telesum-source-offset`, the last in `telesum-source-last-offset` and all of them in
`telesum-window-offsets` (records.py); in exactly-once it is keyed
by its last offset, so its transaction commits every offset it covers.
"""

from __future__ import annotations

from kafka import TopicPartition

from worker.inputs.base import FORMAT_ATTRIBUTE, HOST_ATTRIBUTE, SERVICE_ATTRIBUTE
from worker.inputs.windows import Window
from worker.kafka.records import Source
from worker.messages import TelemetryRecord

WINDOWED_FORMATS = ("syslog", "json-log", "otlp")


def is_windowed(record: TelemetryRecord) -> bool:
    return record.kind == "syslog" and record.attributes.get(FORMAT_ATTRIBUTE) in WINDOWED_FORMATS


def window_key(tp: TopicPartition, record: TelemetryRecord) -> tuple:
    return tp, record.attributes.get(HOST_ATTRIBUTE, ""), record.attributes.get(SERVICE_ATTRIBUTE, "")


def merged(window: Window) -> tuple[Source, bytes, TelemetryRecord, tuple[int, ...]]:
    """(source, original bytes, record, offsets covered: one per part) of a closed window of
    `intake.Pending` parts (`rid`, `source`, `raw`, `record`), all from one partition."""
    parts = window.parts
    first = parts[0]
    tp, host, service = window.key
    covers = tuple(p.rid.offset for p in parts)
    low, high = min(covers), max(covers)
    formats = sorted({p.record.attributes.get(FORMAT_ATTRIBUTE, "") for p in parts})
    attributes = {FORMAT_ATTRIBUTE: ",".join(formats), "window_records": str(len(parts)),
                  "first_offset": str(low), "last_offset": str(high)}
    if host:
        attributes[HOST_ATTRIBUTE] = host
    if service:
        attributes[SERVICE_ATTRIBUTE] = service
    body = "\n".join(p.record.body_text() for p in parts)
    record = TelemetryRecord(id=f"{host or 'unknown-host'}@{tp.topic}:{tp.partition}:{low}-{high}", kind="syslog",
                             body=body, source=host, timestamp=first.record.timestamp, attributes=attributes)
    source = Source(tp.topic, tp.partition, low, first.source.key, None, attributes[FORMAT_ATTRIBUTE], covers)
    raw = b"\n".join(p.raw for p in parts)
    return source, raw, record, covers
