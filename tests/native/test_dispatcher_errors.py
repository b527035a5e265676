"""Each documented error path raises its exception with a message naming the problem."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from worker import _native
from worker.dispatch import (Backpressure, BinDispatcher, DispatcherClosed, DispatcherNotStarted,
                             SequenceTooLong, UnknownSlot)

from tests.native.helpers import WAIT_S, drain


def test_dispatcher_exceptions_have_documented_bases() -> None:
    assert issubclass(Backpressure, RuntimeError) and issubclass(DispatcherClosed, RuntimeError)
    assert issubclass(SequenceTooLong, ValueError) and issubclass(UnknownSlot, ValueError)


def test_dispatcher_submit_before_start_raises_not_started(make_dispatcher) -> None:
    d = make_dispatcher(256, start=False)
    with pytest.raises(DispatcherNotStarted, match="start"):
        d.submit(1, np.ones(4, np.int32), 1)
    with pytest.raises(DispatcherNotStarted):
        d.next_bin(0)


def test_dispatcher_submit_after_close_raises_closed(make_dispatcher) -> None:
    d = make_dispatcher(256)
    d.close()
    with pytest.raises(DispatcherClosed, match="closed"):
        d.submit(1, np.ones(4, np.int32), 1)
    with pytest.raises(DispatcherClosed):
        d.next_bin(WAIT_S)


def test_dispatcher_sequence_over_budget_raises_too_long(make_dispatcher) -> None:
    d = make_dispatcher(256, alignment=16)
    with pytest.raises(SequenceTooLong, match="257 tokens"):
        d.submit(1, np.ones(257, np.int32), 1)
    d.submit(2, np.ones(256, np.int32), 1)  # exactly one bin is fine
    assert [b["seq_ids"].tolist() for b in drain(d)] == [[2]]


def test_dispatcher_full_queue_raises_backpressure(make_dispatcher) -> None:
    d = make_dispatcher(256, queue_capacity_tokens=256, latency_cap_s=60.0, num_slots=2)
    for i in range(2):  # each is a full bin: packed into a slot, which nobody takes
        d.submit(i, np.ones(256, np.int32), 1)
        assert d.wait_for_room(256, WAIT_S)
    d.submit(2, np.ones(256, np.int32), 1)  # no free slot: it stays queued and fills the queue
    with pytest.raises(Backpressure, match="queue full"):
        d.submit(9, np.ones(1, np.int32), 1)
    assert d.wait_for_room(1, 0.05) is False
    assert d.stats()["backpressure_events"] == 1


@pytest.mark.parametrize("tokens", [np.ones(4, np.int64), np.ones(4, np.float32),
                                    torch.ones(4, dtype=torch.int64), [1.5, 2.0]])
def test_dispatcher_wrong_dtype_raises_type_error(make_dispatcher, tokens) -> None:
    d = make_dispatcher(256)
    with pytest.raises(TypeError, match="int"):
        d.submit(1, tokens, 1)


def test_dispatcher_wrong_shape_raises_value_error(make_dispatcher) -> None:
    d = make_dispatcher(256)
    with pytest.raises(ValueError, match="1-D"):
        d.submit(1, np.ones((2, 3), np.int32), 1)
    with pytest.raises(ValueError, match="empty"):
        d.submit(2, np.ones(0, np.int32), 1)
    with pytest.raises(ValueError, match="max_new_tokens"):
        d.submit(3, np.ones(2, np.int32), -1)


def test_dispatcher_strided_tokens_copied_intact(make_dispatcher) -> None:
    d = make_dispatcher(256)
    d.submit(1, np.arange(20, dtype=np.int32)[::2], 1)
    (b,) = drain(d)
    assert b["input_ids"][:10].tolist() == list(range(0, 20, 2))


def test_dispatcher_unknown_slot_raises(make_dispatcher) -> None:
    d = make_dispatcher(256)
    with pytest.raises(UnknownSlot, match="unknown slot 7"):
        d.release(7)
    with pytest.raises(UnknownSlot, match="not handed out"):
        d.release(0)


def test_dispatcher_fewer_than_two_slots_refused() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        BinDispatcher(256, num_slots=1, pin_memory=False)
    native = _native.Dispatcher(token_budget=256)
    s = [np.zeros(256, np.int32), np.zeros(256, np.int32), np.zeros(1025, np.int32),
         np.zeros(1024, np.int64)] + [np.zeros(1024, np.int32)] * 2
    native.add_slot(*s)
    with pytest.raises(RuntimeError, match="two slots"):
        native.start()


def test_dispatcher_bad_slot_buffers_raise() -> None:
    native = _native.Dispatcher(token_budget=256, max_seqs_per_bin=8)
    good = [np.zeros(256, np.int32), np.zeros(256, np.int32), np.zeros(9, np.int32),
            np.zeros(8, np.int64)] + [np.zeros(8, np.int32) for _ in range(2)]
    with pytest.raises(TypeError, match="seq_ids must be int64"):
        native.add_slot(*good[:3], np.zeros(8, np.int32), *good[4:])
    with pytest.raises(ValueError, match="input_ids must be 1-D, contiguous, at least 256"):
        native.add_slot(np.zeros(100, np.int32), *good[1:])
    with pytest.raises(ValueError, match="token_budget must be a positive multiple"):
        _native.Dispatcher(token_budget=100, alignment=16)
