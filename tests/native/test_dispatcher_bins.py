"""Bins from the running dispatcher: nothing lost or duplicated, layout right, FFD as the reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.benchmarks.reference_ffd import align_up, reference_ffd
from worker.dispatch import BinDispatcher, PackedBin

from tests.native.helpers import WAIT_S, check_bin, copy_bin, drain


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lens=st.lists(st.integers(1, 300), min_size=1, max_size=120),
    alignment=st.sampled_from([1, 8, 16]),
    seed=st.integers(0, 2**31 - 1),
)
def test_dispatcher_random_sequences_each_lands_once_intact(make_dispatcher, lens, alignment, seed) -> None:
    budget = 512
    d = make_dispatcher(budget, alignment=alignment, pad_id=-1, num_slots=2, queue_capacity_tokens=1 << 20)
    rng = np.random.default_rng(seed)
    seqs = {100 + i: rng.integers(0, 50_000, n, dtype=np.int32) for i, n in enumerate(lens)}
    max_new = {sid: int(rng.integers(0, 300)) for sid in seqs}
    bins: list[dict] = []
    for sid, toks in seqs.items():
        d.submit(sid, toks, max_new[sid])
        b = d.next_bin(0)  # take bins while submitting too, so both paths run
        if b is not None:
            bins.append(copy_bin(b))
            d.release(b.slot)
    bins += drain(d)
    seen = [sid for b in bins for sid in b["seq_ids"].tolist()]
    assert sorted(seen) == sorted(seqs)
    for b in bins:
        check_bin(b, seqs, token_budget=budget, alignment=alignment, pad_id=-1)
    stats = d.stats()
    assert stats["sequences_packed"] == len(seqs) and stats["bins"] == len(bins)
    assert stats["pad_tokens"] == sum(len(b["input_ids"]) - b["num_real_tokens"] for b in bins)


def test_dispatcher_one_round_equals_reference_ffd(make_dispatcher) -> None:
    # Less than one budget of tokens and a long latency cap: nothing is packed until close(), so
    # the whole set goes through one FFD round; the sequence cap makes it span several bins, and
    # there are slots for all of them (a later round would place its own oldest first).
    budget, alignment, cap = 4096, 16, 5
    d = make_dispatcher(budget, alignment=alignment, max_seqs_per_bin=cap, num_slots=8, latency_cap_s=60.0)
    rng = np.random.default_rng(7)
    lens = rng.integers(1, 150, 40)
    seqs = {i: rng.integers(0, 1000, n, dtype=np.int32) for i, n in enumerate(lens)}
    for sid, toks in seqs.items():
        d.submit(sid, toks, 16)
    bins = drain(d)
    # The oldest sequence is placed first (it always makes the next bin), then FFD over the rest.
    expected = reference_ffd([align_up(n, alignment) for n in lens], budget, cap, num_first=1)
    assert [b["seq_ids"].tolist() for b in bins] == expected


def test_dispatcher_full_bin_waiting_packs_without_consumer(make_dispatcher) -> None:
    d = make_dispatcher(256, alignment=16, latency_cap_s=60.0)
    for i in range(4):
        d.submit(i, np.arange(64, dtype=np.int32), 1)  # exactly one full bin
    b = d.next_bin(WAIT_S)
    assert isinstance(b, PackedBin)
    assert sorted(b.seq_ids.tolist()) == [0, 1, 2, 3] and b.num_real_tokens == 256
    d.release(b.slot)


def test_dispatcher_packed_bin_views_share_slot_memory(make_dispatcher) -> None:
    d = make_dispatcher(256)
    d.submit(1, np.arange(5, dtype=np.int32), 3)
    b = d.next_bin(WAIT_S)
    slot = d._slots[b.slot]
    assert b.input_ids.data_ptr() == slot.input_ids.data_ptr()
    assert b.input_ids.dtype == torch.int32 and b.seq_ids.dtype == torch.int64
    out = d.to_device(b, "cpu")  # CPU: copies, then releases the slot
    assert out.input_ids.data_ptr() != slot.input_ids.data_ptr()
    assert out.input_ids[:5].tolist() == [0, 1, 2, 3, 4] and out.ready is None
    with pytest.raises(ValueError, match="not handed out"):
        d.release(b.slot)


def test_dispatcher_list_and_tensor_tokens_accepted(make_dispatcher) -> None:
    d = make_dispatcher(256)
    d.submit(1, [5, 6, 7], 1)
    d.submit(2, torch.tensor([8, 9], dtype=torch.int32), 1)
    bins = drain(d)
    got = {sid: b for b in bins for sid in b["seq_ids"].tolist()}
    check_bin(got[1], {1: np.array([5, 6, 7]), 2: np.array([8, 9])},
              token_budget=256, alignment=16)


def test_bin_dispatcher_defaults_match_interface() -> None:
    d = BinDispatcher(pin_memory=False)
    assert d.token_budget == 65536 and len(d._slots) == 3
    assert d._slots[0].input_ids.shape == (65536,) and d._slots[0].seq_ids.shape == (1024,)
    d.close()


def test_dispatcher_submit_many_queues_prefix_that_fits(make_dispatcher) -> None:
    from worker.dispatch import Backpressure

    d = make_dispatcher(256, queue_capacity_tokens=256, latency_cap_s=60.0, num_slots=2)
    seqs = {i: np.full(100, i, dtype=np.int32) for i in range(4)}
    assert d.submit_many([0, 1, 2, 3], [seqs[i] for i in range(4)], 5) == 2  # 200 of 256 tokens
    with pytest.raises(Backpressure):
        d.submit_many([2, 3], [seqs[2], seqs[3]], 5)
    with pytest.raises(ValueError, match="empty"):
        d.submit_many([8, 9], [np.ones(1, np.int32), np.ones(0, np.int32)], 5)
    bins = drain(d)
    assert sorted(s for b in bins for s in b["seq_ids"].tolist()) == [0, 1]
    for b in bins:
        check_bin(b, seqs, token_budget=256, alignment=16)


def test_dispatcher_oldest_short_sequence_makes_next_bin_while_long_ones_keep_coming(make_dispatcher) -> None:
    # A long record's near-budget pieces keep arriving after one short sequence: the short one
    # must be in the first bin, not carried behind every piece (first-fit-decreasing alone would).
    budget = 1024
    d = make_dispatcher(budget, alignment=16, num_slots=2, latency_cap_s=60.0)
    d.submit(0, np.arange(100, dtype=np.int32), 1)
    for i in range(1, 9):
        d.submit(i, np.arange(960, dtype=np.int32), 1)
    first = d.next_bin(WAIT_S)
    assert isinstance(first, PackedBin) and 0 in first.seq_ids.tolist()
    d.release(first.slot)
    d.close()
    rest = drain(d)
    assert sorted(s for b in rest for s in b["seq_ids"].tolist()) == list(range(1, 9))


def test_dispatcher_zero_timeout_peek_gets_pending_packed_before_the_cap(make_dispatcher) -> None:
    import time

    d = make_dispatcher(1024, alignment=16, latency_cap_s=60.0)
    assert d.next_bin(0.0) is None  # a peek between decode steps: nothing yet, but the GPU wants work
    d.submit(0, np.arange(10, dtype=np.int32), 1)  # far from a full bin, an hour from the cap
    deadline = time.monotonic() + WAIT_S
    b = None
    while b is None and time.monotonic() < deadline:
        b = d.next_bin(0.0)
        time.sleep(0.001)
    assert isinstance(b, PackedBin) and b.seq_ids.tolist() == [0]
    d.release(b.slot)
    d.submit(1, np.arange(10, dtype=np.int32), 1)  # handed out: no ask pending, the window holds it
    time.sleep(0.05)
    assert d.stats()["bins"] == 1


def test_dispatcher_logs_one_debug_line_per_bin_handed_out(make_dispatcher, caplog) -> None:
    d = make_dispatcher(256, alignment=16)
    d.submit(1, np.arange(20, dtype=np.int32), 1)
    with caplog.at_level("DEBUG", logger="worker.bins"):
        b = d.next_bin(WAIT_S)
    d.release(b.slot)
    (line,) = [r for r in caplog.records if r.name == "worker.bins"]
    assert (line.bin_seqs, line.bin_tokens, line.bin_real_tokens) == (1, 32, 20)  # 20 tokens aligned to 32
    assert f"slot={b.slot} " in line.getMessage() and "fill=0.078" in line.getMessage()
