"""Mixed steps (a bin's prefill carries every decoding sequence's next token in one forward) and bins
prefilled in step-sized parts while sequences decode. Same tokens as the reference, nothing lost."""

import pytest
import torch

from worker.engine import prefill_pacing
from worker.engine.sequence import SamplingParams

from tests.engine.helpers import make_engine, random_prompts, reference_greedy, run_until_done
from tests.engine.test_engine import _reference_greedy_penalised


def _record_prefills(engine) -> list[tuple[int, int]]:
    """(bin sequences, decode rows carried) of every prefill_bin call."""
    calls = []
    original = engine.runner.prefill_bin

    def prefill_bin(device_bin, starts, *rest, decode=None):
        calls.append((len(starts), 0 if decode is None else len(decode.tokens)))
        return original(device_bin, starts, *rest, decode=decode)

    engine.runner.prefill_bin = prefill_bin
    return calls


def _staggered(engine, prompts, params, first=2, warm_steps=3):
    """Submit `first` prompts, let them start decoding, then the rest (they arrive while decoding)."""
    seqs = [engine.add(p, sp) for p, sp in zip(prompts[:first], params[:first])]
    for _ in range(warm_steps):
        engine.step()
    seqs += [engine.add(p, sp) for p, sp in zip(prompts[first:], params[first:])]
    run_until_done(engine, seqs)
    return seqs


def test_mixed_steps_carry_decoding_rows_and_match_the_reference(tiny_model):
    prompts = random_prompts(7, 4, 24, seed=51)
    max_new = [12, 9, 5, 7, 3, 6, 8]
    engine = make_engine(tiny_model, token_budget=40, mixed_steps=True)
    calls = _record_prefills(engine)
    seqs = _staggered(engine, prompts, [SamplingParams(max_new_tokens=n) for n in max_new])
    assert any(rows for _, rows in calls)  # some bins were prefilled beside decoding sequences
    for seq, p, n in zip(seqs, prompts, max_new):
        assert seq.output == reference_greedy(tiny_model, p, n) and seq.finish_reason == "length"
    assert engine.scheduler.slabs.num_used_rows == 0 and not engine.scheduler.decoding


def test_mixed_steps_with_cached_heads_and_repetition_penalty_match_the_reference(tiny_model):
    head = random_prompts(1, 24, 24, seed=52)[0]
    prompts = [head + tail for tail in random_prompts(6, 3, 12, seed=53)]
    engine = make_engine(tiny_model, token_budget=48, prefix_blocks=32, mixed_steps=True)
    calls = _record_prefills(engine)
    params = [SamplingParams(max_new_tokens=8, repetition_penalty=2.0)] * len(prompts)
    seqs = _staggered(engine, prompts, params, first=1)
    assert any(rows for _, rows in calls) and any(s.prefix_len for s in seqs)
    for seq, p in zip(seqs, prompts):
        assert seq.output == _reference_greedy_penalised(tiny_model, p, 8, 2.0)


def test_mixed_step_out_of_memory_runs_prefill_and_decode_apart_and_loses_nothing(tiny_model):
    prompts = random_prompts(5, 5, 16, seed=54)
    engine = make_engine(tiny_model, token_budget=40, mixed_steps=True)
    original = engine.runner.prefill_bin
    mixed_tries = []

    def prefill_bin(device_bin, starts, *rest, decode=None):
        if decode is not None:
            mixed_tries.append(len(decode.tokens))
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return original(device_bin, starts, *rest)

    engine.runner.prefill_bin = prefill_bin
    seqs = _staggered(engine, prompts, [SamplingParams(max_new_tokens=6)] * len(prompts))
    # Each failure halves the decode rows a mixed step may carry; the bin ran again each time.
    assert mixed_tries[0] == 2 and all(b <= a // 2 for a, b in zip(mixed_tries, mixed_tries[1:]))
    assert engine.scheduler.max_mixed_rows == mixed_tries[-1] // 2
    assert [s.output for s in seqs] == [reference_greedy(tiny_model, p, 6) for p in prompts]
    assert all(s.error is None for s in seqs) and engine.scheduler.slabs.num_used_rows == 0


@pytest.mark.parametrize("mixed", [True, False], ids=["mixed", "separate"])
def test_large_bin_prefilled_in_step_sized_parts_while_decoding_with_mixed_steps_only(tiny_model, monkeypatch, mixed):
    # Every measured prompt token costs more than a step may take: parts of one sequence each.
    monkeypatch.setattr(prefill_pacing, "PREFILL_FIXED_COST_S", 0.0)
    monkeypatch.setattr(prefill_pacing, "STEP_TARGET_S", 1e-12)
    prompts = random_prompts(6, 6, 10, seed=55)
    engine = make_engine(tiny_model, token_budget=64, mixed_steps=mixed)
    calls = _record_prefills(engine)
    seqs = _staggered(engine, prompts, [SamplingParams(max_new_tokens=10)] * len(prompts), first=1)
    later = [n for n, rows in calls if rows] if mixed else [n for n, _ in calls[1:]]
    assert len(engine.dispatcher.bins_emitted[-1]) > 1  # the dispatcher packed them together
    if mixed:  # each part carries the decode rows
        assert engine.scheduler.step_prompt_tokens() == 1
        assert later and set(later) == {1}  # while sequences decode, one sequence per step
    else:  # run apart from decoding, parts cost more than they save (docs/streaming.md): bins stay whole
        assert engine.scheduler.step_prompt_tokens() is None
        assert later == [len(engine.dispatcher.bins_emitted[-1])]
    assert [s.output for s in seqs] == [reference_greedy(tiny_model, p, 10) for p in prompts]
    assert engine.scheduler.slabs.num_used_rows == 0
