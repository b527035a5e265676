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


def capture_decode_graphs(graphs: DecodeGraphs, reach: int | None) -> int | None:
    """Every bucket a decode batch of up to `reach` sequences (None: any) falls in, captured now;
    returns the largest (None: graphs off, nothing to do). Call before the GPU loop starts: a capture
    synchronises and empties the caches while every decoding sequence waits. With the elementwise ops
    as Triton kernels a bucket takes 0.04-0.08 s after the first (H100, 2026-12-07), so all of them
    cost ~0.5 s of start-up; captured when first needed instead, 0-2 of them fell inside each 8 s
    stream at 80 % load, 0.05-0.14 s each (bench/NOTES.md, 2026-12-07 sixth)."""
    if not graphs.use_graphs:
        return None
    largest = graphs.bucket_for(min(reach or graphs.max_batch, graphs.max_batch))
    graphs.warm(largest)
    return largest


def run_first_step(engine, vocab_size: int, timeout_s: float) -> tuple[Sequence, bool]:
    """One 16-token prompt through a running engine, 2 new tokens; returns it once finished, and
    whether it succeeded (a failure is logged: each record will report its own). RuntimeError when
    no step ran within timeout_s."""
    seq = engine.add([i % vocab_size for i in range(1, 17)], SamplingParams(max_new_tokens=2))
    try:
        done = engine.finished.get(timeout=timeout_s)
    except queue.Empty:
        raise RuntimeError(f"the engine ran no step within {timeout_s:.0f} s of starting") from None
    ok = done is seq and done.error is None
    if not ok:
        log.warning("start-up: the engine's first step failed: %r", done.error)
    return seq, ok


def measure_prefill_rate(engine, vocab_size: int, tokens: int, timeout_s: float) -> tuple[Sequence, float]:
    """Prompt tokens a second a running, idle engine prefills: one prompt of `tokens` tokens that no
    other prompt shares a prefix with, one new token, timed from add to finished. Returns it and the
    rate. RuntimeError when it did not finish within timeout_s or failed."""
    prompt = [(i * 7919 + 104729) % (vocab_size - 1) + 1 for i in range(tokens)]
    started = time.perf_counter()
    seq = engine.add(prompt, SamplingParams(max_new_tokens=1))
    try:
        done = engine.finished.get(timeout=timeout_s)
    except queue.Empty:
        raise RuntimeError(f"a {tokens}-token prompt was not prefilled within {timeout_s:.0f} s") from None
    if done is not seq or done.error is not None:
        raise RuntimeError(f"the {tokens}-token measurement failed: {done.error!r}")
    return seq, tokens / (time.perf_counter() - started)
