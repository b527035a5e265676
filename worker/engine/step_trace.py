"""Per-step timestamps of the engine loop, for finding where the time between decode steps goes.

Off by default: a benchmark appends a StepTrace's `observe` to `Engine.step_observers` and reads
`summary()` afterwards. Each engine step appends one row: when it began, how long taking work
(the dispatcher's `next_bin`, queued long inputs) took, what the step ran (prefill bin, prefill
chunk, decode, or nothing), how many sequences, how many tokens its forward computed (a prompt's
head served by the prefix cache is not computed), and how long running it took. Engine thread only.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from worker.engine.plans import Decode, MixedStep, Plan, PrefillBin, PrefillChunk

KINDS = ("idle", "prefill", "chunk", "decode", "fail", "mixed")


@dataclass
class StepTrace:
    """Rows of (start_s, take_work_s, kind index, num_seqs, run_s, tokens); `max_rows` bounds the memory."""

    max_rows: int = 2_000_000
    rows: list[tuple[float, float, int, int, float, int]] = field(default_factory=list)

    def add(self, start_s: float, take_work_s: float, kind: str, num_seqs: int, run_s: float,
            tokens: int = 0) -> None:
        if len(self.rows) < self.max_rows:
            self.rows.append((start_s, take_work_s, KINDS.index(kind), num_seqs, run_s, tokens))

    def observe(self, plan: Plan | None, started: float, taken: float, ended: float) -> None:
        """One step as the engine reports it (a `StepObserver`)."""
        if plan is None:
            self.add(started, ended - started, "idle", 0, 0.0)
        else:
            self.add(started, taken - started, _kind(plan), len(getattr(plan, "seqs", ())) or 1, ended - taken,
                     computed_tokens(plan))

    def clear(self) -> None:
        self.rows.clear()

    def summary(self, since_s: float = 0.0) -> dict:
        """Where the wall time went between one decode step and the next: the decode steps
        themselves, prefill steps and idle waits in between (medians and totals, seconds), and the
        tokens each kind of step computed (with the wall time, a rate to set against a FLOP peak)."""
        rows = [r for r in self.rows if r[0] >= since_s]
        if not rows:
            return {"steps": 0}
        wall = rows[-1][0] + rows[-1][1] + rows[-1][4] - rows[0][0]
        out: dict = {"steps": len(rows), "wall_s": wall}
        for i, kind in enumerate(KINDS):
            mine = [r for r in rows if r[2] == i]
            if not mine:
                continue
            out[kind] = {"steps": len(mine), "run_total_s": sum(r[4] for r in mine),
                         "take_work_total_s": sum(r[1] for r in mine),
                         "run_median_ms": 1e3 * statistics.median(r[4] for r in mine),
                         "median_seqs": statistics.median(r[3] for r in mine),
                         "tokens_total": sum(r[5] for r in mine)}
        decode = [r for r in rows if KINDS[r[2]] in ("decode", "mixed")]
        gaps = [b[0] - a[0] for a, b in zip(decode, decode[1:])]
        if gaps:
            between = [0] * len(gaps)  # prefill steps run between consecutive decode steps
            j = 0
            starts = [r[0] for r in decode]
            for r in rows:
                if KINDS[r[2]] in ("prefill", "chunk"):
                    while j + 1 < len(starts) and starts[j + 1] < r[0]:
                        j += 1
                    if j < len(between) and starts[j] <= r[0]:
                        between[j] += 1
            out["decode_interval_median_ms"] = 1e3 * statistics.median(gaps)
            out["decode_interval_p90_ms"] = 1e3 * sorted(gaps)[int(0.9 * (len(gaps) - 1))]
            out["decode_interval_p99_ms"] = 1e3 * sorted(gaps)[int(0.99 * (len(gaps) - 1))]
            out["share_of_decode_intervals_with_a_prefill"] = sum(b > 0 for b in between) / len(gaps)
        out["take_work_total_s"] = sum(r[1] for r in rows)
        return out


def computed_tokens(plan: Plan) -> int:
    """Tokens the step's forward computes: each prompt after the head the prefix cache served, a
    chunk's span, one a decoding sequence."""
    if isinstance(plan, PrefillBin):
        return plan.prompt_tokens
    if isinstance(plan, PrefillChunk):
        return plan.end - plan.start
    if isinstance(plan, Decode):
        return len(plan.seqs)
    if isinstance(plan, MixedStep):
        return computed_tokens(plan.prefill) + computed_tokens(plan.decode)
    return 0


def _kind(plan: Plan) -> str:
    return {PrefillBin: "prefill", PrefillChunk: "chunk", Decode: "decode", MixedStep: "mixed"}.get(type(plan), "fail")
