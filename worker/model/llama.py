"""The Llama family (Llama 2/3.x, Qwen2/2.5, Mistral, SmolLM2) over packed, padding-free token streams.

Weights follow Hugging Face names without the "model." prefix, except that q/k/v and gate/up are
fused (`qkv_proj`, `gate_up_proj`): one matmul each. The loader does the fusing and every other
checkpoint quirk; `forward` knows only this layout. RMSNorm and rotary angles are computed in fp32.
Elementwise work goes through `worker.model.fused` (compiled kernels on CUDA); the residual add is
fused into the next RMSNorm, so a layer returns (its MLP output, the residual stream before it). The
norms and SiLU·up are told which projection they feed (`into=`): an FP8 one may get its input already
quantised (`fused.feeds_fp8`).
Nothing in a forward pass waits for the host: per-pass index tensors are derived once, on the device.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn

from worker.model import fused
from worker.model.attention import AttentionBackend, AttentionMetadata, tape_cu_seqlens_k
from worker.model.config import ModelConfig
from worker.model.fp8 import QuantizedActivation
from worker.model.kv_cache import KVCache


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor, into: nn.Module | None = None) -> Tensor | QuantizedActivation:  # x: [T, C]
        """Normed x, for `into` (the projection it feeds, if any)."""
        return fused.rms_norm(x, self.weight, self.eps, into)

    def add_forward(self, x: Tensor, residual: Tensor,
                    into: nn.Module | None = None) -> tuple[Tensor | QuantizedActivation, Tensor]:
        """(normed x + residual, x + residual); x, residual [T, C]; the normed row for `into`."""
        return fused.add_rms_norm(x, residual, self.weight, self.eps, into)


def rope_inv_freq(cfg: ModelConfig) -> Tensor:
    """Rotary inverse frequencies [head_dim / 2] in fp32, with linear or llama3 scaling applied."""
    dim = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64, device="cpu").float() / dim))
    scaling = cfg.rope_scaling or {}
    kind = scaling.get("rope_type", "default")
    if kind == "linear":
        return inv_freq / scaling["factor"]
    if kind == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_ctx = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old_ctx / low, inv_freq / factor, inv_freq)  # long waves: slowed down
        smooth = (old_ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        is_medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
        return torch.where(is_medium, smoothed, scaled)
    return inv_freq


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, backend: AttentionBackend) -> None:
        super().__init__()
        self.layer, self.backend = layer, backend
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_size, self.kv_size = cfg.q_size, cfg.kv_size
        self.scale = cfg.head_dim ** -0.5
        self.qkv_proj = nn.Linear(cfg.hidden_size, cfg.q_size + 2 * cfg.kv_size, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(cfg.q_size, cfg.hidden_size, bias=cfg.attention_out_bias)

    def forward(self, x: Tensor | QuantizedActivation, cos: Tensor, sin: Tensor, attn: AttentionMetadata,
                kv: KVCache, kv_rows: Tensor | None = None) -> Tensor:
        qkv = self.qkv_proj(x)  # x: [T, C], or its FP8 codes
        num_tokens = qkv.shape[0]
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = fused.apply_rope_qk(q.view(num_tokens, self.num_heads, self.head_dim),
                                   k.view(num_tokens, self.num_kv_heads, self.head_dim), cos, sin)  # [T, H|Hkv, D]
        v = v.reshape(num_tokens, self.num_kv_heads, self.head_dim)  # [T, Hkv, D]
        kv.write(self.layer, attn.slot_mapping, k, v, rows=kv_rows)
        o = self.backend.attend(q, k, v, kv.k[self.layer], kv.v[self.layer], attn, self.scale)  # [T, H, D]
        return self.o_proj(o.reshape(num_tokens, self.q_size))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.intermediate_size = cfg.intermediate_size
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=cfg.mlp_bias)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=cfg.mlp_bias)

    def forward(self, x: Tensor | QuantizedActivation) -> Tensor:  # x: [T, C], or its FP8 codes
        h = fused.silu_mul(self.gate_up_proj(x), into=self.down_proj)  # [T, 2I] -> [T, I]
        return self.down_proj(h)  # [T, C]


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, backend: AttentionBackend) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer, backend)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: Tensor, residual: Tensor | None, cos: Tensor, sin: Tensor, attn: AttentionMetadata,
                kv: KVCache, kv_rows: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(MLP output, residual stream before it); the stream entering is x + residual (x alone when None)."""
        qkv_proj, gate_up_proj = self.self_attn.qkv_proj, self.mlp.gate_up_proj  # what each norm feeds
        if residual is None:
            h, residual = self.input_layernorm(x, into=qkv_proj), x
        else:
            h, residual = self.input_layernorm.add_forward(x, residual, into=qkv_proj)  # [T, C] each
        h = self.self_attn(h, cos, sin, attn, kv, kv_rows)
        h, residual = self.post_attention_layernorm.add_forward(h, residual, into=gate_up_proj)
        return self.mlp(h), residual


class LlamaModel(nn.Module):
    def __init__(self, cfg: ModelConfig, backend: AttentionBackend) -> None:
        super().__init__()
        self.cfg, self.backend = cfg, backend
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, backend) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.inv_freq = rope_inv_freq(cfg)  # fp32 [D/2]; a plain attribute so meta-device builds keep it

    def set_backend(self, backend: AttentionBackend) -> None:
        """Use another attention backend from the next forward on (same weights; for checks and benchmarks)."""
        self.backend = backend
        for layer in self.layers:
            layer.self_attn.backend = backend

    def tie_weights(self) -> None:
        """Re-share lm_head with the embedding after the parameters were materialised (tied configs only)."""
        if self.cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def rope(self, position_ids: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos, sin [T, 1, D] in `dtype`, computed in fp32 from position_ids [T]."""
        if self.inv_freq.device != position_ids.device:
            self.inv_freq = self.inv_freq.to(position_ids.device)
        freqs = position_ids.float()[:, None] * self.inv_freq[None, :]  # [T, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]  # [T, 1, D]
        return emb.cos().to(dtype), emb.sin().to(dtype)

    @torch.inference_mode()
    def forward(self, input_ids: Tensor, position_ids: Tensor, attn: AttentionMetadata, kv: KVCache,
                logits_indices: Tensor) -> Tensor:
        """Logits float32 [B, vocab] at rows logits_indices [B] of the T packed tokens; writes K/V to `kv`."""
        x = self.embed_tokens(input_ids)  # [T, C]
        cos, sin = self.rope(position_ids, x.dtype)
        if not attn.is_prefill_from_zero and attn.cu_seqlens_k is None:
            attn = dataclasses.replace(attn, cu_seqlens_k=tape_cu_seqlens_k(attn.slab_starts, kv.capacity_rows))
        kv_rows = kv.rows_for(attn.slot_mapping)  # [T] once per pass, not per layer
        residual = None
        for layer in self.layers:
            x, residual = layer(x, residual, cos, sin, attn, kv, kv_rows)
        if residual is None:  # no layers
            h = self.norm(x[logits_indices])
        else:
            h = self.norm.add_forward(x[logits_indices], residual[logits_indices])[0]  # [B, C]
        return self.lm_head(h).float()  # [B, vocab]
