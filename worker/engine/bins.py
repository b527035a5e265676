"""A packed bin as the engine holds it (its device arrays and attention bounds), and its split
into halves after an out-of-memory error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.dispatch import DeviceBin
from worker.engine.sequence import Sequence


@dataclass
class BinWork:
    device_bin: Any      # the dispatcher's DeviceBin
    max_seqlen_q: int    # longest span (with alignment pads)
    max_seqlen_k: int    # longest real sequence


def split_bin(work: BinWork, seqs: list[Sequence]) -> list[tuple[BinWork, list[Sequence]]]:
    """Two bins of the first and second half of `seqs` (at least two), same device memory."""
    half = len(seqs) // 2
    return [(_bin_part(work, seqs, 0, half), seqs[:half]), (_bin_part(work, seqs, half, len(seqs)), seqs[half:])]


def _bin_part(work: BinWork, seqs: list[Sequence], first: int, end: int) -> BinWork:
    """Sequences first..end-1 of a prefilled bin as a bin of their own: views of its device arrays
    (spans are contiguous), offsets rebased. Host reads of cu_seqlens: only after an out-of-memory error."""
    db = work.device_bin
    cu = db.cu_seqlens.tolist()
    lens = db.seq_lens.tolist()[first:end]
    lo, hi = cu[first], cu[end]
    part = DeviceBin(db.input_ids[lo:hi], db.position_ids[lo:hi], db.cu_seqlens[first:end + 1] - lo,
                     db.seq_ids[first:end], db.seq_lens[first:end], db.last_token_index[first:end] - lo,
                     db.max_new_tokens[first:end], num_real_tokens=sum(lens), ready=getattr(db, "ready", None))
    spans = [b - a for a, b in zip(cu[first:end], cu[first + 1:end + 1])]
    mine = seqs[first:end]
    max_k = max(lens) if not any(s.prefix_len for s in mine) else max(
        s.prefix_len + span for s, span in zip(mine, spans))  # as _take_work computes it
    return BinWork(part, max(spans), max_k)
