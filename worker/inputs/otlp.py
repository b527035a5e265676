"""OpenTelemetry logs as the OpenTelemetry Collector's kafka exporter writes them (topic `otlp_logs`):
`otlp_proto` by default, or `otlp_json` — one `ExportLogsServiceRequest`, a batch, per message.

Read through the `opentelemetry-proto` package's generated types. One record per resource (its
`host.name` / `service.name`): the resource's log records as one log line each (RFC 5424 when a
severity is known), so the facts layer reads them like any syslog window.
"""

from __future__ import annotations

import msgspec
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import ResourceLogs

from worker.facts.common import epoch_to_iso
from worker.inputs.base import (MAX_ITEMS_PER_MESSAGE, SERVICE_ATTRIBUTE, Decoder, Item, Message, kafka_time,
                                overflow_letters, require_bytes, require_text, too_deep)
from worker.inputs.json_log import SYSLOG_SEVERITIES
from worker.inputs.syslog import line_record
from worker.messages import InvalidRecord

_USER_FACILITY = 1


def _syslog_severity(number: int, text: str) -> int | None:
    """OTLP SeverityNumber ranges (1-4 TRACE … 21-24 FATAL) or its text, as a syslog severity."""
    if number >= 21:
        return 2
    if number >= 17:
        return 3
    if number >= 13:
        return 4
    if number >= 9:
        return 6
    if number >= 1:
        return 7
    return SYSLOG_SEVERITIES.get(text.strip().lower())


def _any_text(value: AnyValue) -> str:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind is None:
        return ""
    if kind == "bytes_value":
        return value.bytes_value.hex()
    import json

    return json.dumps(json_format.MessageToDict(value), separators=(",", ":"))


def _resource_attribute(logs: ResourceLogs, key: str) -> str | None:
    for attribute in logs.resource.attributes:
        if attribute.key == key:
            return _any_text(attribute.value) or None
    return None


def parse_otlp(raw: bytes, media_type: str | None = None) -> ExportLogsServiceRequest:
    """otlp_json when the bytes (or the content-type) say JSON, else otlp_proto. Raises InvalidRecord."""
    request = ExportLogsServiceRequest()
    if raw.lstrip()[:1] == b"{" or (media_type or "").endswith("json"):
        try:
            json_format.Parse(require_text(raw), request, ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            if isinstance(exc.__cause__, RecursionError):  # json_format wraps whatever json.loads raised
                raise too_deep("OTLP JSON") from None
            raise InvalidRecord("invalid_json", f"not an OTLP JSON logs request: {exc}") from exc
        except RecursionError:
            raise too_deep("OTLP JSON") from None
        return request
    try:
        request.ParseFromString(raw)
    except DecodeError as exc:
        raise InvalidRecord("invalid_protobuf", f"not an OTLP protobuf logs request: {exc}") from exc
    return request


def count_log_records(request: ExportLogsServiceRequest) -> int:
    return sum(len(scope.log_records) for logs in request.resource_logs for scope in logs.scope_logs)


def _line(log, host: str | None, service: str | None, fallback_time: str | None) -> tuple[str, str | None]:
    """One log record as a log line (RFC 5424 when its severity is known), and its time."""
    body = _any_text(log.body).strip().replace("\n", " ")
    when = epoch_to_iso(log.time_unix_nano or log.observed_time_unix_nano) or fallback_time
    severity = _syslog_severity(int(log.severity_number), log.severity_text)
    if severity is not None:
        return f"<{_USER_FACILITY * 8 + severity}>1 {when or '-'} {host or '-'} {service or '-'} - - - {body}", when
    return f"{when or '-'} {host or '-'} {service + ': ' if service else ''}{body}", when


def decode_request(request: ExportLogsServiceRequest, message: Message,
                   max_items: int = MAX_ITEMS_PER_MESSAGE) -> list[Item]:
    """One record per resource holding log records; empty_body when the request holds none. Log
    records beyond `max_items` (in request order) are answered by `too_many_items` dead letters
    carrying their lines."""
    items: list[Item] = []
    fallback_time = kafka_time(message)
    total = count_log_records(request)
    overflow: list[str] = []
    kept = 0
    for index, logs in enumerate(request.resource_logs):
        host = _resource_attribute(logs, "host.name")
        service = _resource_attribute(logs, "service.name")
        lines, first_time = [], None
        for scope in logs.scope_logs:
            for log in scope.log_records:
                line, when = _line(log, host, service, fallback_time)
                if kept >= max_items:
                    overflow.append(line)
                    continue
                kept += 1
                first_time = first_time or when
                lines.append(line)
        if not lines:
            continue
        record = line_record("\n".join(lines), message, OtlpDecoder.name, index=index,
                             host=host or service, timestamp=first_time)
        if service:  # a window is per resource: host and service
            record = msgspec.structs.replace(record, attributes={**record.attributes, SERVICE_ATTRIBUTE: service})
        items.append(record)
    if not items and not overflow:
        return [InvalidRecord("empty_body", "the OTLP logs request holds no log records")]
    return items + overflow_letters(overflow, total - len(overflow), total, max_items, "log records",
                                    lambda chunk: "\n".join(chunk).encode("utf-8", "surrogatepass"))


class OtlpDecoder(Decoder):
    name = "otlp"
    windowed = True

    def __init__(self, max_items: int = MAX_ITEMS_PER_MESSAGE) -> None:
        self.max_items = max_items

    def __call__(self, message: Message) -> list[Item]:
        try:
            return decode_request(parse_otlp(require_bytes(message), message.media_type), message, self.max_items)
        except InvalidRecord as exc:
            return [exc]
