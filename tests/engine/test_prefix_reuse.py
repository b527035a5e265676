"""Shared-prefix KV reuse in the engine: the same greedy outputs with the cache on and off."""

import random

import torch

from worker.engine.sequence import SamplingParams

from tests.engine.helpers import make_engine, reference_greedy, run_until_done


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

    def capture(*args, **kw):
        logits = original(*args, **kw)
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


def _burst(heads: int, per_head: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    tops = [[rng.randrange(3, 256) for _ in range(40)] for _ in range(heads)]
    return _prompts_with_heads(heads * per_head, tops, seed=seed + 1)


def test_prefix_reuse_burst_prefills_each_head_once(tiny_model):
    """All prompts added before any prefill: one per head prefills it, the others wait and reuse it."""
    prompts = _burst(2, 6, seed=8)
    off = _run(make_engine(tiny_model, token_budget=256), prompts)
    engine = make_engine(tiny_model, token_budget=256, prefix_blocks=64)
    on = _run(engine, prompts)
    assert [s.output for s in on] == [s.output for s in off]
    assert sorted(s.prefix_len for s in on) == [0, 0] + [40] * 10  # the two first of their head prefill it
    stats = engine.prefix.stats()
    assert stats["lookups"] == 12 and stats["hit_tokens"] == 400
    assert engine.prefix.cache.num_pinned_blocks == 0 and engine.scheduler.slabs.num_used_rows == 0


def test_prefix_reuse_waiters_of_a_failed_prompt_go_ahead_and_finish(tiny_model):
    prompts = _burst(1, 5, seed=9)
    engine = make_engine(tiny_model, token_budget=256, prefix_blocks=64)
    original, calls = engine.runner.prefill_bin, []

    def fail_first(*args, **kw):
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("the first bin fails")
        return original(*args, **kw)

    engine.runner.prefill_bin = fail_first
    seqs = [engine.add(p, SamplingParams(max_new_tokens=6)) for p in prompts]
    run_until_done(engine, seqs)
    failed = [s for s in seqs if s.error is not None]
    assert len(failed) == 1 and "first bin" in str(failed[0].error)  # only the claimer was in that bin
    done = [s for s in seqs if s.error is None]
    assert [s.prefix_len for s in done] == [0] * 4  # the head never got cached: they all go ahead at once
    assert [s.output for s in done] == [reference_greedy(tiny_model, s.prompt, 6) for s in done]
    assert engine.prefix.cache.num_pinned_blocks == 0 and engine.num_unfinished == 0


def test_prefix_reuse_close_intake_with_parked_prompts_still_finishes_them_all(tiny_model):
    prompts = _burst(2, 4, seed=10)
    engine = make_engine(tiny_model, token_budget=256, prefix_blocks=64)
    seqs = [engine.add(p, SamplingParams(max_new_tokens=4)) for p in prompts]
    assert sum(s.parked for s in seqs) == 6
    engine.close_intake()  # the dispatcher closes only once the parked prompts are queued
    steps = 0
    while engine.step():
        steps += 1
        assert steps < 1000
    assert all(s.error is None and len(s.output) == 4 for s in seqs)
    assert [s.output for s in seqs] == [reference_greedy(tiny_model, p, 4) for p in prompts]


def test_prefix_reuse_head_too_big_for_the_cache_never_serialises_the_burst(tiny_model):
    """A 40-token head, a 24-token cache: the claimed block past the cache's end is never cached, so
    its waiters go ahead together instead of claiming it one after another (one bin each)."""
    prompts = _burst(1, 12, seed=11)
    engine = make_engine(tiny_model, token_budget=512, prefix_blocks=3)
    bins, original = [], engine.runner.prefill_bin
    engine.runner.prefill_bin = lambda b, starts, *a, **kw: (bins.append(len(starts)), original(b, starts, *a, **kw))[1]
    seqs = _run(engine, prompts, max_new=4)
    assert len(bins) <= 3 and sum(bins) == 12
    assert [s.output for s in seqs] == [reference_greedy(tiny_model, p, 4) for p in prompts]
    assert engine.prefix.cache.num_pinned_blocks == 0


def test_step_trace_counts_the_tokens_computed_not_those_the_cache_served(tiny_model):
    from worker.engine.step_trace import StepTrace

    rng = random.Random(6)
    heads = [[rng.randrange(3, 256) for _ in range(40)]]
    prompts = _prompts_with_heads(9, heads, seed=7)
    engine = make_engine(tiny_model, token_budget=64, prefix_blocks=64)
    trace = StepTrace()
    engine.step_observers.append(trace.observe)
    seqs = _run(engine, prompts, max_new=4, waves=3)
    summary = trace.summary()
    served = sum(s.prefix_len for s in seqs)
    assert served > 0  # later waves found the head cached
    assert summary["prefill"]["tokens_total"] == sum(s.prompt_len for s in seqs) - served
    # every sequence's 3 tokens after the first (which the prefill samples) are decode rows
    assert summary["decode"]["tokens_total"] == sum(len(s.output) - 1 for s in seqs) == 3 * len(seqs)
