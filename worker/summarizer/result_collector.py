"""Finished sequences into results: the engine's finished queue drained into (request id, `Summary` or
the exception that stopped it), which `Summarizer.poll` hands out.

A record's sequence becomes its Summary here: its text and the check against its facts are sent to
`prose` (the preprocessing pool, off this process's GIL) when several finish together, and the
Summary is pushed when they come back, from the pool's thread, which wakes the poller. A long
record's piece is stored, and once every piece of its level is in, long_records plans the merge. It
owns the sequences' owners (which request, which piece), the summaries being written and the results
not yet polled, under its own lock.

Results are kept per caller: a request routed to a caller (`route`, done by `Summarizer.submit(...,
caller=...)`) is handed out only by `poll(..., caller=that one)`, the others by `poll` with no caller.
So the summaries loop never sees the incident loop's follow-up results, nor the other way round. Any
poller moves finished sequences into the boxes; one at a time, while another pumps a poller only reads
its box.
"""

from __future__ import annotations

import collections
import concurrent.futures
import queue
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from worker.engine.sequence import Sequence, SequenceStatus
from worker.messages import Facts, Summary, TelemetryRecord
from worker.summarizer.summary_assembly import Generated, RecordRequest, assemble_summary, finished_text, summary_prose

# While several callers poll, a blocking wait for finished sequences is cut into slices this long.
_SHARED_SLICE_S = 0.01
# Put into the finished queue when a result is pushed from another thread: a poller waiting on the
# queue wakes and reads its box.
_WAKE = object()
# Summaries finished together that go to the pool as batches; fewer are written on the polling thread.
# A pool task costs the serving process ~0.2-0.5 ms of Python whatever it carries, writing one summary
# here 0.1-0.2 ms (bench/host_threads.py, bench/prose_overhead.py).
POOL_PROSE_MIN = 4


class ResultCollector:
    def __init__(self, finished: queue.SimpleQueue, *, model: str, decode: Callable[[list[int]], str],
                 level_done: Callable[[RecordRequest], None],
                 prose: Callable[[list[tuple[TelemetryRecord, Facts, Generated]]],
                                 list[concurrent.futures.Future]] | None = None,
                 ) -> None:
        """finished: the engine's queue of finished sequences. level_done: called (outside the lock)
        once every piece of a long record's level is summarised. prose: futures of summaries' (text,
        NarrativeCheck) from [(record, facts, generated)] (`Preprocessor.summary_prose`); None: every
        summary written on the polling thread."""
        self._finished = finished
        self._model, self._decode = model, decode
        self._level_done = level_done
        self._prose = prose
        self._lock = threading.Lock()  # protects _owners, _results and _writing
        self._owners: dict[int, tuple[RecordRequest, int]] = {}  # seq_id -> (request, piece index or -1)
        self._writing = 0  # summaries sent to `prose`, not yet pushed
        self._written = threading.Condition(self._lock)  # notified when _writing falls to 0
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

    def wait_written(self, timeout: float | None) -> bool:
        """Wait until every summary sent to `prose` is pushed (True), or `timeout` s (False). Thread-safe."""
        with self._written:
            return self._written.wait_for(lambda: self._writing == 0, timeout)

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
        to_write: list[tuple[RecordRequest, Generated]] = []
        while True:
            if seq is not _WAKE:
                summary = self._on_finished(seq)
                if summary is not None:
                    to_write.append(summary)
            try:
                seq = self._finished.get_nowait()
            except queue.Empty:
                break
        if to_write:
            self._write_summaries(to_write)
        return True

    def push(self, request_id: Hashable, result: Summary | Exception) -> None:
        """`request_id`'s result (each request has one), into its caller's box."""
        with self._lock:
            caller = self._routes.pop(request_id, None)
            self._results.setdefault(caller, collections.deque()).append((request_id, result))

    def _on_finished(self, seq: Sequence) -> tuple[RecordRequest, Generated] | None:
        """Account for one finished sequence; a record's whole summary is returned to be written."""
        with self._lock:
            req, piece = self._owners.pop(seq.seq_id)
            req.in_flight -= 1
        if req.failed:
            return None
        if seq.status is SequenceStatus.FAILED:
            req.failed = True
            self.push(req.request_id, seq.error or RuntimeError("generation failed"))
            return None
        req.count_sequence(seq)
        if piece < 0:
            return req, Generated.of(seq)
        req.pieces[piece] = finished_text(seq, self._decode).strip()
        if None in req.pieces:
            return None
        self._level_done(req)  # the feeder plans and adds the merge
        return None

    def _write_summaries(self, finished: list[tuple[RecordRequest, Generated]]) -> None:
        """Push each request's Summary once its text is written: by `prose` when there are at least
        POOL_PROSE_MIN of them (a pool task costs about as much as writing two here), pushed from the
        pool's thread, which wakes the poller; else here, now."""
        if self._prose is None or len(finished) < POOL_PROSE_MIN:
            for req, generated in finished:
                self._push_summary(req, generated, None)
            return
        with self._lock:
            self._writing += len(finished)
        try:
            futures = self._prose([(req.record, req.facts, generated) for req, generated in finished])
        except Exception:  # noqa: BLE001 - the pool closed: written here instead
            futures = [None] * len(finished)
        for (req, generated), future in zip(finished, futures):
            if future is None or future.done():
                self._summary_written(req, generated, future, wake=False)
            else:
                future.add_done_callback(lambda f, req=req, generated=generated:
                                         self._summary_written(req, generated, f, wake=True))

    def _summary_written(self, req: RecordRequest, generated: Generated,
                         future: concurrent.futures.Future | None, *, wake: bool) -> None:
        try:
            self._push_summary(req, generated, future)
        finally:
            with self._lock:
                self._writing -= 1
                if not self._writing:
                    self._written.notify_all()
            if wake:
                self._finished.put(_WAKE)

    def _push_summary(self, req: RecordRequest, generated: Generated,
                      future: concurrent.futures.Future | None) -> None:
        """Push the Summary from `future`'s prose; written on this thread when there is none, or the
        pool could not write it (closed, or a process died): a record's summary is never lost to it.
        An error of the record's own text is its result."""
        try:
            if future is not None and not future.cancelled() and future.exception() is None:
                text, narrative = future.result()
            else:
                text, narrative = summary_prose(req.record, req.facts, generated, self._decode)
            result: Summary | Exception = assemble_summary(req, text, narrative, self._model)
        except Exception as exc:  # noqa: BLE001 - this record's failure, reported through poll
            result = exc
        self.push(req.request_id, result)
