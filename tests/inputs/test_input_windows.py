"""Log-line windows close by time, by lines and by bytes; a revoked partition's windows are dropped."""

from __future__ import annotations

from worker.inputs.windows import Windows


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_window_closes_after_window_s_from_its_first_line():
    clock = Clock()
    windows: Windows[str] = Windows(5.0, 100, 10_000, clock)
    windows.add(("p0", "h1"), "a", "line a")
    clock.now += 4.9
    windows.add(("p0", "h1"), "b", "line b")
    assert windows.due() == []
    clock.now += 0.1
    (closed,) = windows.due()
    assert closed.parts == ["a", "b"] and closed.lines == 2 and len(windows) == 0


def test_window_closes_at_max_lines_counting_lines_inside_a_record():
    windows: Windows[str] = Windows(5.0, 4, 10_000, Clock())
    assert windows.add("k", "a", "one\ntwo") is None
    closed = windows.add("k", "b", "three\nfour")
    assert closed is not None and closed.parts == ["a", "b"] and windows.add("k", "c", "five") is None


def test_window_closes_at_max_bytes_and_hosts_are_apart():
    windows: Windows[str] = Windows(5.0, 100, 20, Clock())
    assert windows.add("h1", "a", "x" * 10) is None
    assert windows.add("h2", "b", "y" * 15) is None
    closed = windows.add("h1", "c", "z" * 10)
    assert closed is not None and closed.parts == ["a", "c"] and len(windows) == 1


def test_drop_forgets_windows_of_gone_partitions_and_close_all_returns_the_rest():
    windows: Windows[str] = Windows(5.0, 100, 10_000, Clock())
    for key, part in [(("p0", "h1"), "a"), (("p1", "h1"), "b"), (("p0", "h2"), "c")]:
        windows.add(key, part, part)
    assert windows.drop(lambda key: key[0] == "p0") == 2
    assert [w.parts for w in windows.close_all()] == [["b"]] and len(windows) == 0
