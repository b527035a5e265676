"""`auto`: which format a message is in, decided per message from its content (and its
content-type header when one is sent). Producers send no content-type, so content decides:

- content-type MessagePack -> envelope; protobuf -> otlp
- a JSON object: `resourceLogs` -> otlp (otlp_json); `event` / `eventList` / `commonEventHeader`
  -> ves; `id` + `kind` + `body` -> envelope; a message field (`message`, `log`, …) -> json-log;
  any other object -> envelope, whose dead letter names the missing field
- a JSON array holding objects (Fluent Bit's and Vector's HTTP-style batches): each object as above,
  with its own answer; any other JSON value (an array of no objects, a string, a number, true,
  false, null) -> dead letter `invalid_field` naming what it is; JSON nested beyond the decoder ->
  `too_deep`. Text that only begins like JSON (`[2026-12-01 …] …`) is a line; text beginning with
  `{` or `[{"` that is not JSON is `invalid_json`.
- bytes that parse as an OTLP protobuf request holding log records -> otlp
- other UTF-8 text (a raw syslog line) -> syslog; other bytes -> dead letter `invalid_utf8`

The record's `input_format` attribute and the answer's `telesum-input-format` header say which it took.
"""

from __future__ import annotations

import re

import msgspec

from worker.inputs.base import (MAX_ITEMS_PER_MESSAGE, Decoder, Item, Message, decode_batch, not_an_object,
                                require_bytes, require_text, too_deep)
from worker.inputs.envelope import MSGPACK_MEDIA_TYPES, EnvelopeDecoder
from worker.inputs.json_log import JsonLogDecoder
from worker.inputs.otlp import OtlpDecoder, count_log_records, decode_request, parse_otlp
from worker.inputs.syslog import SyslogDecoder
from worker.inputs.ves import VesDecoder, decode_ves, is_ves
from worker.messages import InvalidRecord

PROTOBUF_MEDIA_TYPES = ("application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf")
_ENVELOPE_FIELDS = ("id", "kind", "body")
# An OTLP request's first field is `resource_logs` (field 1, length-delimited): tag byte 0x0a.
_PROTOBUF_FIRST_BYTE = b"\n"
# What else a JSON text may begin with (an array, a string, a number, true, false, null): such a
# message is read as JSON when it parses as JSON, else as a line of text.
_OTHER_JSON_STARTS = b'["-0123456789tfn'
# An array whose first element is an object with a key (or empty): meant as JSON, never a log line.
_ARRAY_OF_OBJECTS = re.compile(rb'\[\s*\{\s*["}]')


class AutoDecoder(Decoder):
    name = "auto"
    windowed = True

    def __init__(self, json_log: JsonLogDecoder | None = None, max_items: int = MAX_ITEMS_PER_MESSAGE) -> None:
        self.envelope, self.ves, self.syslog = EnvelopeDecoder(), VesDecoder(max_items), SyslogDecoder()
        self.json_log = json_log or JsonLogDecoder()
        self.otlp = OtlpDecoder(max_items)
        self.max_items = max_items

    def __call__(self, message: Message) -> list[Item]:
        try:
            return self._decode(message, require_bytes(message))
        except InvalidRecord as exc:
            return [exc]

    def _decode(self, message: Message, raw: bytes) -> list[Item]:
        media_type = message.media_type
        if media_type in MSGPACK_MEDIA_TYPES:
            return self.envelope(message)
        if media_type in PROTOBUF_MEDIA_TYPES:
            return self.otlp(message)
        text = raw.lstrip()
        first = text[:1]
        if first == b"{" or _ARRAY_OF_OBJECTS.match(text, 0, 64):
            return self._json(message, raw)
        if first and first in _OTHER_JSON_STARTS:
            items = self._json(message, raw, text_if_not_json=True)
            if items is not None:
                return items
        not_protobuf = None
        if raw[:1] == _PROTOBUF_FIRST_BYTE:
            try:
                request = parse_otlp(raw)
            except InvalidRecord as exc:
                request, not_protobuf = None, exc
            if request is not None and count_log_records(request):
                return decode_request(request, message, self.max_items)
        try:
            require_text(raw)
        except InvalidRecord:
            if not_protobuf is not None:  # binary that began like OTLP: its parser's reason says more
                raise not_protobuf from None
            raise
        return self.syslog(message)

    def _json(self, message: Message, raw: bytes, text_if_not_json: bool = False) -> list[Item] | None:
        """An object as one event, an array holding objects as a batch of them, any other JSON value
        as its dead letter. Text that is not JSON: None when `text_if_not_json` (a log line may begin
        with `[` or a digit), else the envelope's own answer (invalid_json or invalid_utf8)."""
        try:
            value = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            return None if text_if_not_json else self.envelope(message)
        except RecursionError:
            return [too_deep("JSON")]
        if isinstance(value, dict):
            return self._event(value, message, self.max_items)
        if isinstance(value, list):
            return decode_batch(value, message, self.max_items, self._event)
        return [not_an_object(value)]

    def _event(self, value: dict, message: Message, max_items: int) -> list[Item]:
        """One JSON object, `message` holding its bytes: the format its keys say."""
        if "resourceLogs" in value:
            try:
                return decode_request(parse_otlp(message.value), message, max_items)
            except InvalidRecord as exc:
                return [exc]
        if is_ves(value):
            return decode_ves(value, message, max_items)
        if all(k in value for k in _ENVELOPE_FIELDS):
            return self.envelope(message)
        if self.json_log.is_log_event(value):
            return self.json_log.decode_event(value, message)
        return self.envelope(message)


def decoder_for(name: str, json_log_fields: dict[str, tuple[str, ...]] | None = None,
                max_items: int = MAX_ITEMS_PER_MESSAGE) -> Decoder:
    """The decoder of a format name (`--input-format`; its names are a Literal in the [kafka] settings);
    `max_items`: the items (VES events, OTLP log records) one message may bring to be summarised."""
    json_log = JsonLogDecoder(json_log_fields, max_items)
    decoders: dict[str, Decoder] = {"auto": AutoDecoder(json_log, max_items), "envelope": EnvelopeDecoder(),
                                    "ves": VesDecoder(max_items), "syslog": SyslogDecoder(), "json-log": json_log,
                                    "otlp": OtlpDecoder(max_items)}
    if name not in decoders:
        raise ValueError(f"unknown input format {name!r}; one of {', '.join(decoders)}")
    return decoders[name]
