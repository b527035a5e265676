"""Shared-prefix KV reuse in the engine: the same greedy outputs with the cache on and off."""

import random

import torch

from worker.engine.sequence import SamplingParams

from .helpers import make_engine, reference_greedy, run_until_done


def _prompts_with_heads(n: int, heads: list[list[int]], seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [list(heads[i % len(heads)]) + [rng.randrange(3, 256) for _ in range(rng.randint(2, 20))]
            for i in range(n)]


def _run(engine, prompts, max_new=6, waves=1):
    """Submit the prompts in `waves` (each wave after the previous finished); outputs in order."""
    seqs = []
    per = -(-len(prompts) // waves)
    for w in range(waves):
        wave = [engine.add(p, SamplingParams(max_new_tokens=max_new)) for p in prompts[w * per:(w + 1) * per]]
        run_until_done(engine, wave)
        seqs += wave
    assert all(s.error is None for s in seqs), [s.error for s in seqs if s.error]
    return seqs


def test_prefix_reuse_same_outputs_across_bins_and_waves(tiny_model):
    rng = random.Random(1)
    heads = [[rng.randrange(3, 256) for _ in range(37)], [rng.randrange(3, 256) for _ in range(21)]]
    prompts = _prompts_with_heads(12, heads, seed=2)
    off = _run(make_engine(tiny_model, token_budget=64), prompts, waves=3)
    engine = make_engine(tiny_model, token_budget=64, prefix_blocks=64)
    on = _run(engine, prompts, waves=3)
    assert [s.output for s in on] == [s.output for s in off]
    assert [s.output for s in on[:3]] == [reference_greedy(tiny_model, p, 6) for p in prompts[:3]]
    stats = engine.prefix.stats()
    assert sum(s.prefix_len for s in on[4:]) > 0 and stats["hit_tokens"] == sum(s.prefix_len for s in on)
    assert all(s.prefix_len % 8 == 0 and s.prefix_len < s.prompt_len for s in on)
    assert engine.prefix.cache.num_pinned_blocks == 0  # every head released
    assert engine.scheduler.slabs.num_used_rows == 0


def test_prefix_reuse_partial_match_diverging_mid_block(tiny_model):
    rng = random.Random(3)
    head = [rng.randrange(3, 256) for _ in range(40)]
    first = head + [7, 8, 9]
    second = head[:29] + [200, 201, 202, 203, 204, 205]  # diverges inside the fourth 8-token block
    engine = make_engine(tiny_model, prefix_blocks=32)
    (a,) = _run(engine, [first])
    (b,) = _run(engine, [second])
    assert a.prefix_len == 0 and b.prefix_len == 24  # three whole blocks in common
    assert b.output == reference_greedy(tiny_model, second, 6)


def test_prefix_reuse_evicted_mid_run_stays_exact(tiny_model):
    rng = random.Random(4)
    heads = [[rng.randrange(3, 256) for _ in range(33)] for _ in range(4)]
    pairs = [heads[(i // 2) % 4] for i in range(16)]  # each head twice in a row, then the next
    prompts = [_prompts_with_heads(1, [h], seed=i)[0] for i, h in enumerate(pairs)]
    engine = make_engine(tiny_model, token_budget=48, prefix_blocks=6)  # holds one head and a bit
    on = _run(engine, prompts, waves=16)
    assert engine.prefix.stats()["evictions"] > 0 and engine.prefix.stats()["hit_tokens"] > 0
    assert [s.output for s in on] == [reference_greedy(tiny_model, p, 6) for p in prompts]


def test_prefix_reuse_long_lane_prompt_continues_after_its_head(tiny_model):
    rng = random.Random(6)
    head = [rng.randrange(3, 256) for _ in range(48)]
    long_tail = [rng.randrange(3, 256) for _ in range(60)]
    engine = make_engine(tiny_model, token_budget=40, prefix_blocks=32)  # 48 + 60 tokens: chunked lane
    _run(engine, [head + [9, 9]])
    (seq,) = _run(engine, [head + long_tail])
    assert seq.prefix_len == 48
    assert seq.output == reference_greedy(tiny_model, head + long_tail, 6)


def test_prefix_reuse_logits_match_full_prefill(tiny_model):
    """The first sampled token's logits (from the suffix pass) agree with a full prefill's."""
    rng = random.Random(7)
    head = [rng.randrange(3, 256) for _ in range(32)]
    prompt = head + [5, 6, 7, 8, 9]
    engine = make_engine(tiny_model, prefix_blocks=16)
    _run(engine, [head + [1]])
    captured = []
    original = engine.runner.prefill_bin

    def capture(*args):
        logits = original(*args)
        captured.append(logits.clone())
        return logits

    engine.runner.prefill_bin = capture
    (seq,) = _run(engine, [prompt], max_new=1)
    assert seq.prefix_len == 32
    plain = make_engine(tiny_model)
    plain.runner.prefill_bin = capture
    _run(plain, [prompt], max_new=1)
    assert torch.allclose(captured[0], captured[1], atol=1e-5, rtol=1e-4)


def test_prefix_reuse_decoding_sequence_keeps_its_shared_head_pinned_until_it_finishes(tiny_model):
    rng = random.Random(6)
    head = [rng.randrange(3, 256) for _ in range(40)]
    engine = make_engine(tiny_model, prefix_blocks=32)
    _run(engine, [head + [5, 6]])  # caches the head's five 8-token blocks
    seq = engine.add(head + [9, 10, 11], SamplingParams(max_new_tokens=6))
    while seq not in engine.scheduler.decoding:
        engine.step()
    cache = engine.prefix.cache
    assert seq.prefix_len == 40 and seq.shared_head == (cache.first_row, 40)  # one run of consecutive rows
    row = engine.scheduler.decoding.seqs.index(seq)
    assert engine.scheduler.decoding.head_start[row] == cache.first_row
    assert engine.scheduler.decoding.head_len[row] == 40
    assert cache.num_pinned_blocks == 5  # the head decode reads; the prompt's own block was released
    run_until_done(engine, [seq])
    assert seq.output == reference_greedy(tiny_model, head + [9, 10, 11], 6)
    assert cache.num_pinned_blocks == 0 and seq.shared_head == (0, 0)
