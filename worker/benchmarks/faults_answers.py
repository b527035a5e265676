"""The reader of `telesum bench faults`: which inputs got answers, how often and when."""

from __future__ import annotations

import collections
import threading

from worker.kafka.records import parse_offset_ranges


class AnswerReader(threading.Thread):
    """Reads the output and dead-letter topics read-committed; keeps (source key -> answer times)."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        super().__init__(name="faults-answers", daemon=True)
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=None,
                                      auto_offset_reset="earliest", enable_auto_commit=False,
                                      isolation_level="read_committed", fetch_max_bytes=64 << 20,
                                      max_partition_fetch_bytes=32 << 20)
        self.times: dict[tuple[int, int], list[float]] = collections.defaultdict(list)
        # answers per part: a batch message is answered once per item (telesum-source-index)
        self.parts: collections.Counter = collections.Counter()
        self.first: dict[tuple[int, int], tuple[str, bytes]] = {}  # the first answer: (topic, value)
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                for batch in self.consumer.poll(timeout_ms=200).values():
                    for msg in batch:
                        h = {k: v for k, v in msg.headers}
                        partition = int(h["telesum-source-partition"])
                        offsets = parse_offset_ranges(h["telesum-window-offsets"].decode()) \
                            if "telesum-window-offsets" in h else [int(h["telesum-source-offset"])]
                        index = h.get("telesum-source-index")
                        for offset in offsets:
                            self.parts[(partition, offset, index)] += 1
                            if index not in (None, b"0"):  # an input's time is its first part's
                                continue
                            self.times[(partition, offset)].append(msg.timestamp / 1000.0)
                            self.first.setdefault((partition, offset), (msg.topic, msg.value))
        except BaseException as exc:  # noqa: BLE001 - reported by the harness, which asserts on it
            self.error = exc
        finally:
            self.consumer.close()

    def answered(self) -> int:
        return len(self.times)
