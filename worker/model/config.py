"""ModelConfig: the one description of a Llama-family checkpoint that the model and engine read."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

ARCHS = ("llama", "qwen2", "mistral")
ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True)
class ModelConfig:
    arch: str  # "llama" | "qwen2" | "mistral"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None  # None, or {"rope_type": "linear" | "llama3", ...} without rope_theta
    max_position_embeddings: int  # usable context; capped at a sliding window (see from_hf_config)
    tie_word_embeddings: bool
    attention_bias: bool  # bias on q/k/v projections
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    attention_out_bias: bool = False  # bias on o_proj (Llama's attention_bias covers it; Qwen2's does not)
    mlp_bias: bool = False

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"unsupported model arch {self.arch!r}; supported: {', '.join(ARCHS)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        rope_type = (self.rope_scaling or {}).get("rope_type", "default")
        if rope_type not in ROPE_TYPES:
            raise ValueError(f"unsupported rope scaling {rope_type!r}; supported: {', '.join(ROPE_TYPES)}")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def kv_bytes_per_row(self, element_size: int) -> int:
        """Bytes one KV-tape row takes over all layers (K and V) for a dtype of `element_size` bytes."""
        return 2 * self.num_layers * self.kv_size * element_size

    @classmethod
    def from_hf_config(cls, cfg: dict) -> ModelConfig:
        """Build from a Hugging Face config.json dict (transformers 4 or 5 layout); raises ValueError on what we cannot run."""
        model_type = cfg.get("model_type")
        if model_type not in ARCHS:
            raise ValueError(f"unsupported model_type {model_type!r} in config.json; supported: {', '.join(ARCHS)}")
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {cfg['hidden_act']!r}; only 'silu' is implemented")
        num_heads = cfg["num_attention_heads"]
        rope_theta, rope_scaling = _rope_from_hf(cfg)
        max_pos = int(cfg.get("max_position_embeddings", 4096))
        window = _sliding_window(cfg, model_type)
        if window is not None and window < max_pos:
            # Attention is implemented without a window, so it is exact only up to the window's length.
            log.info("sliding window %d < context %d: capping the usable context at %d", window, max_pos, window)
            max_pos = window
        eos = cfg.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, (list, tuple)) else (() if eos is None else (int(eos),))
        if model_type == "qwen2":
            qkv_bias, out_bias = True, False
        else:
            qkv_bias = out_bias = bool(cfg.get("attention_bias", False))
        return cls(
            arch=model_type,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=cfg.get("num_key_value_heads") or num_heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // num_heads,
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            max_position_embeddings=max_pos,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=qkv_bias,
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=eos_ids,
            attention_out_bias=out_bias,
            mlp_bias=bool(cfg.get("mlp_bias", False)),
        )

    def to_hf_config(self) -> dict:
        """The config.json dict transformers would build this model from (used by tests and the GPU check)."""
        cfg = {
            "model_type": self.arch,
            "architectures": [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM"}[self.arch]],
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_parameters": {"rope_type": "default", **(self.rope_scaling or {}), "rope_theta": self.rope_theta},
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": list(self.eos_token_ids) or None,
        }
        if self.arch == "llama":
            cfg["attention_bias"] = self.attention_bias
            cfg["mlp_bias"] = self.mlp_bias
        if self.arch == "mistral":
            cfg["sliding_window"] = None
        return cfg

    @classmethod
    def tiny(cls, arch: str = "llama", **overrides) -> ModelConfig:
        """A few layers, hidden 64, GQA 4:2, for CPU tests; Qwen2 gets qkv bias like the real family."""
        base = dict(
            arch=arch, vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2,
            num_heads=4, num_kv_heads=2, head_dim=16, rms_norm_eps=1e-6, rope_theta=10000.0,
            rope_scaling=None, max_position_embeddings=512, tie_word_embeddings=False,
            attention_bias=arch == "qwen2", bos_token_id=1, eos_token_ids=(2,),
        )
        base.update(overrides)
        return cls(**base)

    def replace(self, **changes) -> ModelConfig:
        """A copy with some fields changed (e.g. a tiny context for hierarchical-summary tests)."""
        return dataclasses.replace(self, **changes)


def _rope_from_hf(cfg: dict) -> tuple[float, dict | None]:
    params = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    theta = float(params.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
    if "type" in params and "rope_type" not in params:  # transformers 4.3x files
        params["rope_type"] = params.pop("type")
    params.pop("type", None)
    if params.get("rope_type", "default") == "default":
        return theta, None
    return theta, params


def _sliding_window(cfg: dict, model_type: str) -> int | None:
    if model_type == "qwen2" and not cfg.get("use_sliding_window", False):
        return None
    window = cfg.get("sliding_window")
    return int(window) if window else None
