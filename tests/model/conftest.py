"""Factories for tiny models: a transformers reference saved as safetensors, and ours loaded from it."""

from __future__ import annotations

import pytest
import torch

from worker.model import ModelConfig, load_model


def hf_model_from(cfg: ModelConfig, init_std: float = 0.1):
    """A random-weight transformers model for `cfg` (fp32, eval); larger init than HF's so attention is peaked."""
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = cfg.to_hf_config()
    hf_cfg = AutoConfig.for_model(raw.pop("model_type"), **raw, initializer_range=init_std)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(hf_cfg, dtype=torch.float32, attn_implementation="sdpa").eval()


@pytest.fixture
def saved_pair(tmp_path):
    """Factory: cfg -> (transformers model, our LoadedModel loaded from its save_pretrained folder)."""

    def make(cfg: ModelConfig):
        hf = hf_model_from(cfg)
        hf.save_pretrained(tmp_path, safe_serialization=True)
        return hf, load_model(tmp_path, device="cpu", tokenizer=False)

    return make
