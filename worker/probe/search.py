"""The probe's search on numbers alone: the largest size that runs, and the budgets planned from it.

No torch here. A `Measurer` runs each trial (`worker.probe.measure` on CUDA; a memory model in the
tests) and says whether it ran and how much memory it took; `run_probe` decides what to try.

The steps, in order:
0. The decode graphs are captured and held through every later trial, as the worker holds them beside
   every prefill bin and the arena; the free memory is read with them held. (Left out, a bin sized
   without them runs out of memory once the worker captures its largest decode bucket.)
1. Two small prefill bins give the bytes a bin takes per token (its own KV rows + activations).
2. That line predicts the largest bin the free memory holds; a search around the prediction finds
   the largest bin that actually runs (`bin_limit`) in a few trials.
3. The bin budget keeps `BIN_MARGIN` below that limit (and half of that with prefill graphs on).
4. With prefill graphs on, the budget-sized bin's graphs are captured and held from here on: their
   memory pool holds a second copy of a bin's activations beside the eager ones (a bin of a bucket
   not captured, a long input's chunk). The KV arena gets the memory left beside one budget-sized
   bin's activations (and its graphs), less a headroom.
5. The bin and the whole arena run together in one full prefill pass (else the arena, then the
   bin, is made smaller and tried again).
6. Sequences: the arena's rows over (typical prompt + max new tokens), checked by one decode step
   of that many sequences (with sampling) beside the arena.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from worker.settings.budgets import GPU_MAX_SEQS_PER_BIN

ALIGN = 256                  # bin sizes tried are multiples of this (and of the dispatcher's 16)
SAMPLE_TOKENS = (8192, 32768)  # the two small bins that give bytes per token
MAX_BIN_TOKENS = 1 << 23     # the search stops here (8M tokens): int32 offsets and host slots stay small
BIN_MARGIN = 0.10            # the budget keeps 90 % of the largest bin that ran (the seed's rule)
PREFILL_GRAPHS_SHARE = 0.5   # of that with prefill graphs on: a bin's activations are held twice
HEADROOM_FRACTION = 0.03     # of the device's memory left free beside bin + arena: sampling, fragmentation
HEADROOM_MIN_BYTES = 1 << 30
REL_TOL = 0.01               # the bin search stops when its bracket is under 1 % wide
ARENA_RETRIES = 3            # full passes tried, each with one more headroom taken off the arena
TYPICAL_PROMPT_TOKENS = 1024  # the prompt length the sequence count assumes unless told
MAX_BIN_SHRINKS = 10         # then the bin gives up 5 % at a time, this many times at most


class ProbeError(RuntimeError):
    """The probe found no budget that runs (the model leaves too little memory), or cannot probe here."""


@dataclass(frozen=True)
class Trial:
    ok: bool           # ran without running out of memory
    peak_bytes: int    # peak memory over what was held before the trial (its KV arena included)
    seconds: float


class Measurer(Protocol):
    device_name: str
    total_bytes: int        # the device's memory
    resident_bytes: int     # held before the probe (the model's weights, mostly)
    kv_bytes_per_row: int   # one KV row over all layers, K and V
    max_context: int

    def free_bytes(self) -> int:
        """Memory the probe may still take, with the allocator's cache emptied."""

    def warm_up(self, seq_tokens: int) -> None:
        """One small full pass, so compilation and library workspaces are not counted in a trial."""

    def prefill(self, tokens: int, kv_rows: int, seq_tokens: int, *, full: bool) -> Trial:
        """A packed bin of `tokens` (sequences of `seq_tokens`) beside an arena of `kv_rows` rows.
        full=False may stop the pass once every layer shape has run (the peak is reached)."""

    def decode(self, num_seqs: int, context: int, kv_rows: int, max_new_tokens: int) -> Trial:
        """One decode step (with sampling) of `num_seqs` sequences at `context` cached rows each."""

    def hold_decode_graphs(self) -> int:
        """Capture the worker's decode graphs and hold them until released; the bytes they hold."""

    def hold_prefill_graphs(self, bin_tokens: int, bin_seqs: int) -> int:
        """Capture the prefill graphs of a bin of `bin_tokens` tokens and at most `bin_seqs` sequences
        (their logits buffer is one row per sequence), as the worker does at start-up, and hold
        them (instead of any held before) until released; the bytes they hold."""

    def release_graphs(self) -> None:
        """Free what `hold_decode_graphs` and `hold_prefill_graphs` hold."""


@dataclass(frozen=True)
class SearchResult:
    token_budget: int      # the prefill bin budget (tokens)
    kv_rows: int           # the KV arena's rows
    max_decode_seqs: int   # sequences that can be in flight (decoding) at once
    peak_bytes: int        # device memory allocated at the peak of the checks (model included)
    bin_limit: int         # the largest bin that ran beside only its own KV rows (0: bin given)
    free_bytes: int        # free device memory when the probe started, the decode graphs held
    decode_graph_bytes: int  # what the decode graphs hold beside everything else
    prefill_graph_bytes: int  # what the largest bin's prefill graphs hold (0: prefill graphs off)
    headroom_bytes: int    # left free beside the bin's activations and the arena
    seq_tokens: int        # the typical prompt length the sequences were sized for
    seconds: float
    warmup_seconds: float
    trials: list[dict] = field(default_factory=list)


def align_down(n: float, step: int) -> int:
    """n rounded down to a multiple of step, at least step."""
    return max(step, int(n) // step * step)


def largest_passing(fits: Callable[[int], bool], *, guess: int, floor: int, ceiling: int, step: int,
                    rel_tol: float = REL_TOL, spread: float = 0.04) -> tuple[int, int]:
    """(largest multiple of `step` in [floor, ceiling] for which `fits` holds, number of calls).

    `fits` must be monotone: true up to a boundary, false above it. `floor` is taken to fit and is
    not tried (0 = nothing is known to fit). The search tries `guess` first, steps outward by a
    spread that doubles each time until the boundary is bracketed, then bisects until the bracket
    is under `rel_tol` of its lower end (or one step). A good guess costs a handful of calls.
    """
    if floor > ceiling:
        raise ValueError(f"floor {floor} is above ceiling {ceiling}")
    calls = 0

    def test(n: int) -> bool:
        nonlocal calls
        calls += 1
        return fits(n)

    def down(n: float) -> int:
        return int(n) // step * step

    lo, hi = floor, ceiling + step  # lo fits; hi is treated as failing
    x = min(max(down(guess), lo + step), down(ceiling))
    if x <= lo:
        return lo, 0
    width = spread
    if test(x):
        lo = x
        while lo < ceiling:
            x = min(down(ceiling), max(lo + step, down(lo * (1 + width))))
            if x <= lo:
                break
            if not test(x):
                hi = x
                break
            lo, width = x, width * 2
    else:
        hi = x
        while True:
            x = down(hi / (1 + width))
            if x <= lo:
                break
            if test(x):
                lo = x
                break
            hi, width = x, width * 2
    while hi - lo > step and hi - lo > rel_tol * max(lo, step):
        mid = down((lo + hi) // 2)
        if mid <= lo:
            mid = lo + step
        if mid >= hi:
            break
        if test(mid):
            lo = mid
        else:
            hi = mid
    return lo, calls


def fit_line(points: list[tuple[int, int]]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of bytes over tokens for two or more (tokens, bytes) points."""
    if len({x for x, _ in points}) < 2:
        raise ValueError("a line needs two distinct sizes")
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - slope * mx, slope


def headroom_for(total_bytes: int) -> int:
    return max(HEADROOM_MIN_BYTES, int(HEADROOM_FRACTION * total_bytes))


def kv_rows_beside(free_bytes: int, bin_pass_bytes: int, kv_bytes_per_row: int, headroom_bytes: int) -> int:
    """Rows of an arena that fit beside a bin whose pass (without its own rows) takes `bin_pass_bytes`
    (the tape's one scratch row included)."""
    return max(0, (free_bytes - bin_pass_bytes - headroom_bytes) // kv_bytes_per_row - 1)


def slab_rows(bin_tokens: int, seq_tokens: int, max_new_tokens: int) -> int:
    """KV rows the slabs of one full bin of `seq_tokens`-token prompts take."""
    return bin_tokens + -(-bin_tokens // seq_tokens) * max_new_tokens


def run_probe(m: Measurer, *, max_new_tokens: int, typical_prompt_tokens: int = TYPICAL_PROMPT_TOKENS,
              bin_tokens: int | None = None, sample_tokens: tuple[int, int] = SAMPLE_TOKENS,
              prefill_graphs: bool = False, bin_seqs: int = GPU_MAX_SEQS_PER_BIN,
              log: Callable[[str], None] = lambda _: None) -> SearchResult:
    """Find the budgets (steps in the module docstring). bin_tokens given: only steps 0 and 4-6 for it.
    prefill_graphs: the worker will replay bins' prefills from CUDA graphs (TELESUM_PREFILL_GRAPHS),
    for bins of at most `bin_seqs` sequences (engine.max_seqs_per_bin)."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    started = time.perf_counter()
    graph_bytes = m.hold_decode_graphs()
    try:
        return _search(m, graph_bytes, started, max_new_tokens=max_new_tokens, typical_prompt_tokens=typical_prompt_tokens,
                       bin_tokens=bin_tokens, sample_tokens=sample_tokens, prefill_graphs=prefill_graphs,
                       bin_seqs=bin_seqs, log=log)
    finally:
        m.release_graphs()


def _search(m: Measurer, graph_bytes: int, started: float, *, max_new_tokens: int, typical_prompt_tokens: int,
            bin_tokens: int | None, sample_tokens: tuple[int, int], prefill_graphs: bool, bin_seqs: int,
            log: Callable[[str], None]) -> SearchResult:
    """Steps 1-6, the decode graphs (`graph_bytes`) held."""
    trials: list[dict] = []
    seq = max(16, min(typical_prompt_tokens, m.max_context - max_new_tokens))
    per_row = m.kv_bytes_per_row

    def prefill(tokens: int, kv_rows: int, *, full: bool, why: str) -> Trial:
        t = m.prefill(tokens, kv_rows, seq, full=full)
        trials.append({"kind": "prefill", "why": why, "tokens": tokens, "kv_rows": kv_rows, "full": full,
                       "ok": t.ok, "peak_bytes": t.peak_bytes, "seconds": round(t.seconds, 4)})
        log(f"prefill {tokens:,} tokens beside {kv_rows:,} KV rows ({why}): "
            f"{'ok' if t.ok else 'out of memory'}, peak {t.peak_bytes / 2**30:.2f} GiB, {t.seconds:.2f} s")
        return t

    m.warm_up(seq)
    warmup_s = time.perf_counter() - started
    free = m.free_bytes()
    headroom = headroom_for(m.total_bytes)
    bin_limit = 0
    if bin_tokens is None:
        points: list[tuple[int, int]] = []
        for n in (align_down(max(size, k * seq), ALIGN) for size, k in zip(sample_tokens, (1, 4))):
            while n >= seq:
                t = prefill(n, n, full=False, why="bytes per token")
                if t.ok:
                    points.append((n, t.peak_bytes))
                    break
                n = align_down(n // 2, 16)
        if len({x for x, _ in points}) < 2:
            raise ProbeError(f"{m.device_name}: a prefill bin of {seq} tokens does not fit beside the model "
                             f"({free / 2**30:.1f} GiB free)")
        intercept, slope = fit_line(points)
        guess = (free - intercept) / slope if slope > 0 else MAX_BIN_TOKENS
        floor = max(x for x, _ in points) // ALIGN * ALIGN
        bin_limit, _ = largest_passing(
            lambda n: prefill(n, n, full=False, why="largest bin").ok,
            guess=int(guess), floor=floor, ceiling=MAX_BIN_TOKENS, step=ALIGN)
        bin_tokens = align_down(bin_limit * (1 - BIN_MARGIN) * (PREFILL_GRAPHS_SHARE if prefill_graphs else 1),
                                ALIGN)
    elif bin_tokens < 1:
        raise ValueError(f"bin_tokens must be >= 1, got {bin_tokens}")

    # Steps 4-5. The bin's own pass, without its rows, is what the arena must leave room for; the
    # arena must hold a full bin's slabs (prompts + max_new_tokens each), and both must run together.
    # What does not fit costs the arena a headroom's worth of rows, then the bin 5 % of its tokens.
    verify = None
    prefill_graph_bytes = 0
    for _ in range(MAX_BIN_SHRINKS + 1):
        if prefill_graphs:  # those of this bin, replacing a larger one's
            prefill_graph_bytes = m.hold_prefill_graphs(bin_tokens, bin_seqs)
            log(f"prefill graphs of a {bin_tokens:,}-token bin hold {prefill_graph_bytes / 2**30:.2f} GiB")
        t = prefill(bin_tokens, bin_tokens, full=False, why="the budget's activations")
        if t.ok:
            bin_pass = t.peak_bytes - (bin_tokens + 1) * per_row  # the tape has one scratch row
            kv_rows = kv_rows_beside(free - prefill_graph_bytes, bin_pass, per_row, headroom)
            for _ in range(ARENA_RETRIES + 1):
                if kv_rows < slab_rows(bin_tokens, seq, max_new_tokens):
                    break
                verify = prefill(bin_tokens, kv_rows, full=True, why="bin and arena together")
                if verify.ok:
                    break
                kv_rows -= headroom // per_row
            if verify is not None and verify.ok:
                break
        if bin_limit == 0 or bin_tokens <= seq:
            break
        bin_tokens = align_down(bin_tokens * 0.95, ALIGN)
    if verify is None or not verify.ok:
        raise ProbeError(f"{m.device_name}: a bin of {bin_tokens:,} tokens and its KV slabs do not fit "
                         f"beside the model ({free / 2**30:.1f} GiB free)")

    context = seq + max_new_tokens - 1
    bound = kv_rows // (context + 1)

    def decodes(b: int) -> bool:
        t = m.decode(b, context, kv_rows, max_new_tokens)
        trials.append({"kind": "decode", "why": "decode batch", "num_seqs": b, "context": context,
                       "kv_rows": kv_rows, "ok": t.ok, "peak_bytes": t.peak_bytes, "seconds": round(t.seconds, 4)})
        log(f"decode {b:,} sequences beside {kv_rows:,} KV rows: {'ok' if t.ok else 'out of memory'}")
        decode_peak[b] = t.peak_bytes
        return t.ok

    decode_peak: dict[int, int] = {}
    max_seqs, _ = largest_passing(decodes, guess=bound, floor=0, ceiling=bound, step=1)
    if max_seqs < 1:
        raise ProbeError(f"{m.device_name}: not one sequence of {context + 1} rows decodes beside the arena")
    peak = (m.resident_bytes + graph_bytes + prefill_graph_bytes
            + max(verify.peak_bytes, decode_peak.get(max_seqs, 0)))
    return SearchResult(token_budget=bin_tokens, kv_rows=kv_rows, max_decode_seqs=max_seqs, peak_bytes=peak,
                        bin_limit=bin_limit, free_bytes=free, decode_graph_bytes=graph_bytes,
                        prefill_graph_bytes=prefill_graph_bytes,
                        headroom_bytes=headroom, seq_tokens=seq,
                        seconds=time.perf_counter() - started, warmup_seconds=warmup_s, trials=trials)
