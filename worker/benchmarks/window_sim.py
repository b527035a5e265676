"""Simulated-time comparison of accumulation windows: the adaptive rule vs the seed's fixed rule.

Drives the native `AccumulationWindow` (the very object the dispatcher consults) with simulated
arrivals and a simulated GPU, and packs with the native `ffd_pack`. The emission rules below mirror
`Dispatcher::pack_round_unlocked` (native/packing_thread.cpp): pack_one emits the first bin,
pack_full every bin but the last unless that one is within budget/64 of full, pack_all every bin;
never more bins than free slots. A slot is busy from packing until the GPU takes its bin.

Waiting time is what a request feels before compute starts: arrival -> the GPU starts its bin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from worker import _native
from worker.benchmarks.corpora import corpus_token_lengths
from worker.benchmarks.reference_ffd import align_up


@dataclass(frozen=True)
class GpuModel:
    step_overhead_s: float = 0.005      # fixed cost per bin (launches, sampling, host sync)
    tokens_per_s: float = 2_000_000.0   # prefill throughput

    def step_s(self, num_tokens: int) -> float:
        return self.step_overhead_s + num_tokens / self.tokens_per_s


@dataclass(frozen=True)
class SimResult:
    bins: int
    mean_fill: float        # real tokens / token_budget, averaged over bins
    mean_wait_s: float      # arrival -> GPU start, averaged over sequences
    p99_wait_s: float
    makespan_s: float       # until the GPU finishes the last bin


def arrivals(pattern: str, n: int, seed: int = 0) -> list[tuple[float, int]]:
    """(time_s, tokens) for `steady` (even spacing), `bursty` (groups at once) or `trickle`."""
    lens = corpus_token_lengths("A", n, seed)
    if pattern == "steady":          # ~65 % of the simulated GPU's token throughput
        times = np.arange(n) / 1000.0
    elif pattern == "bursty":        # 120 sequences at once, every 0.25 s
        times = (np.arange(n) // 120) * 0.25
    elif pattern == "trickle":       # one sequence every 40 ms: far below one bin per step
        times = np.arange(n) * 0.04
    else:
        raise ValueError(f"unknown arrival pattern {pattern!r}")
    return list(zip(times.tolist(), lens.tolist()))


def simulate(events: list[tuple[float, int]], *, adaptive: bool, token_budget: int = 65536,
             alignment: int = 16, max_seqs_per_bin: int = 1024, latency_cap_s: float = 0.05,
             num_slots: int = 3, gpu: GpuModel = GpuModel()) -> SimResult:
    window = _native.AccumulationWindow(token_budget=token_budget, latency_cap_s=latency_cap_s,
                                        adaptive=adaptive)
    pending: list[tuple[float, int]] = []          # (arrival, tokens), arrival order
    ready: list[list[tuple[float, int]]] = []      # packed bins waiting for the GPU
    fills: list[float] = []
    waits: list[float] = []
    free_slots = num_slots
    gpu_free_at = 0.0
    gpu_busy = False
    gpu_waiting_since: float | None = 0.0
    wake_at = math.inf
    i, now = 0, 0.0

    while i < len(events) or pending or ready or gpu_busy:
        candidates = [wake_at]
        if i < len(events):
            candidates.append(events[i][0])
        if gpu_busy:
            candidates.append(gpu_free_at)
        now = max(now, min(candidates))
        arrived = 0
        while i < len(events) and events[i][0] <= now:
            pending.append(events[i])
            arrived += events[i][1]
            i += 1
        window.observe_arrivals(now, arrived)
        if gpu_busy and gpu_free_at <= now:
            gpu_busy = False
            gpu_waiting_since = now
        while True:
            if not gpu_busy and ready:               # the GPU takes the oldest packed bin
                b = ready.pop(0)
                free_slots += 1
                tokens = sum(align_up(n, alignment) for _, n in b)
                step = gpu.step_s(tokens)
                window.observe_gpu_step(step)
                gpu_busy, gpu_free_at, gpu_waiting_since = True, now + step, None
                waits.extend(now - t for t, _ in b)
                continue
            if not pending:
                wake_at = math.inf
                break
            action, wake_at = window.decide(now, sum(n for _, n in pending), len(pending),
                                            pending[0][0], gpu_waiting_since)
            if action == "wait" or free_slots == 0:
                if free_slots == 0:
                    wake_at = math.inf                # a slot frees only when the GPU takes a bin
                break
            spans = [align_up(n, alignment) for _, n in pending]
            bins = _native.ffd_pack(spans, token_budget, max_seqs_per_bin)
            emit = len(bins)
            if action == "pack_one":
                emit = 1
            elif action == "pack_full":
                last = sum(spans[j] for j in bins[-1])
                emit = len(bins) if last >= token_budget - token_budget // 64 else len(bins) - 1
            emit = min(emit, free_slots)
            done: set[int] = set()
            for items in bins[:emit]:
                ready.append([pending[j] for j in items])
                fills.append(sum(pending[j][1] for j in items) / token_budget)
                done.update(items)
            free_slots -= emit
            pending = [p for j, p in enumerate(pending) if j not in done]
    return SimResult(bins=len(fills), mean_fill=float(np.mean(fills)), mean_wait_s=float(np.mean(waits)),
                     p99_wait_s=float(np.percentile(waits, 99)), makespan_s=gpu_free_at)


def compare(pattern: str, n: int = 3000, seed: int = 0) -> dict[str, SimResult]:
    """Both rules on the same arrivals."""
    events = arrivals(pattern, n, seed)
    return {"adaptive": simulate(events, adaptive=True), "fixed": simulate(events, adaptive=False)}


if __name__ == "__main__":
    for p in ("steady", "bursty", "trickle"):
        for name, r in compare(p).items():
            print(f"{p:8s} {name:8s} bins={r.bins:5d} fill={r.mean_fill:.3f} "
                  f"wait={r.mean_wait_s * 1e3:8.2f} ms p99={r.p99_wait_s * 1e3:8.2f} ms makespan={r.makespan_s:.2f}s")
