"""Log-shipper JSON: Fluent Bit's `out_kafka` and Vector's kafka sink, one event per message, or a
JSON array of events (their HTTP outputs' batches, relayed to Kafka), each event its own answer.

Fields are found through a field map, role -> candidate keys (first present wins; a dotted key
such as `host.name` also reads nested objects). The default map covers both shippers' defaults:
Fluent Bit (`log` or `message`, `@timestamp` as an epoch number, syslog parser fields `host`,
`ident`, `pid`, `pri`) and Vector (`message`, `timestamp`, `host`; its syslog source adds
`hostname`, `appname`, `procid`, `severity`, `facility`). `--json-log-fields` changes roles,
e.g. `message=msg|text,host=node`.

Each event becomes one log line (RFC 5424 when a severity is known, else ISO-stamped), so the
facts layer reads it like any syslog line; a `message` that is itself a full syslog line is kept.
"""

from __future__ import annotations

from typing import Any

from worker.facts.bounds import MAX_FACT_LINE_CHARS
from worker.facts.loglines import parse_line
from worker.inputs.base import (MAX_ITEMS_PER_MESSAGE, Decoder, Item, Message, decode_batch, kafka_time,
                                not_an_object, parse_json, require_bytes, text_value, timestamp_text)
from worker.inputs.syslog import line_record
from worker.messages import InvalidRecord

DEFAULT_FIELDS: dict[str, tuple[str, ...]] = {
    "message": ("message", "log", "msg", "MESSAGE"),
    "host": ("hostname", "host", "HOSTNAME", "host.name", "_HOSTNAME"),
    "app": ("appname", "ident", "app_name", "SYSLOG_IDENTIFIER", "program", "service.name"),
    "pid": ("procid", "pid", "_PID"),
    "timestamp": ("@timestamp", "timestamp", "time", "date"),
    "severity": ("severity", "pri", "level", "log.level", "PRIORITY"),
    "facility": ("facility",),
}
SYSLOG_SEVERITIES = {"emerg": 0, "panic": 0, "alert": 1, "crit": 2, "critical": 2, "fatal": 2, "err": 3,
                     "error": 3, "warning": 4, "warn": 4, "notice": 5, "info": 6, "informational": 6,
                     "debug": 7, "trace": 7}
SYSLOG_FACILITIES = ("kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron",
                     "authpriv", "ftp", "ntp", "security", "console", "solaris-cron", "local0", "local1",
                     "local2", "local3", "local4", "local5", "local6", "local7")
_USER_FACILITY = 1


def parse_field_map(text: str) -> dict[str, tuple[str, ...]]:
    """`role=key1|key2,role=key` over the default map. Raises ValueError naming a bad part."""
    fields = dict(DEFAULT_FIELDS)
    for part in filter(None, (p.strip() for p in text.split(","))):
        role, sep, keys = part.partition("=")
        role = role.strip()
        if not sep or role not in DEFAULT_FIELDS:
            raise ValueError(f"{part!r}: expected role=key|key with role one of {', '.join(DEFAULT_FIELDS)}")
        names = tuple(k.strip() for k in keys.split("|") if k.strip())
        if not names:
            raise ValueError(f"{part!r}: no key for {role}")
        fields[role] = names
    return fields


def _lookup(event: dict, key: str) -> Any:
    if key in event:
        return event[key]
    value: Any = event
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _pri(severity: Any, facility: Any) -> int | None:
    """The syslog PRI from a numeric `pri` or a severity name/number and an optional facility."""
    text = text_value(severity)
    if text is None:
        return None
    text = text.strip().lower()
    if text.isdigit():
        number = int(text)
        return number if number > 7 else _USER_FACILITY * 8 + number  # a PRI, or a bare severity
    if text not in SYSLOG_SEVERITIES:
        return None
    fac = text_value(facility)
    fac_code = SYSLOG_FACILITIES.index(fac.lower()) if fac and fac.lower() in SYSLOG_FACILITIES else _USER_FACILITY
    return fac_code * 8 + SYSLOG_SEVERITIES[text]


class JsonLogDecoder(Decoder):
    name = "json-log"
    windowed = True

    def __init__(self, fields: dict[str, tuple[str, ...]] | None = None,
                 max_items: int = MAX_ITEMS_PER_MESSAGE) -> None:
        self.fields = fields or DEFAULT_FIELDS
        self.max_items = max_items

    def field(self, event: dict, role: str) -> Any:
        for key in self.fields[role]:
            value = _lookup(event, key)
            if value is not None:
                return value
        return None

    def is_log_event(self, value: Any) -> bool:
        return isinstance(value, dict) and self.field(value, "message") is not None

    def decode_event(self, event: Any, message: Message) -> list[Item]:
        if not isinstance(event, dict):
            return [not_an_object(event)]
        raw_message = self.field(event, "message")
        if raw_message is None:
            return [InvalidRecord("invalid_field", f"no message field (tried {', '.join(self.fields['message'])}; "
                                                   f"set --json-log-fields message=KEY)")]
        text = raw_message if isinstance(raw_message, str) else text_value(raw_message)
        if text is None:
            return [InvalidRecord("invalid_field", "the message field is an object or array, not text")]
        text = text.strip()
        if not text:
            return [InvalidRecord("empty_body", "the message field is empty")]
        host = text_value(self.field(event, "host"))
        timestamp = timestamp_text(self.field(event, "timestamp")) or kafka_time(message)
        own = parse_line(text.splitlines()[0][:MAX_FACT_LINE_CHARS])
        if own is not None and own.host:  # the shipper forwarded a whole syslog line
            return [line_record(text, message, self.name, host=host or own.host, timestamp=timestamp)]
        app = text_value(self.field(event, "app"))
        pid = text_value(self.field(event, "pid"))
        pri = _pri(self.field(event, "severity"), self.field(event, "facility"))
        host_field = host or "-"
        if pri is not None:  # RFC 5424 carries the severity
            line = f"<{pri}>1 {timestamp or '-'} {host_field} {app or '-'} {pid or '-'} - - {text}"
        else:
            tag = f"{app}[{pid}]: " if app and pid else f"{app}: " if app else ""
            line = f"{timestamp or '-'} {host_field} {tag}{text}"
        return [line_record(line, message, self.name, host=host, timestamp=timestamp)]

    def __call__(self, message: Message) -> list[Item]:
        try:
            value = parse_json(require_bytes(message))
        except InvalidRecord as exc:
            return [exc]
        if isinstance(value, list):  # a batch, as Fluent Bit's and Vector's HTTP outputs send them
            return decode_batch(value, message, self.max_items, lambda event, part, _: self.decode_event(event, part))
        return self.decode_event(value, message)
