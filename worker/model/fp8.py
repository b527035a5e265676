"""FP8 weights for the decoder's linear layers (`engine.dtype: fp8`): quantised once at load.

Each projection of a layer (qkv, o, gate_up, down) keeps its weight as float8_e4m3fn with one fp32
scale per output row; each call quantises its input with one scale per token (`fused.quantize_fp8`)
and multiplies through `torch._scaled_mm`, which runs on the FP8 tensor cores of Ada and Hopper GPUs
and accumulates in fp32. The embedding, the norms, attention, the KV arena and the LM head stay in the
model dtype (bf16): the LM head's logits decide every token, and it is one matmul of ~30 per layer stack.
Row-wise scales keep one outlier row or token from flattening the rest, which a single per-tensor
scale would.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor, nn

from worker.model import fused

log = logging.getLogger(__name__)

FP8_CAPABILITY = (8, 9)  # Ada and Hopper (and later): FP8 tensor cores and torch._scaled_mm
_ALIGN = 16  # _scaled_mm wants both dimensions of the weight divisible by 16
PROJECTIONS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")


def quantize_rows(w: Tensor) -> tuple[Tensor, Tensor]:
    """w [N, K] -> (w8 [N, K] float8_e4m3fn, scale [N] fp32) with w ~= w8 * scale[:, None]."""
    w32 = w.float()
    scale = (w32.abs().amax(dim=-1) / fused.FP8_MAX).clamp(min=fused.FP8_MIN_SCALE)
    return (w32 / scale[:, None]).clamp(-fused.FP8_MAX, fused.FP8_MAX).to(fused.FP8), scale


class Fp8Linear(nn.Module):
    """y = x @ W.T + b with W in FP8 (per output row scales) and x quantised per token on each call."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight, scale = quantize_rows(linear.weight.detach())
        self.out_features, self.in_features = weight.shape
        self.out_dtype = linear.weight.dtype
        self.register_buffer("weight", weight)  # [N, K] e4m3, row-major: weight.t() is the column-major B
        self.register_buffer("weight_scale", scale[None, :].contiguous())  # [1, N] fp32
        self.bias = linear.bias  # model dtype, or None

    def forward(self, x: Tensor) -> Tensor:  # x [T, K] -> [T, N] in the model dtype
        x8, x_scale = fused.quantize_fp8(x)
        return torch._scaled_mm(x8, self.weight.t(), scale_a=x_scale, scale_b=self.weight_scale, bias=self.bias,
                                out_dtype=self.out_dtype)

    def dequantized(self) -> Tensor:
        """The weight as the matmul sees it, [N, K] fp32 (for checks)."""
        return self.weight.float() * self.weight_scale.t()

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, fp8"


def fp8_unsupported(device: torch.device) -> str | None:
    """Why FP8 weights cannot run on `device` (None: they can). CPU runs PyTorch's reference kernel (tests)."""
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
