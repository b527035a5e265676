"""Finished sequences into results: the engine's finished queue drained into (request id, `Summary` or
the exception that stopped it), which `Summarizer.poll` hands out.

A record's sequence becomes its Summary here; a long record's piece is stored, and once every piece
of its level is in, long_records plans the merge. It owns the sequences' owners (which request, which
piece) and the results not yet polled, under its own lock.

Results are kept per caller: a request routed to a caller (`route`, done by `Summarizer.submit(...,
caller=...)`) is handed out only by `poll(..., caller=that one)`, the others by `poll` with no caller.
So the summaries loop never sees the incident loop's follow-up results, nor the other way round. Any
poller moves finished sequences into the boxes; one at a time, while another pumps a poller only reads
its box.
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

# While several callers poll, a blocking wait for finished sequences is cut into slices this long.
_SHARED_SLICE_S = 0.01


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
        # caller (None: the default one) -> its results not yet polled
        self._results: dict[Hashable, collections.deque[tuple[Hashable, Summary | Exception]]] = {
            None: collections.deque()}
        self._routes: dict[Hashable, Hashable] = {}  # request id -> its caller, until its result is pushed
        self._shared = False  # a caller other than the default was routed: blocking pumps are sliced
        self._pumping = threading.Lock()  # one thread moves finished sequences at a time

    def route(self, request_id: Hashable, caller: Hashable) -> None:
        """The result of `request_id` goes to `caller`'s box (`poll(..., caller=caller)`). Thread-safe."""
        with self._lock:
            self._routes[request_id] = caller
            self._results.setdefault(caller, collections.deque())
            self._shared = True

    def unroute(self, request_id: Hashable) -> None:
        """Forget a route whose request was never queued (its submit raised). Thread-safe."""
        with self._lock:
            self._routes.pop(request_id, None)

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

    def poll(self, timeout: float, caller: Hashable = None) -> list[tuple[Hashable, Summary | Exception]]:
        """`caller`'s finished requests since its last call (None: those submitted without a caller),
        waiting up to `timeout` s for the first. Thread-safe."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                box = self._results.get(caller)
                if box:
                    out = list(box)
                    box.clear()
                    return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if self._pump_once(0.0):
                    continue  # what was just finished may be this caller's
                return []
            # While another caller polls too, it may move this caller's result into its box while this one
            # waits on the queue: wait in slices, so that result waits no longer than a slice.
            self._pump_once(min(remaining, _SHARED_SLICE_S) if self._shared else remaining)

    def _pump_once(self, timeout: float) -> bool:
        """`pump`, unless another thread is pumping (then wait for it at most `timeout`). True when this call
        moved a finished sequence."""
        took = self._pumping.acquire(timeout=timeout) if timeout > 0 else self._pumping.acquire(blocking=False)
        if not took:
            return False
        try:
            return self.pump(timeout)
        finally:
            self._pumping.release()

    def pump(self, timeout: float) -> bool:
        """Move finished sequences into results (blocking up to `timeout` for the first one); True when
        one was moved."""
        try:
            seq = self._finished.get(timeout=timeout) if timeout > 0 else self._finished.get_nowait()
        except queue.Empty:
            return False
        while True:
            self._on_finished(seq)
            try:
                seq = self._finished.get_nowait()
            except queue.Empty:
                return True

    def push(self, request_id: Hashable, result: Summary | Exception) -> None:
        """`request_id`'s result (each request has one), into its caller's box."""
        with self._lock:
            caller = self._routes.pop(request_id, None)
            self._results.setdefault(caller, collections.deque()).append((request_id, result))

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
