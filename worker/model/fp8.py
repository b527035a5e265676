"""FP8 weights for the decoder's linear layers (`engine.dtype: fp8`): quantised once at load.

Each projection of a layer (qkv, o, gate_up, down) keeps its weight as float8_e4m3fn with one fp32
scale per output row, and multiplies through `torch._scaled_mm`, which runs on the FP8 tensor cores of
Ada and Hopper GPUs. Its input is quantised with one scale per token. On CUDA the kernels that produce
the inputs of qkv, gate_up and down (the two RMSNorms and SiLU·up, `fused_kernels`) write those FP8
codes and scales themselves (`QuantizedActivation`), so the bf16 row is never written and read back;
o_proj's input (attention's output), and every input while the fused quantisation or the kernels are
off, is quantised on the call (`quantize_tokens`, a Triton kernel on CUDA at the memory bound;
torch.compile's version of the same math measured 4-9x slower on the 7B's activations). Both paths
compute the same math; on an H100 a few of the norm's codes still differ (2 of 29 million at 8,192
tokens, scales equal; `bench/fp8_fused_quant.py`, cause not found). The embedding, the norms,
attention, the KV arena and the LM head stay in the model dtype (bf16): the LM head's logits pick
every token. Row-wise scales keep one outlier row or token from flattening the others' precision,
which a single per-tensor scale would.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from torch import Tensor, nn

log = logging.getLogger(__name__)

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448: e4m3's largest finite value
MIN_SCALE = 1e-12  # an all-zero row keeps a finite scale

FP8_CAPABILITY = (8, 9)  # Ada and Hopper (and later): FP8 tensor cores and torch._scaled_mm
_ALIGN = 16  # _scaled_mm wants both dimensions of the weight divisible by 16
# Hopper's fast FP8 accumulation: the 7B's gate_up -9 %, down -4 % (+9 % records/s in one run), the
# real SmolLM2's logits within 0.05 points of top-1 agreement of the default (bench/NOTES.md, FP8).
FAST_ACCUM = True
PROJECTIONS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")


class QuantizedActivation(NamedTuple):
    """An activation already quantised per token, as `quantize_tokens` returns it: x ~= codes * scale."""

    codes: Tensor  # [T, K] float8_e4m3fn, row-major
    scale: Tensor  # [T, 1] fp32


_fused_quantisation = True


def set_fused_quantisation(enabled: bool) -> None:
    """Let the norm and SiLU kernels hand FP8 projections their codes (True, the default), or hand them the
    bf16 row to quantise on the call (False), for later forwards; benchmarks compare both in one process.
    A captured CUDA graph keeps what it was captured with."""
    global _fused_quantisation
    _fused_quantisation = enabled


def fused_quantisation_enabled() -> bool:
    return _fused_quantisation


def quantize_rows(w: Tensor) -> tuple[Tensor, Tensor]:
    """w [N, K] -> (w8 [N, K] float8_e4m3fn, scale [N, 1] fp32) with w ~= w8 * scale: one scale per row.

    The reference math, and the weights' quantisation at load (once, so eager)."""
    w32 = w.float()
    scale = (w32.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=MIN_SCALE)
    return (w32 / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


@triton.jit
def row_scale(amax, FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr):
    """A token's scale from its largest magnitude (fp32), as `quantize_rows`: max(amax / FP8_MAX, MIN_SCALE).
    Shared with the fused norm and SiLU kernels, so both paths compute the same math."""
    return tl.maximum(amax / FP8_MAX, MIN_SCALE)


@triton.jit
def scaled_codes(x, scale, FP8_MAX: tl.constexpr):
    """x / scale clamped to e4m3's range, still fp32: the caller casts it to the codes' dtype."""
    return tl.clamp(x / scale, -FP8_MAX, FP8_MAX)


@triton.jit
def _quantize_rows_kernel(x_ptr, q_ptr, scale_ptr, K, stride_x, stride_q, FP8_MAX: tl.constexpr,
                          MIN_SCALE: tl.constexpr, BLOCK: tl.constexpr, ONE_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row, q_row = x_ptr + row * stride_x, q_ptr + row * stride_q
    cols = tl.arange(0, BLOCK)
    if ONE_BLOCK:  # the row fits in registers: read once
        x = tl.load(x_row + cols, mask=cols < K, other=0.0).to(tl.float32)
        scale = row_scale(tl.max(tl.abs(x), axis=0), FP8_MAX, MIN_SCALE)
        tl.store(q_row + cols, scaled_codes(x, scale, FP8_MAX).to(q_ptr.dtype.element_ty), mask=cols < K)
    else:  # a long row (the down projection's input): the max first, then a second read from L2
        amax = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, K, BLOCK):
            x = tl.load(x_row + start + cols, mask=start + cols < K, other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.abs(x))
        scale = row_scale(tl.max(amax, axis=0), FP8_MAX, MIN_SCALE)
        for start in range(0, K, BLOCK):
            x = tl.load(x_row + start + cols, mask=start + cols < K, other=0.0).to(tl.float32)
            tl.store(q_row + start + cols, scaled_codes(x, scale, FP8_MAX).to(q_ptr.dtype.element_ty),
                     mask=start + cols < K)
    tl.store(scale_ptr + row, scale)


_MAX_BLOCK = 4096


def quantize_tokens(x: Tensor) -> tuple[Tensor, Tensor]:
    """x [T, K] -> (x8 [T, K] float8_e4m3fn, scale [T, 1] fp32), x ~= x8 * scale: one scale per token.
    The Triton kernel on CUDA, `quantize_rows` elsewhere."""
    return quantize_tokens_triton(x) if x.is_cuda else quantize_rows(x)


def quantize_tokens_triton(x: Tensor) -> tuple[Tensor, Tensor]:
    """`quantize_tokens`' Triton kernel on any device (CPU tensors through TRITON_INTERPRET=1, in checks)."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    tokens, k = x.shape
    x8 = torch.empty((tokens, k), dtype=FP8, device=x.device)
    scale = torch.empty((tokens, 1), dtype=torch.float32, device=x.device)
    if tokens:
        block = min(triton.next_power_of_2(k), _MAX_BLOCK)
        _quantize_rows_kernel[(tokens,)](x, x8, scale, k, x.stride(0), x8.stride(0), FP8_MAX=FP8_MAX,
                                         MIN_SCALE=MIN_SCALE, BLOCK=block, ONE_BLOCK=block >= k,
                                         num_warps=8 if block >= 2048 else 4)
    return x8, scale


class Fp8Linear(nn.Module):
    """y = x @ W.T + b with W in FP8 (per output row scales) and x quantised per token: on the call, or
    already by the kernel that produced it (a `QuantizedActivation`)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight, scale = quantize_rows(linear.weight.detach())
        self.out_features, self.in_features = weight.shape
        self.out_dtype = linear.weight.dtype
        self.register_buffer("weight", weight)  # [N, K] e4m3, row-major: weight.t() is the column-major B
        self.register_buffer("weight_scale", scale.t().contiguous())  # [1, N] fp32
        self.bias = linear.bias  # model dtype, or None

    def forward(self, x: Tensor | QuantizedActivation) -> Tensor:  # x [T, K] -> [T, N] in the model dtype
        x8, x_scale = x if isinstance(x, QuantizedActivation) else quantize_tokens(x)
        if not x8.is_cuda:  # the same products in fp32 (CPU _scaled_mm differs between torch versions)
            y = (x8.float() * x_scale) @ self.dequantized().t()
            return (y if self.bias is None else y + self.bias).to(self.out_dtype)
        return torch._scaled_mm(x8, self.weight.t(), scale_a=x_scale, scale_b=self.weight_scale, bias=self.bias,
                                out_dtype=self.out_dtype, use_fast_accum=FAST_ACCUM)

    def dequantized(self) -> Tensor:
        """The weight as the matmul sees it, [N, K] fp32 (the CPU path, checks)."""
        return self.weight.float() * self.weight_scale.t()

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, fp8"


def fp8_unsupported(device: torch.device) -> str | None:
    """Why FP8 weights cannot run on `device` (None: they can). CPU computes the same products in fp32 (checks)."""
    if device.type == "cpu":
        return None
    if device.type != "cuda":
        return f"FP8 weights run on NVIDIA GPUs (and on CPU, for checks); {device} is neither"
    capability = torch.cuda.get_device_capability(device)
    if capability < FP8_CAPABILITY:
        return (f"FP8 weights need an NVIDIA GPU of compute capability {FP8_CAPABILITY[0]}.{FP8_CAPABILITY[1]} or "
                f"newer (Ada, Hopper); {torch.cuda.get_device_name(device)} is {capability[0]}.{capability[1]}")
    return None


def quantize_model(model: nn.Module) -> int:
    """Replace every decoder layer's projections with Fp8Linear, freeing each bf16 weight as it goes.

    Returns how many were replaced; a projection whose sizes _scaled_mm cannot take stays in the
    model dtype (logged)."""
    replaced = 0
    for index, layer in enumerate(model.layers):
        for path in PROJECTIONS:
            owner_name, attr = path.split(".")
            owner = getattr(layer, owner_name)
            linear = getattr(owner, attr)
            if isinstance(linear, Fp8Linear):
                continue
            if linear.in_features % _ALIGN or linear.out_features % _ALIGN:
                log.warning("layer %d %s (%d -> %d) stays in %s: FP8 matmuls need sizes divisible by %d", index,
                            path, linear.in_features, linear.out_features, linear.weight.dtype, _ALIGN)
                continue
            setattr(owner, attr, Fp8Linear(linear))
            del linear
            replaced += 1
    return replaced
