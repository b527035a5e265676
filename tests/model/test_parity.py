"""Logits parity with transformers (fp32, CPU) for a tiny random model of each architecture."""

from __future__ import annotations

import pytest
import torch

from worker.model import ModelConfig
from worker.model.llama import rope_inv_freq

from tests.model.helpers import rel_err, run_packed

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16}

CONFIGS = {
    "llama": ModelConfig.tiny("llama"),
    "llama3_rope_tied": ModelConfig.tiny("llama", rope_scaling=LLAMA3_ROPE, rope_theta=500000.0,
                                         tie_word_embeddings=True),
    "llama_attention_bias": ModelConfig.tiny("llama", attention_bias=True, attention_out_bias=True, mlp_bias=True),
    "qwen2_qkv_bias": ModelConfig.tiny("qwen2"),
    "mistral": ModelConfig.tiny("mistral", num_kv_heads=1),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_packed_forward_tiny_arch_matches_transformers(name, saved_pair):
    cfg = CONFIGS[name]
    hf, ours = saved_pair(cfg)
    gen = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, cfg.vocab_size, (n,), generator=gen) for n in (37, 5, 1, 20)]
    got, _ = run_packed(ours.model, seqs, pad_lens=[3, 0, 7, 4])
    for seq, logits in zip(seqs, got):
        with torch.no_grad():
            ref = hf(seq[None]).logits[0].float()  # [L, vocab]
        assert logits.shape == ref.shape
        assert rel_err(logits, ref) < 1e-4, name


def test_rope_inv_freq_llama3_scaling_changes_low_frequencies_only():
    plain = rope_inv_freq(ModelConfig.tiny("llama", rope_theta=500000.0))
    scaled = rope_inv_freq(ModelConfig.tiny("llama", rope_theta=500000.0,
                                            rope_scaling={**LLAMA3_ROPE, "original_max_position_embeddings": 8192}))
    assert torch.equal(scaled[0], plain[0])  # highest frequency kept
    assert torch.isclose(scaled[-1], plain[-1] / 8.0)  # lowest frequency divided by the factor


def test_tied_model_shares_head_with_embedding(saved_pair):
    _, ours = saved_pair(CONFIGS["llama3_rope_tied"])
    assert ours.model.lm_head.weight.data_ptr() == ours.model.embed_tokens.weight.data_ptr()
