"""Lookahead decode: the same tokens as the synchronous engine, and extra steps stay in their slabs."""

import pytest
import torch

from worker.engine.sequence import SamplingParams

from .helpers import make_engine, random_prompts, reference_greedy, run_until_done


def _run_schedule(model, arrivals, *, lookahead, eos_ids=(), detokenize=None, **kw):
    """arrivals: (step index, prompt, params) in step order. Returns the sequences and how many
    decode steps were fed tokens straight from the device (i.e. launched ahead)."""
    engine = make_engine(model, eos_ids=eos_ids, detokenize=detokenize, lookahead=lookahead, **kw)
    fed_from_device = []
    original = engine.runner.decode
    engine.runner.decode = lambda ids, pos, starts: (
        fed_from_device.append(isinstance(ids, torch.Tensor)), original(ids, pos, starts))[1]
    seqs, pending, step = [], list(arrivals), 0
    while pending or not all(s.is_done for s in seqs):
        while pending and pending[0][0] <= step:
            _, prompt, params = pending.pop(0)
            seqs.append(engine.add(prompt, params))
        engine.step()
        step += 1
        assert step < 5_000, "engine did not finish"
    assert engine.scheduler.slabs.num_used_rows == 0
    return seqs, sum(fed_from_device)


def _schedules(model):
    prompts = random_prompts(8, 3, 28, seed=21)
    first = reference_greedy(model, prompts[0], 10)
    last = reference_greedy(model, prompts[7], 6)
    detok = lambda ids: "".join(f"<{i}>" for i in ids)  # noqa: E731
    p = lambda n, **kw: SamplingParams(max_new_tokens=n, **kw)  # noqa: E731
    return {
        "all_at_once_staggered_lengths": (
            [(0, q, p(n)) for q, n in zip(prompts[:6], [3, 9, 5, 7, 2, 12])], {}),
        "joins_mid_stream": (
            [(0, prompts[0], p(10)), (0, prompts[1], p(4)), (3, prompts[2], p(6)),
             (5, prompts[3], p(8)), (6, prompts[4], p(1)), (11, prompts[5], p(5))], {}),
        "eos_and_stop_strings": (
            [(0, prompts[0], p(10)), (0, prompts[1], p(10, stop=("<7>",))), (2, prompts[6], p(10)),
             (4, prompts[7], p(6, stop=(f"<{last[2]}>",)))],
            {"eos_ids": (first[3],), "detokenize": detok}),
        "repetition_penalty": (
            [(0, prompts[0], p(12, repetition_penalty=1.5)), (0, prompts[1], p(8)),
             (2, prompts[2], p(10, repetition_penalty=3.0))], {}),
        "long_inputs_chunked": (
            [(0, prompts[0], p(9)), (0, random_prompts(1, 100, 100, seed=22)[0], p(5)),
             (4, prompts[1], p(7)), (6, random_prompts(1, 70, 70, seed=23)[0], p(4))],
            {"token_budget": 32}),
    }


@pytest.mark.parametrize("name", ["all_at_once_staggered_lengths", "joins_mid_stream",
                                  "eos_and_stop_strings", "repetition_penalty", "long_inputs_chunked"])
def test_engine_lookahead_on_join_leave_schedules_matches_sync(tiny_model, name):
    arrivals, kw = _schedules(tiny_model)[name]
    ahead, num_ahead = _run_schedule(tiny_model, arrivals, lookahead=True, **kw)
    sync, num_sync_ahead = _run_schedule(tiny_model, arrivals, lookahead=False, **kw)
    assert num_sync_ahead == 0
    assert num_ahead > 0  # the lookahead path actually ran
    for a, s in zip(ahead, sync, strict=True):
        assert a.error is None and s.error is None
        assert (a.output, a.finish_reason, a.text) == (s.output, s.finish_reason, s.text)
    if name == "eos_and_stop_strings":
        assert {s.finish_reason for s in sync} >= {"eos", "stop"}


def test_engine_lookahead_seeded_sampling_is_reproducible(tiny_model):
    prompts = random_prompts(3, 5, 15, seed=24)
    runs = []
    for _ in range(2):
        engine = make_engine(tiny_model, seed=7)
        seqs = [engine.add(q, SamplingParams(max_new_tokens=n, temperature=1.2, top_p=0.9))
                for q, n in zip(prompts, [4, 9, 6])]
        run_until_done(engine, seqs)
        runs.append([s.output for s in seqs])
    assert runs[0] == runs[1]
    assert [len(o) for o in runs[0]] == [4, 9, 6]


def _decode_writes(model, prompts, news, *, lookahead, eos_ids=()):
    """Run prompts as one bin, watching the KV tapes around every decode step.

    Returns the sequences, their slab starts and, per decode step, the (slab start, row) pairs it
    was issued for and the tape rows that actually changed."""
    engine = make_engine(model, token_budget=64, eos_ids=eos_ids, lookahead=lookahead)
    seqs = [engine.add(q, SamplingParams(max_new_tokens=n)) for q, n in zip(prompts, news)]
    engine.step()  # the prefill: slabs are now assigned
    starts = [s.slab_start for s in seqs]
    assert min(starts) >= 0
    kv, steps = engine.runner.kv, []
    tapes = lambda: torch.stack(kv.k_full + kv.v_full)  # noqa: E731  [2L, capacity + 1, H, D]

    def watched(ids, pos, st, original=engine.runner.decode):
        before = tapes()
        logits = original(ids, pos, st)
        changed = (tapes() != before).flatten(2).any(-1).any(0)  # [capacity + 1]
        steps.append(([(a, a + p) for a, p in zip(st, pos)], set(torch.nonzero(changed).flatten().tolist())))
        return logits

    engine.runner.decode = watched
    run_until_done(engine, seqs)
    assert engine.scheduler.slabs.num_used_rows == 0
    return seqs, starts, steps


@pytest.mark.parametrize("finish", ["length", "eos"])
def test_engine_lookahead_discarded_extra_step_touches_only_its_own_slab(tiny_model, finish):
    prompts = random_prompts(3, 6, 14, seed=25)
    news = [2, 12, 3]  # the first finishes after one decode step, while its slab borders the second's
    eos_ids = ()
    if finish == "eos":
        eos_ids = (reference_greedy(tiny_model, prompts[0], 3)[1],)
        news = [6, 12, 6]
    sync_seqs, sync_starts, sync_steps = _decode_writes(tiny_model, prompts, news, lookahead=False, eos_ids=eos_ids)
    seqs, starts, steps = _decode_writes(tiny_model, prompts, news, lookahead=True, eos_ids=eos_ids)
    assert [s.output for s in seqs] == [s.output for s in sync_seqs]
    assert starts == sync_starts
    assert finish in {s.finish_reason for s in seqs}
    owner = {st: s for s, st in zip(seqs, starts)}

    def extra_writes(all_steps):
        """Writes past the rows a sequence needed: prompt + every output token that was fed back."""
        extra = []
        for issued, changed in all_steps:
            assert changed <= {row for _, row in issued}  # no row outside the issued ones changed
            for st, row in issued:
                s = owner[st]
                if row - st >= s.prompt_len + len(s.output) - (s.finish_reason != "eos"):
                    extra.append((st, row))
                    assert row in changed and row < st + s.slab_rows  # inside its own slab
        return extra

    assert extra_writes(sync_steps) == []
    extra = extra_writes(steps)
    assert extra  # the discarded steps happened ...
    assert len({st for st, _ in extra}) == len(extra)  # ... at most one per sequence
    if finish == "length":  # the extra row is the slab's last, right before the next sequence's first
        assert any(row + 1 in owner for _, row in extra)
