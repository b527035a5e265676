"""Elementwise parts of a decoder layer: one Triton kernel each on CUDA, plain eager math elsewhere.

The eager versions are the reference math (RMSNorm accumulates in fp32, the weight multiplies in the
model dtype, as transformers does); `fused_kernels` computes the same in one launch instead of ~6,
rounding once to the model dtype. `TELESUM_COMPILE=0` in the environment, or
`set_compile_enabled(False)`, keeps CUDA eager too.

An op whose output feeds an FP8 projection (the norms into qkv and gate_up, SiLU·up into down) is told
so (`into=`); where the kernels run it then returns the projection's FP8 input, codes and per-token
scales (`fp8.QuantizedActivation`), instead of the row in the model dtype (`feeds_fp8` decides;
`fp8.set_fused_quantisation(False)` turns only this off). Elsewhere the projection quantises the row
itself with the same math (on an H100, bit for bit but for a few of the norm's codes: `fp8` says).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from worker.model import fp8, fused_kernels
from worker.model.fp8 import QuantizedActivation
from worker.settings.environment import COMPILE as COMPILE_ENV

log = logging.getLogger(__name__)


def rms_norm_eager(x: Tensor, w: Tensor, eps: float) -> Tensor:
    """x [T, C] -> [T, C] in x.dtype: normalised in fp32, cast back, then scaled by w [C]."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return w * x32.to(x.dtype)


def add_rms_norm_eager(x: Tensor, residual: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """(rms_norm(x + residual), x + residual); the sum is taken in the stream's dtype. x, residual [T, C]."""
    new_residual = x + residual
    return rms_norm_eager(new_residual, w, eps), new_residual


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [T, heads, D]; cos/sin [T, 1, D] (half-split rotation, as transformers does)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def apply_rope_qk_eager(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Rotary embedding on q [T, H, D] and k [T, Hkv, D] with cos/sin [T, 1, D]."""
    return rotate(q, cos, sin), rotate(k, cos, sin)


def silu_mul_eager(gate_up: Tensor) -> Tensor:
    """gate_up [T, 2I] (gate then up) -> silu(gate) * up [T, I]."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def rms_norm_fp8_eager(x: Tensor, w: Tensor, eps: float) -> QuantizedActivation:
    """The norm's output quantised per token, as an FP8 projection would: the reference of the fused kernel."""
    return QuantizedActivation(*fp8.quantize_rows(rms_norm_eager(x, w, eps)))


def add_rms_norm_fp8_eager(x: Tensor, residual: Tensor, w: Tensor, eps: float) -> tuple[QuantizedActivation, Tensor]:
    normed, new_residual = add_rms_norm_eager(x, residual, w, eps)
    return QuantizedActivation(*fp8.quantize_rows(normed)), new_residual


def silu_mul_fp8_eager(gate_up: Tensor) -> QuantizedActivation:
    return QuantizedActivation(*fp8.quantize_rows(silu_mul_eager(gate_up)))


@dataclass(frozen=True)
class FusedOps:
    rms_norm: Callable[[Tensor, Tensor, float], Tensor]
    add_rms_norm: Callable[[Tensor, Tensor, Tensor, float], tuple[Tensor, Tensor]]
    apply_rope_qk: Callable[[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]
    silu_mul: Callable[[Tensor], Tensor]
    # the same, quantised for an FP8 projection; the eager math unless given (bench/fused_kernels.py builds four)
    rms_norm_fp8: Callable[[Tensor, Tensor, float], QuantizedActivation] = rms_norm_fp8_eager
    add_rms_norm_fp8: Callable[[Tensor, Tensor, Tensor, float], tuple[QuantizedActivation, Tensor]] = \
        add_rms_norm_fp8_eager
    silu_mul_fp8: Callable[[Tensor], QuantizedActivation] = silu_mul_fp8_eager


EAGER = FusedOps(rms_norm_eager, add_rms_norm_eager, apply_rope_qk_eager, silu_mul_eager)
KERNELS = FusedOps(fused_kernels.rms_norm, fused_kernels.add_rms_norm, fused_kernels.apply_rope_qk,
                   fused_kernels.silu_mul, fused_kernels.rms_norm_fp8, fused_kernels.add_rms_norm_fp8,
                   fused_kernels.silu_mul_fp8)


class _Switch:
    """Which implementation CUDA tensors get; decided lazily on the first CUDA call, logged once."""

    def __init__(self) -> None:
        self.enabled = os.environ.get(COMPILE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
        self.logged = False

    def cuda_ops(self) -> FusedOps:
        if not self.logged:
            if self.enabled:
                log.info("fused elementwise ops: Triton kernels; set %s=0 to run eager", COMPILE_ENV)
            else:
                log.info("fused elementwise ops: eager on CUDA (%s=0 or disabled)", COMPILE_ENV)
            self.logged = True
        return KERNELS if self.enabled else EAGER


_switch = _Switch()


def set_compile_enabled(enabled: bool) -> None:
    """Turn the kernels on CUDA on or off for later calls (benchmarks compare both in one process)."""
    _switch.enabled = enabled
    _switch.logged = False


def compile_enabled() -> bool:
    return _switch.enabled


def ops_for(x: Tensor) -> FusedOps:
    """The implementation for tensors like `x`: the Triton kernels on CUDA when enabled, else the eager math."""
    return _switch.cuda_ops() if x.is_cuda else EAGER


def feeds_fp8(into: nn.Module | None, ops: FusedOps) -> bool:
    """Whether an op run by `ops` whose output only feeds `into` should hand it FP8 codes and scales: `into`
    is an FP8 projection, the Triton kernels run and the fused quantisation is on. Eager ops (CPU,
    TELESUM_COMPILE=0) hand over the row in the model dtype and the projection quantises it."""
    return ops is KERNELS and isinstance(into, fp8.Fp8Linear) and fp8.fused_quantisation_enabled()


def rms_norm(x: Tensor, w: Tensor, eps: float, into: nn.Module | None = None) -> Tensor | QuantizedActivation:
    """RMSNorm of x [T, C] with weight w [C] -> [T, C] (fp32 accumulation); quantised for `into`, the
    projection it feeds, when `feeds_fp8`."""
    ops = ops_for(x)
    return ops.rms_norm_fp8(x, w, eps) if feeds_fp8(into, ops) else ops.rms_norm(x, w, eps)


def add_rms_norm(x: Tensor, residual: Tensor, w: Tensor, eps: float,
                 into: nn.Module | None = None) -> tuple[Tensor | QuantizedActivation, Tensor]:
    """(normed, new_residual) = (rms_norm(x + residual), x + residual); x, residual [T, C]. The normed
    row quantised for `into` when `feeds_fp8`; the residual stays in the model dtype."""
    ops = ops_for(x)
    if feeds_fp8(into, ops):
        return ops.add_rms_norm_fp8(x, residual, w, eps)
    return ops.add_rms_norm(x, residual, w, eps)


def apply_rope_qk(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Rotated (q [T, H, D], k [T, Hkv, D]) for cos/sin [T, 1, D]."""
    return ops_for(q).apply_rope_qk(q, k, cos, sin)


def silu_mul(gate_up: Tensor, into: nn.Module | None = None) -> Tensor | QuantizedActivation:
    """silu(gate) * up from gate_up [T, 2I] -> [T, I]; quantised for `into` when `feeds_fp8`."""
    ops = ops_for(gate_up)
    return ops.silu_mul_fp8(gate_up) if feeds_fp8(into, ops) else ops.silu_mul(gate_up)
