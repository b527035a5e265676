"""The one observer of a worker process: after every loop step it reads the KafkaWorker's `stats()`
(each partition's lag about once a second) and, a few times a second, the Summarizer's `stats()`, and
feeds the metrics, health and the status page from these snapshots and the step's results. Nothing
else reaches into the loop or the Summarizer.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import TYPE_CHECKING, Protocol

from worker.messages import Summary

if TYPE_CHECKING:  # the snapshots' types live above this layer
    from worker.kafka.loop import LoopStats
    from worker.metrics import WorkerMetrics
    from worker.ops.health import Health
    from worker.ops.status import StatusBoard
    from worker.summarizer.summarizer import SummarizerStats

# The engine's counters sit behind the GPU-loop thread's lock: read them at most this often.
SUMMARIZER_INTERVAL_S = 0.25
# Lag needs a look at every assigned partition's position: once a second is plenty.
LAG_INTERVAL_S = 1.0


class _Loop(Protocol):
    def stats(self, *, lag: bool = False) -> LoopStats: ...


class _Summarizer(Protocol):
    def stats(self) -> SummarizerStats: ...


class Observer:
    """A KafkaWorker's `observer(worker, results)`. Only from the loop thread."""

    def __init__(self, metrics: WorkerMetrics, health: Health, summarizer: _Summarizer | None = None,
                 board: StatusBoard | None = None) -> None:
        self.metrics = metrics
        self.health = health
        self.summarizer = summarizer
        self.board = board
        self._last_lag = float("-inf")
        self._last_sample = float("-inf")

    def __call__(self, worker: _Loop, results: list[tuple[Hashable, Summary | Exception]]) -> None:
        now = time.monotonic()
        stats = worker.stats(lag=now - self._last_lag >= LAG_INTERVAL_S)
        self.metrics.observe_loop(stats)
        if stats.partitions is not None:
            self._last_lag = now
            self.metrics.observe_partitions(stats.partitions)
        self.health.observe(stats.assigned, stats.consumer)
        if results:
            self.metrics.observe_results(results)
        if self.board is not None:
            self.board.observe_loop(stats)
            if results:
                self.board.observe_results(results)
        if self.summarizer is not None and now - self._last_sample >= SUMMARIZER_INTERVAL_S:
            elapsed, self._last_sample = now - self._last_sample, now
            self.metrics.observe_summarizer(self.summarizer.stats(), elapsed)
