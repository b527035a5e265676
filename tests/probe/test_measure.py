"""The probe's trials through the model's real prefill and decode paths, on CPU with a tiny model.

A fake gauge stands in for the CUDA allocator's counters; out-of-memory is injected by a layer
hook that sees each pass's token count and KV tape, as a GPU would fail an allocation.
"""

from __future__ import annotations

import pytest
import torch

from worker.engine.decode_graphs import decode_buckets
from worker.model import ModelConfig, random_model
from worker.probe.measure import PEAK_LAYERS, TorchMeasurer, synthetic_bin
from worker.probe.search import ALIGN, BIN_MARGIN, run_probe


class FakeGauge:
    """Memory counters of a pretend device; `charge` sets what the current trial took."""

    def __init__(self, free: int = 1 << 40) -> None:
        self.free_now, self.total_now, self.peak_now = free, free, 0

    def name(self) -> str:
        return "CPU pretending"

    def total(self) -> int:
        return self.total_now

    def free(self) -> int:
        return self.free_now

    def allocated(self) -> int:
        return 0

    def peak(self) -> int:
        return self.peak_now

    def reset_peak(self) -> None:
        self.peak_now = 0

    def charge(self, nbytes: int) -> None:
        self.peak_now = max(self.peak_now, nbytes)

    def release(self) -> None: ...

    def synchronize(self) -> None: ...


@pytest.fixture(scope="module")
def loaded():
    return random_model(ModelConfig.tiny(num_layers=4, max_position_embeddings=4096), device="cpu")


def _layers_run(model):
    ran: list[int] = []
    handles = [layer.register_forward_hook(lambda mod, args, out, i=i: ran.append(i))
               for i, layer in enumerate(model.layers)]
    return ran, handles


def test_synthetic_bin_packs_sequences_with_restarting_positions():
    b = synthetic_bin(1000, 256, vocab_size=256, device="cpu")
    assert b.cu_seqlens.tolist() == [0, 256, 512, 768, 1000]
    assert b.seq_lens.tolist() == [256, 256, 256, 232]
    assert b.last_token_index.tolist() == [255, 511, 767, 999]
    assert b.position_ids[:3].tolist() == [0, 1, 2] and b.position_ids[256].item() == 0
    assert b.position_ids[-1].item() == 231 and b.max_seqlen == 256
    assert b.slab_starts == [0, 256, 512, 768]
    assert b.input_ids.dtype == torch.int32 and 0 <= int(b.input_ids.min()) and int(b.input_ids.max()) < 256


def test_search_pass_stops_after_the_peak_layers_and_full_pass_runs_all(loaded):
    m = TorchMeasurer(loaded, "cpu", gauge=FakeGauge())
    ran, handles = _layers_run(loaded.model)
    try:
        assert m.prefill(600, 600, 256, full=False).ok
        assert ran == list(range(PEAK_LAYERS))
        ran.clear()
        assert m.prefill(600, 600, 256, full=True).ok
        assert ran == list(range(4))
    finally:
        for h in handles:
            h.remove()
    assert not any(layer._forward_pre_hooks for layer in loaded.model.layers)  # the stop hook is gone


@pytest.mark.parametrize("error", [torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"),
                                   RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate")])
def test_out_of_memory_is_a_failed_trial_and_leaves_no_hook(loaded, error):
    m = TorchMeasurer(loaded, "cpu", gauge=FakeGauge())

    def oom_above_500(_mod, args):
        if args[0].shape[0] > 500:
            raise error

    handle = loaded.model.layers[0].register_forward_pre_hook(oom_above_500)
    try:
        assert not m.prefill(512, 512, 256, full=False).ok
        assert m.prefill(496, 496, 256, full=False).ok
        assert not m.prefill(512, 512, 256, full=True).ok
    finally:
        handle.remove()
    assert not any(layer._forward_pre_hooks for layer in loaded.model.layers)


def test_other_errors_propagate(loaded):
    m = TorchMeasurer(loaded, "cpu", gauge=FakeGauge())

    def broken(_mod, _args):
        raise RuntimeError("an illegal memory access was encountered")

    handle = loaded.model.layers[0].register_forward_pre_hook(broken)
    try:
        with pytest.raises(RuntimeError, match="illegal memory access"):
            m.prefill(256, 256, 256, full=True)
    finally:
        handle.remove()


def test_decode_trial_samples_a_batch_beside_the_arena(loaded):
    m = TorchMeasurer(loaded, "cpu", gauge=FakeGauge())
    assert m.decode(8, 100, 8 * 101, max_new_tokens=16).ok
    with pytest.raises(ValueError, match="do not fit"):
        m.decode(8, 100, 8 * 101 - 1, max_new_tokens=16)


def test_probe_through_the_real_passes_finds_the_injected_limit(loaded):
    """run_probe end to end through TorchMeasurer: the pretend device fails any pass whose tokens and
    KV tape exceed its memory, charged at the first layer as a real allocation would be."""
    gauge = FakeGauge(free=1 << 30)  # total 1 GiB: the headroom is the minimum, 1 GiB beyond `capacity`
    m = TorchMeasurer(loaded, "cpu", gauge=gauge)
    per_row, per_token = m.kv_bytes_per_row, 3 * m.kv_bytes_per_row
    capacity = 6_000 * (per_row + per_token)
    gauge.free_now = capacity + (1 << 30)
    shapes = []

    def charge(_mod, args):
        tokens, kv = args[0].shape[0], args[5]
        need = tokens * per_token + (kv.capacity_rows + 1) * per_row
        shapes.append(tokens)
        if need > capacity:
            raise torch.cuda.OutOfMemoryError(f"pretend device: {need} > {capacity}")
        gauge.charge(need)

    handle = loaded.model.layers[0].register_forward_pre_hook(charge)
    try:
        r = run_probe(m, max_new_tokens=32, typical_prompt_tokens=128, sample_tokens=(512, 1024))
    finally:
        handle.remove()
    limit = capacity // (per_row + per_token)
    assert limit * 0.99 - ALIGN <= r.bin_limit <= limit
    assert r.token_budget == int(r.bin_limit * (1 - BIN_MARGIN)) // ALIGN * ALIGN
    assert r.token_budget * per_token + (r.kv_rows + 1) * per_row <= capacity
    bucket = min(b for b in decode_buckets(1024) if b >= r.max_decode_seqs)  # decode pads the batch to its bucket
    assert r.max_decode_seqs == r.kv_rows // (128 + 32) and bucket in shapes  # the decode trial ran that batch


KEPT_FIRST_ROUND = 256 << 20  # an H100 kept 172 MiB after the first round (library state of the capture stream)
NO_GROWTH = 16 << 20


@pytest.mark.skipif(not torch.cuda.is_available(), reason="prefill graphs need a GPU")
def test_held_prefill_graphs_take_memory_until_replaced_or_released():
    """On a GPU: the largest bin's prefill graphs hold memory (their pool and logits buffer) that the
    probe sees as gone; a smaller bin's graphs replace them, and releasing frees them. The first round
    leaves the capture stream's library state behind (workspaces, once per process); later rounds
    must leave nothing more, as each new side stream once did (128 MiB per hold: bench/NOTES.md)."""
    on_gpu = random_model(ModelConfig.tiny(num_layers=4, max_position_embeddings=4096, hidden_size=512,
                                           num_heads=8, num_kv_heads=4, head_dim=64, intermediate_size=2048),
                          device="cuda", dtype=torch.bfloat16,
                          backend="torch_fa2")
    m = TorchMeasurer(on_gpu, "cuda")
    free = m.free_bytes()
    kept = []
    for _ in range(3):
        large = m.hold_prefill_graphs(32768, 1024)
        assert large > 32768 * 2048 * 2  # at least the MLP's activations of a 32,768-token bin
        assert m.free_bytes() <= free - large
        small = m.hold_prefill_graphs(4096, 1024)
        assert 0 < small < large and m.free_bytes() > free - large
        assert large > 2 * KEPT_FIRST_ROUND  # else the checks below could pass with the pool still held
        m.release_graphs()
        kept.append(free - m.free_bytes())
    assert kept[0] <= KEPT_FIRST_ROUND, kept
    assert all(k <= kept[0] + NO_GROWTH for k in kept[1:]), kept
