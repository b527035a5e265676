"""Kafka records <-> message types: decoding input, building summary and dead-letter outputs."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from worker.control_chars import clean_text
from worker.inputs.envelope import decode_envelope
from worker.messages import DeadLetter, Summary, TelemetryRecord

CONTENT_TYPE = "content-type"
H_TOPIC, H_PARTITION, H_OFFSET = "telesum-source-topic", "telesum-source-partition", "telesum-source-offset"
H_MODEL, H_REASON = "telesum-model", "telesum-reason"
# A batch item's place in its message, and the input format the message was read as.
H_INDEX, H_FORMAT = "telesum-source-index", "telesum-input-format"
# A log window's answer: its first offset is H_OFFSET, its last this one.
H_LAST_OFFSET, H_WINDOW_RECORDS = "telesum-source-last-offset", "telesum-window-records"
H_WINDOW_OFFSETS = "telesum-window-offsets"  # every offset a window covers, as ranges: "3-5,9,12-20"
JSON = b"application/json"
# What a compact dead letter keeps of the original bytes when the full one is too large to publish.
COMPACT_ORIGINAL_BYTES = 1024


@dataclass(frozen=True)
class Source:
    """Where an input record came from: enough to find it again and to de-duplicate outputs."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    index: int | None = None         # the item of a batch message this answers
    input_format: str | None = None  # what the input layer read the message as
    covers: tuple[int, ...] = ()     # a log window: the offset of each record in it (`offset` is the first)

    @property
    def key_text(self) -> str | None:
        return None if self.key is None else self.key.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Output:
    """One record to publish."""

    topic: str
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]


def header(headers, name: str) -> str | None:
    """The first header named `name` (case-insensitive) as text, or None."""
    for key, value in headers or ():
        if key.lower() == name and value is not None:
            return value.decode("utf-8", errors="replace")
    return None


def decode_message(value: bytes | None, headers) -> TelemetryRecord:
    """Decode one Kafka record value as telesum's envelope (the worker's `envelope` input format);
    MessagePack when its content-type header says so. Raises InvalidRecord with a reason code."""
    return decode_envelope(value or b"", header(headers, CONTENT_TYPE))


def offset_ranges(offsets) -> str:
    """Offsets as compact ranges: (3, 4, 5, 9) -> '3-5,9'."""
    parts: list[str] = []
    ordered = sorted(set(offsets))
    start = prev = ordered[0] if ordered else None
    for offset in ordered[1:] + [None]:
        if offset is not None and offset == prev + 1:
            prev = offset
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = offset
    return ",".join(parts)


def parse_offset_ranges(text: str) -> list[int]:
    """'3-5,9' -> [3, 4, 5, 9]: what a consumer reads from telesum-window-offsets."""
    offsets: list[int] = []
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        offsets.extend(range(int(low), int(high or low) + 1))
    return offsets


def _provenance(source: Source, model: str) -> list[tuple[str, bytes]]:
    headers = [(H_TOPIC, source.topic.encode()), (H_PARTITION, str(source.partition).encode()),
               (H_OFFSET, str(source.offset).encode()), (H_MODEL, model.encode())]
    if source.index is not None:
        headers.append((H_INDEX, str(source.index).encode()))
    if source.covers:
        headers += [(H_LAST_OFFSET, str(max(source.covers)).encode()),
                    (H_WINDOW_RECORDS, str(len(source.covers)).encode()),
                    (H_WINDOW_OFFSETS, offset_ranges(source.covers).encode())]
    if source.input_format is not None:
        headers.append((H_FORMAT, source.input_format.encode()))
    return headers


def summary_output(topic: str, source: Source, summary: Summary) -> Output:
    """The answer for `source`: same key as the input, provenance headers."""
    summary = msgspec.structs.replace(summary, key=source.key_text)
    return Output(topic, source.key, msgspec.json.encode(summary),
                  [(CONTENT_TYPE, JSON), *_provenance(source, summary.model)])


def dead_letter_output(topic: str, source: Source, original: bytes | None, reason: str, message: str,
                       model: str, *, compact: bool = False) -> Output:
    """A dead letter with the reason code, a human message and the original bytes.
    `compact` keeps only the first COMPACT_ORIGINAL_BYTES of the original (for outputs too large to publish)."""
    original = original or b""
    message = clean_text(message)  # may quote the input: no escape sequences, no lone surrogates
    if compact and len(original) > COMPACT_ORIGINAL_BYTES:
        message = f"{message} (original of {len(original)} bytes cut to {COMPACT_ORIGINAL_BYTES})"
        original = original[:COMPACT_ORIGINAL_BYTES]
    letter = DeadLetter(reason=reason, message=message, original=original, topic=source.topic,
                        partition=source.partition, offset=source.offset, key=source.key_text)
    return Output(topic, source.key, msgspec.json.encode(letter),
                  [(CONTENT_TYPE, JSON), (H_REASON, reason.encode()), *_provenance(source, model)])
