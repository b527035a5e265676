"""The input layer's one base: a Kafka message in, records out (one, or several for a batch).

A format is a `Decoder`: a callable `Message -> list[Item]`, where every item is a record to
summarise or the `InvalidRecord` that says why one part of the message cannot be (its dead letter).
It never returns an empty list, so every message gets at least one answer. `windowed` says whether
its records are log lines that the worker groups per host into windows (`worker.inputs.windows`).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Union

import msgspec

from worker.facts.common import epoch_to_iso
from worker.messages import InvalidRecord, TelemetryRecord
from worker.settings.kafka import MAX_ITEMS_PER_MESSAGE  # noqa: F401 - the decoders' default, re-exported

# An id or host name longer than this is no id (DNS names stop at 253): an id is refused, a host ignored.
MAX_NAME_CHARS = 256
# The attribute of every record that names the format it was read as (what `auto` chose).
FORMAT_ATTRIBUTE = "input_format"
# The attribute naming the sending host (or OTLP resource) a log window is grouped by.
HOST_ATTRIBUTE = "host"
SERVICE_ATTRIBUTE = "service"

Item = Union[TelemetryRecord, InvalidRecord]


@dataclass(frozen=True)
class Message:
    """One consumed Kafka message, as the input layer sees it."""

    value: bytes
    headers: tuple[tuple[str, bytes | None], ...] = ()
    topic: str = ""
    partition: int = 0
    offset: int = 0
    timestamp_ms: int | None = None  # the Kafka record's timestamp (the producer's create time)
    batch_index: int | None = None  # an element of a top-level JSON array: its index (part of its ids)

    def header(self, name: str) -> str | None:
        """The first header called `name` (case-insensitive) as text, or None."""
        for key, value in self.headers:
            if key.lower() == name and value is not None:
                return value.decode("utf-8", errors="replace")
        return None

    @property
    def media_type(self) -> str | None:
        """The content-type header without its parameters, lower case: 'application/msgpack; charset=utf-8'
        -> 'application/msgpack'."""
        value = self.header("content-type")
        if value is None:
            return None
        return value.split(";", 1)[0].strip().lower() or None

    def stable_id(self, index: int | None = None) -> str:
        """An id for a record that brought none: the same on every replay of this message."""
        base = f"{self.topic}:{self.partition}:{self.offset}"
        if self.batch_index is not None:
            base = f"{base}:{self.batch_index}"
        return base if index is None else f"{base}:{index}"


class Decoder:
    """One input format. Subclasses set `name` and implement `__call__`."""

    name: ClassVar[str]
    windowed: ClassVar[bool] = False

    def __call__(self, message: Message) -> list[Item]:
        raise NotImplementedError


def checked_id(value: str, where: str) -> str:
    """`value` as a record id; InvalidRecord('invalid_field') when it is empty or too long to be one."""
    if not value.strip():
        raise InvalidRecord("invalid_field", f"{where} is empty")
    if len(value) > MAX_NAME_CHARS:
        raise InvalidRecord("invalid_field", f"{where} is {len(value):,} characters long, over the {MAX_NAME_CHARS} "
                                             f"an id may have")
    return value


def overflow_letters(items: list, first: int, total: int, max_items: int, what: str, encode) -> list[InvalidRecord]:
    """Dead letters `too_many_items` for `items` (those of a batch from index `first` on), up to
    `max_items` in each, each carrying its own items as `encode(chunk)`: never the whole message."""
    letters = []
    for start in range(0, len(items), max_items):
        chunk = items[start:start + max_items]
        low = first + start
        letters.append(InvalidRecord(
            "too_many_items", f"{what} {low}-{low + len(chunk) - 1} of {total}: over the {max_items} one message "
                              f"may bring to be summarised (this dead letter carries them)", original=encode(chunk)))
    return letters


def require_bytes(message: Message) -> bytes:
    """The message's bytes; InvalidRecord('empty_record') when there are none."""
    if not message.value:
        raise InvalidRecord("empty_record", "the message has no bytes")
    return message.value


def require_text(raw: bytes) -> str:
    """`raw` as UTF-8 text; InvalidRecord('invalid_utf8') naming where it stops being text."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRecord("invalid_utf8", f"not UTF-8 text: {exc.reason} at byte {exc.start}") from exc


def too_deep(what: str) -> InvalidRecord:
    """The answer for a value nested deeper than a decoder follows: the C decoders (msgspec, json,
    protobuf) stop at a depth of about Python's recursion limit and raise RecursionError, which must
    never leave the message's own path."""
    return InvalidRecord("too_deep", f"{what} nested deeper than the decoder follows "
                                     f"(about {sys.getrecursionlimit()} levels)")


def parse_json(raw: bytes) -> Any:
    """`raw` as JSON; invalid_utf8 for bytes that are not text, invalid_json for text that is not JSON,
    too_deep for JSON nested beyond what the decoder follows."""
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        require_text(raw)
        raise InvalidRecord("invalid_json", f"not JSON: {exc}") from exc
    except RecursionError:
        raise too_deep("JSON") from None


def json_kind(value: Any) -> str:
    """What a decoded JSON value is, for a dead letter: 'an object', 'a number', 'null', …"""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return "a string" if isinstance(value, str) else "a number"


def _plural(kind: str) -> str:
    return {"an object": "objects", "an array": "arrays", "a string": "strings", "a number": "numbers"}.get(
        kind, f"{kind} values")


def not_an_object(value: Any) -> InvalidRecord:
    """The dead letter for JSON that is neither an object (a record) nor an array holding objects (a
    batch of them): `invalid_field`, naming what the value is instead."""
    if isinstance(value, list):
        kinds = sorted({json_kind(v) for v in value[:1000]})
        what = (f"an array of {_plural(kinds[0])}" if len(kinds) == 1 else
                f"an array of {', '.join(_plural(k) for k in kinds)}") if value else "an empty array"
        return InvalidRecord("invalid_field", f"the message is JSON, {what}: a record is a JSON object, and a "
                                              f"batch an array of objects")
    hint = " (JSON text inside a JSON string: encoded twice?)" if isinstance(value, str) and \
        value.lstrip()[:1] in ("{", "[") else ""
    return InvalidRecord("invalid_field", f"the message is JSON, {json_kind(value)}{hint}: a record is a JSON "
                                          f"object, and a batch an array of objects")


def decode_batch(events: list, message: Message, max_items: int,
                 decode_one: Callable[[dict, Message, int], list[Item]]) -> list[Item]:
    """The items of a top-level JSON array of events (Fluent Bit's and Vector's HTTP-style batches):
    each object through `decode_one(event, its message, items it may still bring)`, its message
    holding the event's own bytes and its index (`batch_index`, part of the ids it gets); an element
    that is not an object is its own dead letter. At most `max_items` records in all: the events
    past them are answered by `too_many_items` letters. An array holding no object is one dead letter."""
    if not any(isinstance(event, dict) for event in events):
        return [not_an_object(events)]
    items: list[Item] = []
    kept = 0
    for index, event in enumerate(events):
        if kept >= max_items:
            return items + overflow_letters(events[index:], index, len(events), max_items, "events",
                                            msgspec.json.encode)
        raw = msgspec.json.encode(event)
        if not isinstance(event, dict):
            letter = InvalidRecord("invalid_field", f"element {index} of the array is {json_kind(event)}, not an "
                                                    f"event (a JSON object)", original=raw)
            items.append(letter)
            continue
        part = dataclasses.replace(message, value=raw, batch_index=index)
        for item in decode_one(event, part, max_items - kept):
            if isinstance(item, InvalidRecord):
                item.original = item.original if item.original is not None else raw
            else:
                kept += 1
            items.append(item)
    return items


def text_value(value: Any) -> str | None:
    """A field's value as text (numbers and booleans written out), None when absent or a container."""
    if value is None or isinstance(value, (dict, list)):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def timestamp_text(value: Any) -> str | None:
    """An ISO time as given, or an epoch number in s/ms/µs/ns (told by magnitude) as ISO UTC."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return epoch_to_iso(value)
    text = str(value).strip()
    if text.replace(".", "", 1).isdigit():
        return epoch_to_iso(text)
    return text or None


def kafka_time(message: Message) -> str | None:
    """The Kafka record's own timestamp as ISO UTC: a log line's time when the line has none."""
    return epoch_to_iso(message.timestamp_ms) if message.timestamp_ms and message.timestamp_ms > 0 else None


def with_format(record: TelemetryRecord, name: str) -> TelemetryRecord:
    return msgspec.structs.replace(record, attributes={**record.attributes, FORMAT_ATTRIBUTE: name})
