"""The next decode step queued behind a launched one before its tokens are read, fed the tokens
where they were sampled (`Scheduler.decode_ahead`, `Engine._decode_ahead`). On with launch-ahead
(CUDA's default); these CPU tests turn it on."""

import dataclasses

import numpy as np
import pytest
import torch

from worker.engine.kv_arena import SlabAllocator
from worker.engine.plans import Decode
from worker.engine.scheduler import Scheduler
from worker.engine.sequence import SamplingParams, Sequence

from tests.engine.helpers import make_engine, random_prompts, reference_greedy, run_until_done


def _count_decode_ahead(engine) -> list[tuple[Decode, int]]:
    """Every decode step the scheduler plans ahead, with how many of its rows were already done then
    (ended in a step not yet read when it was planned: none can be, it skips those)."""
    planned, original = [], engine.scheduler.decode_ahead

    def decode_ahead(launched):
        out = original(launched)
        if out is not None:
            planned.append((out[0], sum(s.is_done for s in out[0].seqs)))
        return out

    engine.scheduler.decode_ahead = decode_ahead
    return planned


def test_decode_steps_queued_ahead_give_the_reference_outputs_at_every_length_limit(tiny_model):
    engine = make_engine(tiny_model, token_budget=64, alignment=1, launch_ahead=True)
    planned = _count_decode_ahead(engine)
    prompts = random_prompts(6, 5, 12, seed=70)
    news = [1, 2, 3, 5, 8, 13]
    seqs = [engine.add(p, SamplingParams(max_new_tokens=n)) for p, n in zip(prompts, news)]
    run_until_done(engine, seqs)
    assert len(planned) >= 8  # most decode steps went ahead
    assert all(done == 0 for _, done in planned)
    assert [s.output for s in seqs] == [reference_greedy(tiny_model, p, n) for p, n in zip(prompts, news)]
    assert all(s.finish_reason == "length" for s in seqs)
    engine.step()  # nothing left in flight, nothing held
    assert engine._in_flight is None and engine.scheduler.slabs.num_used_rows == 0


def test_a_row_that_ends_on_eos_runs_one_step_ahead_more_and_that_token_is_dropped(tiny_model):
    prompts = random_prompts(4, 8, 12, seed=71)
    full = [reference_greedy(tiny_model, p, 10) for p in prompts]
    eos = full[0][3]  # the first prompt ends on its 4th token; others may end on it too, or not
    expected = [f[:f.index(eos)] if eos in f else f for f in full]
    engine = make_engine(tiny_model, token_budget=64, alignment=1, eos_ids=(eos,), launch_ahead=True)
    planned = _count_decode_ahead(engine)
    seqs = [engine.add(p, SamplingParams(max_new_tokens=10)) for p in prompts]
    ran_ahead_while_done = []
    original = engine.scheduler.postprocess

    def postprocess(plan, tokens):
        if isinstance(plan, Decode) and plan.ahead is not None:
            ran_ahead_while_done.append(sum(s.is_done for s in plan.seqs))
        return original(plan, tokens)

    engine.scheduler.postprocess = postprocess
    run_until_done(engine, seqs)
    assert [s.output for s in seqs] == expected
    assert seqs[0].finish_reason == "eos"
    assert planned and max(ran_ahead_while_done) >= 1  # a row that had ended still ran once, its token unused
    engine.step()
    assert engine.scheduler.slabs.num_used_rows == 0


def test_repetition_penalty_and_stop_strings_are_the_same_with_decode_steps_ahead(tiny_model):
    prompts = random_prompts(5, 6, 12, seed=72)
    detok = lambda ids: "".join(f"<{i}>" for i in ids)  # noqa: E731
    stop = (f"<{reference_greedy(tiny_model, prompts[1], 8)[4]}>",)
    outputs = []
    for ahead in (False, True):
        engine = make_engine(tiny_model, token_budget=64, alignment=1, detokenize=detok, launch_ahead=ahead)
        planned = _count_decode_ahead(engine)
        seqs = [engine.add(p, SamplingParams(max_new_tokens=9, repetition_penalty=1.8, stop=stop)) for p in prompts]
        run_until_done(engine, seqs)
        assert bool(planned) == ahead
        outputs.append([(s.output, s.finish_reason) for s in seqs])
    assert outputs[0] == outputs[1]
    assert any(reason == "stop" for _, reason in outputs[1])


def test_a_decode_step_that_cannot_be_queued_ahead_runs_as_usual(tiny_model):
    engine = make_engine(tiny_model, token_budget=64, alignment=1, launch_ahead=True)
    planned = _count_decode_ahead(engine)
    original, failed = engine.runner.decode, []

    def decode(ids, *rest):
        if isinstance(ids, torch.Tensor) and not failed:  # the first step fed from the device
            failed.append(len(ids))
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return original(ids, *rest)

    engine.runner.decode = decode
    prompts = random_prompts(4, 5, 9, seed=73)
    seqs = [engine.add(p, SamplingParams(max_new_tokens=6)) for p in prompts]
    run_until_done(engine, seqs)
    assert failed and len(planned) > 1  # later steps went ahead again
    assert [s.output for s in seqs] == [reference_greedy(tiny_model, p, 6) for p in prompts]
    assert engine.oom.events == 0  # planned again after the launched step, it ran


def test_decode_steps_ahead_are_timed_from_the_end_of_the_step_before(tiny_model):
    """The pacer adds decode steps' times: spans that overlapped would count decoding twice."""
    engine = make_engine(tiny_model, token_budget=64, alignment=1, launch_ahead=True)
    planned = _count_decode_ahead(engine)
    spans = []
    engine.step_observers.append(lambda plan, started, taken, ended: spans.append((plan, taken, ended)))
    seqs = [engine.add(p, SamplingParams(max_new_tokens=7)) for p in random_prompts(3, 5, 9, seed=74)]
    run_until_done(engine, seqs)
    ahead = [i for i, (plan, _, _) in enumerate(spans) if isinstance(plan, Decode) and plan.ahead is not None]
    assert len(ahead) >= 4 and len(planned) == len(ahead)
    assert all(spans[i][1] >= spans[i - 1][2] for i in ahead)


def _seq(i: int, n: int, new: int) -> Sequence:
    return Sequence(i, list(range(3, 3 + n)), SamplingParams(max_new_tokens=new))


def test_the_scheduler_plans_ahead_only_rows_going_on_and_only_when_decode_comes_next():
    sched = Scheduler(SlabAllocator(400), eos_ids=(), chunk_tokens=64)
    sched.add_bin("bin", [_seq(0, 8, new=2), _seq(1, 8, new=5), _seq(2, 8, new=5)])
    sched.postprocess(sched.schedule(), [7, 7, 7])
    step = sched.schedule()
    assert isinstance(step, Decode) and step.ahead is None
    plan, keep = sched.decode_ahead(step)
    assert keep.tolist() == [1, 2]  # row 0 reaches its limit of 2 at `step`
    assert [s.seq_id for s in plan.seqs] == [1, 2]
    assert plan.ahead.position.tolist() == (sched.decoding.position[1:] + 1).tolist()
    assert plan.ahead.out_len.tolist() == [2, 2]
    sched.decodes_ahead = False  # a benchmark's switch
    assert sched.decode_ahead(step) is None
    sched.decodes_ahead = True
    after, keep = sched.decode_ahead(plan)  # planned behind the step ahead, from its rows
    assert keep.tolist() == [0, 1] and after.ahead.out_len.tolist() == [3, 3]
    sched.postprocess(step, [8, 8, 8])  # row 0 leaves; the step ahead's rows are the batch's
    assert sched.postprocess(plan, [9, 9]) == [] and sched.decoding.out_len.tolist() == [3, 3]

    sched.add_long(_seq(3, 200, new=2))  # a long input waits: its chunks alternate with decoding
    assert sched.decode_ahead(sched.schedule()) is None
    mixed = Scheduler(SlabAllocator(200), eos_ids=(), chunk_tokens=64, mixed_steps=True)
    mixed.add_bin("bin", [_seq(0, 8, new=4)])
    mixed.postprocess(mixed.schedule(), [7])
    assert mixed.decode_ahead(mixed.schedule()) is None  # a bin's prefill may carry the rows
    last = Scheduler(SlabAllocator(200), eos_ids=(), chunk_tokens=64)
    last.add_bin("bin", [_seq(0, 8, new=2)])
    last.postprocess(last.schedule(), [7])
    assert last.decode_ahead(last.schedule()) is None  # every row ends at this step
    assert np.array_equal(last.decoding.out_len, [1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="device-fed decode steps need a GPU")
def test_on_a_gpu_decode_steps_fed_from_the_device_give_the_same_tokens():
    """Replayed decode graphs fed the tokens the step before sampled, through the staging buffer,
    without a host read in between: bitwise the tokens of steps launched one at a time (the rows
    at each step are the same: every row ends at its length limit, which both leave out)."""
    from tests.engine.conftest import FakeDispatcher
    from worker.engine.engine import Engine
    from worker.engine.runner import ModelRunner
    from worker.model import ModelConfig, random_model
    from worker.model.kv_cache import KVCache

    class CudaDispatcher(FakeDispatcher):
        def to_device(self, b, device):
            return dataclasses.replace(b, **{f.name: getattr(b, f.name).to(device) for f in dataclasses.fields(b)
                                             if isinstance(getattr(b, f.name), torch.Tensor)})

    shape = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=4, num_heads=9,
                 num_kv_heads=3, head_dim=64, rope_theta=100000.0, max_position_embeddings=8192,
                 tie_word_embeddings=True, eos_token_ids=())
    model = random_model(ModelConfig.tiny(**shape), device="cuda", dtype=torch.bfloat16, backend="torch_fa2").model
    prompts = random_prompts(40, 20, 300, seed=75, vocab=49152)
    news = [1 + i % 17 for i in range(40)]
    outputs = []
    for ahead in (False, True):
        kv = KVCache.allocate(model.cfg, 40 * 320, torch.bfloat16, "cuda")
        engine = Engine(ModelRunner(model, kv, "cuda"), CudaDispatcher(token_budget=16384, alignment=8),
                        SlabAllocator(40 * 320), eos_ids=(), max_context=8192, launch_ahead=ahead)
        planned = _count_decode_ahead(engine)
        seqs = [engine.add(p, SamplingParams(max_new_tokens=n)) for p, n in zip(prompts, news)]
        run_until_done(engine, seqs)
        assert all(s.error is None for s in seqs)
        assert len(planned) >= (10 if ahead else 0) and (ahead or not planned)
        outputs.append([s.output for s in seqs])
    assert outputs[0] == outputs[1]
