"""Scheduler decisions without a model: bin admission, holding, chunk/decode alternation."""

from worker.engine.kv_arena import SlabAllocator
from worker.engine.plans import Decode, MixedStep, PrefillBin, PrefillChunk
from worker.engine.prefill_pacing import CHUNK_TARGET_S, MIN_CHUNK_TOKENS
from worker.engine.scheduler import Scheduler
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
    sched = Scheduler(SlabAllocator(400), eos_ids=(), chunk_tokens=64, mixed_steps=True)
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
    assert steps == ["Decode", "Decode", "Decode", "MixedStep", "Decode"]


def test_scheduler_bin_of_half_the_budget_joins_decoding_at_once():
    sched = Scheduler(SlabAllocator(400), eos_ids=(), chunk_tokens=64)
    first = _seq(0, 10, new=50)
    sched.add_bin("bin-a", [first])
    plan = sched.schedule()
    sched.observe_step(plan, 0.040)
    sched.postprocess(plan, [100])
    sched.add_bin("bin-b", [_seq(1, 16, new=50), _seq(2, 16, new=50)])  # 32 of 64 tokens
    plan = sched.schedule()
    assert isinstance(plan, PrefillBin) and plan.bin == "bin-b"


def test_scheduler_paces_small_bins_on_the_fixed_part_of_a_long_prefill_only():
    from worker.engine.prefill_pacing import PREFILL_FIXED_COST_S

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


def _splitter(work, seqs, k):
    return (work, "head", k), (work, "rest", k)


def test_scheduler_mixed_step_carries_every_decoding_sequence_and_they_advance_first():
    sched = Scheduler(SlabAllocator(400), eos_ids=(), chunk_tokens=64, mixed_steps=True)
    first = _seq(0, 10, new=3)
    sched.add_bin("bin-a", [first])
    sched.postprocess(sched.schedule(), [100])
    sched.postprocess(sched.schedule(), [101])  # a decode step: first has 2 of its 3 tokens
    new = _seq(1, 40, new=5)
    sched.add_bin("bin-b", [new])
    plan = sched.schedule()
    assert isinstance(plan, MixedStep) and plan.seqs == [new, first]
    finished = sched.postprocess(plan, [200, 102])
    assert finished == [first] and first.output == [100, 101, 102] and first.slab_start == -1
    assert new.output == [200] and sched.running == [new]


def test_scheduler_cuts_a_large_bin_into_step_sized_parts_while_sequences_decode():
    from worker.engine.prefill_pacing import PREFILL_FIXED_COST_S, STEP_TARGET_S

    sched = Scheduler(SlabAllocator(10_000), eos_ids=(), chunk_tokens=2000, split_bin=_splitter, mixed_steps=True)
    sched.add_bin("bin-a", [_seq(0, 1000, new=50)])
    plan = sched.schedule()
    assert sched.step_prompt_tokens() is None  # nothing measured yet: no cut
    # 1000 prompt tokens took the fixed cost + 2 x the step target: a step holds 500 tokens.
    sched.observe_step(plan, PREFILL_FIXED_COST_S + 2 * STEP_TARGET_S)
    sched.postprocess(plan, [100])
    assert sched.step_prompt_tokens() == 500
    seqs = [_seq(i, 200, new=50) for i in range(1, 6)]
    sched.add_bin("bin-b", seqs)
    parts = []
    for _ in range(3):  # no pacing between the parts (nor before: half the token budget)
        plan = sched.schedule()
        assert isinstance(plan, MixedStep)
        parts.append((plan.prefill.bin, [s.seq_id for s in plan.prefill.seqs]))
        sched.observe_step(plan, PREFILL_FIXED_COST_S + 2 * STEP_TARGET_S * 400 / 1000)  # same cost per token
        sched.postprocess(plan, [7] * len(plan.seqs))
    assert parts == [(("bin-b", "head", 2), [1, 2]),
                     ((("bin-b", "rest", 2), "head", 2), [3, 4]),
                     ((("bin-b", "rest", 2), "rest", 2), [5])]
    assert not sched.waiting_bins and [s.seq_id for s in sched.running] == [0, 1, 2, 3, 4, 5]


def test_scheduler_runs_a_decode_step_between_the_parts_of_a_cut_bin():
    from worker.engine.prefill_pacing import PREFILL_FIXED_COST_S, STEP_TARGET_S

    sched = Scheduler(SlabAllocator(10_000), eos_ids=(), chunk_tokens=2000, split_bin=_splitter)
    sched.add_bin("bin-a", [_seq(0, 1000, new=50)])
    plan = sched.schedule()
    sched.observe_step(plan, PREFILL_FIXED_COST_S + 2 * STEP_TARGET_S)  # a step holds 500 tokens
    sched.postprocess(plan, [100])
    sched.add_bin("bin-b", [_seq(i, 200, new=50) for i in range(1, 6)])
    steps = []
    for _ in range(5):
        plan = sched.schedule()
        steps.append(type(plan).__name__ if isinstance(plan, Decode) else [s.seq_id for s in plan.seqs])
        tokens = sum(s.prompt_len for s in plan.seqs)  # the same cost per prompt token
        sched.observe_step(plan, 0.01 if isinstance(plan, Decode) else PREFILL_FIXED_COST_S + tokens * 1e-4)
        sched.postprocess(plan, [7] * len(plan.seqs))
    assert steps == [[1, 2], "Decode", [3, 4], "Decode", [5]]
    assert [s.seq_id for s in sched.running] == [0, 1, 2, 3, 4, 5]


def test_scheduler_keeps_a_bin_whole_when_nothing_decodes():
    from worker.engine.prefill_pacing import PREFILL_FIXED_COST_S, STEP_TARGET_S

    sched = Scheduler(SlabAllocator(10_000), eos_ids=(), chunk_tokens=4096, split_bin=_splitter)
    sched.add_bin("bin-a", [_seq(0, 1000, new=1)])
    plan = sched.schedule()
    sched.observe_step(plan, PREFILL_FIXED_COST_S + 2 * STEP_TARGET_S)
    assert sched.postprocess(plan, [100])  # finished: nothing decodes
    sched.add_bin("bin-b", [_seq(i, 200) for i in range(1, 6)])
    plan = sched.schedule()
    assert isinstance(plan, PrefillBin) and plan.bin == "bin-b" and len(plan.seqs) == 5


def test_scheduler_step_size_ignores_one_slow_prefill():
    from worker.engine.prefill_pacing import PREFILL_FIXED_COST_S, STEP_TARGET_S

    sched = Scheduler(SlabAllocator(100_000), eos_ids=(), chunk_tokens=4096, split_bin=_splitter)
    seqs = [_seq(i, 1000, new=1) for i in range(4)]
    observe = lambda seq, s: sched.observe_step(PrefillBin("bin", [seq]), s)  # noqa: E731
    observe(seqs[0], PREFILL_FIXED_COST_S + 100 * STEP_TARGET_S)  # the first step of a shape: compiling
    for seq in seqs[1:]:
        observe(seq, PREFILL_FIXED_COST_S + 2 * STEP_TARGET_S)
    assert sched.step_prompt_tokens() == 500  # the median, not pulled down to 10 tokens by the outlier


def test_scheduler_long_lane_takes_a_bounded_share_while_a_short_sequence_decodes():
    # A 2-core CPU: a long record's chunk takes 40 decode steps' time. A short sequence admitted
    # behind it gets decode steps for as long as each chunk ran, so it finishes after one more
    # chunk instead of one chunk per token (20 chunks: 41 s); the long input keeps its share.
    chunk_s, decode_s = 2.0, 0.05
    sched = Scheduler(SlabAllocator(4000), eos_ids=(), chunk_tokens=64)
    long, short = _seq(0, 64 * 30, new=4), _seq(1, 10, new=20)
    sched.add_long(long)
    clock, chunks, finished_at = 0.0, 0, {}
    while len(finished_at) < 2:
        if clock >= chunk_s and short.status.name == "WAITING" and not sched.waiting_bins:
            sched.add_bin("bin", [short])  # arrives while the first chunk runs
        plan = sched.schedule()
        seconds = chunk_s if isinstance(plan, PrefillChunk) else decode_s
        chunks += isinstance(plan, PrefillChunk)
        clock += seconds
        sched.observe_step(plan, seconds)
        if isinstance(plan, PrefillChunk):
            done = sched.postprocess(plan, [60] if plan.is_last else [])
        else:
            done = sched.postprocess(plan, [51] * len(plan.seqs))
        finished_at.update({seq.seq_id: (clock, chunks) for seq in done})
    short_clock, short_chunks = finished_at[short.seq_id]
    assert short_chunks <= 2 and short_clock < 6.0
    long_clock, long_chunks = finished_at[long.seq_id]
    assert long_chunks == 30 and long_clock < 30 * chunk_s + 2.0  # the long lane lost only the short's turn


def test_scheduler_long_lane_chunks_shrink_to_the_target_time_once_timed():
    # A 2-core CPU: the first 2,048-token chunk took 8 s, so later chunks hold the tokens of about
    # CHUNK_TARGET_S (a record arriving behind one waits that long, not 8 s); never below the floor.
    sched = Scheduler(SlabAllocator(20000), eos_ids=(), chunk_tokens=2048)
    long = _seq(0, 6000)
    sched.add_long(long)
    sizes = []
    while long.num_prefilled < long.prompt_len:
        plan = sched.schedule()
        assert isinstance(plan, PrefillChunk)
        sizes.append(plan.end - plan.start)
        sched.observe_step(plan, 8.0 * (plan.end - plan.start) / 2048)
        sched.postprocess(plan, [60] if plan.is_last else [])
    assert sizes[0] == 2048 and set(sizes[1:-1]) == {int(CHUNK_TARGET_S / (8.0 / 2048))} == {512}
    slow = Scheduler(SlabAllocator(20000), eos_ids=(), chunk_tokens=2048)
    slow.pacer.chunked(60.0, 2048)  # a starved machine: 30 ms a token
    assert slow.pacer.chunk_tokens(2048) == MIN_CHUNK_TOKENS
