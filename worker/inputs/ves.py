"""VES events as the ONAP and O-RAN SC collectors publish them: one bare `{"event": {...}}` per
message (no key, no headers), or an `{"eventList": [...]}` batch (one record per event).

A record's body is `{"event": <the event>}`, read by `worker.facts.ves`; its id is the event's
`commonEventHeader.eventId` (an event without one gets the message's stable id).
"""

from __future__ import annotations

from typing import Any

import msgspec

from worker.facts.common import epoch_to_iso
from worker.inputs.base import (MAX_ITEMS_PER_MESSAGE, MAX_NAME_CHARS, Decoder, Item, Message, checked_id,
                                overflow_letters, parse_json, require_bytes, text_value)
from worker.messages import InvalidRecord, TelemetryRecord


def is_ves(value: Any) -> bool:
    """Whether a decoded JSON value has the shape of a VES body."""
    return isinstance(value, dict) and ("event" in value or "eventList" in value or "commonEventHeader" in value)


def _record(event: Any, message: Message, index: int | None, where: str) -> TelemetryRecord:
    if not isinstance(event, dict):
        raise InvalidRecord("invalid_field", f"{where} is a JSON {type(event).__name__}, not an object")
    header = event.get("commonEventHeader")
    if not isinstance(header, dict):
        raise InvalidRecord("invalid_field", f"{where} has no `commonEventHeader` object")
    domain = text_value(header.get("domain"))
    if not domain:
        raise InvalidRecord("invalid_field", f"{where}: `commonEventHeader.domain` is missing")
    event_id = text_value(header.get("eventId"))
    if event_id:
        checked_id(event_id, f"{where}: `commonEventHeader.eventId`")
    source = text_value(header.get("sourceName")) or text_value(header.get("reportingEntityName")) or ""
    if len(source) > MAX_NAME_CHARS:
        raise InvalidRecord("invalid_field", f"{where}: the source name is {len(source):,} characters long, "
                                             f"over the {MAX_NAME_CHARS} a name may have")
    attributes = {"domain": domain, "input_format": "ves"}
    if source:
        attributes["host"] = source
    return TelemetryRecord(id=event_id or message.stable_id(index), kind="ves", body={"event": event},
                           source=source, timestamp=epoch_to_iso(header.get("startEpochMicrosec")),
                           attributes=attributes)


def decode_ves(value: Any, message: Message, max_items: int = MAX_ITEMS_PER_MESSAGE) -> list[Item]:
    """The records of a decoded VES body: one per event; an event that is not one becomes its dead
    letter (carrying that event); events beyond `max_items` are answered by `too_many_items` letters."""
    if not isinstance(value, dict):
        return [InvalidRecord("invalid_field", f"a VES message is a JSON object; got a JSON {type(value).__name__}")]
    if "eventList" in value:
        events = value["eventList"]
        if not isinstance(events, list):
            return [InvalidRecord("invalid_field", "`eventList` is not an array")]
        if not events:
            return [InvalidRecord("empty_body", "`eventList` holds no events")]
        items: list[Item] = []
        for i, event in enumerate(events[:max_items]):
            try:
                items.append(_record(event, message, i, f"eventList[{i}]"))
            except InvalidRecord as exc:
                exc.original = msgspec.json.encode(event)
                items.append(exc)
        return items + overflow_letters(events[max_items:], max_items, len(events), max_items, "events",
                                        lambda chunk: msgspec.json.encode({"eventList": chunk}))
    event = value.get("event", value if "commonEventHeader" in value else None)
    if event is None:
        return [InvalidRecord("invalid_field", "no `event` or `eventList` in the VES message")]
    try:
        return [_record(event, message, None, "the event")]
    except InvalidRecord as exc:
        return [exc]


class VesDecoder(Decoder):
    name = "ves"

    def __init__(self, max_items: int = MAX_ITEMS_PER_MESSAGE) -> None:
        self.max_items = max_items

    def __call__(self, message: Message) -> list[Item]:
        try:
            return decode_ves(parse_json(require_bytes(message)), message, self.max_items)
        except InvalidRecord as exc:
            return [exc]
