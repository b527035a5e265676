"""Prefill attention over FP8 KV tapes: query spans against their slabs' codes, in one Triton launch.

FlashAttention-2 reads K/V in the model dtype only, so a pass that attends through an FP8 tape (a
prompt after a cached head, a bin's part in a mixed step) comes here; a prefill from zero still runs
FA2 on the pass's own bf16 K/V. Same contract as `attention.tape_attention`: sequence b's queries are
rows cu_seqlens_q[b]:cu_seqlens_q[b+1] and see its slab's rows slab_starts[b] + j for
j <= i + seqused_k[b] - span (the causal mask aligned bottom-right).

One program per (block of BLOCK_M queries, sequence, query head), online softmax over the visible
key blocks; the scales apply to the scores (K) and the probabilities (V), as in `decode_attention`.
The heads of a group read the same K/V rows, mostly from L2.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from worker.model.decode_attention import load_kv, scale_offset_of, softmax_step, tape_args
from worker.model.kv_fp8 import Fp8Tape

_LOG2E = 1.4426950408889634
BLOCK_M = 64
BLOCK_N = 64


@triton.jit
def _tape_prefill_kernel(q_ptr, k_ptr, v_ptr, o_ptr, cu_q_ptr, starts_ptr, used_ptr, scale_log2,
                         stride_qt, stride_qh, stride_kr, stride_kh, stride_vr, stride_vh, stride_ot, stride_oh,
                         scale_offset, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, FP8: tl.constexpr):
    m_block = tl.program_id(0)
    seq = tl.program_id(1)
    head = tl.program_id(2)
    kv_head = head // GROUP
    q_lo = tl.load(cu_q_ptr + seq).to(tl.int64)
    span = tl.load(cu_q_ptr + seq + 1) - tl.load(cu_q_ptr + seq)
    used = tl.load(used_ptr + seq)
    start = tl.load(starts_ptr + seq).to(tl.int64)
    offs = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = offs < span
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + (q_lo + offs)[:, None] * stride_qt + head * stride_qh + dims[None, :],
                mask=row_ok[:, None], other=0.0)  # [M, D]
    last_visible = offs + used - span  # query i sees keys j <= i + used - span
    # Keys past the block's last query's window are never visible; a block past the span does nothing.
    hi = tl.minimum(used, (m_block + 1) * BLOCK_M + used - span)
    hi = tl.where(m_block * BLOCK_M < span, hi, 0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    denom = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for n0 in range(0, hi, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        col_ok = cols < used
        k, k_scale = load_kv(k_ptr, start + cols, kv_head, dims, col_ok, stride_kr, stride_kh, scale_offset, FP8)
        v, v_scale = load_kv(v_ptr, start + cols, kv_head, dims, col_ok, stride_vr, stride_vh, scale_offset, FP8)
        if FP8:
            # Dequantised as loaded: in a 64-query block the codes' way into the dots' layout costs
            # more than bf16's (bench/NOTES.md 2026-12-06: 1.2-1.5x faster this way; decode gains nothing).
            k, k_scale = (k.to(tl.float32) * k_scale[:, None]).to(q.dtype), tl.full([BLOCK_N], 1.0, tl.float32)
            v, v_scale = (v.to(tl.float32) * v_scale[:, None]).to(q.dtype), tl.full([BLOCK_N], 1.0, tl.float32)
        visible = col_ok[None, :] & (cols[None, :] <= last_visible[:, None])
        m, denom, acc = softmax_step(q, k, k_scale, v, v_scale, visible, scale_log2, m, denom, acc)
    out = acc / tl.where(denom == 0.0, 1.0, denom)[:, None]
    tl.store(o_ptr + (q_lo + offs)[:, None] * stride_ot + head * stride_oh + dims[None, :],
             out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])


def tape_prefill_attention(q: torch.Tensor,           # [T, H, D]
                           k_tape: torch.Tensor | Fp8Tape,
                           v_tape: torch.Tensor | Fp8Tape,
                           cu_seqlens_q: torch.Tensor,  # int32 [B+1]
                           slab_starts: torch.Tensor,   # int32 [B]
                           seqused_k: torch.Tensor,     # int32 [B]
                           max_seqlen_q: int,
                           scale: float) -> torch.Tensor:  # [T, H, D]
    """Causal attention of packed query spans over their slabs (see the module docstring). No host sync."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_seqs = slab_starts.shape[0]
    group = num_heads // k_tape.shape[1]
    if q.stride(-1) != 1:
        raise ValueError("tape_prefill_attention needs the head dimension contiguous")
    (k, k_strides), (v, v_strides) = tape_args(k_tape), tape_args(v_tape)
    out = torch.empty_like(q)
    if q.shape[0] and num_seqs:
        _tape_prefill_kernel[(triton.cdiv(max_seqlen_q, BLOCK_M), num_seqs, num_heads)](
            q, k, v, out, cu_seqlens_q, slab_starts, seqused_k, scale * _LOG2E, q.stride(0), q.stride(1),
            *k_strides, *v_strides, out.stride(0), out.stride(1), scale_offset_of(k_tape), GROUP=group,
            HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, FP8=isinstance(k_tape, Fp8Tape),
            num_warps=4, num_stages=2)
    return out
