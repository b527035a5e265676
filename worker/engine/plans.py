"""What one engine step does: the plans the scheduler hands the engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from worker.engine.sequence import Sequence

if TYPE_CHECKING:
    from worker.engine.decode_batch import DecodeBatch


@dataclass
class PrefillBin:
    """Prefill a whole packed bin in one pass. `bin` is opaque here (the engine's device bin)."""

    bin: Any
    seqs: list[Sequence]
    is_part: bool = False  # a part of a larger bin cut to keep steps short

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens the prefill computes (a head the prefix cache served is not among them)."""
        return sum(s.prompt_len - s.prefix_len for s in self.seqs)


@dataclass
class PrefillChunk:
    """Prefill prompt[start:end] of one long sequence, attending to the rows already on its slab."""

    seq: Sequence
    start: int
    end: int

    @property
    def is_last(self) -> bool:
        return self.end == self.seq.prompt_len


@dataclass
class Decode:
    """One decode step: every active sequence advances one token."""

    seqs: list[Sequence]
    # Planned behind the decode step before it, before that step's tokens were read
    # (Scheduler.decode_ahead): its rows, one token on. None: the decode batch as it is.
    ahead: DecodeBatch | None = None


@dataclass
class MixedStep:
    """One forward that prefills a bin and advances every decoding sequence one token."""

    prefill: PrefillBin
    decode: Decode

    @property
    def seqs(self) -> list[Sequence]:
        return self.prefill.seqs + self.decode.seqs


@dataclass
class Fail:
    """Sequences that can never run (e.g. larger than the whole arena)."""

    seqs: list[Sequence]
    error: BaseException


Plan = PrefillBin | PrefillChunk | Decode | MixedStep | Fail
