"""Put checkpoint tensors (Hugging Face names) into a LlamaModel's fused parameters, checking completeness."""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator

import torch
from torch import nn

from worker.model.llama import LlamaModel

_QKV = re.compile(r"^layers\.(\d+)\.self_attn\.([qkv])_proj\.(weight|bias)$")
_GATE_UP = re.compile(r"^layers\.(\d+)\.mlp\.(gate|up)_proj\.(weight|bias)$")
_IGNORED = re.compile(r"(^|\.)rotary_emb\.inv_freq$")


_INIT_LOCK = threading.Lock()  # protects the classes' reset_parameters while one build skips them


@contextlib.contextmanager
def skipped_init() -> Iterator[None]:
    """Linear and Embedding constructors skip their random init: every value is overwritten by the
    checkpoint (or init_random). On the meta device the init computes nothing, but its first call
    imports torch's compiler stack (~1.2 s on CPU), which a CPU run never needs otherwise."""
    classes = (nn.Linear, nn.Embedding)
    with _INIT_LOCK:
        saved = [cls.__dict__["reset_parameters"] for cls in classes]
        for cls in classes:
            cls.reset_parameters = lambda self: None
        try:
            yield
        finally:
            for cls, method in zip(classes, saved):
                cls.reset_parameters = method


def materialize(model: LlamaModel, device, dtype: torch.dtype) -> LlamaModel:
    """Turn a meta-device model into uninitialised storage on `device` in `dtype` (no fp32 detour)."""
    model.to(dtype=dtype)
    # Module.to_empty's empty_like of a meta tensor runs torch's Python reference, whose first call
    # imports sympy and torch.fx's symbolic shapes (0.6 s of a CPU start); torch.empty needs neither.
    model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device))
    model.tie_weights()
    return model


class WeightSink:
    """Copies named checkpoint tensors into the model; `finish()` raises if any parameter was left unfilled."""

    def __init__(self, model: LlamaModel, source: str) -> None:
        self.model, self.source = model, source
        self.cfg = model.cfg
        self.params = dict(model.named_parameters(remove_duplicate=False))
        self.filled: set[str] = set()  # "param" or "param[part]" keys

    def put(self, name: str, tensor: torch.Tensor) -> None:
        """Store one tensor under its Hugging Face name ("model." prefix optional)."""
        name = name.removeprefix("model.")
        if _IGNORED.search(name):
            return
        if name == "lm_head.weight" and self.cfg.tie_word_embeddings:
            return  # a tied checkpoint may still store the (identical) head
        if m := _QKV.match(name):
            layer, part, kind = m.groups()
            offsets = {"q": 0, "k": self.cfg.q_size, "v": self.cfg.q_size + self.cfg.kv_size}
            size = self.cfg.q_size if part == "q" else self.cfg.kv_size
            self._copy(f"layers.{layer}.self_attn.qkv_proj.{kind}", tensor, offsets[part], size, part)
        elif m := _GATE_UP.match(name):
            layer, part, kind = m.groups()
            size = self.cfg.intermediate_size
            self._copy(f"layers.{layer}.mlp.gate_up_proj.{kind}", tensor, 0 if part == "gate" else size, size, part)
        else:
            self._copy(name, tensor, None, None, None)

    def _copy(self, target: str, tensor: torch.Tensor, offset: int | None, size: int | None, part: str | None) -> None:
        param = self.params.get(target)
        if param is None:
            raise ValueError(f"{self.source}: unexpected tensor for {target!r} (shape {tuple(tensor.shape)})")
        dest = param.data if offset is None else param.data.narrow(0, offset, size)
        if tuple(dest.shape) != tuple(tensor.shape):
            raise ValueError(f"{self.source}: tensor for {target}{'' if part is None else f'[{part}]'} has shape "
                             f"{tuple(tensor.shape)}, expected {tuple(dest.shape)}")
        dest.copy_(tensor)
        self.filled.add(target if part is None else f"{target}[{part}]")

    def finish(self) -> None:
        """Raise ValueError naming the parameters no tensor was given for."""
        expected: set[str] = set()
        for name, _ in self.model.named_parameters():  # duplicates (tied head) removed
            if name.endswith("qkv_proj.weight") or name.endswith("qkv_proj.bias"):
                expected |= {f"{name}[{p}]" for p in "qkv"}
            elif ".gate_up_proj." in name:
                expected |= {f"{name}[gate]", f"{name}[up]"}
            else:
                expected.add(name)
        missing = sorted(expected - self.filled)
        if missing:
            raise ValueError(f"{self.source}: no weights for {len(missing)} parameter(s): {', '.join(missing[:8])}")


def init_random(model: LlamaModel, seed: int, std: float = 0.02) -> None:
    """Random weights in place: normal(0, std) matrices, unit norms, zero biases (speed runs and tests)."""
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, std, generator=gen)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
            elif hasattr(module, "eps") and hasattr(module, "weight"):  # RMSNorm
                module.weight.fill_(1.0)
    model.tie_weights()
