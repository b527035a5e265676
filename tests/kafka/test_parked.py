"""release_parked: an emptied in-line slot is freed only when a paused partition's records are parked."""

from __future__ import annotations

from types import SimpleNamespace

from worker.kafka.parked import release_parked


class Records:
    def __init__(self, left: int) -> None:
        self.left = left

    def __bool__(self) -> bool:
        return self.left > 0


def _client(in_line, parked):
    return SimpleNamespace(_fetcher=SimpleNamespace(_next_partition_records=in_line, _paused_partition_records=parked))


def test_an_emptied_in_line_slot_is_freed_for_parked_records():
    client = _client(Records(0), {"tp-1": Records(5)})
    release_parked(client)
    assert client._fetcher._next_partition_records is None


def test_records_still_in_line_or_nothing_parked_are_left_alone():
    in_line = Records(3)
    client = _client(in_line, {"tp-1": Records(5)})
    release_parked(client)
    assert client._fetcher._next_partition_records is in_line
    emptied = Records(0)
    client = _client(emptied, {})
    release_parked(client)
    assert client._fetcher._next_partition_records is emptied
