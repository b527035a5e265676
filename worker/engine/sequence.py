"""One generation request as the engine sees it: token ids in, token ids out, timestamps."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    """How to pick new tokens. temperature 0 = greedy; stop strings end generation (not included);
    repetition_penalty > 1 makes tokens this sequence already generated less likely (1 = off).
    max_new_tokens has no default: the operator's (`engine.max_new_tokens`) is the one."""

    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")


class SequenceStatus(enum.Enum):
    WAITING = "waiting"      # submitted, not yet prefilled
    PREFILLING = "prefilling"  # long-input lane: some chunks written
    DECODING = "decoding"
    FINISHED = "finished"
    FAILED = "failed"


@dataclass(eq=False)
class Sequence:
    """Mutable per-request state; only the engine thread changes it after submission."""

    seq_id: int
    prompt: list[int]
    params: SamplingParams
    status: SequenceStatus = SequenceStatus.WAITING
    output: list[int] = field(default_factory=list)
    slab_start: int = -1          # first KV-tape row of this sequence's slab; -1 = none
    num_prefilled: int = 0        # prompt tokens whose K/V are on the tape
    finish_reason: str | None = None  # "eos" | "length" | "stop"
    error: BaseException | None = None
    text: str | None = None       # decoded output, set when a stop string is checked
    prefix_len: int = 0           # prompt tokens whose K/V come from the prefix cache (not prefilled)
    prefix_hit: object | None = None  # the prefix cache's handle pinning them (PrefixHit), until cached
    prefix_in_slab: bool = False  # the cached head has been copied into the current slab
    # (first tape row, rows): a pinned copy of the slab's first rows that decode reads instead (the
    # cached head's leading blocks that lie in consecutive rows); (0, 0) = none.
    shared_head: tuple[int, int] = (0, 0)
    prefix_wait: object | None = None  # the prefix cache's Claim this sequence waits on (parked), if any
    parked: bool = False          # waiting on a claim, or woken and not yet queued (Engine)
    submitted_at: float = field(default_factory=time.perf_counter)
    prefill_started_at: float = 0.0
    first_token_at: float = 0.0
    finished_at: float = 0.0

    @property
    def prompt_len(self) -> int:
        return len(self.prompt)

    @property
    def slab_rows(self) -> int:
        """Rows this sequence owns from admission to finish: prompt + max new tokens."""
        return len(self.prompt) + self.params.max_new_tokens

    @property
    def num_cached(self) -> int:
        """Tokens whose K/V are written: the prompt and every output token but the last sampled one."""
        return self.num_prefilled + max(len(self.output) - 1, 0)

    @property
    def is_done(self) -> bool:
        return self.status in (SequenceStatus.FINISHED, SequenceStatus.FAILED)

    def timings(self) -> tuple[float, float, float]:
        """(queued, prefill, decode) seconds."""
        queued = max(self.prefill_started_at - self.submitted_at, 0.0)
        prefill = max(self.first_token_at - self.prefill_started_at, 0.0)
        decode = max(self.finished_at - self.first_token_at, 0.0)
        return queued, prefill, decode
