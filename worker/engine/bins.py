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
    # Host copies of the bin's cu_seqlens [B+1] and seq_lens [B] (a split then reads no device memory).
    cu: list[int] | None = field(default=None, repr=False)
    lens: list[int] | None = field(default=None, repr=False)


def split_bin(work: BinWork, seqs: list[Sequence]) -> list[tuple[BinWork, list[Sequence]]]:
    """Two bins of the first and second half of `seqs` (at least two), same device memory."""
    return list(zip(split_bin_at(work, seqs, len(seqs) // 2), (seqs[:len(seqs) // 2], seqs[len(seqs) // 2:])))


def split_bin_at(work: BinWork, seqs: list[Sequence], k: int) -> tuple[BinWork, BinWork]:
    """Bins of the first k of `seqs` and of the rest (0 < k < len(seqs)), same device memory."""
    if not 0 < k < len(seqs):
        raise ValueError(f"cannot split a bin of {len(seqs)} sequences after {k}")
    return _bin_part(work, seqs, 0, k), _bin_part(work, seqs, k, len(seqs))


def _bin_part(work: BinWork, seqs: list[Sequence], first: int, end: int) -> BinWork:
    """Sequences first..end-1 of a packed bin as a bin of their own: views of its device arrays
    (spans are contiguous), offsets rebased. Reads the device's cu_seqlens only without host copies."""
    db = work.device_bin
    all_cu = work.cu if work.cu is not None else db.cu_seqlens.tolist()
    all_lens = work.lens if work.lens is not None else db.seq_lens.tolist()
    cu = [c - all_cu[first] for c in all_cu[first:end + 1]]
    lens = all_lens[first:end]
    lo, hi = all_cu[first], all_cu[end]
    part = DeviceBin(db.input_ids[lo:hi], db.position_ids[lo:hi], db.cu_seqlens[first:end + 1] - lo,
                     db.seq_ids[first:end], db.seq_lens[first:end], db.last_token_index[first:end] - lo,
                     db.max_new_tokens[first:end], num_real_tokens=sum(lens), ready=getattr(db, "ready", None))
    spans = [b - a for a, b in zip(cu, cu[1:])]
    mine = seqs[first:end]
    max_k = max(lens) if not any(s.prefix_len for s in mine) else max(
        s.prefix_len + span for s, span in zip(mine, spans))  # as _take_work computes it
    return BinWork(part, max(spans), max_k, cu, lens)
