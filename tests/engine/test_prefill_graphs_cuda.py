"""On a GPU: a bin's prefill replayed from its bucket's CUDA graph gives the eager prefill's logits and
KV rows (SmolLM2-135M shape, random bf16 weights, FlashAttention-2), from zero and through the tape,
and a second bin of the same bucket replays the same graph."""

import pytest
import torch

from worker.engine.runner import ModelRunner
from worker.model import ModelConfig, random_model
from worker.model.kv_cache import KVCache

from tests.engine.test_prefill_graphs import _bin, _spans

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")

SMOL = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9,
            num_kv_heads=3, head_dim=64, rope_theta=100000.0, max_position_embeddings=8192,
            tie_word_embeddings=True, eos_token_ids=())
ROWS = 8192


@pytest.fixture(scope="module")
def smol():
    return random_model(ModelConfig.tiny(**SMOL), device="cuda", dtype=torch.bfloat16, backend="torch_fa2").model


def _pair(model):
    """Two runners over equal tapes: one eager, one replaying prefill graphs."""
    kv = KVCache.allocate(model.cfg, ROWS, torch.bfloat16, "cuda")
    for t in kv.k + kv.v:
        t.normal_()  # earlier prompts' rows, read through the tape
    twin = KVCache.allocate(model.cfg, ROWS, torch.bfloat16, "cuda")
    for mine, theirs in zip(twin.k + twin.v, kv.k + kv.v):
        mine.copy_(theirs)
    return ModelRunner(model, kv, "cuda"), ModelRunner(model, twin, "cuda", largest_bin=(4096, 64))


def _to_cuda(b):
    return type(b)(*(t.cuda() for t in (b.input_ids, b.position_ids, b.cu_seqlens, b.seq_lens, b.last_token_index)),
                   num_real_tokens=b.num_real_tokens, ready=None)


@pytest.mark.parametrize("through_tape", [False, True], ids=["from-zero", "through-the-tape"])
def test_a_replayed_prefill_matches_the_eager_one(smol, through_tape, monkeypatch):
    monkeypatch.setenv("TELESUM_PREFILL_GRAPHS", "1")  # off by default
    eager, graphed = _pair(smol)
    assert graphed.prefill_step is not None
    for seed in range(2):  # the second bin replays the first one's graph
        lens = [301, 77, 512, 5, 260] if seed == 0 else [290, 90, 498, 12, 250]
        b = _to_cuda(_bin(lens, SMOL["vocab_size"], seed=seed))
        starts = [0, 1024, 2048, 3072, 4096]
        prefix = [64, 0, 128, 16, 0] if through_tape else None
        want = eager.prefill_bin(b, starts, _spans(b), 1024, prefix)
        got = graphed.prefill_bin(b, starts, _spans(b), 1024, prefix)
        torch.cuda.synchronize()
        assert len(graphed.prefill_step._graphs) == 1
        scale = want.abs().max().item()
        assert (got - want).abs().max().item() <= 0.02 * scale
        assert torch.equal(got.argmax(-1), want.argmax(-1))
        for mine, theirs in zip(graphed.kv.k + graphed.kv.v, eager.kv.k + eager.kv.v):
            assert (mine.float() - theirs.float()).abs().max().item() <= 0.02 * theirs.abs().max().item()


def _pool_bytes(pool) -> int:
    return sum(s["total_size"] for s in torch.cuda.memory_snapshot() if tuple(s["segment_pool_id"]) == tuple(pool))


def test_smaller_buckets_reuse_the_pool_the_largest_sized(smol, monkeypatch):
    """The worker captures the largest bucket first, as the probe held it: a smaller bin's capture
    afterwards takes no new memory for the graphs' pool (the arena was sized beside that pool)."""
    monkeypatch.setenv("TELESUM_PREFILL_GRAPHS", "1")
    eager, graphed = _pair(smol)
    graphs = graphed.prefill_step
    assert graphs.capture_largest() == 2 and len(graphs._graphs) == 2
    pool = _pool_bytes(graphs._pool)
    assert pool > 0
    b = _to_cuda(_bin([301, 77, 512, 5, 260], SMOL["vocab_size"], seed=0))
    starts = [0, 1024, 2048, 3072, 4096]
    want = eager.prefill_bin(b, starts, _spans(b), 1024)
    got = graphed.prefill_bin(b, starts, _spans(b), 1024)
    torch.cuda.synchronize()
    assert len(graphs._graphs) == 3  # the small bin's own bucket, captured after the largest
    assert _pool_bytes(graphs._pool) == pool
    assert torch.equal(got.argmax(-1), want.argmax(-1))
