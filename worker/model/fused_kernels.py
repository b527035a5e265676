"""Triton kernels for a decoder layer's elementwise parts: one launch each, no tracing at start-up.

Each kernel computes in fp32 and rounds once to the model dtype; `fused.py` holds the eager reference
math they are checked against. They replace `torch.compile` of the same functions, which cost ~6 s of
tracing on every start (its caches skip code generation, not dynamo) and, at run time, a guard check
and wrapper on every call: ~40 % of a prefill forward's host time (bench/NOTES.md, issue 29).

No kernel takes the token count as an argument (it is the grid), so a new count never compiles a new
variant. Rows and heads may be strided views (q and k are column slices of the qkv projection's
output); the last dimension must be contiguous.

The `_fp8` variants of the norms and SiLU·up feed an FP8 projection (`fp8.Fp8Linear`): instead of the
row in the model dtype they write its FP8 codes and per-token scale, computed from that rounded row
exactly as `fp8.quantize_tokens` would, so the projection's input costs no extra launch or pass.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from worker.model.fp8 import FP8, FP8_MAX, MIN_SCALE, QuantizedActivation, row_scale, scaled_codes


@triton.jit
def _rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, scale_ptr, C, stride_x, stride_res, stride_out,
                     stride_res_out, eps, HAS_RESIDUAL: tl.constexpr, FP8_OUT: tl.constexpr,
                     FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < C
    dtype = x_ptr.dtype.element_ty  # the model dtype (out's too, unless it holds FP8 codes)
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:  # the sum is rounded to the stream's dtype before the norm, as the eager math does
        res = tl.load(res_ptr + row * stride_res + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + res.to(tl.float32)).to(res_out_ptr.dtype.element_ty)
        tl.store(res_out_ptr + row * stride_res_out + cols, x, mask=mask)
    x32 = x.to(tl.float32)
    inv = tl.rsqrt(tl.sum(x32 * x32, axis=0) / C + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    normed = (x32 * inv).to(dtype).to(tl.float32)  # rounded before the weight, as transformers does
    y = (normed * w).to(dtype)
    if FP8_OUT:  # the row as the model dtype holds it, quantised as quantize_tokens does (padding is 0)
        y32 = y.to(tl.float32)
        scale = row_scale(tl.max(tl.abs(y32), axis=0), FP8_MAX, MIN_SCALE)
        tl.store(out_ptr + row * stride_out + cols, scaled_codes(y32, scale, FP8_MAX).to(out_ptr.dtype.element_ty),
                 mask=mask)
        tl.store(scale_ptr + row, scale)
    else:
        tl.store(out_ptr + row * stride_out + cols, y, mask=mask)


def _row_major(x: Tensor) -> Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def _norm(x: Tensor, residual: Tensor | None, w: Tensor, eps: float,
          fp8_out: bool = False) -> tuple[Tensor | QuantizedActivation, Tensor | None]:
    """(rms_norm(x [+ residual]) or its FP8 codes and scales, x + residual or None): one launch, a row per program."""
    x = _row_major(x)
    tokens, channels = x.shape
    out = torch.empty((tokens, channels), dtype=FP8 if fp8_out else x.dtype, device=x.device)
    scale = torch.empty((tokens, 1), dtype=torch.float32, device=x.device) if fp8_out else out
    new_residual = None
    if residual is not None:
        residual = _row_major(residual)
        new_residual = torch.empty((tokens, channels), dtype=x.dtype, device=x.device)
    if tokens:
        block = triton.next_power_of_2(channels)
        res, res_out = (x, out) if residual is None else (residual, new_residual)
        _rms_norm_kernel[(tokens,)](x, res, w, out, res_out, scale, channels, x.stride(0), res.stride(0),
                                    out.stride(0), res_out.stride(0), eps, HAS_RESIDUAL=residual is not None,
                                    FP8_OUT=fp8_out, FP8_MAX=FP8_MAX, MIN_SCALE=MIN_SCALE, BLOCK=block,
                                    num_warps=8 if block >= 2048 else 4)
    return (QuantizedActivation(out, scale) if fp8_out else out), new_residual


def rms_norm(x: Tensor, w: Tensor, eps: float) -> Tensor:
    """x [T, C] -> [T, C]: normalised in fp32, cast back to x.dtype, scaled by w [C] (w.dtype == x.dtype)."""
    return _norm(x, None, w, eps)[0]


def add_rms_norm(x: Tensor, residual: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """(rms_norm(x + residual), x + residual) for x, residual [T, C], in one pass over both."""
    return _norm(x, residual, w, eps)


def rms_norm_fp8(x: Tensor, w: Tensor, eps: float) -> QuantizedActivation:
    """quantize_tokens(rms_norm(x, w, eps)) in one launch: codes [T, C] e4m3 and scales [T, 1], no bf16 row."""
    return _norm(x, None, w, eps, fp8_out=True)[0]


def add_rms_norm_fp8(x: Tensor, residual: Tensor, w: Tensor, eps: float) -> tuple[QuantizedActivation, Tensor]:
    """(quantize_tokens(rms_norm(x + residual)), x + residual) in one launch; the sum stays in x.dtype."""
    return _norm(x, residual, w, eps, fp8_out=True)


@triton.jit
def _rotate_heads(x_ptr, o_ptr, token, stride_t, stride_h, heads, c1, c2, s1, s2,
                  HALF: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    h = tl.arange(0, BLOCK_H)[:, None]
    d = tl.arange(0, BLOCK_D)[None, :]
    mask = (h < heads) & (d < HALF)
    src = x_ptr + token * stride_t + h * stride_h + d
    x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
    dst = o_ptr + token * heads * 2 * HALF + h * 2 * HALF + d  # the output is contiguous [T, heads, D]
    tl.store(dst, (x1 * c1 - x2 * s1).to(o_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + HALF, (x2 * c2 + x1 * s2).to(o_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_qk_kernel(q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, stride_qt, stride_qh, stride_kt,
                    stride_kh, stride_cos, stride_sin, heads_q, heads_k, HALF: tl.constexpr,
                    BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr, BLOCK_D: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    d = tl.arange(0, BLOCK_D)[None, :]
    dmask = d < HALF
    c1 = tl.load(cos_ptr + token * stride_cos + d, mask=dmask, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + token * stride_cos + HALF + d, mask=dmask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + token * stride_sin + d, mask=dmask, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + token * stride_sin + HALF + d, mask=dmask, other=0.0).to(tl.float32)
    _rotate_heads(q_ptr, q_out_ptr, token, stride_qt, stride_qh, heads_q, c1, c2, s1, s2, HALF, BLOCK_HQ, BLOCK_D)
    _rotate_heads(k_ptr, k_out_ptr, token, stride_kt, stride_kh, heads_k, c1, c2, s1, s2, HALF, BLOCK_HK, BLOCK_D)


def apply_rope_qk(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Rotated (q [T, H, D], k [T, Hkv, D]), contiguous, for cos/sin [T, 1, D] (half-split pairs)."""
    q, k, cos, sin = _row_major(q), _row_major(k), _row_major(cos), _row_major(sin)
    tokens, heads_q, dim = q.shape
    heads_k = k.shape[1]
    q_out = torch.empty((tokens, heads_q, dim), dtype=q.dtype, device=q.device)
    k_out = torch.empty((tokens, heads_k, dim), dtype=k.dtype, device=k.device)
    if tokens:
        half = dim // 2
        _rope_qk_kernel[(tokens,)](q, k, cos, sin, q_out, k_out, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                                   cos.stride(0), sin.stride(0), heads_q, heads_k, HALF=half,
                                   BLOCK_HQ=triton.next_power_of_2(heads_q), BLOCK_HK=triton.next_power_of_2(heads_k),
                                   BLOCK_D=triton.next_power_of_2(half), num_warps=4)
    return q_out, k_out


@triton.jit
def _silu_mul_at(gate_up_row, cols, inner):
    """silu(gate) * up in fp32 at `cols` of one token's [gate | up] row (0 past `inner`)."""
    mask = cols < inner
    gate = tl.load(gate_up_row + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_up_row + inner + cols, mask=mask, other=0.0).to(tl.float32)
    return gate * tl.sigmoid(gate) * up


@triton.jit
def _silu_mul_kernel(gate_up_ptr, out_ptr, inner, stride_in, stride_out, BLOCK: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    y = _silu_mul_at(gate_up_ptr + token * stride_in, cols, inner)
    tl.store(out_ptr + token * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=cols < inner)


@triton.jit
def _silu_mul_fp8_kernel(gate_up_ptr, q_ptr, scale_ptr, inner, stride_in, stride_q, FP8_MAX: tl.constexpr,
                         MIN_SCALE: tl.constexpr, BLOCK: tl.constexpr):
    # One program per token: the scale needs the whole row's max first (the 7B's is 18,944 wide), so a
    # first pass takes it and a second recomputes the row (its input again, mostly from L2) and writes codes.
    token = tl.program_id(0).to(tl.int64)
    row, q_row = gate_up_ptr + token * stride_in, q_ptr + token * stride_q
    cols = tl.arange(0, BLOCK)
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, inner, BLOCK):
        y = _silu_mul_at(row, start + cols, inner).to(gate_up_ptr.dtype.element_ty).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(y))
    scale = row_scale(tl.max(amax, axis=0), FP8_MAX, MIN_SCALE)
    for start in range(0, inner, BLOCK):
        y = _silu_mul_at(row, start + cols, inner).to(gate_up_ptr.dtype.element_ty).to(tl.float32)
        tl.store(q_row + start + cols, scaled_codes(y, scale, FP8_MAX).to(q_ptr.dtype.element_ty),
                 mask=start + cols < inner)
    tl.store(scale_ptr + token, scale)


_SILU_BLOCK = 1024
_SILU_FP8_BLOCK = 2048  # a block of gate and one of up per step, 8 warps


def silu_mul(gate_up: Tensor) -> Tensor:
    """gate_up [T, 2I] (gate then up) -> silu(gate) * up [T, I]."""
    gate_up = _row_major(gate_up)
    tokens, inner = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty((tokens, inner), dtype=gate_up.dtype, device=gate_up.device)
    if tokens:
        block = min(_SILU_BLOCK, triton.next_power_of_2(inner))
        _silu_mul_kernel[(tokens, triton.cdiv(inner, block))](gate_up, out, inner, gate_up.stride(0), out.stride(0),
                                                              BLOCK=block, num_warps=4)
    return out


def silu_mul_fp8(gate_up: Tensor) -> QuantizedActivation:
    """quantize_tokens(silu_mul(gate_up)) in one launch: codes [T, I] e4m3 and scales [T, 1], no bf16 row."""
    gate_up = _row_major(gate_up)
    tokens, inner = gate_up.shape[0], gate_up.shape[1] // 2
    codes = torch.empty((tokens, inner), dtype=FP8, device=gate_up.device)
    scale = torch.empty((tokens, 1), dtype=torch.float32, device=gate_up.device)
    if tokens:
        block = min(_SILU_FP8_BLOCK, triton.next_power_of_2(inner))
        _silu_mul_fp8_kernel[(tokens,)](gate_up, codes, scale, inner, gate_up.stride(0), codes.stride(0),
                                        FP8_MAX=FP8_MAX, MIN_SCALE=MIN_SCALE, BLOCK=block,
                                        num_warps=8 if block >= 2048 else 4)
    return QuantizedActivation(codes, scale)
