"""Deterministic fact extraction: one parser per record kind, one vocabulary for all of them.

`extract_facts` never raises: a record its kind's parser cannot read falls back to the generic text
extractor, and what went wrong is written to `Facts.facts_error`.
"""

from __future__ import annotations

from datetime import datetime, timezone

import msgspec

from worker.facts import pm, syslog, text, trace, ves
from worker.facts.bounds import MAX_FACT_LINE_CHARS, bounded_record, bounded_text
from worker.facts.pm_filename import FILE_ATTRIBUTES, parse_file_name
from worker.facts.common import SEVERITIES, parse_iso, with_error
from worker.messages import Facts, TelemetryRecord

__all__ = ["MAX_FACT_LINE_CHARS", "SEVERITIES", "extract_facts"]

# Record attributes that name the element when the body does not (a collector's own labels).
HOST_ATTRIBUTES = ("host", "hostname", "element", "node", "sourceName")


def _attribute_host(record: TelemetryRecord) -> str | None:
    return next((record.attributes[k] for k in HOST_ATTRIBUTES if record.attributes.get(k)), None)


def _fallback(record: TelemetryRecord, error: str) -> Facts:
    try:
        facts = text.parse(bounded_text(record.body_text()), _attribute_host(record))
    except Exception as exc:  # noqa: BLE001 - extract_facts must never raise
        facts = Facts(facts_error=f"text extractor failed: {type(exc).__name__}: {exc}")
    return with_error(facts, error)


def _reference(record: TelemetryRecord) -> tuple[datetime, str]:
    """The time that gives a year to log times without one: the record's timestamp, else now."""
    when = parse_iso(record.timestamp) if record.timestamp else None
    if when is not None:
        return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)), "record timestamp"
    return datetime.now(timezone.utc), "receive time"


def _logs(record: TelemetryRecord, body: str) -> Facts | None:
    reference, source = _reference(record)
    return syslog.parse(body, reference, source)


def _by_kind(record: TelemetryRecord) -> Facts:
    kind = record.kind
    if kind == "ves":
        try:
            return ves.parse(record.body)
        except ves.VesError as exc:
            return _fallback(record, str(exc))
    body = record.body_text()
    if kind == "pm":
        names = [record.attributes.get(k) for k in FILE_ATTRIBUTES] + [record.id]
        file_name = next((n for n in map(parse_file_name, filter(None, names)) if n is not None), None)
        try:
            return pm.parse(body, file_name)
        except pm.PmError as exc:
            facts = _fallback(record, str(exc))
            element = pm.element_hint(body) or (file_name.element if file_name else None)
            return msgspec.structs.replace(facts, entity=element) if element else facts
    if kind == "syslog":
        return _logs(record, body) or _fallback(record, "no syslog line (RFC 5424/3164, BSD, ISO) found")
    if kind == "trace":
        return trace.parse(body) or _fallback(record, "no trace line (time, element, EventName) found")
    facts = _logs(record, body)  # free text is often a log file
    if facts is not None and int(facts.details.get("unparsedLines", 0)) <= facts.event_count:
        return facts
    return text.parse(body, _attribute_host(record))


def extract_facts(record: TelemetryRecord) -> Facts:
    """Facts for one record, by its kind; never raises (problems go to facts_error). Reads at most
    MAX_FACT_LINE_CHARS of any one line or JSON string (see `bounds`). Thread-safe."""
    record = bounded_record(record)
    try:
        facts = _by_kind(record)
    except Exception as exc:  # noqa: BLE001 - a parser bug must not lose the record
        facts = _fallback(record, f"{record.kind} parser failed: {type(exc).__name__}: {exc}")
    if facts.entity is None:
        host = _attribute_host(record)
        if host:
            facts = msgspec.structs.replace(facts, entity=host)
    if facts.first_seen is None and record.timestamp:
        facts = msgspec.structs.replace(facts, first_seen=record.timestamp, last_seen=facts.last_seen or record.timestamp)
    return facts
