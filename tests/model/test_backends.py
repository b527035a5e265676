"""Backend selection, and the FlashAttention-2 call plumbing checked on CPU against stand-in kernels.

The stand-ins implement FA2's documented semantics (keys of sequence b are rows cu_seq_k[b] onward,
seqused_k[b] of them when given, causal mask aligned bottom-right), so the model run through the
torch_fa2 backend must give the sdpa backend's logits; the real kernels run in bench/gpu_check_model.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from worker.model import KVCache, ModelConfig, random_model, select_backend
from worker.model.attention import AttentionMetadata, SdpaBackend, TorchFa2Backend

from tests.model.helpers import rel_err, run_packed


def test_select_backend_cpu_default_is_sdpa():
    assert select_backend("cpu").name == "sdpa"


def test_select_backend_override_sdpa_honoured():
    assert isinstance(select_backend("cpu", "sdpa"), SdpaBackend)


def test_select_backend_unknown_name_raises():
    with pytest.raises(ValueError, match="unknown attention backend 'fa9'.*flash_attn, torch_fa2, sdpa"):
        select_backend("cpu", "fa9")


@pytest.mark.parametrize("name", ["torch_fa2", "flash_attn"])
def test_select_backend_gpu_only_name_on_cpu_raises(name):
    with pytest.raises(ValueError, match="needs a CUDA device"):
        select_backend("cpu", name)


def _fa2_reference(q, k, v, cu_q, cu_k, max_q, max_k, scale, seqused_k=None):
    assert cu_q.dtype == torch.int32 and cu_k.dtype == torch.int32 and cu_q.shape == cu_k.shape
    assert int(cu_k[-1]) <= k.shape[0] and k.shape == v.shape and q.shape[1] % k.shape[1] == 0
    out = torch.full_like(q, float("nan"))
    for b in range(cu_q.shape[0] - 1):
        q_lo, q_hi, k_lo = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b])
        len_k = int(seqused_k[b]) if seqused_k is not None else int(cu_k[b + 1]) - k_lo
        assert q_hi - q_lo <= max_q and len_k <= max_k
        len_q = q_hi - q_lo
        mask = torch.arange(len_k)[None, :] <= torch.arange(len_q)[:, None] + (len_k - len_q)
        o = F.scaled_dot_product_attention(
            q[q_lo:q_hi].transpose(0, 1)[None], k[k_lo:k_lo + len_k].transpose(0, 1)[None],
            v[k_lo:k_lo + len_k].transpose(0, 1)[None], attn_mask=mask, scale=scale, enable_gqa=True)
        out[q_lo:q_hi] = o[0].transpose(0, 1)
    return out


def fake_flash_attention_forward(q, k, v, cu_q, cu_k, max_q, max_k, dropout_p, is_causal, return_debug_mask,
                                 *, scale=None, window_size_left=None, window_size_right=None,
                                 seqused_k=None, alibi_slopes=None):
    assert dropout_p == 0.0 and is_causal is True and return_debug_mask is False
    assert seqused_k is None or seqused_k.dtype == torch.int32
    out = _fa2_reference(q, k, v, cu_q, cu_k, max_q, max_k, scale, seqused_k)
    return out, None, None, None, None


def test_torch_fa2_backend_plumbing_matches_sdpa(monkeypatch):
    monkeypatch.setattr(torch.ops.aten, "_flash_attention_forward", fake_flash_attention_forward)
    lm = random_model(ModelConfig.tiny("llama", num_layers=2), device="cpu", seed=5)
    model = lm.model
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 256, (n,), generator=gen) for n in (9, 21, 3)]

    def prefill_chunk_decode():
        kv = KVCache.allocate(model.cfg, 3 * 64, torch.float32, "cpu")
        first, kv = run_packed(model, seqs, pad_lens=[7, 3, 5], kv=kv)  # from zero, with pads
        more = [torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(1)) for n in (6, 1, 1)]
        second, kv = run_packed(model, more, ctx_lens=[len(s) for s in seqs], kv=kv)  # tape: chunk + decode
        return torch.cat([torch.cat(first), torch.cat(second)])

    model.set_backend(SdpaBackend())
    expected = prefill_chunk_decode()
    model.set_backend(TorchFa2Backend())
    got = prefill_chunk_decode()
    assert not torch.isnan(got).any()
    assert rel_err(got, expected) < 1e-5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlashAttention-2 runs on CUDA")
def test_torch_fa2_backend_on_cuda_matches_sdpa_from_zero_and_on_the_tape():
    lm = random_model(ModelConfig.tiny("qwen2", num_layers=2), device="cuda", dtype=torch.bfloat16, seed=5)
    model = lm.model
    assert model.cfg.num_kv_heads < model.cfg.num_heads  # grouped K/V heads, as the served models have
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 256, (n,), generator=gen).cuda() for n in (9, 40, 3)]
    more = [torch.randint(0, 256, (n,), generator=gen).cuda() for n in (6, 1, 1)]

    def prefill_then_more():
        kv = KVCache.allocate(model.cfg, 3 * 64, torch.bfloat16, "cuda")
        first, kv = run_packed(model, seqs, pad_lens=[7, 0, 5], kv=kv)  # from zero, with pads
        second, kv = run_packed(model, more, ctx_lens=[len(s) for s in seqs], kv=kv)  # the tape
        return torch.cat([torch.cat(first), torch.cat(second)]).float()

    model.set_backend(SdpaBackend())
    expected = prefill_then_more()
    model.set_backend(TorchFa2Backend())
    got = prefill_then_more()
    assert rel_err(got, expected) < 2e-2


def test_tape_attention_splits_a_mixed_step_between_fa2_and_the_decode_kernel(monkeypatch):
    """Prefill spans go to FA2, the decode rows after them to the decode kernel; same result as SDPA."""
    import dataclasses

    import worker.model.attention as attention
    import worker.model.decode_attention as decode_module
    from worker.model.attention import build_pass, tape_attention

    calls = {}

    def fa2(*args, **kw):
        calls["fa2_seqs"] = args[3].shape[0] - 1
        return fake_flash_attention_forward(*args, **kw)

    def decode_kernel(q, k_tape, v_tape, slab_starts, seqused_k, scale, head_starts=None, head_lens=None):
        calls["decode_rows"] = q.shape[0]
        meta = AttentionMetadata(cu_seqlens_q=torch.arange(q.shape[0] + 1, dtype=torch.int32), max_seqlen_q=1,
                                 slab_starts=slab_starts, seqused_k=seqused_k, max_seqlen_k=int(seqused_k.max()),
                                 slot_mapping=torch.zeros(0, dtype=torch.int64), is_prefill_from_zero=False)
        return SdpaBackend._decode(q, k_tape, v_tape, meta, scale)

    monkeypatch.setattr(torch.ops.aten, "_flash_attention_forward", fa2)
    monkeypatch.setattr(decode_module, "decode_attention", decode_kernel)
    monkeypatch.setattr(attention, "_triton_decode_ok", lambda q: True)
    # Two prompts (one after a cached head of 5 rows, with 3 pads) and three decoding sequences.
    meta, _ = build_pass([7, 4, 1, 1, 1], [0, 5, 9, 30, 2], [0, 40, 80, 120, 160], pad_lens=[0, 3, 0, 0, 0])
    meta = dataclasses.replace(meta, num_decode_rows=3)
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(int(meta.cu_seqlens_q[-1]), 4, 16, generator=gen)
    k_tape, v_tape = torch.randn(2, 200, 2, 16, generator=gen)
    got = tape_attention(q, k_tape, v_tape, meta, 0.25)
    assert calls == {"fa2_seqs": 2, "decode_rows": 3}
    expected = SdpaBackend().attend(q, None, None, k_tape, v_tape, meta, 0.25)
    real = meta.slot_mapping >= 0  # pads' outputs are never used
    assert rel_err(got[real], expected[real]) < 1e-5
