"""Slab allocator: slabs never overlap, admission never exceeds capacity, everything is freed."""

import pytest
from hypothesis import given, settings, strategies as st

from worker.engine.kv_arena import SlabAllocator


def _check_invariants(alloc: SlabAllocator) -> None:
    used = sorted(alloc.allocated().items())
    spans = [(s, s + n) for s, n in used] + alloc.free_ranges()
    spans.sort()
    # used + free tile [0, capacity) exactly: no overlap, no gap
    pos = 0
    for start, end in spans:
        assert start == pos and end > start
        pos = end
    assert pos == alloc.capacity
    assert alloc.num_used_rows == sum(n for _, n in used) <= alloc.capacity
    free = alloc.free_ranges()
    assert all(a[1] < b[0] for a, b in zip(free, free[1:])), "free ranges must be coalesced"


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(1, 200),
       ops=st.lists(st.tuples(st.booleans(), st.lists(st.integers(1, 60), min_size=1, max_size=5),
                              st.integers(0, 1000)), max_size=60))
def test_slab_allocator_random_ops_never_overlap_and_free_everything(capacity, ops):
    alloc = SlabAllocator(capacity)
    live: list[int] = []
    for is_alloc, sizes, pick in ops:
        if is_alloc or not live:
            before = alloc.num_used_rows
            starts = alloc.allocate_all(sizes)
            if starts is None:
                assert alloc.num_used_rows == before  # all-or-nothing
            else:
                assert len(starts) == len(sizes)
                live.extend(starts)
        else:
            alloc.free(live.pop(pick % len(live)))
        _check_invariants(alloc)
    for start in live:
        alloc.free(start)
    _check_invariants(alloc)
    assert alloc.num_used_rows == 0 and alloc.free_ranges() == [(0, capacity)]


def test_slab_allocator_first_fit_reuses_lowest_hole():
    alloc = SlabAllocator(100)
    a, b, c = alloc.allocate(10), alloc.allocate(20), alloc.allocate(30)
    assert (a, b, c) == (0, 10, 30)
    alloc.free(b)
    assert alloc.allocate(15) == 10  # first hole large enough
    assert alloc.allocate(50) is None  # only 40 contiguous rows left at the end
    assert alloc.allocate(40) == 60


def test_slab_allocator_allocate_all_too_big_allocates_nothing():
    alloc = SlabAllocator(50)
    assert alloc.allocate_all([20, 20, 20]) is None
    assert alloc.num_used_rows == 0
    # fragmented: total free is enough but no contiguous range for the last one
    x = alloc.allocate(20); alloc.allocate(10); alloc.free(x)
    assert alloc.num_free_rows == 40
    assert alloc.allocate_all([15, 25]) is None  # 15 fits, 25 does not: rolled back
    assert alloc.num_used_rows == 10


def test_slab_allocator_bad_arguments_raise():
    with pytest.raises(ValueError, match="capacity"):
        SlabAllocator(0)
    alloc = SlabAllocator(10)
    with pytest.raises(ValueError, match="slab size"):
        alloc.allocate(0)
    with pytest.raises(KeyError, match="no slab"):
        alloc.free(3)
