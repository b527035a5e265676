"""Copies of whole blocks of KV rows across every layer's K and V tape: one Triton launch on CUDA.

The prefix cache copies a bin's cached heads into the new slabs (~10^4 blocks) and the prompts' new
blocks back into the cache. As torch ops that is an `index_select` and an `index_copy_` per tape:
120 launches for SmolLM2's 30 layers, each releasing and retaking the GIL the other threads want,
through generic index kernels that gather and scatter row by row: 14 % of the GPU loop's py-spy
samples at capacity on an H100, 7.6 ms of GPU time for 3,000 blocks. Here one program copies one
block of one tape, a contiguous span of `block_size × heads × head_dim` elements at the address the
tape table gives: 1.7 ms for the same blocks (bench/NOTES.md, 2026-12-05).
"""

from __future__ import annotations

import numpy as np
import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs use the torch ops
    triton = None

_CHUNK = 1024  # elements a program moves per loop turn (16 bytes a thread with 4 warps and 2-byte rows)

if triton is not None:
    @triton.jit
    def _copy_blocks_kernel(tapes_ptr, src_ptr, dst_ptr, row_elems, span, WORD: tl.constexpr, CHUNK: tl.constexpr):
        block = tl.program_id(0)
        tape = tl.load(tapes_ptr + tl.program_id(1)).to(tl.pointer_type(WORD))
        src = tape + tl.load(src_ptr + block) * row_elems  # int64 row starts: no overflow on large tapes
        dst = tape + tl.load(dst_ptr + block) * row_elems
        offsets = tl.arange(0, CHUNK)
        for start in range(0, span, CHUNK):
            idx = start + offsets
            mask = idx < span
            tl.store(dst + idx, tl.load(src + idx, mask=mask), mask=mask)

    # Bits are copied, not values: a word of the element's width.
    _WORDS = {1: tl.int8, 2: tl.int16, 4: tl.int32, 8: tl.int64}


class BlockCopier:
    """Copies blocks of `block_rows` rows within each of `tapes` (equal shapes [rows, ...], contiguous).

    `copy(src, dst)`: rows [src[i], src[i] + block_rows) to [dst[i], ...) in every tape, queued on the
    current stream (no host sync). A source block must not be another copy's destination in the same
    call (the cache's region and the slabs never overlap)."""

    def __init__(self, tapes: list[torch.Tensor], block_rows: int) -> None:
        first = tapes[0]
        if any(t.shape != first.shape or t.dtype != first.dtype or not t.is_contiguous() for t in tapes):
            raise ValueError("tapes must be contiguous and of one shape and dtype")
        self.tapes = tapes
        self.block_rows = block_rows
        self.device = first.device
        self.row_elems = first[0].numel()
        self.use_kernel = triton is not None and self.device.type == "cuda" and first.element_size() in _WORDS
        self._table = (torch.tensor([t.data_ptr() for t in tapes], dtype=torch.int64, device=self.device)
                       if self.use_kernel else None)

    @torch.inference_mode()
    def copy(self, src: list[int], dst: list[int]) -> None:
        if not src:
            return
        starts = torch.from_numpy(np.array([src, dst], dtype=np.int64))
        if self.device.type == "cuda":  # pinned: the upload does not wait for the queued GPU work
            starts = starts.pin_memory()
        starts = starts.to(self.device, non_blocking=True)
        if self.use_kernel:
            word = _WORDS[self.tapes[0].element_size()]
            _copy_blocks_kernel[(len(src), len(self.tapes))](
                self._table, starts[0], starts[1], self.row_elems, self.block_rows * self.row_elems,
                WORD=word, CHUNK=_CHUNK)
            return
        src_rows, dst_rows = (starts[:, :, None] + torch.arange(self.block_rows, device=self.device)).flatten(1)
        for tape in self.tapes:
            tape.index_copy_(0, dst_rows, tape.index_select(0, src_rows))
