"""DecodeGraphs.warm: every bucket the budgets reach is run (captured on CUDA) at start-up, largest
first, leaving the KV tape and the staging buffer as they were."""

from types import SimpleNamespace

import torch

from worker.engine.decode_graphs import DecodeGraphs
from worker.model.kv_cache import KVCache
from worker.summarizer.preprocess import Preprocessor
from worker.settings.budgets import Budgets
from worker.settings.sections import EngineSettings
from worker.summarizer.summarizer import Summarizer

from tests.engine.conftest import FakeDispatcher
from tests.engine.tiny_tokenizer import tiny_tokenizer


def _graphs(model, *, max_batch=8, capacity=64, use_graphs=False) -> DecodeGraphs:
    kv = KVCache.allocate(model.cfg, capacity, torch.float32, "cpu")
    return DecodeGraphs(model, kv, torch.device("cpu"), max_batch=max_batch, max_seqlen_k=capacity,
                        use_graphs=use_graphs)


def _forwarded_buckets(graphs: DecodeGraphs) -> list[int]:
    seen: list[int] = []
    inner = graphs._forward
    graphs._forward = lambda bucket, max_seqlen_k: seen.append(bucket) or inner(bucket, max_seqlen_k)
    return seen


def test_decode_graphs_warm_runs_each_bucket_up_to_the_limit_once_largest_first(tiny_model):
    graphs = _graphs(tiny_model, max_batch=8)
    seen = _forwarded_buckets(graphs)
    assert graphs.warm(3) == (1, 2, 4)
    assert seen == [4, 2, 1]
    seen.clear()
    assert graphs.warm() == (1, 2, 4, 8)
    assert seen == [8, 4, 2, 1]


def test_decode_graphs_warm_leaves_the_tape_and_later_steps_unchanged(tiny_model):
    graphs = _graphs(tiny_model, capacity=64)
    for layer in range(graphs.kv.num_layers):
        graphs.kv.k[layer].normal_()
        graphs.kv.v[layer].normal_()
    tape = [t.clone() for t in graphs.kv.k + graphs.kv.v]
    cold = graphs.run([7, 8, 9], [5, 9, 3], [0, 20, 40]).clone()
    for layer in range(graphs.kv.num_layers):  # the step wrote rows 5, 29 and 43: restore them
        graphs.kv.k[layer].copy_(tape[layer])
        graphs.kv.v[layer].copy_(tape[graphs.kv.num_layers + layer])
    graphs.warm()
    assert all(torch.equal(a, b) for a, b in zip(graphs.kv.k + graphs.kv.v, tape))  # only the scratch row
    assert torch.equal(graphs.run([7, 8, 9], [5, 9, 3], [0, 20, 40]), cold)


def test_decode_graphs_warm_captures_each_missing_bucket_once(tiny_model):
    graphs = _graphs(tiny_model, max_batch=8)
    graphs.use_graphs = True  # no CUDA here: record the captures instead of making them
    captured: list[int] = []
    graphs._capture = lambda bucket: captured.append(bucket) or graphs._graphs.setdefault(bucket, None)
    graphs.warm(2)
    graphs.warm()
    assert captured == [2, 1, 8, 4]


def test_summarizer_start_captures_the_buckets_its_budgets_reach_before_the_gpu_loop(tiny_model, monkeypatch):
    loaded = SimpleNamespace(model=tiny_model, config=tiny_model.cfg, tokenizer=tiny_tokenizer(), name="tiny")
    s = Summarizer(loaded, EngineSettings(max_new_tokens=4, max_record_tokens=0),
                   Budgets(256, 8, 2048, {}, max_decode_seqs=40), dispatcher=FakeDispatcher(256, 16),
                   preprocessor=Preprocessor(loaded.tokenizer, 0))
    graphs = s.runner.decode_step
    graphs.use_graphs = True
    warmed: list[tuple[int | None, bool]] = []

    def warm(limit=None):  # record, then run eagerly: there is no CUDA to capture on
        warmed.append((limit, s._thread is None))
        graphs.use_graphs = False

    monkeypatch.setattr(graphs, "warm", warm)
    try:
        s.start()
    finally:
        s.close(drain=False)
    assert warmed == [(48, True)]  # the bucket holding 40 sequences, before the loop thread existed


def test_start_up_captures_every_bucket_the_budgets_reach():
    """capture_decode_graphs warms the buckets up to the one holding `reach` sequences (all of them
    when reach is None or past the largest); with graphs off it does nothing."""
    from worker.engine.decode_graphs import decode_buckets
    from worker.engine.warmup import capture_decode_graphs

    class Graphs:
        use_graphs, max_batch = True, 1024
        buckets = decode_buckets(1024)
        warmed = None

        def bucket_for(self, batch):
            return next(b for b in self.buckets if b >= batch)

        def warm(self, largest):
            self.warmed = largest

    graphs = Graphs()
    assert capture_decode_graphs(graphs, 2021) == 1024 == graphs.warmed
    assert capture_decode_graphs(graphs, None) == 1024 == graphs.warmed
    assert capture_decode_graphs(graphs, 300) == 384 == graphs.warmed
    assert capture_decode_graphs(graphs, 20) == 32 == graphs.warmed
    graphs.use_graphs, graphs.warmed = False, None
    assert capture_decode_graphs(graphs, 2021) is None and graphs.warmed is None
