"""Deterministic fact extraction: one parser per record kind, one vocabulary for all of them.

`extract_facts` never raises: a record its kind's parser cannot read falls back to the generic text
extractor, and what went wrong is written to `Facts.facts_error`.
"""

from __future__ import annotations

import msgspec

from worker.facts import pm, syslog, text, trace, ves
from worker.facts.common import SEVERITIES, with_error
from worker.messages import Facts, TelemetryRecord

__all__ = ["SEVERITIES", "extract_facts"]


def _fallback(record: TelemetryRecord, error: str) -> Facts:
    try:
        facts = text.parse(record.body_text())
    except Exception as exc:  # noqa: BLE001 - extract_facts must never raise
        facts = Facts(facts_error=f"text extractor failed: {type(exc).__name__}: {exc}")
    return with_error(facts, error)


def _by_kind(record: TelemetryRecord) -> Facts:
    kind = record.kind
    if kind == "ves":
        try:
            return ves.parse(record.body)
        except ves.VesError as exc:
            return _fallback(record, str(exc))
    body = record.body_text()
    if kind == "pm":
        try:
            return pm.parse(body)
        except pm.PmError as exc:
            return _fallback(record, str(exc))
    if kind == "syslog":
        return syslog.parse(body) or _fallback(record, "no RFC 5424 or RFC 3164 syslog line found")
    if kind == "trace":
        return trace.parse(body) or _fallback(record, "no trace line (time, element, EventName) found")
    return text.parse(body)


def extract_facts(record: TelemetryRecord) -> Facts:
    """Facts for one record, by its kind; never raises (problems go to facts_error). Thread-safe."""
    try:
        facts = _by_kind(record)
    except Exception as exc:  # noqa: BLE001 - a parser bug must not lose the record
        facts = _fallback(record, f"{record.kind} parser failed: {type(exc).__name__}: {exc}")
    if facts.first_seen is None and record.timestamp:
        facts = msgspec.structs.replace(facts, first_seen=record.timestamp, last_seen=facts.last_seen or record.timestamp)
    return facts
