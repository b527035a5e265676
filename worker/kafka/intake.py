"""Intake: a fetched message becomes work for the summarizer.

Each message is decoded through `worker.inputs` into records or invalid items; an invalid item is
answered at once as a dead letter, a log line waits in its window (`windowing.py`) and everything
else, with each closed window as one record, queues in the backlog until the summarizer has room.

One message never stops the worker: whatever raises while it is decoded, staged or windowed ends
as that message's (or that part's) dead letter `internal_error`, logged once with where it came
from; the loop goes on. A batch item's dead letter carries that item's bytes, not the whole message.
Only from the loop thread.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kafka import TopicPartition

from worker.control_chars import clean_text
from worker.inputs import FORMAT_ATTRIBUTE, Item, Message, decoder_for
from worker.inputs.json_log import parse_field_map
from worker.inputs.windows import Window, Windows
from worker.kafka.publish import Request, RequestId
from worker.kafka.records import Source
from worker.kafka.undecodable import OversizedBatchRecord
from worker.kafka.windowing import is_windowed, merged, window_key
from worker.messages import InvalidRecord, ReasonCode, TelemetryRecord
from worker.settings.kafka import KafkaSettings

log = logging.getLogger(__name__)


@dataclass
class Pending:
    rid: RequestId
    source: Source
    raw: bytes
    record: TelemetryRecord
    covers: tuple[int, ...] = ()  # a log window: the offset of each part

    def request(self, kind, reason: ReasonCode | None = None) -> Request:
        return Request(self.rid, self.source, self.raw, self.record.id, kind, reason, covers=self.covers)


class Intake:
    """Decodes messages, answers invalid items through `dead_letter`, stages log lines in their
    windows and holds the backlog of records waiting for the summarizer."""

    def __init__(self, settings: KafkaSettings, dead_letter: Callable[[Request, str], None]) -> None:
        self.input_format = settings.input_format
        self.decode_message = decoder_for(settings.input_format, parse_field_map(settings.json_log_fields),
                                          settings.max_items_per_message)
        self.dead_letter = dead_letter
        self.backlog: deque[Pending] = deque()        # decoded, waiting for summarizer room
        # Log lines waiting for their window to close (window_s 0: every record is answered alone).
        self.windows: Windows[Pending] | None = Windows(settings.window_s, settings.window_max_lines,
                                                        settings.window_max_bytes) if settings.window_s > 0 else None

    @property
    def staged(self) -> int:
        """Records waiting for summarizer room or in open log windows."""
        return len(self.backlog) + (self.windows.parts if self.windows is not None else 0)

    def decode(self, msg) -> list[Item]:
        """The message's items; an exception out of its decoder becomes its one internal_error item."""
        try:
            if isinstance(msg, OversizedBatchRecord):
                return [InvalidRecord("batch_too_large", msg.reason)]
            return self.decode_message(Message(msg.value or b"", tuple(msg.headers or ()), msg.topic, msg.partition,
                                               msg.offset, getattr(msg, "timestamp", None)))
        except Exception as exc:  # noqa: BLE001 - one message never stops the worker
            return [internal_error(exc, "decoding", msg.topic, msg.partition, msg.offset)]

    def stage(self, msg, epoch: int, items: list[Item]) -> None:
        """Answer the invalid items of one decoded message; queue or window the records."""
        tp = TopicPartition(msg.topic, msg.partition)
        batch = len(items) > 1
        for index, item in enumerate(items):
            rid = RequestId(tp, msg.offset, epoch, index)
            fmt = item.attributes.get(FORMAT_ATTRIBUTE) if isinstance(item, TelemetryRecord) else (
                None if self.input_format == "auto" else self.input_format)
            source = Source(msg.topic, msg.partition, msg.offset, msg.key, index if batch else None, fmt)
            try:
                raw = _item_bytes(item) if batch else msg.value or b""
                if isinstance(item, TelemetryRecord):
                    self._queue(Pending(rid, source, raw, item))
                    continue
                letter = Request(rid, source, raw, None, "dead_letter", item.reason)
                why = f"item {index} of {len(items)}: {item.message}" if batch else item.message
            except Exception as exc:  # noqa: BLE001 - this part's answer; the others go on
                error = internal_error(exc, "staging", msg.topic, msg.partition, msg.offset)
                original = b"" if batch else msg.value or b""
                letter, why = Request(rid, source, original, None, "dead_letter", error.reason), error.message
            self.dead_letter(letter, why)  # outside the guard: a failure to publish is the worker's own

    def _queue(self, pending: Pending) -> None:
        if self.windows is None or not is_windowed(pending.record):
            self.backlog.append(pending)
        elif (full := self.windows.add(window_key(pending.rid.tp, pending.record), pending,
                                       pending.record.body_text())) is not None:
            self._close(full)

    def close_due_windows(self) -> None:
        if self.windows is not None:
            for window in self.windows.due():
                self._close(window)

    def close_all_windows(self) -> list[Pending]:
        if self.windows is None:
            return []
        closed = [self._merge(window) for window in self.windows.close_all()]
        return [pending for pending in closed if pending is not None]

    def _close(self, window: Window[Pending]) -> None:
        pending = self._merge(window)
        if pending is not None:
            self.backlog.append(pending)

    def _merge(self, window: Window[Pending]) -> Pending | None:
        """A closed window as one piece of work; None when merging raised: each part is then
        answered with its own internal_error dead letter."""
        try:
            return window_pending(window)
        except Exception as exc:  # noqa: BLE001 - the window's parts are answered, the loop goes on
            first = window.parts[0].source
            error = internal_error(exc, "closing a log window", first.topic, first.partition, first.offset)
            for part in window.parts:
                self.dead_letter(part.request("dead_letter", error.reason), error.message)
            return None

    def forget(self, gone: set[TopicPartition]) -> None:
        """Drop what these partitions staged: whoever reads them next replays it."""
        self.backlog = deque(p for p in self.backlog if p.rid.tp not in gone)
        if self.windows is not None:
            self.windows.drop(lambda key: key[0] in gone)


def _item_bytes(item: Item) -> bytes:
    """A batch item's own bytes, for its dead letter: what the decoder kept of it, or its record's body."""
    if isinstance(item, InvalidRecord):
        return item.original or b""
    return item.body_text().encode("utf-8", "surrogatepass")


def internal_error(exc: Exception, stage: str, topic: str, partition: int, offset: int) -> InvalidRecord:
    """The dead letter's reason for an unexpected exception in one message's path, logged once with
    its traceback and where the message came from."""
    log.error("internal error while %s %s[%d]@%d: answered with a dead letter internal_error", stage, topic,
              partition, offset, exc_info=exc)
    return InvalidRecord("internal_error", f"{type(exc).__name__} while {stage}: {clean_text(str(exc))[:300]}")


def window_pending(window: Window[Pending]) -> Pending:
    """A closed window as one piece of work, answered under its last part's id."""
    source, raw, record, covers = merged(window)
    return Pending(window.parts[-1].rid, source, raw, record, covers)
