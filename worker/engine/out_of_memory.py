"""Nothing is lost to an out-of-memory error: the step's work is queued again in smaller pieces.

A bin is retried as two bins of half its sequences, down to one; a long input's chunk at half its
size; a mixed step's bin beside at most half as many decode rows (then apart). A decode step is
split: its rows run in passes of half as many (from then on), down to one row, which is retried a
few times (memory freed by finishing sequences may let it run). Only a sequence that fails even
alone in the smallest piece fails, with OutOfMemory. Engine thread only.
"""

from __future__ import annotations

import logging

import torch

from worker.engine.bins import split_bin
from worker.engine.plans import Decode, MixedStep, Plan, PrefillBin
from worker.engine.scheduler import Scheduler
from worker.engine.sequence import Sequence

log = logging.getLogger(__name__)

MAX_DECODE_OOM_RETRIES = 3


def is_out_of_memory(exc: BaseException) -> bool:
    """The CUDA allocator's OutOfMemoryError, or an allocation failure that reached Python as a RuntimeError."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("CUDA out of memory" in text or "CUBLAS_STATUS_ALLOC_FAILED" in text)


class OutOfMemoryRecovery:
    """The smaller pieces a step that ran out of memory is retried in, and the decode pass size."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.decode_pass_rows: int | None = None  # rows per decode pass after a split; None = all
        self.events = 0  # steps that ran out of memory since start (read from any thread: an int)
        self._decode_ooms = 0  # consecutive decode steps that ran out of memory one row at a time

    def step_ran(self) -> None:
        """A step ran without running out of memory."""
        self._decode_ooms = 0

    def recover(self, plan: Plan, seqs: list[Sequence], reason: str = "") -> list[Sequence]:
        """After `plan` (over `seqs`) ran out of GPU memory: its work is queued again in smaller
        pieces. Returns the sequences that cannot be made smaller: the caller fails them. `reason`,
        the allocator's message (what was asked for, what was free, what was reserved but unused),
        ends each warning: it tells a budget too tight from fragmentation."""
        self.events += 1
        reason = f": {reason}" if reason else ""
        if isinstance(plan, MixedStep):  # the bin again, beside at most half as many decode rows from now on
            self.scheduler.max_mixed_rows = len(plan.decode.seqs) // 2
            self.scheduler.requeue_split(plan.prefill, [(plan.prefill.bin, plan.prefill.seqs)])
            log.warning("a mixed step (a bin of %d sequences beside %d decoding) ran out of GPU memory; "
                        "bins are prefilled beside at most %d decoding sequences from now on (else apart)%s",
                        len(plan.prefill.seqs), len(plan.decode.seqs), self.scheduler.max_mixed_rows, reason)
            return []
        if isinstance(plan, Decode):
            rows = min(self.decode_pass_rows or len(seqs), len(seqs))
            if rows > 1:  # split: the same tokens in passes of half as many rows, and so on
                self.decode_pass_rows = rows // 2
                self.scheduler.max_mixed_rows = 0  # a mixed step would carry every row again
                log.warning("decode step of %d sequences ran out of GPU memory; running it in passes of %d%s",
                            len(seqs), self.decode_pass_rows, reason)
                return []
            self._decode_ooms += 1
            if self._decode_ooms <= MAX_DECODE_OOM_RETRIES:
                log.warning("decode step of %d sequences ran out of GPU memory one row at a time; retrying "
                            "(%d/%d)%s", len(seqs), self._decode_ooms, MAX_DECODE_OOM_RETRIES, reason)
                return []
            return list(seqs)
        if isinstance(plan, PrefillBin) and len(seqs) > 1:
            parts = split_bin(plan.bin, seqs)
            self.scheduler.requeue_split(plan, parts)
            log.warning("a bin of %d sequences ran out of GPU memory; retrying it as bins of %d and %d%s",
                        len(seqs), len(parts[0][1]), len(parts[1][1]), reason)
            return []
        log.warning("%s of %d sequence(s) ran out of GPU memory; retrying in smaller pieces%s",
                    type(plan).__name__, len(seqs), reason)
        return self.scheduler.retry_smaller(plan)

