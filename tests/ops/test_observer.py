"""The one observer: the loop's stats() after every step (each partition's lag about once a second), the
Summarizer's a few times a second, the step's results to the metrics and the status page."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.ops.helpers import loop_stats, summarizer_stats
from worker.kafka.loop import PartitionStats, WorkerStats
from worker.messages import Summary, Timings
from worker.metrics import WorkerMetrics
from worker.ops import observer as observer_module
from worker.ops.health import Health
from worker.ops.observer import LAG_INTERVAL_S, SUMMARIZER_INTERVAL_S, Observer
from worker.ops.status import StatusBoard


class _Loop:
    def __init__(self) -> None:
        self.asked: list[bool] = []
        self.consumed = 0

    def stats(self, *, lag: bool = False):
        self.asked.append(lag)
        return loop_stats(WorkerStats(consumed=self.consumed), assigned=1,
                          partitions=(PartitionStats("in", 0, 0, False, 5),) if lag else None)


class _Summarizer:
    def __init__(self) -> None:
        self.bins = 0

    def stats(self):
        self.bins += 1  # one more bin at every read: the bins counter shows how often it was read
        return summarizer_stats(bins=self.bins)


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(observer_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    return now


def test_observer_reads_lag_and_the_summarizer_only_when_due(clock):
    metrics, loop, summarizer = WorkerMetrics("cpu", "w-1"), _Loop(), _Summarizer()
    observe = Observer(metrics, Health(lambda: True, stall_after_s=60), summarizer)
    bins = lambda: metrics.registry.get_sample_value("telesum_bins_total", metrics.labels)  # noqa: E731
    observe(loop, [])
    loop.consumed = 3
    observe(loop, [])  # same moment: no lag, no summarizer read; the counters still follow
    assert loop.asked == [True, False] and bins() == 1
    assert metrics.registry.get_sample_value("telesum_records_consumed_total", metrics.labels) == 3
    clock[0] += SUMMARIZER_INTERVAL_S
    observe(loop, [])
    assert loop.asked[-1] is False and bins() == 2
    clock[0] += LAG_INTERVAL_S
    observe(loop, [])
    assert loop.asked[-1] is True and bins() == 3


def test_observer_passes_the_steps_results_to_metrics_and_the_status_page(clock):
    metrics = WorkerMetrics("cpu", "w-1")
    board = StatusBoard(metrics, {}, [])
    health = Health(lambda: True, stall_after_s=60)
    summary = Summary(id="r7", summary="s", model="m", prompt_tokens=10, output_tokens=3,
                      timings=Timings(queued_s=0.0, prefill_s=0.01, decode_s=0.02, total_s=0.03))
    Observer(metrics, health, board=board)(_Loop(), [("rid", summary), ("bad", RuntimeError("boom"))])
    assert metrics.registry.get_sample_value("telesum_output_tokens_total", metrics.labels) == 3
    assert [row["id"] for row in board.snapshot()["latest"]] == ["r7"]
    assert health.liveness()[1]["loop_started"] is True
