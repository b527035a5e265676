"""Fixtures for dispatcher tests: a factory of small, unpinned dispatchers closed after the test."""

from __future__ import annotations

import pytest

from worker.dispatch import BinDispatcher


@pytest.fixture
def make_dispatcher():
    made: list[BinDispatcher] = []

    def make(token_budget: int = 1024, *, start: bool = True, **kwargs) -> BinDispatcher:
        kwargs.setdefault("pin_memory", False)
        kwargs.setdefault("max_seqs_per_bin", 64)
        kwargs.setdefault("queue_capacity_tokens", 64 * token_budget)
        d = BinDispatcher(token_budget, **kwargs)
        if start:
            d.start()
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()

