"""Benchmark corpora as token-id lengths: A (stress mix), B (uniform), C (OAM long tail); the speed model.

Speed does not depend on token values, so the GPU benchmarks draw random ids; ~1.3 tokens per word.
"""

from __future__ import annotations

import numpy as np

TOKENS_PER_WORD = 1.3

# The speed model of the GPU benchmarks: Qwen2.5-7B's config.json fields (weights are random).
QWEN25_7B = {
    "model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
    "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 32768,
    "tie_word_embeddings": False, "bos_token_id": 151643, "eos_token_id": 151645,
}

# The embedded model's architecture (SmolLM2-135M-Instruct's config.json fields) for the same purpose.
SMOLLM2_135M = {
    "model_type": "llama", "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
    "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
    "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "max_position_embeddings": 8192,
    "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2,
}


def corpus_words(name: str, n: int, seed: int = 0) -> np.ndarray:
    """Word counts of `n` documents of corpus A, B or C."""
    rng = np.random.default_rng(seed)
    if name == "A":  # half 45-130 words, half 1820-2000 words, interleaved
        short = rng.integers(45, 131, size=(n + 1) // 2)
        long = rng.integers(1820, 2001, size=n // 2)
        words = np.empty(n, dtype=np.int64)
        words[0::2], words[1::2] = short, long
        return words
    if name == "B":
        return rng.integers(50, 1901, size=n)
    if name == "C":  # log-normal around a few hundred words, tail to ~38k words (~50k tokens)
        return np.clip(rng.lognormal(mean=6.0, sigma=1.3, size=n), 30, 38_000).astype(np.int64)
    raise ValueError(f"unknown corpus {name!r}: A, B or C")


def corpus_token_lengths(name: str, n: int, seed: int = 0) -> np.ndarray:
    """Token counts (int64 [n]) of `n` documents of corpus A, B or C."""
    return np.maximum(1, np.round(corpus_words(name, n, seed) * TOKENS_PER_WORD)).astype(np.int64)


def corpus_token_ids(name: str, n: int, vocab_size: int, seed: int = 0) -> list[np.ndarray]:
    """Random int32 token ids with the corpus's lengths (ids avoid the first/last 100 of the vocabulary)."""
    rng = np.random.default_rng(seed + 1)
    lengths = corpus_token_lengths(name, n, seed)
    return [rng.integers(100, vocab_size - 100, size=int(k), dtype=np.int32) for k in lengths]
