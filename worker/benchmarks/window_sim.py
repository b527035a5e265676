"""Simulated-time comparison of accumulation windows: the adaptive rule vs the seed's fixed rule.

Drives the native `AccumulationWindow` (the very object the dispatcher consults) with simulated
arrivals and a simulated GPU, and packs with the native `ffd_pack`. The emission rules below mirror
`Dispatcher::pack_round_unlocked` (native/packing_thread.cpp): pack_one emits the first bin,
pack_full every bin but the last unless that one is within budget/64 of full, pack_all every bin;
never more bins than free slots. A slot is busy from packing until the GPU takes its bin.

Waiting time is what a request feels before compute starts: arrival -> the GPU starts its bin.

Fairness (`fairness=`): "none" is plain first-fit-decreasing over everything waiting; "oldest"
places the oldest waiting sequence first, so it always makes the next bin; "overdue" (what the
dispatcher does) places every sequence past the latency cap first, in arrival order, and at least
the oldest.
`long_record=(at_s, pieces, in_flight)` adds one long record's near-budget pieces to the stream:
`in_flight` of them wait at a time, the next one arriving when the GPU starts a bin holding one
(the Summarizer's cap per record); `in_flight=pieces` submits the whole record at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from worker import _native
from worker.benchmarks.corpora import corpus_token_lengths
from worker.benchmarks.reference_ffd import align_up
from worker.settings.budgets import ALIGNMENT, GPU_MAX_SEQS_PER_BIN, GPU_TOKEN_BUDGET

# The simulation compares the window rules at the seed's scale of 0.05 s, not at the dispatcher's cap in
# force (settings/budgets.py LATENCY_CAP_S): it has no engine whose ask is served at once, so at 0.5 s
# it counts an idle GPU holding for a fuller bin (up to a quarter of the cap) as waiting (bursty: mean
# 85 ms against the fixed rule's 42 ms).
SIM_LATENCY_CAP_S = 0.05


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
    mean_wait_s: float      # arrival -> GPU start, averaged over sequences (long pieces excluded)
    p99_wait_s: float
    makespan_s: float       # until the GPU finishes the last bin
    max_wait_s: float = 0.0


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


def _num_first(fairness: str, pending: list, now: float, latency_cap_s: float) -> int:
    if fairness == "none":
        return 0
    if fairness == "oldest":
        return 1
    if fairness == "overdue":  # arrival order: the overdue sequences are a prefix
        overdue = next((j for j, p in enumerate(pending) if p[0] + latency_cap_s > now), len(pending))
        return max(1, overdue)
    raise ValueError(f"unknown fairness {fairness!r}")


def simulate(events: list[tuple], *, adaptive: bool, token_budget: int = GPU_TOKEN_BUDGET,
             alignment: int = ALIGNMENT, max_seqs_per_bin: int = GPU_MAX_SEQS_PER_BIN,
             latency_cap_s: float = SIM_LATENCY_CAP_S,
             num_slots: int = 3, gpu: GpuModel = GpuModel(), fairness: str = "overdue",
             long_record: tuple[float, int, int] | None = None) -> SimResult:
    window = _native.AccumulationWindow(token_budget=token_budget, latency_cap_s=latency_cap_s,
                                        adaptive=adaptive)
    pending: list[tuple] = []                      # (arrival, tokens[, is_long_piece]), arrival order
    ready: list[list[tuple[float, int]]] = []      # packed bins waiting for the GPU
    fills: list[float] = []
    waits: list[float] = []
    free_slots = num_slots
    gpu_free_at = 0.0
    gpu_busy = False
    gpu_waiting_since: float | None = 0.0
    wake_at = math.inf
    i, now = 0, 0.0
    piece = (token_budget * 31) // 32
    long_at, long_left, long_in_flight = long_record or (math.inf, 0, 0)
    long_started = False

    while i < len(events) or pending or ready or gpu_busy or long_left:
        candidates = [wake_at] + ([long_at] if not long_started and long_left else [])
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
        if not long_started and long_left and long_at <= now:
            long_started = True
            for _ in range(min(long_in_flight, long_left)):
                pending.append((now, piece, True))
                arrived += piece
            long_left -= min(long_in_flight, long_left)
        window.observe_arrivals(now, arrived)
        if gpu_busy and gpu_free_at <= now:
            gpu_busy = False
            gpu_waiting_since = now
        while True:
            if not gpu_busy and ready:               # the GPU takes the oldest packed bin
                b = ready.pop(0)
                free_slots += 1
                tokens = sum(align_up(p[1], alignment) for p in b)
                step = gpu.step_s(tokens)
                window.observe_gpu_step(step)
                gpu_busy, gpu_free_at, gpu_waiting_since = True, now + step, None
                waits.extend(now - p[0] for p in b if len(p) == 2)
                for _ in range(min(long_left, sum(1 for p in b if len(p) > 2))):  # the next piece
                    pending.append((now, piece, True))
                    window.observe_arrivals(now, piece)
                    long_left -= 1
                continue
            if not pending:
                wake_at = math.inf
                break
            action, wake_at = window.decide(now, sum(p[1] for p in pending), len(pending),
                                            pending[0][0], gpu_waiting_since)
            if action == "wait" or free_slots == 0:
                if free_slots == 0:
                    wake_at = math.inf                # a slot frees only when the GPU takes a bin
                break
            spans = [align_up(p[1], alignment) for p in pending]
            bins = _native.ffd_pack(spans, token_budget, max_seqs_per_bin,
                                    _num_first(fairness, pending, now, latency_cap_s))
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
                     p99_wait_s=float(np.percentile(waits, 99)), makespan_s=gpu_free_at,
                     max_wait_s=float(np.max(waits)))


def compare(pattern: str, n: int = 3000, seed: int = 0) -> dict[str, SimResult]:
    """Both rules on the same arrivals."""
    events = arrivals(pattern, n, seed)
    return {"adaptive": simulate(events, adaptive=True), "fixed": simulate(events, adaptive=False)}


def compare_fairness(pattern: str, n: int = 3000, seed: int = 0, pieces: int = 200, in_flight: int = 2,
                     ) -> dict[str, dict[str, SimResult]]:
    """Each fairness rule on `pattern` alone, with a long record's pieces `in_flight` at a time,
    and with all of them at once; the record starts a tenth into the stream."""
    events = arrivals(pattern, n, seed)
    at = events[len(events) // 10][0]
    return {rule: {"alone": simulate(events, adaptive=True, fairness=rule),
                   "long_capped": simulate(events, adaptive=True, fairness=rule,
                                           long_record=(at, pieces, in_flight)),
                   "long_at_once": simulate(events, adaptive=True, fairness=rule,
                                            long_record=(at, pieces, pieces))}
            for rule in ("none", "oldest", "overdue")}


if __name__ == "__main__":
    for p in ("steady", "bursty", "trickle"):
        for name, r in compare(p).items():
            print(f"{p:8s} {name:8s} bins={r.bins:5d} fill={r.mean_fill:.3f} "
                  f"wait={r.mean_wait_s * 1e3:8.2f} ms p99={r.p99_wait_s * 1e3:8.2f} ms makespan={r.makespan_s:.2f}s")
    for p in ("steady", "bursty", "trickle"):
        for rule, runs in compare_fairness(p).items():
            for name, r in runs.items():
                print(f"{p:8s} {rule:8s} {name:12s} fill={r.mean_fill:.3f} p99={r.p99_wait_s * 1e3:9.2f} ms "
                      f"max={r.max_wait_s * 1e3:9.2f} ms makespan={r.makespan_s:.2f}s")
