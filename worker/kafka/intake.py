"""Intake: a fetched message becomes work for the summarizer.

Each message is decoded through `worker.inputs` into records or invalid items; an invalid item is
answered at once as a dead letter, a log line waits in its window (`windowing.py`) and everything
else, with each closed window as one record, queues in the backlog until the summarizer has room.
Only from the loop thread.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kafka import TopicPartition

from worker.inputs import FORMAT_ATTRIBUTE, Item, Message, decoder_for
from worker.inputs.json_log import parse_field_map
from worker.inputs.windows import Window, Windows
from worker.kafka.publish import Request, RequestId
from worker.kafka.records import Source
from worker.kafka.windowing import is_windowed, merged, window_key
from worker.messages import InvalidRecord, ReasonCode, TelemetryRecord
from worker.settings.kafka import KafkaSettings


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
        self.decode_message = decoder_for(settings.input_format, parse_field_map(settings.json_log_fields))
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
        return self.decode_message(Message(msg.value or b"", tuple(msg.headers or ()), msg.topic, msg.partition,
                                           msg.offset, getattr(msg, "timestamp", None)))

    def stage(self, msg, epoch: int, items: list[Item]) -> None:
        """Answer the invalid items of one decoded message; queue or window the records."""
        tp = TopicPartition(msg.topic, msg.partition)
        raw = msg.value or b""
        batch = len(items) > 1
        for index, item in enumerate(items):
            rid = RequestId(tp, msg.offset, epoch, index)
            if isinstance(item, InvalidRecord):
                fmt = None if self.input_format == "auto" else self.input_format
                source = Source(msg.topic, msg.partition, msg.offset, msg.key, index if batch else None, fmt)
                why = f"item {index} of {len(items)}: {item.message}" if batch else item.message
                self.dead_letter(Request(rid, source, raw, None, "dead_letter", item.reason), why)
                continue
            source = Source(msg.topic, msg.partition, msg.offset, msg.key, index if batch else None,
                            item.attributes.get(FORMAT_ATTRIBUTE))
            pending = Pending(rid, source, raw, item)
            if self.windows is None or not is_windowed(item):
                self.backlog.append(pending)
            elif (full := self.windows.add(window_key(tp, item), pending, item.body_text())) is not None:
                self.backlog.append(window_pending(full))

    def close_due_windows(self) -> None:
        if self.windows is not None:
            self.backlog.extend(map(window_pending, self.windows.due()))

    def close_all_windows(self) -> list[Pending]:
        return list(map(window_pending, self.windows.close_all())) if self.windows is not None else []

    def forget(self, gone: set[TopicPartition]) -> None:
        """Drop what these partitions staged: whoever reads them next replays it."""
        self.backlog = deque(p for p in self.backlog if p.rid.tp not in gone)
        if self.windows is not None:
            self.windows.drop(lambda key: key[0] in gone)


def window_pending(window: Window[Pending]) -> Pending:
    """A closed window as one piece of work, answered under its last part's id."""
    source, raw, record, covers = merged(window)
    return Pending(window.parts[-1].rid, source, raw, record, covers)
