"""Fused elementwise ops: the eager math equals the reference formulas; the Triton kernels equal the eager math."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

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


def test_ops_for_cpu_tensor_is_eager_even_when_kernels_enabled():
    assert fused.compile_enabled() in (True, False)
    assert fused.ops_for(torch.zeros(2)) is fused.EAGER


def test_switch_env_zero_disables_compile(monkeypatch):
    monkeypatch.setenv(fused.COMPILE_ENV, "0")
    assert not fused._Switch().enabled
    monkeypatch.setenv(fused.COMPILE_ENV, "1")
    assert fused._Switch().enabled


# The interpreter is chosen when a kernel module is imported, so the check runs in its own process. It
# truncates where the GPU rounds to nearest, so bf16 gets two units in the last place.
_KERNEL_CHECK = textwrap.dedent("""
    import torch
    from worker.model import fused, fused_kernels as kernels

    torch.manual_seed(0)
    def close(got, want, dtype):
        scale = want.float().abs().amax().clamp(min=1.0)
        bound = 1e-5 if dtype == torch.float32 else 2 * 2.0 ** -7
        err = float((got.float() - want.float()).abs().amax() / scale)
        assert got.dtype == want.dtype and got.shape == want.shape and err <= bound, (got.shape, dtype, err)

    for dtype in (torch.float32, torch.bfloat16):
        for tokens, channels in ((1, 48), (7, 576), (3, 1000)):
            x, res = torch.randn(tokens, channels).to(dtype) * 3, torch.randn(tokens, channels).to(dtype)
            w = torch.randn(channels).to(dtype)
            close(kernels.rms_norm(x, w, 1e-6), fused.rms_norm_eager(x, w, 1e-6), dtype)
            for got, want in zip(kernels.add_rms_norm(x, res, w, 1e-5), fused.add_rms_norm_eager(x, res, w, 1e-5)):
                close(got, want, dtype)
        for tokens, heads, kv_heads, dim in ((5, 9, 3, 64), (2, 28, 4, 128), (1, 4, 4, 32)):
            qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim).to(dtype)
            q = qkv[:, :heads * dim].view(tokens, heads, dim)  # strided views, as the model passes them
            k = qkv[:, heads * dim:(heads + kv_heads) * dim].view(tokens, kv_heads, dim)
            cos, sin = torch.randn(tokens, 1, dim).to(dtype), torch.randn(tokens, 1, dim).to(dtype)
            got, want = kernels.apply_rope_qk(q, k, cos, sin), fused.apply_rope_qk_eager(q, k, cos, sin)
            assert got[0].is_contiguous() and got[1].is_contiguous()
            for g, e in zip(got, want):
                close(g, e, dtype)
        for tokens, inner in ((4, 1536), (3, 2500), (1, 24)):
            gate_up = torch.randn(tokens, 2 * inner).to(dtype) * 2
            close(kernels.silu_mul(gate_up), fused.silu_mul_eager(gate_up), dtype)
        empty = torch.empty(0, 48, dtype=dtype)
        assert kernels.rms_norm(empty, torch.ones(48, dtype=dtype), 1e-6).shape == (0, 48)
    print("ok")
""")


def test_kernels_match_the_eager_math_for_model_shapes_and_strided_views():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", _KERNEL_CHECK], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "ok"


# The FP8 variants against the unfused kernels run the same way (the norm or SiLU·up kernel, then
# fp8's quantisation kernel): bit for bit, also in the interpreter. Against torch's quantisation of the
# same rounded row only the scales are compared here: the interpreter's fp32 -> e4m3 cast sometimes
# rounds toward zero (124.3 -> 64), where the GPU's rounds to nearest (the CUDA test below checks codes).
_FP8_KERNEL_CHECK = textwrap.dedent("""
    import torch
    from worker.model import fp8, fused_kernels as kernels

    torch.manual_seed(0)
    def same(got, want):
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
        bits = (lambda t: t.view(torch.uint8)) if got.dtype == torch.float8_e4m3fn else (lambda t: t)
        assert torch.equal(bits(got), bits(want)), float((got.float() != want.float()).float().mean())

    def check(got, row):  # got: the fused (codes, scale); row: the unfused kernel's rounded output
        want8, want_scale = fp8.quantize_tokens_triton(row)
        same(got.codes, want8)
        same(got.scale, want_scale)
        same(got.scale, fp8.quantize_rows(row)[1])

    def zero(got, row):  # an all-zero token: zero codes, the smallest scale
        assert not got.codes[row].float().any() and got.scale[row].item() == torch.tensor(fp8.MIN_SCALE).item()

    for dtype in (torch.bfloat16, torch.float32):
        for tokens, channels in ((1, 48), (5, 576), (4, 1000)):
            x, res = torch.randn(tokens, channels).to(dtype) * 3, torch.randn(tokens, channels).to(dtype)
            w = torch.randn(channels).to(dtype)
            x[tokens // 2] = 0  # a zero row: the smallest scale, all-zero codes
            got = kernels.rms_norm_fp8(x, w, 1e-6)
            check(got, kernels.rms_norm(x, w, 1e-6))
            zero(got, tokens // 2)
            x[tokens // 2] = -res[tokens // 2]  # a zero row again, after the add
            got, summed = kernels.add_rms_norm_fp8(x, res, w, 1e-5)
            row, want_summed = kernels.add_rms_norm(x, res, w, 1e-5)
            check(got, row)
            zero(got, tokens // 2)
            same(summed, want_summed)
            qkv = torch.randn(tokens, 2 * channels).to(dtype)  # strided input rows
            check(kernels.rms_norm_fp8(qkv[:, :channels], w, 1e-6), kernels.rms_norm(qkv[:, :channels], w, 1e-6))
        for tokens, inner in ((1, 24), (3, 1536), (4, 5000)):  # 5000: more than one block of the loop
            gate_up = torch.randn(tokens, 2 * inner).to(dtype) * 2
            gate_up[-1] = 0
            got = kernels.silu_mul_fp8(gate_up)
            check(got, kernels.silu_mul(gate_up))
            zero(got, -1)
        empty = torch.empty(0, 48, dtype=dtype)
        got = kernels.rms_norm_fp8(empty, torch.ones(48, dtype=dtype), 1e-6)
        assert got.codes.shape == (0, 48) and got.scale.shape == (0, 1)
        assert kernels.silu_mul_fp8(torch.empty(0, 96, dtype=dtype)).codes.shape == (0, 48)
    print("ok")
""")


def test_fp8_kernels_equal_the_unfused_kernels_then_quantisation_bit_for_bit():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", _FP8_KERNEL_CHECK], env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the Triton kernels need a CUDA GPU")
@pytest.mark.parametrize("channels, inner", [(576, 1536), (3584, 18944)])  # SmolLM2's shape, the 7B's
def test_fp8_kernels_on_cuda_equal_the_unfused_path_bit_for_bit(channels, inner):
    from worker.model import fp8, fused_kernels as kernels

    torch.manual_seed(0)
    w = torch.randn(channels, device="cuda", dtype=torch.bfloat16)
    for tokens in (1, 37, 1000):
        x = torch.randn(tokens, channels, device="cuda", dtype=torch.bfloat16) * 3
        res = torch.randn(tokens, channels, device="cuda", dtype=torch.bfloat16)
        x[tokens // 2] = 0
        gate_up = torch.randn(tokens, 2 * inner, device="cuda", dtype=torch.bfloat16) * 2
        gate_up[-1] = 0
        (got_add, summed), (row_add, want_summed) = (kernels.add_rms_norm_fp8(x, res, w, 1e-5),
                                                     kernels.add_rms_norm(x, res, w, 1e-5))
        assert torch.equal(summed, want_summed)
        for got, row in ((kernels.rms_norm_fp8(x, w, 1e-6), kernels.rms_norm(x, w, 1e-6)), (got_add, row_add),
                         (kernels.silu_mul_fp8(gate_up), kernels.silu_mul(gate_up))):
            want8, want_scale = fp8.quantize_tokens(row)  # what the projection would do with the bf16 row
            assert torch.equal(got.scale, want_scale)
            assert torch.equal(got.codes.view(torch.uint8), want8.view(torch.uint8))
            ref8, ref_scale = fp8.quantize_rows(row)  # torch's math on the same row: the scales exactly
            assert torch.equal(got.scale, ref_scale)
            assert (got.codes.float() != ref8.float()).float().mean().item() < 1e-3  # division rounding at most


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled kernels need a CUDA GPU")
def test_kernels_on_cuda_round_like_the_eager_math_and_compile_once_for_any_token_count():
    from worker.model import fused_kernels as kernels

    torch.manual_seed(0)
    w = torch.randn(576, device="cuda", dtype=torch.bfloat16)
    variants = None
    for tokens in (1, 7, 300, 4099):
        x = torch.randn(tokens, 576, device="cuda", dtype=torch.bfloat16) * 3
        res = torch.randn(tokens, 576, device="cuda", dtype=torch.bfloat16)
        normed, summed = kernels.add_rms_norm(x, res, w, 1e-5)
        want_normed, want_summed = fused.add_rms_norm_eager(x, res, w, 1e-5)
        assert torch.equal(summed, want_summed)  # one rounding to nearest, as torch's add
        # the normalised row is rounded before the weight: its last bit, scaled by |w|, can move two of the output's
        torch.testing.assert_close(normed, want_normed, rtol=2 ** -6, atol=2 ** -6)
        gate_up = torch.randn(tokens, 3072, device="cuda", dtype=torch.bfloat16)
        torch.testing.assert_close(kernels.silu_mul(gate_up), fused.silu_mul_eager(gate_up), rtol=2 ** -7,
                                   atol=2 ** -7)
        # compiled variants so far (other tests' shapes may have added some before this one)
        now = [len(k.device_caches[torch.cuda.current_device()][0])
               for k in (kernels._rms_norm_kernel, kernels._silu_mul_kernel)]
        assert variants is None or now == variants, (tokens, variants, now)  # tokens are the grid: no new one
        variants = now


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
