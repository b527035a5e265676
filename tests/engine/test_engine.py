"""Engine: packed == solo == no-cache reference; continuous batching; chunked prefill; failures."""

import pytest
import torch

from worker.engine.errors import ArenaTooSmall, ContextTooLong
from worker.engine.sequence import SamplingParams, SequenceStatus

from tests.engine.helpers import generate, make_engine, random_prompts, reference_greedy, run_until_done


def test_engine_packed_bins_match_solo_and_reference(tiny_model):
    prompts = random_prompts(6, 3, 30, seed=1)
    packed = generate(tiny_model, prompts, max_new=6, token_budget=64)
    regrouped = generate(tiny_model, prompts[::-1], max_new=6, token_budget=40, alignment=1)[::-1]
    solo = [generate(tiny_model, [p], max_new=6)[0] for p in prompts]
    reference = [reference_greedy(tiny_model, p, 6) for p in prompts]
    assert solo == reference
    assert packed == reference
    assert regrouped == reference


def test_engine_bins_hold_several_sequences(tiny_model):
    engine = make_engine(tiny_model, token_budget=64)
    seqs = [engine.add(p, SamplingParams(max_new_tokens=2)) for p in random_prompts(5, 3, 12, seed=2)]
    run_until_done(engine, seqs)
    assert max(len(b) for b in engine.dispatcher.bins_emitted) >= 3


def test_engine_sequences_join_and_leave_mid_stream_match_solo(tiny_model):
    prompts = random_prompts(5, 4, 20, seed=3)
    max_new = [3, 9, 5, 7, 2]
    engine = make_engine(tiny_model, token_budget=32)
    first = [engine.add(p, SamplingParams(max_new_tokens=n)) for p, n in zip(prompts[:2], max_new[:2])]
    for _ in range(4):
        engine.step()
    assert any(s.output for s in first) and not all(s.is_done for s in first)
    later = [engine.add(p, SamplingParams(max_new_tokens=n)) for p, n in zip(prompts[2:], max_new[2:])]
    decode_batches = []
    original_decode = engine.runner.decode
    engine.runner.decode = lambda ids, *rest: (decode_batches.append(len(ids)), original_decode(ids, *rest))[1]
    run_until_done(engine, first + later)
    assert len(set(decode_batches)) > 1  # the decode batch grew and shrank
    for seq, p, n in zip(first + later, prompts, max_new):
        assert seq.output == reference_greedy(tiny_model, p, n)
        assert seq.finish_reason == "length"
    assert engine.scheduler.slabs.num_used_rows == 0


def test_engine_chunked_prefill_matches_one_shot(tiny_model):
    prompts = [random_prompts(1, 150, 150, seed=4)[0], random_prompts(1, 90, 90, seed=5)[0]]
    one_shot = generate(tiny_model, prompts, max_new=5, token_budget=256)
    chunked_engine = make_engine(tiny_model, token_budget=32)  # both go to the long-input lane
    seqs = [chunked_engine.add(p, SamplingParams(max_new_tokens=5)) for p in prompts]
    short = chunked_engine.add(random_prompts(1, 5, 5, seed=6)[0], SamplingParams(max_new_tokens=12))
    run_until_done(chunked_engine, seqs + [short])
    assert [s.output for s in seqs] == one_shot
    assert short.output == reference_greedy(tiny_model, short.prompt, 12)


def test_engine_eos_ends_sequence_without_emitting_it(tiny_model):
    prompt = random_prompts(1, 10, 10, seed=7)[0]
    full = reference_greedy(tiny_model, prompt, 8)
    eos = full[3]
    engine = make_engine(tiny_model, eos_ids=(eos,))
    seq = engine.add(prompt, SamplingParams(max_new_tokens=8))
    run_until_done(engine, [seq])
    assert seq.output == full[:full.index(eos)]
    assert seq.finish_reason == "eos"


def test_engine_stop_string_cuts_text(tiny_model):
    prompt = random_prompts(1, 10, 10, seed=8)[0]
    full = reference_greedy(tiny_model, prompt, 8)
    detok = lambda ids: "".join(f"<{i}>" for i in ids)  # noqa: E731
    engine = make_engine(tiny_model, detokenize=detok)
    seq = engine.add(prompt, SamplingParams(max_new_tokens=8, stop=(f"<{full[4]}>",)))
    run_until_done(engine, [seq])
    assert seq.finish_reason == "stop"
    assert seq.text == detok(full[:full.index(full[4])])


def test_engine_sampling_is_seeded_and_top_p_tiny_is_greedy(tiny_model):
    prompt = random_prompts(1, 10, 10, seed=9)[0]
    runs = []
    for _ in range(2):
        engine = make_engine(tiny_model, seed=123)
        seq = engine.add(prompt, SamplingParams(max_new_tokens=10, temperature=1.5))
        run_until_done(engine, [seq])
        runs.append(seq.output)
    assert runs[0] == runs[1]
    assert runs[0] != reference_greedy(tiny_model, prompt, 10)  # temperature 1.5 over 10 tokens
    engine = make_engine(tiny_model, seed=5)
    seq = engine.add(prompt, SamplingParams(max_new_tokens=10, temperature=1.0, top_p=1e-6))
    run_until_done(engine, [seq])
    assert seq.output == reference_greedy(tiny_model, prompt, 10)


def test_engine_bin_larger_than_arena_fails_with_arena_too_small(tiny_model):
    engine = make_engine(tiny_model, capacity=40)
    seq = engine.add(random_prompts(1, 30, 30, seed=10)[0], SamplingParams(max_new_tokens=20))
    run_until_done(engine, [seq])
    assert seq.status is SequenceStatus.FAILED and isinstance(seq.error, ArenaTooSmall)
    ok = engine.add(random_prompts(1, 10, 10, seed=11)[0], SamplingParams(max_new_tokens=4))
    run_until_done(engine, [ok])
    assert ok.status is SequenceStatus.FINISHED


def test_engine_full_arena_holds_bin_until_slabs_free(tiny_model):
    engine = make_engine(tiny_model, capacity=60, token_budget=32)
    prompts = random_prompts(3, 12, 12, seed=12)
    seqs = [engine.add(p, SamplingParams(max_new_tokens=8)) for p in prompts]  # 20 rows each
    peak = 0
    while not all(s.is_done for s in seqs):
        engine.step()
        peak = max(peak, engine.scheduler.slabs.num_used_rows)
    assert peak <= 60
    assert [s.output for s in seqs] == [reference_greedy(tiny_model, p, 8) for p in prompts]


def test_engine_prompt_beyond_context_raises(tiny_model):
    engine = make_engine(tiny_model)
    with pytest.raises(ContextTooLong, match="context"):
        engine.add([5] * 510, SamplingParams(max_new_tokens=8))


def test_engine_model_error_fails_only_that_step(tiny_model):
    engine = make_engine(tiny_model)
    bad = engine.add([5, 6, 7], SamplingParams(max_new_tokens=4))
    original = engine.runner.prefill_bin
    engine.runner.prefill_bin = lambda *a, **kw: (_ for _ in ()).throw(RuntimeError("boom"))
    run_until_done(engine, [bad])
    assert isinstance(bad.error, RuntimeError)
    engine.runner.prefill_bin = original
    good = engine.add([5, 6, 7], SamplingParams(max_new_tokens=4))
    run_until_done(engine, [good])
    assert good.output == reference_greedy(tiny_model, [5, 6, 7], 4)
    assert engine.scheduler.slabs.num_used_rows == 0


def test_engine_bin_too_big_for_empty_arena_runs_members_one_by_one(tiny_model):
    engine = make_engine(tiny_model, capacity=60, token_budget=64)
    prompts = random_prompts(3, 16, 16, seed=13)
    news = [20, 10, 50]  # slabs of 36, 26 and 66 rows: together 128 > 60; the last alone > 60
    seqs = [engine.add(p, SamplingParams(max_new_tokens=n)) for p, n in zip(prompts, news)]
    run_until_done(engine, seqs)
    assert engine.dispatcher.bins_emitted[0] == [s.seq_id for s in seqs]  # they came as one bin
    assert [s.output for s in seqs[:2]] == [reference_greedy(tiny_model, p, n) for p, n in zip(prompts[:2], news[:2])]
    assert isinstance(seqs[2].error, ArenaTooSmall)
    assert engine.scheduler.slabs.num_used_rows == 0


@torch.inference_mode()
def _reference_greedy_penalised(model, prompt: list[int], max_new: int, penalty: float) -> list[int]:
    from worker.engine.sampling import apply_repetition_penalty
    from worker.model.attention import build_pass
    from worker.model.kv_cache import KVCache

    tokens, out = list(prompt), []
    for _ in range(max_new):
        kv = KVCache.allocate(model.cfg, len(tokens), torch.float32, "cpu")
        meta, pos = build_pass([len(tokens)], [0], [0])
        logits = model(torch.tensor(tokens), pos, meta, kv, torch.tensor([len(tokens) - 1]))
        if out:
            logits = apply_repetition_penalty(logits, torch.tensor([out]), torch.tensor([penalty]))
        out.append(int(logits.argmax(-1)))
        tokens.append(out[-1])
    return out


def test_engine_repetition_penalty_from_device_tape_matches_reference(tiny_model):
    prompts = random_prompts(4, 5, 25, seed=21)
    engine = make_engine(tiny_model, token_budget=48)
    seqs = [engine.add(p, SamplingParams(max_new_tokens=12, repetition_penalty=3.0)) for p in prompts]
    run_until_done(engine, seqs)
    expected = [_reference_greedy_penalised(tiny_model, p, 12, 3.0) for p in prompts]
    assert [s.output for s in seqs] == expected
    assert expected != [reference_greedy(tiny_model, p, 12) for p in prompts]  # the penalty mattered


def test_engine_stop_string_decodes_only_on_trigger_tokens(tiny_model):
    prompt = random_prompts(1, 10, 10, seed=8)[0]
    full = reference_greedy(tiny_model, prompt, 12)
    stop_token = full[6]
    detok = lambda ids: "".join("|" if i == stop_token else "a" for i in ids)  # noqa: E731
    engine = make_engine(tiny_model, detokenize=detok)
    seq = engine.add(prompt, SamplingParams(max_new_tokens=12, stop=("a|",)))
    run_until_done(engine, [seq])
    assert seq.finish_reason == "stop"
    assert seq.output == full[:full.index(stop_token) + 1]
    assert full.index(stop_token) >= 1
    assert seq.text == "a" * (full.index(stop_token) - 1)  # cut before the stop string "a|"
    assert engine.scheduler.stops.num_decodes == 1  # only the token holding "|" made it decode


def test_decode_bucket_padding_rows_leave_the_tape_untouched(tiny_model):
    engine = make_engine(tiny_model, capacity=256)
    runner = engine.runner
    assert runner.decode_step.bucket_for(3) == 4
    for layer in range(runner.kv.num_layers):
        runner.kv.k[layer].normal_()
        runner.kv.v[layer].normal_()
    before = [t.clone() for t in runner.kv.k]
    starts, positions = [0, 100, 200], [5, 9, 3]
    logits = runner.decode([7, 8, 9], positions, starts)
    assert logits.shape[0] == 3
    written = {s + p for s, p in zip(starts, positions)}
    for layer in range(runner.kv.num_layers):
        changed = (runner.kv.k[layer] != before[layer]).flatten(1).any(-1).nonzero().flatten().tolist()
        assert set(changed) == written
    solo = [runner.decode([t], [p], [s]) for t, p, s in zip([7, 8, 9], positions, starts)]
    assert torch.allclose(torch.cat(solo), logits, atol=1e-5)


def test_engine_decode_batch_mixes_stop_sets_eos_and_lengths(tiny_model):
    prompts = random_prompts(4, 6, 14, seed=31)
    fulls = [reference_greedy(tiny_model, p, 10) for p in prompts]
    eos = fulls[0][4]
    detok = lambda ids: "".join(f"<{i}>" for i in ids)  # noqa: E731
    engine = make_engine(tiny_model, eos_ids=(eos,), detokenize=detok)
    params = [SamplingParams(max_new_tokens=10),                                  # ends at EOS
              SamplingParams(max_new_tokens=10, stop=(f"<{fulls[1][2]}>",)),      # a stop string
              SamplingParams(max_new_tokens=10, stop=(f"<{fulls[2][5]}>", "zz")),  # another stop set
              SamplingParams(max_new_tokens=3)]                                   # its length
    seqs = [engine.add(p, sp) for p, sp in zip(prompts, params)]
    run_until_done(engine, seqs)

    def upto(full, n, token):  # the reference output before `token` (the EOS one, or a stop string's)
        cut = [i for i, t in enumerate(full[:n]) if t == token]
        return full[:cut[0]] if cut else full[:n]

    assert seqs[0].output == upto(fulls[0], 10, eos) and seqs[0].finish_reason == "eos"
    expected_1 = upto(fulls[1], 10, fulls[1][2])
    assert seqs[1].finish_reason == "stop" and seqs[1].text == detok(expected_1)
    expected_2 = upto(fulls[2], 10, fulls[2][5])
    assert seqs[2].finish_reason == "stop" and seqs[2].text == detok(expected_2)
    if eos not in fulls[3][:3]:
        assert seqs[3].output == fulls[3][:3] and seqs[3].finish_reason == "length"
    assert engine.scheduler.decoding.seqs == [] and engine.scheduler.slabs.num_used_rows == 0


def test_engine_bin_out_of_memory_is_split_in_halves_down_to_one_and_loses_nothing(tiny_model, caplog):
    engine = make_engine(tiny_model, token_budget=64)
    original = engine.runner.prefill_bin
    sizes = []

    def prefill_bin(device_bin, starts, *rest, **kw):
        sizes.append(len(starts))
        if len(starts) > 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return original(device_bin, starts, *rest, **kw)

    engine.runner.prefill_bin = prefill_bin
    prompts = random_prompts(4, 5, 12, seed=41)
    seqs = [engine.add(p, SamplingParams(max_new_tokens=5)) for p in prompts]
    run_until_done(engine, seqs)
    assert sizes == [4, 2, 1, 1, 2, 1, 1]  # halves of halves, each retried before later work
    assert engine.oom.events == 3  # counted for the operator (telesum_gpu_out_of_memory_total)
    assert [s.output for s in seqs] == [reference_greedy(tiny_model, p, 5) for p in prompts]
    assert all(s.error is None for s in seqs) and engine.scheduler.slabs.num_used_rows == 0
    warned = [r.getMessage() for r in caplog.records if "ran out of GPU memory" in r.getMessage()]
    assert warned[0] == ("a bin of 4 sequences ran out of GPU memory; retrying it as bins of 2 and 2: "
                         "CUDA out of memory. Tried to allocate 2.00 GiB")  # the allocator's why, for the operator
    assert len(warned) == 3


def test_engine_chunk_out_of_memory_halves_the_chunk_then_fails_only_that_sequence(tiny_model, monkeypatch):
    from worker.engine import scheduler as scheduler_mod
    from worker.engine.errors import OutOfMemory

    monkeypatch.setattr(scheduler_mod, "MIN_OOM_CHUNK", 8)
    engine = make_engine(tiny_model, token_budget=32)  # prompts above 32 tokens take the chunked lane
    original = engine.runner.prefill_chunk
    chunks = []

    def prefill_chunk(tokens, start, slab_start, limit=[16]):
        chunks.append(len(tokens))
        if len(tokens) > limit[0]:
            raise RuntimeError("CUDA out of memory. Tried to allocate 512.00 MiB")
        return original(tokens, start, slab_start)

    engine.runner.prefill_chunk = prefill_chunk
    long_prompt = random_prompts(1, 70, 70, seed=42)[0]
    seq = engine.add(long_prompt, SamplingParams(max_new_tokens=4))
    run_until_done(engine, [seq])
    assert chunks[:3] == [32, 16, 16] and max(chunks[1:]) <= 16  # 32 failed, then halves ran
    assert seq.output == reference_greedy(tiny_model, long_prompt, 4)

    prefill_chunk.__defaults__[0][0] = 4  # now even the smallest chunk (8) runs out of memory
    doomed = engine.add(long_prompt, SamplingParams(max_new_tokens=4))
    run_until_done(engine, [doomed])
    assert isinstance(doomed.error, OutOfMemory) and "smallest chunks" in str(doomed.error)
    short = engine.add([5, 6, 7], SamplingParams(max_new_tokens=3))  # the engine keeps serving
    run_until_done(engine, [short])
    assert short.output == reference_greedy(tiny_model, [5, 6, 7], 3)
    assert engine.scheduler.slabs.num_used_rows == 0


def test_engine_decode_out_of_memory_splits_the_step_and_loses_nothing(tiny_model):
    engine = make_engine(tiny_model, token_budget=64)
    original = engine.runner.decode
    sizes = []

    def decode(input_ids, *rest):
        sizes.append(len(input_ids))
        if len(input_ids) > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return original(input_ids, *rest)

    engine.runner.decode = decode
    prompts = random_prompts(5, 5, 12, seed=43)
    seqs = [engine.add(p, SamplingParams(max_new_tokens=6)) for p in prompts]
    run_until_done(engine, seqs)
    assert max(sizes) == 5 and 2 in sizes  # the full step failed, then ran in passes of at most 2
    assert [s.output for s in seqs] == [reference_greedy(tiny_model, p, 6) for p in prompts]
    assert all(s.error is None for s in seqs) and engine.scheduler.slabs.num_used_rows == 0


def test_engine_admits_no_more_sequences_to_decode_than_its_bound(tiny_model):
    engine = make_engine(tiny_model, token_budget=16, max_decode_seqs=3)
    original = engine.runner.decode
    sizes = []

    def decode(input_ids, *rest):
        sizes.append(len(input_ids))
        return original(input_ids, *rest)

    engine.runner.decode = decode
    prompts = random_prompts(8, 3, 6, seed=44)
    seqs = [engine.add(p, SamplingParams(max_new_tokens=5)) for p in prompts]
    run_until_done(engine, seqs)
    assert max(sizes) <= 3 and len(sizes) > 5
    assert [s.output for s in seqs] == [reference_greedy(tiny_model, p, 5) for p in prompts]


def test_engine_step_observers_see_every_step_and_a_trace_counts_its_kinds(tiny_model):
    from worker.engine.step_trace import StepTrace

    engine = make_engine(tiny_model, token_budget=64)
    trace, plans = StepTrace(), []
    engine.step_observers += [trace.observe, lambda plan, started, taken, ended: plans.append(plan)]
    seqs = [engine.add(p, SamplingParams(max_new_tokens=3)) for p in random_prompts(4, 3, 12, seed=20)]
    run_until_done(engine, seqs)
    summary = trace.summary()
    assert summary["steps"] == len(plans) and plans[-1] is not None
    assert summary["prefill"]["steps"] >= 1 and summary["decode"]["steps"] >= 1
