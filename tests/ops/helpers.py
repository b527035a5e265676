"""Snapshots as the loop's and the Summarizer's stats() give them, for the metrics', health's and the
observer's tests."""

from __future__ import annotations

import dataclasses

from worker.kafka.loop import ConsumerStats, LoopStats, WorkerStats
from worker.summarizer.summarizer import SummarizerStats


def loop_stats(counts: WorkerStats | None = None, *, backlog=0, in_summarizer=0, unfinished_answers=0, commit_lag=0,
               held_back=0, assigned=0, paused=0, stuck=(), undecodable_batches=0, partitions=None) -> LoopStats:
    """A KafkaWorker.stats() snapshot with the given values (the rest zero)."""
    return LoopStats(counts=counts or WorkerStats(), backlog=backlog, in_summarizer=in_summarizer,
                     unfinished_answers=unfinished_answers, commit_lag=commit_lag, held_back=held_back,
                     assigned=assigned,
                     consumer=ConsumerStats(stable=True, paused=paused, stuck=tuple(stuck),
                                            undecodable_batches=undecodable_batches),
                     partitions=partitions)


def summarizer_stats(**values) -> SummarizerStats:
    """A Summarizer.stats() snapshot with the given values (the rest zero)."""
    return SummarizerStats(**{f.name: 0 for f in dataclasses.fields(SummarizerStats)} | values)

