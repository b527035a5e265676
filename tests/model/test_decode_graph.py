"""DecodeGraphs on CPU (graphs off): bucketing, padding with dummy sequences, staging, validation."""

from __future__ import annotations

import copy

import pytest
import torch

from worker.model import KVCache, ModelConfig, build_pass, random_model
from worker.model.decode_graph import IDS, POSITIONS, ROWS, STARTS, USED, DecodeGraphs
from worker.model.weights import init_random

from .helpers import rel_err, run_packed

SLAB = 32


@pytest.fixture(scope="module")
def model():
    lm = random_model(ModelConfig.tiny("qwen2", num_layers=2), device="cpu")
    init_random(lm.model, seed=5, std=0.15)
    return lm.model


def _prefilled(model, lengths):
    gen = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, 256, (n,), generator=gen) for n in lengths]
    kv = KVCache.allocate(model.cfg, SLAB * len(seqs), torch.float32, "cpu")
    run_packed(model, seqs, kv=kv, slab_rows=SLAB)
    return kv


def test_bucket_rounds_up_to_next_captured_size(model):
    graphs = DecodeGraphs(model, _prefilled(model, [3]), batch_sizes=(8, 1, 2, 4))
    assert [graphs.bucket(b) for b in (1, 2, 3, 4, 5, 8)] == [1, 2, 4, 4, 8, 8]
    assert graphs.batch_sizes == (1, 2, 4, 8) and graphs.max_batch == 8


@pytest.mark.parametrize("batch", [0, 9])
def test_bucket_outside_sizes_raises(model, batch):
    graphs = DecodeGraphs(model, _prefilled(model, [3]), batch_sizes=(1, 8))
    with pytest.raises(ValueError, match="outside 1..8"):
        graphs.bucket(batch)


def test_graphs_on_cpu_unsupported_and_refused(model):
    kv = _prefilled(model, [3])
    assert not DecodeGraphs.supported(model, kv)
    assert not DecodeGraphs(model, kv).use_graphs
    with pytest.raises(ValueError, match="CUDA-graph decode needs"):
        DecodeGraphs(model, kv, use_graphs=True)


def test_max_seqlen_k_defaults_to_tape_or_context_and_is_bounded(model):
    kv = _prefilled(model, [3, 4])
    assert DecodeGraphs(model, kv).max_seqlen_k == min(kv.capacity_rows, model.cfg.max_position_embeddings)
    with pytest.raises(ValueError, match="max_seqlen_k"):
        DecodeGraphs(model, kv, max_seqlen_k=kv.capacity_rows + 1)


def test_decode_padded_bucket_equals_plain_forward(model):
    lengths = [5, 11, 2]
    kv = _prefilled(model, lengths)
    ref_kv = copy.deepcopy(kv)
    graphs = DecodeGraphs(model, kv, batch_sizes=(1, 4, 8))
    graphs.capture()  # a no-op with graphs off
    tokens, positions = [7, 8, 9], list(lengths)
    starts = [b * SLAB for b in range(len(lengths))]
    for step in range(3):  # 3 sequences in bucket 4, then 1 in bucket 1
        b = 3 if step < 2 else 1
        before = copy.deepcopy(kv)
        got = graphs.decode(tokens[:b], positions[:b], starts[:b])
        meta, pos = build_pass([1] * b, positions[:b], starts[:b])
        want = model(torch.tensor(tokens[:b]), pos, meta, ref_kv, torch.arange(b))
        assert got.shape == (b, model.cfg.vocab_size)
        assert rel_err(got, want) < 1e-5
        written = [s + p for s, p in zip(starts[:b], positions[:b])]
        kept = [r for r in range(kv.capacity_rows) if r not in written]
        for layer in range(model.cfg.num_layers):  # dummies wrote only the scratch row, outside k/v
            for tape, old, ref in ((kv.k, before.k, ref_kv.k), (kv.v, before.v, ref_kv.v)):
                assert torch.equal(tape[layer][kept], old[layer][kept])
                assert rel_err(tape[layer][written], ref[layer][written]) < 1e-5
        tokens = [int(t) for t in got.argmax(-1)] + tokens[b:]
        positions = [p + 1 for p in positions[:b]] + positions[b:]


def test_decode_stages_real_columns_then_dummies(model):
    graphs = DecodeGraphs(model, _prefilled(model, [3, 4]), batch_sizes=(4,))
    graphs._stage_host(2, 4, [11, 12], [3, 4], [0, 32])
    rows = graphs._rows
    assert rows[IDS].tolist() == [11, 12, 0, 0]
    assert rows[POSITIONS].tolist() == [3, 4, 0, 0]
    assert rows[STARTS].tolist() == [0, 32, 0, 0]
    assert rows[ROWS].tolist() == [3, 36, -1, -1]  # slab + position; -1 -> KV scratch row
    assert rows[USED].tolist() == [4, 5, 1, 1]  # dummies read one row
    host_staged = rows.clone()
    rows.fill_(99)
    graphs._stage_device(2, 4, torch.tensor([11, 12]), torch.tensor([3, 4]), torch.tensor([0, 32], dtype=torch.int32))
    assert torch.equal(rows, host_staged)


def test_decode_position_at_max_seqlen_k_rejected(model):
    graphs = DecodeGraphs(model, _prefilled(model, [3, 4]), max_seqlen_k=16)
    assert graphs.can_run(2, 15) and not graphs.can_run(2, 16)
    with pytest.raises(ValueError, match="positions must be in 0..15"):
        graphs.decode([1, 2], [3, 16], [0, 32])


def test_decode_row_beyond_tape_rejected(model):
    graphs = DecodeGraphs(model, _prefilled(model, [3, 4]))
    with pytest.raises(ValueError, match="tape rows"):
        graphs.decode([1], [40], [32])


def test_decode_mismatched_lengths_rejected(model):
    graphs = DecodeGraphs(model, _prefilled(model, [3, 4]))
    with pytest.raises(ValueError, match="one entry per sequence"):
        graphs.decode([1, 2], [3], [0, 32])
