"""The native first-fit-decreasing packer against the pure-Python reference."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker import _native
from worker.benchmarks.reference_ffd import reference_ffd


@settings(max_examples=200, deadline=None)
@given(
    budget=st.sampled_from([16, 64, 1000, 4096]),
    max_seqs=st.integers(1, 40),
    data=st.data(),
)
def test_ffd_pack_random_spans_equals_reference(budget: int, max_seqs: int, data) -> None:
    spans = data.draw(st.lists(st.integers(1, budget), max_size=300))
    num_first = data.draw(st.integers(0, len(spans) + 2))
    native = _native.ffd_pack(spans, budget, max_seqs, num_first)
    assert native == reference_ffd(spans, budget, max_seqs, num_first)
    assert sorted(i for b in native for i in b) == list(range(len(spans)))
    for b in native:
        assert sum(spans[i] for i in b) <= budget
        assert len(b) <= max_seqs


def test_ffd_pack_span_over_budget_raises() -> None:
    with pytest.raises(ValueError, match="outside"):
        _native.ffd_pack([10, 2000], 1024, 8)


def test_ffd_pack_oldest_first_lands_in_bin_zero_despite_larger_items() -> None:
    spans = [100] + [1000] * 6  # the oldest is the smallest: plain FFD puts it in the last bin
    assert 0 not in _native.ffd_pack(spans, 1024, 8)[0]
    bins = _native.ffd_pack(spans, 1024, 8, num_first=1)
    assert bins[0][0] == 0 and sorted(i for b in bins for i in b) == list(range(7))


def test_ffd_pack_negative_num_first_raises() -> None:
    with pytest.raises(ValueError, match="num_first"):
        _native.ffd_pack([10], 1024, 8, num_first=-1)
