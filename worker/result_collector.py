"""Finished sequences into results: the engine's finished queue drained into (request id, `Summary` or
the exception that stopped it), which `Summarizer.poll` hands out.

A record's sequence becomes its Summary here; a long record's piece is stored, and once every piece
of its level is in, long_records plans the merge. State is guarded by the Summarizer's lock (passed
in), which also guards the sequence owners the feeder adds to.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable, Hashable

from worker.engine.sequence import Sequence, SequenceStatus
from worker.messages import Summary
from worker.summary_assembly import RecordRequest, assemble_summary, finished_text


class ResultCollector:
    def __init__(self, finished: queue.Queue, *, lock: threading.Lock,
                 owners: dict[int, tuple[RecordRequest, int]], model: str,
                 decode: Callable[[list[int]], str], stops: Callable[[], tuple[str, ...]],
                 pieces_done: Callable[[RecordRequest], None]) -> None:
        """owners: seq_id -> (request, piece index or -1), filled as sequences enter the engine.
        stops: the stop strings, read per sequence since a caller may replace the Summarizer's params.
        pieces_done: called (outside the lock) once every piece of a long record's level is summarised."""
        self._finished = finished
        self._lock = lock
        self._owners = owners
        self._model, self._decode, self._stops = model, decode, stops
        self._pieces_done = pieces_done
        self._results: collections.deque[tuple[Hashable, Summary | Exception]] = collections.deque()

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
        text = finished_text(seq, self._decode, self._stops())
        if piece < 0:
            self.push(req.request_id, assemble_summary(req, text, self._model))
            return
        req.pieces[piece] = text.strip()
        if None in req.pieces:
            return
        self._pieces_done(req)  # the feeder plans and adds the merge
