"""GGUF loading: llama.cpp's Q/K permutation undone, and the real embedded SmolLM2 against transformers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from worker.model import embedded_model_path, load_model
from worker.model.gguf_loader import gguf_config, open_gguf, unpermute_qk
from worker.model.tokenizer import load_tokenizer

from tests.model.helpers import rel_err, run_packed


def _llama_cpp_permute(w: np.ndarray, num_heads: int) -> np.ndarray:
    # convert_hf_to_gguf.py's LlamaModel.permute
    return w.reshape(num_heads, 2, w.shape[0] // num_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.mark.parametrize("shape, heads", [((48, 5), 3), ((64,), 4)])
def test_unpermute_qk_inverts_llama_cpp_permutation(shape, heads):
    w = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    permuted = _llama_cpp_permute(w, heads)
    assert not np.array_equal(permuted, w)
    assert np.array_equal(unpermute_qk(permuted, heads), w)


def test_gguf_config_smollm2_matches_known_shape():
    path = embedded_model_path()
    cfg = gguf_config(open_gguf(path), path)
    assert (cfg.arch, cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.vocab_size) == \
        ("llama", 30, 576, 9, 3, 49152)
    assert cfg.tie_word_embeddings and cfg.head_dim == 64 and cfg.rope_theta == 100000.0
    assert cfg.eos_token_ids == (2,) and cfg.max_position_embeddings == 8192


def test_open_gguf_not_a_gguf_raises(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(ValueError, match="not a readable GGUF file"):
        load_model(bad, device="cpu", tokenizer=False)


def test_tokenizer_from_gguf_has_chat_template():
    tok = load_tokenizer(embedded_model_path())
    text = tok.apply_chat_template([{"role": "user", "content": "link down on cell 7"}],
                                   add_generation_prompt=True, tokenize=False)
    assert "<|im_start|>user\nlink down on cell 7<|im_end|>" in text and text.endswith("<|im_start|>assistant\n")
    assert tok.eos_token_id == 2 and tok.pad_token_id is not None


@pytest.mark.slow  # transformers' own GGUF load takes ~16 s on 2 cores
def test_gguf_smollm2_packed_logits_match_transformers():
    from transformers import AutoModelForCausalLM

    path = embedded_model_path()
    ours = load_model(path, device="cpu", tokenizer=False)
    hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 49152, (n,), generator=gen) for n in (23, 6, 41)]
    got, _ = run_packed(ours.model, seqs, pad_lens=[9, 2, 7])
    for seq, logits in zip(seqs, got):
        with torch.no_grad():
            ref = hf(seq[None]).logits[0].float()
        assert rel_err(logits, ref) < 1e-4
        assert torch.equal(logits.argmax(-1), ref.argmax(-1))
