"""FP8 weights (`engine.dtype: fp8`): the quantisation's error bounds, Fp8Linear's matmul, a whole model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.model.helpers import run_packed
from worker.model import KVCache, ModelConfig, build_pass, random_model, use_fp8_weights
from worker.model import fp8, fused

E4M3_REL_STEP = 2.0 ** -3  # 3 mantissa bits: neighbouring normal values differ by at most 1/8 of the smaller


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_quantize_rows_scales_each_row_by_its_own_largest_value():
    w = _randn(32, 64)
    w[3] *= 1000.0  # an outlier row must not cost the other rows their precision
    w8, scale = fp8.quantize_rows(w)
    assert w8.dtype == torch.float8_e4m3fn and scale.shape == (32, 1)
    torch.testing.assert_close(scale, w.abs().amax(-1, keepdim=True) / fp8.FP8_MAX)
    back = w8.float() * scale
    # round to nearest: within half a step of the value, outside e4m3's subnormal range
    normal = w.abs() >= scale * 2.0 ** -6
    rel = ((back - w).abs() / w.abs())[normal]
    assert rel.max() <= E4M3_REL_STEP / 2 + 1e-6
    assert (back.abs().amax(-1) - w.abs().amax(-1)).abs().max() <= 1e-3 * w.abs().amax()  # the max survives


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the Triton kernel runs on CUDA")
@pytest.mark.parametrize("k", [576, 3584, 18944])  # one block, one block, the looped two-pass path
def test_quantize_tokens_kernel_equals_the_reference_math(k):
    x = (_randn(37, k, seed=k) * 5).to(torch.bfloat16).cuda()
    x[3] = 0
    got8, got_scale = fp8.quantize_tokens(x)
    want8, want_scale = fp8.quantize_rows(x)
    torch.testing.assert_close(got_scale, want_scale, rtol=0, atol=0)
    assert (got8.float() != want8.float()).float().mean().item() < 1e-3  # division rounding at most


def test_quantize_tokens_per_token_scale_and_an_all_zero_token():
    x = _randn(5, 48)
    x[2] = 0.0
    x8, scale = fp8.quantize_tokens(x)
    assert x8.dtype == torch.float8_e4m3fn and scale.shape == (5, 1)
    assert torch.isfinite(scale).all() and scale[2].item() > 0
    assert torch.equal(x8[2].float(), torch.zeros(48))
    back = x8.float() * scale
    torch.testing.assert_close(back, x, rtol=E4M3_REL_STEP / 2, atol=scale.max().item() * 2.0 ** -6)


def _linear(bias: bool, device="cpu", dtype=torch.float32) -> nn.Linear:
    linear = nn.Linear(64, 48, bias=bias)
    with torch.no_grad():
        linear.weight.copy_(_randn(48, 64, seed=1))
        if bias:
            linear.bias.copy_(_randn(48, seed=2))
    return linear.to(device, dtype)


@pytest.mark.parametrize("bias", [False, True])
def test_fp8_linear_stores_one_byte_weights_and_stays_close_to_the_exact_product(bias):
    linear = _linear(bias)
    layer = fp8.Fp8Linear(linear)
    assert layer.weight.dtype == torch.float8_e4m3fn and layer.weight.element_size() == 1
    assert layer.weight_scale.shape == (1, 48)
    x = _randn(7, 64, seed=3)
    got, exact = layer(x), linear(x).detach()
    assert got.dtype == torch.float32 and got.shape == (7, 48)
    assert ((got - exact).norm() / exact.norm()).item() < 0.05  # two e4m3 roundings, fp32 accumulation


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch._scaled_mm runs on CUDA")
@pytest.mark.parametrize("bias", [False, True])
def test_fp8_linear_on_cuda_is_the_product_of_its_quantised_operands(bias):
    linear = _linear(bias, "cuda", torch.bfloat16)
    layer = fp8.Fp8Linear(linear)
    x = _randn(7, 64, seed=3).to("cuda", torch.bfloat16)
    x8, x_scale = fp8.quantize_tokens(x)
    want = (x8.float() * x_scale) @ layer.dequantized().t() + (linear.bias.float() if bias else 0)
    got = layer(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)  # bf16 output


@pytest.mark.parametrize("bias", [False, True])
def test_fp8_linear_takes_an_input_already_quantised_to_the_same_result(bias):
    layer = fp8.Fp8Linear(_linear(bias))
    x = _randn(7, 64, seed=3)
    assert torch.equal(layer(fp8.QuantizedActivation(*fp8.quantize_tokens(x))), layer(x))


@pytest.fixture
def fused_quantisation():
    """Restores the module switch after a test that flips it."""
    yield
    fp8.set_fused_quantisation(True)


def test_only_an_fp8_projection_fed_by_the_kernels_gets_codes_and_the_switch_turns_it_off(fused_quantisation):
    fp8_linear, linear = fp8.Fp8Linear(_linear(False)), _linear(False)
    assert fp8.fused_quantisation_enabled()
    assert fused.feeds_fp8(fp8_linear, fused.KERNELS)
    assert not fused.feeds_fp8(linear, fused.KERNELS) and not fused.feeds_fp8(None, fused.KERNELS)
    assert not fused.feeds_fp8(fp8_linear, fused.EAGER)  # CPU, TELESUM_COMPILE=0: the projection quantises
    fp8.set_fused_quantisation(False)
    assert not fused.feeds_fp8(fp8_linear, fused.KERNELS)


def test_on_cpu_the_ops_hand_an_fp8_projection_its_row_and_the_eager_fp8_ops_equal_the_projection_math():
    layer = fp8.Fp8Linear(_linear(False))
    x, res, w = _randn(5, 64), _randn(5, 64, seed=1), _randn(64, seed=2)
    gate_up = _randn(5, 128, seed=3)
    assert torch.equal(fused.rms_norm(x, w, 1e-6, into=layer), fused.rms_norm(x, w, 1e-6))
    assert torch.equal(fused.silu_mul(gate_up, into=layer), fused.silu_mul(gate_up))
    for got, row in ((fused.EAGER.rms_norm_fp8(x, w, 1e-6), fused.rms_norm_eager(x, w, 1e-6)),
                     (fused.EAGER.add_rms_norm_fp8(x, res, w, 1e-6)[0], fused.add_rms_norm_eager(x, res, w, 1e-6)[0]),
                     (fused.EAGER.silu_mul_fp8(gate_up), fused.silu_mul_eager(gate_up))):
        want8, want_scale = fp8.quantize_tokens(row)
        assert isinstance(got, fp8.QuantizedActivation) and torch.equal(got.scale, want_scale)
        assert torch.equal(got.codes.view(torch.uint8), want8.view(torch.uint8))
    assert torch.equal(fused.EAGER.add_rms_norm_fp8(x, res, w, 1e-6)[1], x + res)


def test_a_model_fed_fp8_codes_by_its_norms_and_silu_gives_the_same_logits(monkeypatch):
    """The layer's wiring of the fused quantisation, on CPU: the eager ops stand in for the kernels."""
    cfg = ModelConfig.tiny(arch="qwen2", num_layers=3)
    loaded = use_fp8_weights(random_model(cfg, device="cpu", seed=5))
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(3, cfg.vocab_size, (n,), generator=gen) for n in (9, 17, 4)]
    want = torch.cat(run_packed(loaded.model, seqs)[0])

    fed = []

    def feeds_fp8_on_cpu(into, ops):  # as on CUDA with the kernels on, with the eager ops
        fed.append(type(into).__name__)
        return isinstance(into, fp8.Fp8Linear) and fp8.fused_quantisation_enabled()

    monkeypatch.setattr(fused, "feeds_fp8", feeds_fp8_on_cpu)
    got = torch.cat(run_packed(loaded.model, seqs)[0])
    assert fed == ["Fp8Linear"] * (3 * cfg.num_layers) + ["NoneType"]  # qkv, gate_up, down; the final norm
    assert torch.equal(got, want)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the Triton kernels and torch._scaled_mm run on CUDA")
def test_on_cuda_a_model_gives_the_same_logits_with_the_fused_quantisation_on_and_off(fused_quantisation):
    cfg = ModelConfig.tiny(arch="qwen2", num_layers=3)
    loaded = use_fp8_weights(random_model(cfg, device="cuda", dtype=torch.bfloat16, seed=5))
    kv = KVCache.allocate(cfg, 128, torch.bfloat16, "cuda")
    meta, pos = build_pass([9, 17, 4], [0, 0, 0], [0, 32, 64], device="cuda")
    ids = torch.randint(3, cfg.vocab_size, (30,), device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    rows = torch.arange(30, device="cuda")
    fed = []
    fp8.set_fused_quantisation(True)
    with pytest.MonkeyPatch.context() as patch:
        original = fp8.Fp8Linear.forward
        patch.setattr(fp8.Fp8Linear, "forward",
                      lambda self, x: fed.append(isinstance(x, fp8.QuantizedActivation)) or original(self, x))
        fused_logits = loaded.model(ids, pos, meta, kv, rows)
    assert fed == [True, False, True, True] * cfg.num_layers  # o_proj's input is attention's: quantised on the call
    fp8.set_fused_quantisation(False)
    assert torch.equal(loaded.model(ids, pos, meta, kv, rows), fused_logits)


def test_quantize_model_replaces_every_projection_and_keeps_the_logits_close():
    cfg = ModelConfig.tiny(arch="qwen2", num_layers=3)  # qkv bias too
    reference = random_model(cfg, device="cpu", seed=5)
    quantized = random_model(cfg, device="cpu", seed=5)
    use_fp8_weights(quantized)
    assert quantized.fp8 and quantized.precision == "fp8" and reference.precision == "float32"
    layers = quantized.model.layers
    kinds = [type(getattr(getattr(layer, owner), attr)) for layer in layers
             for owner, attr in (p.split(".") for p in fp8.PROJECTIONS)]
    assert kinds == [fp8.Fp8Linear] * (4 * cfg.num_layers)
    assert type(quantized.model.lm_head) is nn.Linear  # the logits' own matmul stays in the model dtype

    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(3, cfg.vocab_size, (n,), generator=gen) for n in (9, 17, 4)]
    want, got = (torch.cat(run_packed(loaded.model, seqs)[0]) for loaded in (reference, quantized))
    assert ((got - want).norm() / want.norm()).item() < 0.1
    assert not torch.equal(got, want)  # the weights did change


def test_fp8_on_a_small_model_warns_that_it_is_slower(caplog):
    use_fp8_weights(random_model(ModelConfig.tiny(), device="cpu"))
    assert "too small to gain" in caplog.text and "--dtype auto is faster here" in caplog.text


def test_a_projection_that_fp8_matmuls_cannot_take_stays_in_the_model_dtype(caplog):
    cfg = ModelConfig.tiny(intermediate_size=120)  # 2 * 120 = 240 rows fit, 120 inputs of down_proj do not
    loaded = random_model(cfg, device="cpu")
    replaced = fp8.quantize_model(loaded.model)
    assert replaced == 3 * cfg.num_layers
    assert all(type(layer.mlp.down_proj) is nn.Linear for layer in loaded.model.layers)
    assert "mlp.down_proj (120 -> 64) stays in" in caplog.text


def test_fp8_is_refused_on_a_gpu_without_fp8_tensor_cores(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    reason = fp8.fp8_unsupported(torch.device("cuda", 0))
    assert reason is not None and "8.9" in reason and "A100" in reason and "8.0" in reason
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert fp8.fp8_unsupported(torch.device("cuda", 0)) is None
    assert fp8.fp8_unsupported(torch.device("cpu")) is None


@pytest.mark.slow
def test_fp8_on_the_real_smollm2_stays_within_the_tolerance_engine_md_states():
    """engine.md's tolerance for FP8, on the embedded model's real weights and two real-shaped prompts:
    logits within 10 % (relative) and the same top token at >= 90 % of positions (measured on an
    H200: 7.0 % and 93.5 % over 50,135 positions; here the same products in fp32)."""
    from worker.benchmarks.quality import corpus
    from worker.model import embedded_model_path, load_model
    from worker.summarizer.preprocess import prepare

    try:
        path = embedded_model_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    reference = load_model(path, device="cpu")
    quantized = use_fp8_weights(load_model(path, device="cpu", tokenizer=False))
    items = corpus(2, 0, 0, 1, 0)  # one generated record, one real-shaped host log
    seqs = [torch.from_numpy(prepare(record, reference.tokenizer).prompt).long() for record, _, _ in items]
    want, got = (torch.cat(run_packed(loaded.model, seqs, slab_rows=max(map(len, seqs)))[0])
                 for loaded in (reference, quantized))
    rel = ((got - want).norm() / want.norm()).item()
    top1 = (got.argmax(-1) == want.argmax(-1)).float().mean().item()
    print(f"fp8 vs fp32 on the real SmolLM2, {want.shape[0]} positions: rel. error {rel:.4f}, top-1 {top1:.4f}")
    assert rel <= 0.10 and top1 >= 0.90
    assert rel > 0.001  # the weights really are FP8
