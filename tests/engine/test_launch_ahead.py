"""A bin's prefill queued behind the step before it, read one step later (`Engine._launch_ahead`).
On by default on CUDA only; these CPU tests turn it on."""

import random

import numpy as np
import pytest
import torch

from worker.engine.kv_arena import SlabAllocator
from worker.engine.plans import Decode, PrefillBin
from worker.engine.scheduler import Scheduler
from worker.engine.sequence import SamplingParams, Sequence

from tests.engine.helpers import make_engine, random_prompts, reference_greedy, run_until_done


def _count_ahead(engine) -> list:
    """Every plan `admit_bin_ahead` hands the engine, with the decode batch's size at that moment and
    the launched step it goes behind."""
    admitted, original = [], engine.scheduler.admit_bin_ahead

    def admit_bin_ahead(launched):
        plan = original(launched)
        if plan is not None:
            admitted.append((plan, len(engine.scheduler.decoding), launched))
        return plan

    engine.scheduler.admit_bin_ahead = admit_bin_ahead
    return admitted


def test_bins_prefilled_behind_the_step_before_give_the_reference_outputs(tiny_model):
    engine = make_engine(tiny_model, token_budget=24, alignment=1, launch_ahead=True)  # a bin holds one or two prompts
    admitted = _count_ahead(engine)
    prompts = random_prompts(8, 6, 14, seed=60)
    news = [2, 5, 3, 7, 1, 4, 6, 2]
    seqs = [engine.add(p, SamplingParams(max_new_tokens=n)) for p, n in zip(prompts, news)]
    run_until_done(engine, seqs)
    assert any(isinstance(launched, PrefillBin) for _, _, launched in admitted)  # a bin behind a bin's prefill
    assert [s.output for s in seqs] == [reference_greedy(tiny_model, p, n) for p, n in zip(prompts, news)]
    assert all(s.error is None and s.finish_reason == "length" for s in seqs)
    engine.step()  # nothing left in flight, nothing held
    assert engine._in_flight is None and engine.scheduler.slabs.num_used_rows == 0


def test_rows_at_their_length_limit_make_room_behind_their_last_decode_step(tiny_model):
    engine = make_engine(tiny_model, token_budget=16, alignment=1, max_decode_seqs=2, launch_ahead=True)
    admitted = _count_ahead(engine)
    decode_sizes, original = [], engine.runner.decode
    engine.runner.decode = lambda ids, *rest: (decode_sizes.append(len(ids)), original(ids, *rest))[1]
    first = [engine.add(p, SamplingParams(max_new_tokens=2)) for p in random_prompts(2, 5, 7, seed=61)]
    while not all(s.output for s in first):  # both prefilled, decoding
        engine.step()
    later_prompts = random_prompts(2, 5, 7, seed=62)
    later = [engine.add(p, SamplingParams(max_new_tokens=3)) for p in later_prompts]
    run_until_done(engine, first + later)
    # the later bin was admitted behind a decode step while both first rows still decoded (bound 2):
    # both left at that step
    assert any(decoding == 2 and isinstance(launched, Decode) for _, decoding, launched in admitted)
    assert max(decode_sizes) <= 2  # the bound held
    assert [s.output for s in later] == [reference_greedy(tiny_model, p, 3) for p in later_prompts]


def test_bins_launched_ahead_with_shared_heads_and_evictions_stay_exact(tiny_model):
    rng = random.Random(64)
    heads = [[rng.randrange(3, 256) for _ in range(25)] for _ in range(3)]
    prompts = [heads[i % 3] + [rng.randrange(3, 256) for _ in range(rng.randint(2, 9))] for i in range(12)]
    # the prefix cache holds two heads at most
    engine = make_engine(tiny_model, token_budget=40, alignment=1, prefix_blocks=8, launch_ahead=True)
    admitted = _count_ahead(engine)
    news = [3 + i % 4 for i in range(12)]
    seqs = []
    for wave in range(3):  # later waves find heads cached, parked or evicted
        seqs += [engine.add(p, SamplingParams(max_new_tokens=n)) for p, n in
                 zip(prompts[wave * 4:(wave + 1) * 4], news[wave * 4:(wave + 1) * 4])]
        for _ in range(3):
            engine.step()
    run_until_done(engine, seqs)
    assert admitted and engine.prefix.stats()["hit_tokens"] > 0
    assert [s.output for s in seqs] == [reference_greedy(tiny_model, p, n) for p, n in zip(prompts, news)]
    engine.step()
    assert engine.prefix.cache.num_pinned_blocks == 0 and engine.scheduler.slabs.num_used_rows == 0


def test_out_of_memory_in_a_bin_launched_ahead_retries_it_and_keeps_the_step_before(tiny_model):
    engine = make_engine(tiny_model, token_budget=40, alignment=1, launch_ahead=True)
    admitted = _count_ahead(engine)
    original, failed = engine.runner.prefill_bin, []

    def prefill_bin(device_bin, starts, *rest, **kw):
        if admitted and not failed and len(starts) > 1:  # the first multi-prompt bin launched ahead
            failed.append(len(starts))
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return original(device_bin, starts, *rest, **kw)

    engine.runner.prefill_bin = prefill_bin
    prompts = random_prompts(10, 4, 9, seed=63)
    seqs = [engine.add(p, SamplingParams(max_new_tokens=4)) for p in prompts]
    run_until_done(engine, seqs)
    assert failed and engine.oom.events == 1
    assert [s.output for s in seqs] == [reference_greedy(tiny_model, p, 4) for p in prompts]
    assert all(s.error is None for s in seqs)


def _seq(i: int, n: int, new: int = 4) -> Sequence:
    return Sequence(i, list(range(3, 3 + n)), SamplingParams(max_new_tokens=new))


def _decoding(max_news: list[int]) -> tuple[Scheduler, Decode]:
    """A scheduler (at most 4 decoding) whose rows with these limits decode after one token each,
    a bin of two waiting for room, and its next (decode) step."""
    sched = Scheduler(SlabAllocator(400), eos_ids=(), chunk_tokens=64, max_decode_seqs=4)
    sched.add_bin("bin-a", [_seq(i, 8, new=n) for i, n in enumerate(max_news)])
    sched.postprocess(sched.schedule(), [7] * len(max_news))
    sched.add_bin("bin-b", [_seq(10, 8), _seq(11, 8)])
    step = sched.schedule()
    assert isinstance(step, Decode)  # 3 + 2 > 4: the bin waits
    return sched, step


def test_scheduler_admits_a_bin_ahead_only_with_room_after_the_launched_step():
    sched, step = _decoding([4, 4, 4])
    assert sched.admit_bin_ahead(step) is None  # no row leaves at this step
    sched, step = _decoding([2, 4, 4])
    plan = sched.admit_bin_ahead(step)  # one row leaves at this step: 2 + 2 fit
    assert isinstance(plan, PrefillBin) and plan.bin == "bin-b" and all(s.slab_start >= 0 for s in plan.seqs)
    sched.add_bin("bin-c", [_seq(12, 40)])  # full enough never to wait for decode's share
    assert sched.admit_bin_ahead(plan) is None  # behind bin-b's prefill its two join: 3 + 2 + 1 > 4
    sched.decoding.keep(np.array([False, False, True]))  # two rows gone: 1 + 2 + 1 fit
    assert isinstance(sched.admit_bin_ahead(plan), PrefillBin)
    mixed = Scheduler(SlabAllocator(200), eos_ids=(), chunk_tokens=64, mixed_steps=True)
    mixed.add_bin("bin", [_seq(0, 8)])
    assert mixed.admit_bin_ahead(Decode([])) is None  # mixed steps carry the rows


def test_behind_a_bins_prefill_a_small_bin_waits_for_decode_as_it_would_once_that_prefill_ran():
    sched = Scheduler(SlabAllocator(400), eos_ids=(), chunk_tokens=64)
    sched.add_bin("bin-a", [_seq(0, 8)])
    launched = sched.schedule()  # bin-a's prefill, its tokens not applied yet
    sched.add_bin("bin-b", [_seq(1, 8)])  # 8 prompt tokens of a 64-token budget: small
    assert sched.admit_bin_ahead(launched) is None  # bin-a's row will decode
    sched.postprocess(launched, [5])
    sched.waiting_bins.clear()
    sched.add_bin("bin-c", [_seq(2, 16), _seq(3, 16)])  # 32 of 64: full enough never to wait
    plan = sched.admit_bin_ahead(launched)
    assert isinstance(plan, PrefillBin) and plan.bin == "bin-c"
    alone = Scheduler(SlabAllocator(400), eos_ids=(), chunk_tokens=64)
    alone.add_bin("bin-d", [_seq(4, 8, new=1)])
    nobody = PrefillBin("bin-0", [])  # a launched prefill that adds no row to decode
    assert isinstance(alone.admit_bin_ahead(nobody), PrefillBin)  # nobody decodes


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the device-to-host read needs a GPU")
def test_a_steps_tokens_are_read_as_they_were_when_launched_whatever_is_queued_behind():
    from worker.engine.device_step import start_read

    tokens = torch.arange(4096, device="cuda")
    big = torch.randn(4096, 4096, device="cuda")
    host, copied = start_read(tokens)
    for _ in range(8):  # work queued behind the read, some of it overwriting the tokens
        big = torch.tanh(big @ big)
        tokens.add_(big[0, :4096].long())
    copied.synchronize()
    assert host.device.type == "cpu" and host.is_pinned()
    assert torch.equal(host, torch.arange(4096))


def test_with_a_step_on_the_device_the_engine_only_peeks_for_the_next_bin(tiny_model):
    """Blocking for a bin while a launched step waits to be read would hold a lone record's answer
    back by the idle wait (20 ms a prefill at low load)."""
    from worker.engine.engine import BUSY_TIMEOUT_S, IDLE_TIMEOUT_S

    engine = make_engine(tiny_model, token_budget=32, launch_ahead=True)
    waits, original = [], engine.dispatcher.next_bin
    launched = []
    engine.runner.prefill_bin = (lambda run: lambda *a, **kw: (launched.append(1), run(*a, **kw))[1])(
        engine.runner.prefill_bin)

    def next_bin(timeout):
        waits.append((len(launched), timeout))
        return original(timeout)

    engine.dispatcher.next_bin = next_bin
    seq = engine.add([5, 6, 7, 8], SamplingParams(max_new_tokens=1))  # answered by its prefill alone
    run_until_done(engine, [seq])
    assert seq.output == reference_greedy(tiny_model, [5, 6, 7, 8], 1)
    assert waits[0] == (0, IDLE_TIMEOUT_S)  # idle: nothing launched yet, a wait is free
    assert all(timeout == BUSY_TIMEOUT_S for n, timeout in waits if n > 0)  # the prefill launched: peek only


def test_on_a_cpu_steps_are_not_launched_ahead_unless_asked(tiny_model):
    engine = make_engine(tiny_model, token_budget=24, alignment=1)
    admitted = _count_ahead(engine)
    seqs = [engine.add(p, SamplingParams(max_new_tokens=3)) for p in random_prompts(6, 6, 14, seed=65)]
    run_until_done(engine, seqs)
    assert not engine.launch_ahead and admitted == []
