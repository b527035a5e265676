"""When a waiting bin, or a long input's next chunk, is prefilled while sequences decode, and how
much of a bin one step takes, from the measured run times of the steps before. Engine thread only."""

from __future__ import annotations

from collections import deque

import numpy as np

# A prefill step has a fixed host cost whatever its bin holds (~35-40 ms for a bin of 1-4 prompts,
# SmolLM2-135M shape on an H200, against 2-6 ms for a decode step of hundreds of sequences). Small
# bins admitted as soon as they came starved decode: at 20 % load 355 prefill steps ran beside 200
# decode steps in 15.7 s, so each token waited ~80 ms (bench/gpu_stream.py, 2026-12-01). While
# sequences decode, a bin under half the token budget therefore waits until decode steps have run
# this many times the last prefill's time, counting at most PREFILL_FIXED_COST_S of it (the part
# that does not grow with the bin: a 7B model's prefill of 22 prompts took 270 ms, nearly all of it
# GPU work that waiting does not save, and pacing on all of it held records for seconds at 80 %
# load); meanwhile later arrivals pack into the next, fuller bin.
DECODE_TIME_PER_PREFILL = 1.5
PREFILL_FIXED_COST_S = 0.05
# While sequences decode, a bin is prefilled in parts of at most as many prompt tokens as the last
# prefills took STEP_TARGET_S for (beyond PREFILL_FIXED_COST_S), each part its own step: a decoding
# sequence then waits about this long per token instead of a whole bin's prefill (a 7B model's bin
# of 13 prompts: 172 ms). A small model's prefill is mostly fixed cost, so its bins stay whole.
STEP_TARGET_S = 0.05
# While sequences decode, the long-input lane (chunks of a prompt longer than a bin: long records'
# pieces on a CPU, whose bins are small) runs at most this share of the engine's time: after a
# chunk, decode steps run for as long again before the next chunk. One token per chunk starved
# decoding on a 2-core CPU: a 2,048-token chunk of the embedded model took seconds, so an alarm
# behind a 50 MB line waited a chunk per token of its answer.
LONG_LANE_SHARE = 0.5
# Once prefills have been timed, a long input's chunk holds the prompt tokens that take about this
# long (at least MIN_CHUNK_TOKENS, at most a bin's budget): a record arriving behind it waits that
# long for its own prefill. A 2,048-token chunk of the embedded model took 10-40 s on 2 shared
# cores; a GPU prefills a bin's budget in far less, so its chunks stay whole.
CHUNK_TARGET_S = 2.0
MIN_CHUNK_TOKENS = 256
# The per-token cost is the median of the last prefills': one slow step (the first of a new shape
# compiles) must not cut the next bins into one-prompt steps.
_COST_WINDOW = 9


def is_small_bin(prompt_tokens: int, token_budget: int) -> bool:
    """A bin under half the budget: paced while sequences decode (a fuller one never waits)."""
    return 2 * prompt_tokens < token_budget


class PrefillPacer:
    """Run times of past steps -> pacing of small bins and the prompt tokens one step may prefill."""

    def __init__(self) -> None:
        self.step_target_s = STEP_TARGET_S
        self._last_prefill_s = 0.0          # run time of the last bin's prefill step
        self._decode_since_prefill_s = 0.0  # decode steps' run time since then
        self._costs: deque[float] = deque(maxlen=_COST_WINDOW)  # s per prompt token beyond the fixed cost
        self._decode_owed_s = 0.0  # decode time due before the long lane's next chunk
        self._chunk_costs: deque[float] = deque(maxlen=_COST_WINDOW)  # s per prompt token of a chunk

    def prefilled(self, seconds: float, prompt_tokens: int) -> None:
        """A bin's prefill step (alone or with decode rows) ran for `seconds`."""
        self._last_prefill_s, self._decode_since_prefill_s = seconds, 0.0
        self._costs.append(max(seconds - PREFILL_FIXED_COST_S, 0.0) / max(prompt_tokens, 1))

    def decoded(self, seconds: float) -> None:
        self._decode_since_prefill_s += seconds
        self._decode_owed_s = max(self._decode_owed_s - seconds, 0.0)

    def chunked(self, seconds: float, prompt_tokens: int) -> None:
        """A long input's chunk of `prompt_tokens` ran for `seconds`: decoding is owed its share
        before the next one."""
        self._decode_owed_s += seconds * (1.0 - LONG_LANE_SHARE) / LONG_LANE_SHARE
        self._chunk_costs.append(seconds / max(prompt_tokens, 1))

    def chunk_tokens(self, budget: int) -> int:
        """Prompt tokens of a long input's next chunk: those of about CHUNK_TARGET_S at the cost per
        token the last chunks (else the last bins) took, within [MIN_CHUNK_TOKENS, budget]."""
        costs = self._chunk_costs or self._costs
        cost = float(np.median(costs)) if costs else 0.0
        if not cost:
            return budget
        return min(budget, max(MIN_CHUNK_TOKENS, int(CHUNK_TARGET_S / cost)))

    def chunk_waits(self, decoding: bool) -> bool:
        """While sequences decode: the next chunk waits until decoding has had its share."""
        if not decoding:
            self._decode_owed_s = 0.0  # nobody to share with: what was owed lapses
        return self._decode_owed_s > 0.0

    def small_bin_waits(self, prompt_tokens: int, token_budget: int) -> bool:
        """While sequences decode: a bin under half the budget waits for decoding's share."""
        return (is_small_bin(prompt_tokens, token_budget)
                and self._decode_since_prefill_s
                < DECODE_TIME_PER_PREFILL * min(self._last_prefill_s, PREFILL_FIXED_COST_S))

    def step_prompt_tokens(self) -> int | None:
        """Prompt tokens one step beside decoding may prefill; None before any prefill was measured
        or when prefills cost no more than their fixed part (nothing to gain by cutting)."""
        if not self._costs:
            return None
        cost = float(np.median(self._costs))
        return max(1, round(self.step_target_s / cost)) if cost else None
