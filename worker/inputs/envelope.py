"""telesum's own envelope, `TelemetryRecord` (schemas/telemetry_record.json), as JSON or MessagePack.

Lenient where a producer would expect it: a content-type with parameters
(`application/msgpack; charset=utf-8`), numbers and booleans in `attributes` (kept as their text),
and `timestamp` as an epoch number in seconds, milliseconds or microseconds (kept as ISO UTC).
"""

from __future__ import annotations

from typing import Any

import msgspec

from worker.inputs.base import Decoder, checked_id, Item, Message, parse_json, require_bytes, require_text, text_value, timestamp_text, \
    too_deep, with_format
from worker.messages import InvalidRecord, Kind, TelemetryRecord

MSGPACK_MEDIA_TYPES = ("application/msgpack", "application/x-msgpack", "application/vnd.msgpack")

Scalar = str | int | float | bool | None


class _LenientRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    id: str
    kind: Kind
    body: str | dict[str, Any]
    source: str = ""
    timestamp: str | int | float | None = None
    attributes: dict[str, Scalar] = {}


_json = msgspec.json.Decoder(_LenientRecord)
_msgpack = msgspec.msgpack.Decoder(_LenientRecord)


def decode_envelope(raw: bytes, media_type: str | None = None) -> TelemetryRecord:
    """One envelope, validated; MessagePack when `media_type` says so. Raises InvalidRecord."""
    if not raw:
        raise InvalidRecord("empty_record", "the record has no bytes")
    is_msgpack = media_type is not None and media_type.split(";", 1)[0].strip().lower() in MSGPACK_MEDIA_TYPES
    try:
        lenient = _msgpack.decode(raw) if is_msgpack else _json.decode(raw)
    except msgspec.ValidationError as exc:
        if not is_msgpack:
            parse_json(raw)  # a type error early in text that is not JSON at all: say invalid_json
        raise InvalidRecord("invalid_field", str(exc)) from exc
    except msgspec.DecodeError as exc:
        if is_msgpack:
            raise InvalidRecord("invalid_msgpack", str(exc)) from exc
        require_text(raw)
        raise InvalidRecord("invalid_json", str(exc)) from exc
    except RecursionError:
        raise too_deep("MessagePack" if is_msgpack else "JSON") from None
    timestamp = lenient.timestamp
    if timestamp is not None:
        timestamp = timestamp_text(timestamp)
        if timestamp is None:
            raise InvalidRecord("invalid_field", f"`timestamp` {lenient.timestamp!r} is not a time")
    attributes = {k: text for k, v in lenient.attributes.items() if (text := text_value(v)) is not None}
    record = TelemetryRecord(id=lenient.id, kind=lenient.kind, body=lenient.body, source=lenient.source,
                             timestamp=timestamp, attributes=attributes)
    checked_id(record.id, "`id`")
    if not record.body_text().strip() or record.body == {}:
        raise InvalidRecord("empty_body", f"record {record.id!r} has an empty body")
    return record


class EnvelopeDecoder(Decoder):
    name = "envelope"

    def __call__(self, message: Message) -> list[Item]:
        try:
            return [with_format(decode_envelope(require_bytes(message), message.media_type), self.name)]
        except InvalidRecord as exc:
            return [exc]
