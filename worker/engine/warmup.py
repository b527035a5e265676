"""An engine's warm-up before it takes records: the decode graphs its budgets reach, then one prompt
through prefill and decode, so capture and compilation happen at start-up, not on the first records
(a caller that reports readiness afterwards reports it when a step can run)."""

from __future__ import annotations

import logging
import queue
import time

from worker.engine.decode_graphs import DecodeGraphs
from worker.engine.sequence import SamplingParams, Sequence

log = logging.getLogger(__name__)


def _phase_done(name: str, started: float) -> None:
    seconds = time.perf_counter() - started  # the line worker.ops.logs.startup_phase writes
    log.info("start-up: %s in %.1f s", name, seconds, extra={"startup_phase": name, "seconds": round(seconds, 3)})


def capture_decode_graphs(graphs: DecodeGraphs, reach: int | None) -> None:
    """Every bucket a decode batch of up to `reach` sequences (None: any) falls in, captured now (eager,
    graphs off: nothing to do). Call before the GPU loop starts: no other thread may launch work during
    a capture, and a capture mid-stream stalls every decoding sequence."""
    if not graphs.use_graphs:
        return
    started = time.perf_counter()
    largest = graphs.bucket_for(min(reach or graphs.max_batch, graphs.max_batch))
    graphs.warm(largest)
    _phase_done(f"decode graphs captured (batch buckets up to {largest})", started)


def run_first_step(engine, vocab_size: int, timeout_s: float) -> Sequence:
    """One 16-token prompt through a running engine, 2 new tokens; returns it once finished (a failure
    is logged: each record will report its own). RuntimeError when no step ran within timeout_s."""
    started = time.perf_counter()
    seq = engine.add([i % vocab_size for i in range(1, 17)], SamplingParams(max_new_tokens=2))
    try:
        done = engine.finished.get(timeout=timeout_s)
    except queue.Empty:
        raise RuntimeError(f"the engine ran no step within {timeout_s:.0f} s of starting") from None
    if done is not seq or done.error is not None:
        log.warning("start-up: the engine's first step failed: %r", done.error)
    else:
        _phase_done("first engine step (prefill compilation)", started)
    return seq
