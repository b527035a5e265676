"""Fused elementwise ops: the eager math equals the reference formulas; compiling keeps one graph per op."""

from __future__ import annotations

import pytest
import torch

from worker.model import KVCache, ModelConfig, build_pass, random_model
from worker.model import fused
from worker.model.attention import AttentionBackend

C, H, HKV, D = 48, 4, 2, 16


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _reference_rms_norm(x, w, eps):  # transformers' Llama/Qwen2 RMSNorm
    var = x.float().pow(2).mean(-1, keepdim=True)
    return w * (x.float() * torch.rsqrt(var + eps)).to(x.dtype)


def _reference_rope(x, angles):  # pair i with i + D/2, rotate by angles [T, D/2]
    half = x.shape[-1] // 2
    c, s = angles.cos()[:, None, :], angles.sin()[:, None, :]  # [T, 1, D/2]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_eager_equals_reference_bitwise(dtype):
    x, w = _randn(7, C, dtype=dtype) * 3, _randn(C, dtype=dtype, seed=1)
    assert torch.equal(fused.rms_norm(x, w, 1e-6), _reference_rms_norm(x, w, 1e-6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_add_rms_norm_returns_normed_sum_and_sum(dtype):
    x, res, w = _randn(9, C, dtype=dtype), _randn(9, C, dtype=dtype, seed=1), _randn(C, dtype=dtype, seed=2)
    normed, new_res = fused.add_rms_norm(x, res, w, 1e-5)
    assert torch.equal(new_res, res + x)
    assert torch.equal(normed, _reference_rms_norm(res + x, w, 1e-5))


def test_apply_rope_qk_rotates_pairs_by_angle():
    t = 6
    q, k = _randn(t, H, D), _randn(t, HKV, D, seed=1)
    angles = torch.arange(t, dtype=torch.float32)[:, None] * (0.5 ** torch.arange(D // 2, dtype=torch.float32))
    emb = torch.cat((angles, angles), dim=-1)[:, None, :]  # [T, 1, D]
    rq, rk = fused.apply_rope_qk(q, k, emb.cos(), emb.sin())
    torch.testing.assert_close(rq, _reference_rope(q, angles), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rk, _reference_rope(k, angles), rtol=1e-6, atol=1e-6)


def test_apply_rope_qk_strided_views_same_result():
    t = 5
    qkv = _randn(t, (H + 2 * HKV) * D)
    q = qkv[:, :H * D].view(t, H, D)  # non-contiguous views, as the model passes them
    k = qkv[:, H * D:(H + HKV) * D].view(t, HKV, D)
    cos, sin = _randn(t, 1, D, seed=3), _randn(t, 1, D, seed=4)
    rq, rk = fused.apply_rope_qk(q, k, cos, sin)
    eq, ek = fused.apply_rope_qk(q.contiguous(), k.contiguous(), cos, sin)
    assert torch.equal(rq, eq) and torch.equal(rk, ek)


def test_silu_mul_equals_gate_sigmoid_times_up():
    gate_up = _randn(5, 2 * C)
    gate, up = gate_up[:, :C], gate_up[:, C:]
    torch.testing.assert_close(fused.silu_mul(gate_up), gate * torch.sigmoid(gate) * up, rtol=1e-6, atol=1e-6)


def test_ops_for_cpu_tensor_is_eager_even_when_compile_enabled():
    assert fused.compile_enabled() in (True, False)
    assert fused.ops_for(torch.zeros(2)) is fused.EAGER


def test_switch_env_zero_disables_compile(monkeypatch):
    monkeypatch.setenv(fused.COMPILE_ENV, "0")
    assert not fused._Switch().enabled
    monkeypatch.setenv(fused.COMPILE_ENV, "1")
    assert fused._Switch().enabled


def test_compiled_ops_new_token_count_no_recompile():
    torch._dynamo.reset()
    ops = fused.build_compiled(backend="aot_eager")  # tracing and guards as on CUDA, no codegen

    sizes = (5, 7, 64, 13)
    weights = {t: torch.nn.Parameter(_randn(C, seed=t)) for t in sizes}  # one per layer: no guard on identity

    @torch.inference_mode()  # as in LlamaModel.forward: inputs are inference tensors
    def run(t):
        x, res, w = _randn(t, C), _randn(t, C, seed=1), weights[t]
        q, k, cs = _randn(t, H, D, seed=3), _randn(t, HKV, D, seed=4), _randn(t, 1, D, seed=5)
        gate_up = _randn(t, 2 * C, seed=6)
        got = [ops.rms_norm(x, w, 1e-6), *ops.add_rms_norm(x, res, w, 1e-6),
               *ops.apply_rope_qk(q, k, cs, cs), ops.silu_mul(gate_up)]
        want = [fused.rms_norm(x, w, 1e-6), *fused.add_rms_norm(x, res, w, 1e-6),
                *fused.apply_rope_qk(q, k, cs, cs), fused.silu_mul(gate_up)]
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)

    run(sizes[0])
    with torch._dynamo.config.patch(error_on_recompile=True):
        for t in sizes[1:]:
            run(t)
    torch._dynamo.reset()


class _NoSyncBackend(AttentionBackend):
    """Attention stand-in (output = q) so the test sees only the model's own ops."""

    name = "nosync"

    def attend(self, q, k, v, k_tape, v_tape, meta, scale):
        return q * 1.0


def test_forward_layers_no_host_sync(monkeypatch):
    lm = random_model(ModelConfig.tiny("qwen2", num_layers=2), device="cpu")
    lm.model.set_backend(_NoSyncBackend())
    kv = KVCache.allocate(lm.config, 64, torch.float32, "cpu")
    prefill, prefill_pos = build_pass([5, 3], [0, 0], [0, 32], pad_lens=[3, 0])
    decode, decode_pos = build_pass([1, 1], [5, 3], [0, 32])

    def no_sync(*_args, **_kwargs):
        raise AssertionError("host sync inside a forward pass")

    for name in ("item", "tolist", "__bool__", "nonzero", "cpu", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, no_sync)
    lm.model(torch.arange(11), prefill_pos, prefill, kv, torch.tensor([4, 10]))
    lm.model(torch.tensor([1, 2]), decode_pos, decode, kv, torch.arange(2))
