"""A packed bin as the engine holds it (its device arrays and attention bounds), and its split:
into halves after an out-of-memory error, or after its first k sequences to keep a step short."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from worker.dispatch import DeviceBin
from worker.engine.sequence import Sequence


@dataclass
class BinWork:
    device_bin: Any      # the dispatcher's DeviceBin
    max_seqlen_q: int    # longest span (with alignment pads)
    max_seqlen_k: int    # longest real sequence
    # Host copies of the bin's cu_seqlens [B+1] and seq_lens [B] (a split reads no device memory).
    cu: list[int] = field(repr=False)
    lens: list[int] = field(repr=False)

    @classmethod
    def of(cls, device_bin: Any, cu: list[int], lens: list[int], seqs: list[Sequence]) -> BinWork:
        """The bin of `seqs` with its attention bounds. After a cached head, each sequence sees its
        head and its whole span (pads included)."""
        spans = [b - a for a, b in zip(cu, cu[1:])]
        max_k = max(lens) if not any(s.prefix_len for s in seqs) else max(
            s.prefix_len + span for s, span in zip(seqs, spans))
        return cls(device_bin, max(spans), max_k, cu, lens)


def split_bin(work: BinWork, seqs: list[Sequence]) -> list[tuple[BinWork, list[Sequence]]]:
    """Two bins of the first and second half of `seqs` (at least two), same device memory."""
    half = len(seqs) // 2
    first, second = split_bin_at(work, seqs, half)
    return [(first, seqs[:half]), (second, seqs[half:])]


def split_bin_at(work: BinWork, seqs: list[Sequence], k: int) -> tuple[BinWork, BinWork]:
    """Bins of the first k of `seqs` and of the rest (0 < k < len(seqs)), same device memory."""
    if not 0 < k < len(seqs):
        raise ValueError(f"cannot split a bin of {len(seqs)} sequences after {k}")
    return _bin_part(work, seqs, 0, k), _bin_part(work, seqs, k, len(seqs))


def _bin_part(work: BinWork, seqs: list[Sequence], first: int, end: int) -> BinWork:
    """Sequences first..end-1 of a packed bin as a bin of their own: views of its device arrays
    (spans are contiguous), offsets rebased."""
    db = work.device_bin
    lo, hi = work.cu[first], work.cu[end]
    cu = [c - lo for c in work.cu[first:end + 1]]
    lens = work.lens[first:end]
    part = DeviceBin(db.input_ids[lo:hi], db.position_ids[lo:hi], db.cu_seqlens[first:end + 1] - lo,
                     db.seq_lens[first:end], db.last_token_index[first:end] - lo, num_real_tokens=sum(lens),
                     ready=getattr(db, "ready", None))
    return BinWork.of(part, cu, lens, seqs[first:end])
