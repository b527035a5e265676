"""Scheduler decisions without a model: bin admission, holding, chunk/decode alternation."""

from worker.engine.kv_arena import SlabAllocator
from worker.engine.scheduler import Decode, PrefillBin, PrefillChunk, Scheduler
from worker.engine.sequence import SamplingParams, Sequence


def _seq(i: int, n: int, new: int = 4) -> Sequence:
    return Sequence(i, list(range(3, 3 + n)), SamplingParams(max_new_tokens=new))


def test_scheduler_holds_bin_until_slabs_free_then_admits():
    sched = Scheduler(SlabAllocator(30), eos_ids=(), chunk_tokens=8)
    a, b = _seq(0, 10), _seq(1, 10)
    sched.add_bin("bin-a", [a])
    plan = sched.schedule()
    assert isinstance(plan, PrefillBin) and a.slab_start == 0
    sched.postprocess(plan, [100])
    sched.add_bin("bin-b", [b, _seq(2, 10)])  # 28 rows > 16 free
    assert isinstance(sched.schedule(), Decode) and sched.is_holding_bin
    for token in (101, 102, 103):  # a finishes after 4 tokens and frees its slab
        finished = sched.postprocess(Decode([a]), [token])
    assert finished == [a] and a.output == [100, 101, 102, 103] and a.finish_reason == "length"
    plan = sched.schedule()
    assert isinstance(plan, PrefillBin) and plan.bin == "bin-b" and sched.slabs.num_used_rows == 28


def test_scheduler_long_input_chunks_alternate_with_decode():
    sched = Scheduler(SlabAllocator(100), eos_ids=(), chunk_tokens=8)
    short, long = _seq(0, 4, new=10), _seq(1, 20)
    sched.add_bin("bin", [short])
    sched.postprocess(sched.schedule(), [50])
    sched.add_long(long)
    kinds = []
    while not long.output:
        plan = sched.schedule()
        kinds.append(type(plan).__name__)
        if isinstance(plan, PrefillChunk):
            sched.postprocess(plan, [60] if plan.is_last else [])
        else:
            sched.postprocess(plan, [51] * len(plan.seqs))
    assert kinds == ["PrefillChunk", "Decode", "PrefillChunk", "Decode", "PrefillChunk"]
    assert long.num_prefilled == 20 and long.slab_start >= 0 and long in sched.running


def test_scheduler_small_bin_waits_for_decode_share_after_a_prefill():
    sched = Scheduler(SlabAllocator(400), eos_ids=(), chunk_tokens=64)
    first = _seq(0, 10, new=50)
    sched.add_bin("bin-a", [first])
    plan = sched.schedule()
    sched.observe_step(plan, 0.040)  # a prefill step's fixed cost
    sched.postprocess(plan, [100])
    sched.add_bin("bin-b", [_seq(1, 10, new=50)])  # 10 new tokens: a small bin
    steps = []
    for _ in range(5):
        plan = sched.schedule()
        steps.append(type(plan).__name__)
        sched.observe_step(plan, 0.020 if isinstance(plan, Decode) else 0.040)
        sched.postprocess(plan, [101] * len(plan.seqs))
    # 1.5 x 40 ms of decode (three 20 ms steps) before the small bin's prefill.
    assert steps == ["Decode", "Decode", "Decode", "PrefillBin", "Decode"]


def test_scheduler_bin_of_half_the_budget_joins_decoding_at_once():
    sched = Scheduler(SlabAllocator(400), eos_ids=(), chunk_tokens=64)
    first = _seq(0, 10, new=50)
    sched.add_bin("bin-a", [first])
    plan = sched.schedule()
    sched.observe_step(plan, 0.040)
    sched.postprocess(plan, [100])
    sched.add_bin("bin-b", [_seq(1, 16, new=50), _seq(2, 16, new=50)])  # 32 of 64 tokens
    assert isinstance(sched.schedule(), PrefillBin)


def test_scheduler_paces_small_bins_on_the_fixed_part_of_a_long_prefill_only():
    from worker.engine.scheduler import PREFILL_FIXED_COST_S

    sched = Scheduler(SlabAllocator(400), eos_ids=(), chunk_tokens=64)
    sched.add_bin("bin-a", [_seq(0, 10, new=50)])
    plan = sched.schedule()
    sched.observe_step(plan, 10 * PREFILL_FIXED_COST_S)  # a long prefill: mostly GPU work
    sched.postprocess(plan, [100])
    sched.add_bin("bin-b", [_seq(1, 10, new=50)])
    steps = []
    for _ in range(3):
        plan = sched.schedule()
        steps.append(type(plan).__name__)
        sched.observe_step(plan, PREFILL_FIXED_COST_S if isinstance(plan, Decode) else 0.0)
        sched.postprocess(plan, [101] * len(plan.seqs))
    assert steps == ["Decode", "Decode", "PrefillBin"]  # 1.5 x the fixed part, not 1.5 x the whole
