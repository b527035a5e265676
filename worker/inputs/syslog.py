"""Raw syslog lines as rsyslog `omkafka` and syslog-ng `kafka-c` send them with their default
templates: one line per message, RFC 5424 (`<PRI>1 TIMESTAMP HOST APP PROCID MSGID [SD] MSG`),
RFC 3164 (`<PRI>Mmm dd hh:mm:ss HOST TAG[PID]: MSG`) or ISO-stamped
(`2026-12-01T14:39:12.254811+00:00 HOST TAG[PID]: MSG`). Every shape `worker.facts.loglines` reads
is accepted; a message holding several lines is one record.
"""

from __future__ import annotations

from worker.facts.bounds import MAX_FACT_LINE_CHARS
from worker.facts.common import iso_utc
from worker.facts.loglines import parse_line
from worker.control_chars import clean_text
from worker.inputs.base import (FORMAT_ATTRIBUTE, HOST_ATTRIBUTE, MAX_NAME_CHARS, Decoder, Item, Message, require_bytes,
                                require_text)
from worker.messages import InvalidRecord, TelemetryRecord


def line_record(text: str, message: Message, fmt: str, index: int | None = None,
                host: str | None = None, timestamp: str | None = None) -> TelemetryRecord:
    """A record of kind syslog holding log line(s) `text` (escape sequences and control characters
    removed, `worker.control_chars`); host and time from the first line that has them."""
    text = clean_text(text)
    if not host or not timestamp:
        for raw in text.splitlines()[:8]:
            line = parse_line(raw[:MAX_FACT_LINE_CHARS])  # a header is at a line's start: no need to scan 50 MB
            if line is not None:
                host = host or line.host
                timestamp = timestamp or (iso_utc(line.time) if line.time is not None and line.year_known else None)
                break
    attributes = {FORMAT_ATTRIBUTE: fmt}
    if host:
        host = clean_text(host) if len(host) <= MAX_NAME_CHARS else None  # too long for a name: no host
    if host:
        attributes[HOST_ATTRIBUTE] = host
    return TelemetryRecord(id=message.stable_id(index), kind="syslog", body=text, source=host or "",
                           timestamp=timestamp, attributes=attributes)


def decode_lines(raw: bytes, message: Message) -> TelemetryRecord:
    text = clean_text(require_text(raw)).strip()
    if not text:
        raise InvalidRecord("empty_body", "the message holds only white space")
    return line_record(text, message, SyslogDecoder.name)


class SyslogDecoder(Decoder):
    name = "syslog"
    windowed = True

    def __call__(self, message: Message) -> list[Item]:
        try:
            return [decode_lines(require_bytes(message), message)]
        except InvalidRecord as exc:
            return [exc]
