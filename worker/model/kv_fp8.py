"""FP8 KV tapes (`engine.kv_cache: fp8`): K and V stored as e4m3 codes with one fp32 scale per token and head.

A decode step reads every decoding sequence's whole context from the tapes; at large batches that
read is the step (bench/NOTES.md, 2026-12-05: decode attention 40 % of the SmolLM2 shape's GPU time
at the H100's memory rate). FP8 halves it, and the same memory holds twice the sequences.

One tape row (uint8, `Fp8Layout.row_bytes`) holds one token of one layer's K (or V):

    [head 0: D codes][head 1: D codes] ... [head Hkv-1: D codes][Hkv fp32 scales][pad to 16 bytes]

Each head's codes start 16-byte aligned (D is a multiple of 16), so kernels load them in 16-byte
vectors; the row stays one contiguous span, so slabs, the arena and the prefix cache's block copies
treat it as they treat a bf16 row. The scale is the head's amax / 448 for that token: a token or head
with outliers (Qwen2's K biases) keeps its own range instead of flattening the others'.

Writes go through one Triton launch per layer (quantise K and V, scatter to their rows); the
attention kernels (`decode_attention`, `tape_prefill`) read the codes and scales directly. The torch
functions here are the reference math and the CPU path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor

# The FP8 weights' per-row quantisation, applied per token and head: the same scale and codes.
from worker.model.fp8 import FP8, FP8_MAX, MIN_SCALE, quantize_rows, row_scale, scaled_codes

_ALIGN = 16


@dataclass(frozen=True)
class Fp8Layout:
    """Where a row's codes and scales lie, for `num_kv_heads` heads of `head_dim`."""

    num_kv_heads: int
    head_dim: int

    def __post_init__(self) -> None:
        if self.head_dim % _ALIGN:
            raise ValueError(f"an FP8 KV cache needs a head size divisible by {_ALIGN}; "
                             f"this model's is {self.head_dim}")

    @property
    def scale_offset(self) -> int:
        """Byte offset of head 0's scale in a row."""
        return self.num_kv_heads * self.head_dim

    @property
    def row_bytes(self) -> int:
        used = self.scale_offset + 4 * self.num_kv_heads
        return -(-used // _ALIGN) * _ALIGN


@dataclass(frozen=True)
class Fp8Tape:
    """One layer's K or V tape: `data` uint8 [rows, row_bytes] in `layout`; logically [rows, Hkv, D]."""

    data: Tensor
    layout: Fp8Layout

    @property
    def shape(self) -> tuple[int, int, int]:
        """The tape as attention sees it: [rows, Hkv, D]."""
        return self.data.shape[0], self.layout.num_kv_heads, self.layout.head_dim

    def dequantized(self, rows: Tensor | slice, dtype: torch.dtype) -> Tensor:
        """K or V [*rows' shape, Hkv, D] in `dtype` at `rows` (an index tensor or a slice)."""
        return unpack(self.data[rows], self.layout, dtype)


def quantize_heads(x: Tensor) -> tuple[Tensor, Tensor]:
    """x [..., Hkv, D] -> (codes e4m3 [..., Hkv, D], scale fp32 [..., Hkv]) with x ~= codes * scale."""
    codes, scale = quantize_rows(x.reshape(-1, x.shape[-1]))
    return codes.reshape(x.shape), scale.reshape(x.shape[:-1])


def pack(codes: Tensor, scale: Tensor, layout: Fp8Layout) -> Tensor:
    """codes [T, Hkv, D] e4m3 and scale [T, Hkv] fp32 -> rows uint8 [T, row_bytes]."""
    tokens = codes.shape[0]
    rows = torch.zeros((tokens, layout.row_bytes), dtype=torch.uint8, device=codes.device)
    rows[:, :layout.scale_offset] = codes.reshape(tokens, -1).view(torch.uint8)
    rows[:, layout.scale_offset:layout.scale_offset + 4 * layout.num_kv_heads] = \
        scale.float().contiguous().view(torch.uint8).reshape(tokens, -1)
    return rows


def unpack(rows: Tensor, layout: Fp8Layout, dtype: torch.dtype) -> Tensor:
    """rows uint8 [..., row_bytes] -> values [..., Hkv, D] in `dtype` (codes * scale, in fp32 first)."""
    lead = rows.shape[:-1]
    flat = rows.reshape(-1, layout.row_bytes)
    codes = flat[:, :layout.scale_offset].contiguous().view(FP8).float()
    codes = codes.reshape(-1, layout.num_kv_heads, layout.head_dim)
    scale = flat[:, layout.scale_offset:layout.scale_offset + 4 * layout.num_kv_heads].contiguous().view(torch.float32)
    return (codes * scale[:, :, None]).to(dtype).reshape(*lead, layout.num_kv_heads, layout.head_dim)


@triton.jit
def _write_kernel(k_ptr, v_ptr, rows_ptr, k_tape_ptr, v_tape_ptr, stride_kt, stride_kh, stride_vt, stride_vh,
                  row_bytes, HEADS: tl.constexpr, HEADS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                  FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    if tl.program_id(1) == 0:
        src, tape, stride_t, stride_h = k_ptr, k_tape_ptr, stride_kt, stride_kh
    else:
        src, tape, stride_t, stride_h = v_ptr, v_tape_ptr, stride_vt, stride_vh
    heads = tl.arange(0, HEADS_PAD)
    dims = tl.arange(0, HEAD_DIM)
    ok = heads < HEADS
    x = tl.load(src + token * stride_t + heads[:, None] * stride_h + dims[None, :], mask=ok[:, None],
                other=0.0).to(tl.float32)  # [Hkv, D]
    scale = row_scale(tl.max(tl.abs(x), axis=1), FP8_MAX, MIN_SCALE)  # [Hkv]
    codes = scaled_codes(x, scale[:, None], FP8_MAX).to(tl.float8e4nv)
    row = tape + tl.load(rows_ptr + token) * row_bytes
    tl.store(row.to(tl.pointer_type(tl.float8e4nv)) + heads[:, None] * HEAD_DIM + dims[None, :], codes,
             mask=ok[:, None])
    tl.store((row + HEADS * HEAD_DIM).to(tl.pointer_type(tl.float32)) + heads, scale, mask=ok)


def write(k_full: Tensor, v_full: Tensor, rows: Tensor, k: Tensor, v: Tensor, layout: Fp8Layout) -> None:
    """Quantise k, v [T, Hkv, D] per token and head and store them at tape rows `rows` (int64 [T]) of
    k_full, v_full (uint8 [rows, row_bytes]). One launch on CUDA; no host sync either way."""
    tokens = k.shape[0]
    if not tokens:
        return
    if k.is_cuda and k.stride(-1) == 1 and v.stride(-1) == 1:
        _write_kernel[(tokens, 2)](k, v, rows, k_full, v_full, k.stride(0), k.stride(1), v.stride(0), v.stride(1),
                                   layout.row_bytes, HEADS=layout.num_kv_heads,
                                   HEADS_PAD=triton.next_power_of_2(layout.num_kv_heads),
                                   HEAD_DIM=layout.head_dim, FP8_MAX=FP8_MAX, MIN_SCALE=MIN_SCALE, num_warps=4)
        return
    k_full.index_copy_(0, rows, pack(*quantize_heads(k), layout))
    v_full.index_copy_(0, rows, pack(*quantize_heads(v), layout))
