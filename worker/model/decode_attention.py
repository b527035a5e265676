"""Decode attention over per-sequence KV slabs: a Triton kernel, one program per (sequence, K/V head).

FlashAttention-2's varlen kernel is built for prefill: a decode query (one token) still occupies a
128-row tile, so at large batches it spends its time on empty rows (measured on an H200, SmolLM2-135M
shape, batch 1,024, 1,100-row contexts: 14.9 ms per step, the KV read at 1.7 TB/s; Qwen2.5-7B shape
55 ms). Here each program loads the `group` query heads that share one K/V head as the rows of one
small tile (padded to 16 for the tensor cores) and streams that head's slab rows once, with the
online softmax, so the step is bound by reading the KV tape.

Contract (same as `tape_attention` for one query per sequence): q [B, H, D]; k_tape/v_tape
[rows, Hkv, D]; sequence b attends to rows slab_starts[b] .. slab_starts[b] + seqused_k[b] - 1.

Shared heads: when head_lens[b] > 0, the sequence's first head_lens[b] keys are read from rows
head_starts[b] .. instead of its slab, which holds a copy of the same K/V (a head served by the
prefix cache). Sequences whose prompts share a head then read the same rows in the same step, so a
head is fetched from memory about once per step and served to the others from L2.

FP8 tapes (`kv_fp8.Fp8Tape`): the same kernel reads each row's e4m3 codes and applies its per-head
scales to the scores (K) and to the probabilities (V), so a step reads half the bytes; measured, it
is no faster than over bf16 (1.0-1.6 TB/s against 2.2-2.8 on an H100; bench/NOTES.md 2026-12-06, and
2026-12-08 for a version with fp16 dots and no byte loads, not kept).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from worker.model.kv_fp8 import Fp8Tape

_LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class DecodeConfig:
    """The kernel's launch choices (`bench/kv_fp8.py --sweep` times them: on an H100 every choice came
    within 3 % of these for bf16 tapes and 10 % for FP8 ones, 2026-12-06)."""
    block_n: int = 64
    num_warps: int = 4
    num_stages: int = 2


DEFAULT_CONFIG = DecodeConfig()


def group_rows(group: int) -> int:
    """Rows of a program's query tile: the `group` heads sharing a KV head, padded for the tensor cores."""
    return max(16, triton.next_power_of_2(group))


@triton.jit
def load_kv(tape_ptr, tape_rows, kv_head, dims, ok, stride_r, stride_h, scale_offset, FP8: tl.constexpr):
    """Rows `tape_rows` [N] of one KV head: (values [N, D] in the tape's dtype or e4m3, scales [N] fp32;
    1.0 for a tape in the model dtype)."""
    at = tape_ptr + tape_rows[:, None] * stride_r + kv_head * stride_h + dims[None, :]
    if FP8:
        x = tl.load(at.to(tl.pointer_type(tl.float8e4nv)), mask=ok[:, None], other=0.0)
        s = tl.load((tape_ptr + tape_rows * stride_r + scale_offset).to(tl.pointer_type(tl.float32)) + kv_head,
                    mask=ok, other=0.0)
    else:
        x = tl.load(at, mask=ok[:, None], other=0.0)
        s = tl.full(tape_rows.shape, 1.0, tl.float32)
    return x, s


@triton.jit
def softmax_step(q, k, k_scale, v, v_scale, visible, scale_log2, m, denom, acc):
    """One key block of the online softmax: (m, denom, acc) after the keys `visible` [M, N] marks, for
    queries q [M, D] and keys k, v [N, D] with their scales [N] (1.0 for a tape in the model dtype),
    applied to the scores (K) and to the probabilities (V). Scores in log2 units."""
    s = tl.dot(q, tl.trans(k.to(q.dtype))) * (k_scale * scale_log2)[None, :]  # [M, N]
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing visible yet (or a pad row)
    p = tl.exp2(s - m_safe[:, None])
    alpha = tl.exp2(m - m_safe)
    denom = denom * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot((p * v_scale[None, :]).to(q.dtype), v.to(q.dtype))
    return m_new, denom, acc


@triton.jit
def _decode_kernel(q_ptr, k_ptr, v_ptr, o_ptr, starts_ptr, used_ptr, head_starts_ptr, head_lens_ptr, scale_log2,
                   stride_qb, stride_qh, stride_kr, stride_kh, stride_vr, stride_vh, stride_ob, stride_oh,
                   scale_offset, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                   BLOCK_N: tl.constexpr, FP8: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    start = tl.load(starts_ptr + seq).to(tl.int64)
    used = tl.load(used_ptr + seq)
    head_start = tl.load(head_starts_ptr + seq).to(tl.int64)
    head_len = tl.load(head_lens_ptr + seq)
    rows = tl.arange(0, GROUP_PAD)  # query heads kv_head * GROUP + rows
    dims = tl.arange(0, HEAD_DIM)
    row_ok = rows < GROUP
    q = tl.load(q_ptr + seq * stride_qb + (kv_head * GROUP + rows)[:, None] * stride_qh + dims[None, :],
                mask=row_ok[:, None], other=0.0)  # [G, D]
    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    denom = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    for n0 in range(0, used, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        col_ok = cols < used
        tape_rows = tl.where(cols < head_len, head_start + cols, start + cols)
        k, k_scale = load_kv(k_ptr, tape_rows, kv_head, dims, col_ok, stride_kr, stride_kh, scale_offset, FP8)
        v, v_scale = load_kv(v_ptr, tape_rows, kv_head, dims, col_ok, stride_vr, stride_vh, scale_offset, FP8)
        m, denom, acc = softmax_step(q, k, k_scale, v, v_scale, col_ok[None, :], scale_log2, m, denom, acc)
    out = acc / denom[:, None]
    tl.store(o_ptr + seq * stride_ob + (kv_head * GROUP + rows)[:, None] * stride_oh + dims[None, :],
             out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])


def decode_attention(q: torch.Tensor,          # [B, H, D]
                     k_tape: torch.Tensor | Fp8Tape,     # [rows, Hkv, D]
                     v_tape: torch.Tensor | Fp8Tape,     # [rows, Hkv, D]
                     slab_starts: torch.Tensor,  # int32 [B]
                     seqused_k: torch.Tensor,    # int32 [B], >= 1
                     scale: float,
                     head_starts: torch.Tensor | None = None,  # int32 [B]
                     head_lens: torch.Tensor | None = None,    # int32 [B], <= seqused_k
                     config: DecodeConfig = DEFAULT_CONFIG,
                     ) -> torch.Tensor:  # [B, H, D]
    """One query token per sequence against its slab's first seqused_k rows (the first head_lens
    of them read from head_starts on: see the module docstring). No host sync."""
    num_seqs, num_heads, head_dim = q.shape
    num_kv_heads = k_tape.shape[1]
    group = num_heads // num_kv_heads
    (k, k_strides), (v, v_strides), scale_offset = tape_args(k_tape), tape_args(v_tape), scale_offset_of(k_tape)
    if q.stride(-1) != 1:
        raise ValueError("decode_attention needs the head dimension contiguous")
    out = torch.empty_like(q)
    if head_lens is None:
        head_starts = head_lens = torch.zeros_like(slab_starts)
    _decode_kernel[(num_seqs, num_kv_heads)](
        q, k, v, out, slab_starts, seqused_k, head_starts, head_lens, scale * _LOG2E,
        q.stride(0), q.stride(1), *k_strides, *v_strides, out.stride(0), out.stride(1), scale_offset,
        GROUP=group, GROUP_PAD=group_rows(group), HEAD_DIM=head_dim, BLOCK_N=config.block_n,
        FP8=isinstance(k_tape, Fp8Tape), num_warps=config.num_warps,
        num_stages=config.num_stages)
    return out


def tape_args(tape: torch.Tensor | Fp8Tape) -> tuple[torch.Tensor, tuple[int, int]]:
    """(the tensor a kernel addresses, (row stride, head stride) in its elements) for a KV tape."""
    if isinstance(tape, Fp8Tape):
        return tape.data, (tape.layout.row_bytes, tape.layout.head_dim)
    if tape.stride(-1) != 1:
        raise ValueError("a KV tape needs the head dimension contiguous")
    return tape, (tape.stride(0), tape.stride(1))


def scale_offset_of(tape: torch.Tensor | Fp8Tape) -> int:
    """Byte offset of the scales in an FP8 tape's rows (0 for a tape in the model dtype)."""
    return tape.layout.scale_offset if isinstance(tape, Fp8Tape) else 0
