"""Log-line windows: records of log lines grouped per key (the partition and the sending host, or
the OTLP resource), each window closed by time (`window_s` after its first line), by lines or by
bytes, then summarised once as one record.

A window never spans partitions: its answer and the offsets it covers then commit together in one
partition's order (exactly-once: in one transaction). Producers that key messages by host keep
all of a host's lines in one partition, hence in one window.
Only from the poll-loop thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Part = TypeVar("Part")


@dataclass
class Window(Generic[Part]):
    key: Hashable
    opened: float
    parts: list[Part] = field(default_factory=list)
    lines: int = 0
    bytes: int = 0


class Windows(Generic[Part]):
    """Open windows by key. `add` returns a window it closed by size; `due` those closed by time."""

    def __init__(self, window_s: float, max_lines: int, max_bytes: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s, self.max_lines, self.max_bytes = window_s, max_lines, max_bytes
        self.clock = clock
        self._open: dict[Hashable, Window[Part]] = {}

    def __len__(self) -> int:
        return len(self._open)

    @property
    def parts(self) -> int:
        return sum(len(w.parts) for w in self._open.values())

    def add(self, key: Hashable, part: Part, text: str) -> Window[Part] | None:
        lines, size = text.count("\n") + 1, len(text.encode("utf-8", "surrogatepass"))  # before the part joins
        window = self._open.get(key)
        if window is None:
            window = self._open[key] = Window(key, self.clock())
        window.parts.append(part)
        window.lines += lines
        window.bytes += size
        if window.lines >= self.max_lines or window.bytes >= self.max_bytes:
            return self._open.pop(key)
        return None

    def due(self) -> list[Window[Part]]:
        """The windows open for window_s or longer, removed."""
        now = self.clock()
        keys = [k for k, w in self._open.items() if now - w.opened >= self.window_s]
        return [self._open.pop(k) for k in keys]

    def close_all(self) -> list[Window[Part]]:
        closed = list(self._open.values())
        self._open.clear()
        return closed

    def drop(self, gone: Callable[[Hashable], bool]) -> int:
        """Forget the windows whose key is `gone` (a revoked partition's); returns their parts."""
        keys = [k for k in self._open if gone(k)]
        return sum(len(self._open.pop(k).parts) for k in keys)
