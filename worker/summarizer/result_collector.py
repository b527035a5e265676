"""Finished sequences into results: the engine's finished queue drained into (request id, `Summary` or
the exception that stopped it), which `Summarizer.poll` hands out.

A record's sequence becomes its Summary here; a long record's piece is stored, and once every piece
of its level is in, long_records plans the merge. It owns the sequences' owners (which request, which
piece) and the results not yet polled, under its own lock.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from worker.engine.sequence import Sequence, SequenceStatus
from worker.messages import Summary
from worker.summarizer.summary_assembly import RecordRequest, assemble_summary, finished_text


class ResultCollector:
    def __init__(self, finished: queue.Queue, *, model: str, decode: Callable[[list[int]], str],
                 level_done: Callable[[RecordRequest], None]) -> None:
        """finished: the engine's queue of finished sequences. level_done: called (outside the lock)
        once every piece of a long record's level is summarised."""
        self._finished = finished
        self._model, self._decode = model, decode
        self._level_done = level_done
        self._lock = threading.Lock()  # protects _owners and _results
        self._owners: dict[int, tuple[RecordRequest, int]] = {}  # seq_id -> (request, piece index or -1)
        self._results: collections.deque[tuple[Hashable, Summary | Exception]] = collections.deque()

    def track(self, req: RecordRequest, piece: int, add: Callable[..., Sequence], *args: Any) -> None:
        """`add(*args)` puts one sequence of `req` into the engine; it is owned before it can finish
        (the lock is held across the call). Raises what `add` raises. Thread-safe."""
        with self._lock:
            seq = add(*args)
            self._owners[seq.seq_id] = (req, piece)
            req.in_flight += 1

    def has_unfinished_levels(self) -> bool:
        """True while a long record still has pieces of its level in the engine. Thread-safe."""
        with self._lock:
            return any(r.hierarchical and not r.failed and None in r.pieces for r, _ in self._owners.values())

    def poll(self, timeout: float) -> list[tuple[Hashable, Summary | Exception]]:
        """Finished requests since the last call, waiting up to `timeout` s for the first. Thread-safe."""
        deadline = time.monotonic() + timeout
        while True:
            self.pump(max(deadline - time.monotonic(), 0.0))
            with self._lock:
                if self._results or time.monotonic() >= deadline:
                    out = list(self._results)
                    self._results.clear()
                    return out

    def pump(self, timeout: float) -> None:
        """Move finished sequences into results (blocking up to `timeout` for the first one)."""
        try:
            seq = self._finished.get(timeout=timeout) if timeout > 0 else self._finished.get_nowait()
        except queue.Empty:
            return
        while True:
            self._on_finished(seq)
            try:
                seq = self._finished.get_nowait()
            except queue.Empty:
                break

    def push(self, request_id: Hashable, result: Summary | Exception) -> None:
        with self._lock:
            self._results.append((request_id, result))

    def _on_finished(self, seq: Sequence) -> None:
        with self._lock:
            req, piece = self._owners.pop(seq.seq_id)
            req.in_flight -= 1
        if req.failed:
            return
        if seq.status is SequenceStatus.FAILED:
            req.failed = True
            self.push(req.request_id, seq.error or RuntimeError("generation failed"))
            return
        req.count_sequence(seq)
        text = finished_text(seq, self._decode)
        if piece < 0:
            self.push(req.request_id, assemble_summary(req, text, self._model))
            return
        req.pieces[piece] = text.strip()
        if None in req.pieces:
            return
        self._level_done(req)  # the feeder plans and adds the merge
