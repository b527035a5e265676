"""GGUF files: config from the metadata, tensors dequantised with `gguf` and renamed to Hugging Face names."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from worker.model.config import ModelConfig

_ARCHS = {"llama": "llama", "qwen2": "qwen2"}  # GGUF general.architecture -> ours (Mistral GGUFs say "llama")

_GLOBAL_NAMES = {
    "token_embd.weight": "embed_tokens.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK = re.compile(r"^blk\.(\d+)\.(\w+)\.(weight|bias)$")


def open_gguf(path: Path):
    """A gguf.GGUFReader over `path` (memory-mapped); raises ValueError if it is not a GGUF file."""
    import gguf

    try:
        return gguf.GGUFReader(path)
    except (ValueError, OSError) as exc:
        raise ValueError(f"{path}: not a readable GGUF file ({exc})") from exc


def _field(reader, key: str, default=None):
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def gguf_config(reader, path: Path) -> ModelConfig:
    """ModelConfig from GGUF metadata; raises ValueError for architectures or rope variants we do not run."""
    gguf_arch = _field(reader, "general.architecture")
    if gguf_arch not in _ARCHS:
        raise ValueError(f"{path}: GGUF architecture {gguf_arch!r} is not supported; supported: {', '.join(_ARCHS)}")
    if any(t.name == "rope_freqs.weight" for t in reader.tensors):
        raise ValueError(f"{path}: GGUF carries llama3 rope frequency factors (rope_freqs.weight), which this "
                         "loader does not read; load the Hugging Face folder instead")
    rope_kind = _field(reader, f"{gguf_arch}.rope.scaling.type", "none")
    rope_scaling = None
    if rope_kind == "linear":
        rope_scaling = {"rope_type": "linear", "factor": float(_field(reader, f"{gguf_arch}.rope.scaling.factor"))}
    elif rope_kind not in ("none", None):
        raise ValueError(f"{path}: GGUF rope scaling {rope_kind!r} is not supported")

    def need(key: str):
        value = _field(reader, f"{gguf_arch}.{key}")
        if value is None:
            raise ValueError(f"{path}: GGUF metadata lacks {gguf_arch}.{key}")
        return value

    hidden, num_heads = int(need("embedding_length")), int(need("attention.head_count"))
    vocab = _field(reader, f"{gguf_arch}.vocab_size") or len(_field(reader, "tokenizer.ggml.tokens"))
    eos = _field(reader, "tokenizer.ggml.eos_token_id")
    names = {t.name for t in reader.tensors}
    return ModelConfig(
        arch=_ARCHS[gguf_arch],
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=int(need("feed_forward_length")),
        num_layers=int(need("block_count")),
        num_heads=num_heads,
        num_kv_heads=int(_field(reader, f"{gguf_arch}.attention.head_count_kv", num_heads)),
        head_dim=int(_field(reader, f"{gguf_arch}.attention.key_length", hidden // num_heads)),
        rms_norm_eps=float(need("attention.layer_norm_rms_epsilon")),
        rope_theta=float(_field(reader, f"{gguf_arch}.rope.freq_base", 10000.0)),
        rope_scaling=rope_scaling,
        max_position_embeddings=int(need("context_length")),
        tie_word_embeddings="output.weight" not in names,
        attention_bias="blk.0.attn_q.bias" in names,
        bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_ids=() if eos is None else (int(eos),),
        attention_out_bias="blk.0.attn_output.bias" in names,
    )


def hf_name(gguf_name: str) -> str | None:
    """Our (Hugging Face) name for a GGUF tensor name; None for tensors we do not use."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = _BLOCK.match(gguf_name)
    if m is None or m.group(2) not in _BLOCK_NAMES:
        return None
    return f"layers.{m.group(1)}.{_BLOCK_NAMES[m.group(2)]}.{m.group(3)}"


def unpermute_qk(w: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's rows permutation of Q/K (interleaved rope) back to the half-split layout of transformers."""
    half = w.shape[0] // num_heads // 2
    return w.reshape(num_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(reader, cfg: ModelConfig, path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """(Hugging Face name, fp32 CPU tensor) for every tensor the model uses, dequantised one at a time."""
    from gguf.quants import dequantize

    permuted = _field(reader, "general.architecture") == "llama"
    for t in reader.tensors:
        name = hf_name(t.name)
        if name is None:
            raise ValueError(f"{path}: unexpected GGUF tensor {t.name!r}")
        w = dequantize(t.data, t.tensor_type).reshape(tuple(reversed([int(d) for d in t.shape])))
        if permuted and ".q_proj." in name:
            w = unpermute_qk(w, cfg.num_heads)
        elif permuted and ".k_proj." in name:
            w = unpermute_qk(w, cfg.num_kv_heads)
        w = np.ascontiguousarray(w, dtype=np.float32)
        yield name, torch.from_numpy(w if w.flags.writeable else w.copy())  # F32 tensors are read-only maps
