"""KafkaWorker.stats(): the loop's counters, queues, offsets and consumer facts in one snapshot, and the
one observer feeding every metric, health and the status page from it (no broker: stand-in clients)."""

from __future__ import annotations

import time

from kafka import TopicPartition

from worker.kafka.loop import KafkaWorker
from worker.kafka.undecodable import StuckPartition
from worker.messages import Summary, Timings
from worker.metrics import WorkerMetrics
from worker.ops.health import Health
from worker.ops.observer import Observer
from worker.ops.status import StatusBoard
from worker.settings.kafka import KafkaSettings

A, B = TopicPartition("in", 0), TopicPartition("in", 1)


class _Client:
    """The kafka-python consumer's log ends and positions."""

    def __init__(self) -> None:
        self.highwaters: dict[TopicPartition, int] = {}
        self.positions: dict[TopicPartition, int] = {}

    def highwater(self, tp):
        return self.highwaters.get(tp)

    def position(self, tp, timeout_ms=None):
        return self.positions.get(tp)


class _Consumer:
    """What the loop's stats() reads from its Consumer."""

    def __init__(self) -> None:
        self.client = _Client()
        self.stuck: dict[TopicPartition, StuckPartition] = {}
        self.undecodable_batches = 0
        self.paused_partitions: set[TopicPartition] = set()
        self.stable = True

    def is_stable(self) -> bool:
        return self.stable

    def paused(self) -> set[TopicPartition]:
        return set(self.paused_partitions)


def _worker() -> tuple[KafkaWorker, _Consumer]:
    consumer = _Consumer()
    worker = KafkaWorker(KafkaSettings(), summarizer=None, model_name="fake", max_in_flight=8,
                         consumer=consumer, producer=object())
    for tp in (A, B):
        worker.tracker.assign(tp)
    epoch = [worker.tracker.track(A, offset) for offset in range(4)][0]
    worker.tracker.track(B, 10)
    worker.tracker.mark_done(A, 0, epoch)  # offset 0 joins the done prefix: 3 + 1 records hold the commit
    consumer.paused_partitions = {A}
    consumer.client.highwaters, consumer.client.positions = {A: 20, B: 11}, {A: 15, B: 11}
    consumer.stuck = {A: StuckPartition(A, 4, "UnsupportedCodecError: zstd", time.time())}
    consumer.undecodable_batches = 2
    worker.counts.consumed, worker.counts.reasons = 5, {"invalid_json": 1}
    return worker, consumer


def test_loop_stats_reads_offsets_queues_and_consumer_facts():
    worker, consumer = _worker()
    stats = worker.stats()
    assert (stats.assigned, stats.commit_lag, stats.backlog, stats.in_summarizer, stats.unfinished_answers) == \
        (2, 4, 0, 0, 0)
    assert stats.consumer.stable and stats.consumer.paused == 1 and stats.consumer.undecodable_batches == 2
    assert [(s["partition"], s["offset"]) for s in stats.consumer.stuck] == [(0, 4)]
    assert stats.partitions is None  # the log ends are only read when asked
    lagged = worker.stats(lag=True).partitions
    assert [(p.partition, p.in_flight, p.paused, p.lag) for p in lagged] == [(0, 3, True, 8), (1, 1, False, 1)]


def test_loop_stats_is_a_copy_later_counting_leaves_it_unchanged():
    worker, _ = _worker()
    stats = worker.stats()
    worker.counts.consumed += 1
    worker.counts.reasons["invalid_json"] += 1
    assert stats.counts.consumed == 5 and stats.counts.reasons == {"invalid_json": 1}


def test_observer_feeds_every_metric_health_and_the_status_page_from_stats():
    """A field the metrics, health or the status page read and stats() lacks fails here."""
    worker, consumer = _worker()
    metrics = WorkerMetrics("cpu", "w-1")
    health = Health(lambda: True, stall_after_s=60)
    board = StatusBoard(metrics, {"worker": "w-1"}, [])
    summary = Summary(id="r1", summary="link down", model="m", prompt_tokens=40, output_tokens=4,
                      timings=Timings(queued_s=0.01, prefill_s=0.02, decode_s=0.1, total_s=0.13))
    Observer(metrics, health, board=board)(worker, [("rid", summary)])
    value = lambda name, **extra: metrics.registry.get_sample_value(name, {**metrics.labels, **extra})  # noqa: E731
    assert value("telesum_records_consumed_total") == 5
    assert value("telesum_dead_letters_total", reason="invalid_json") == 1
    assert value("telesum_assigned_partitions") == 2 and value("telesum_paused_partitions") == 1
    assert value("telesum_commit_lag_records") == 4 and value("telesum_stuck_partitions") == 1
    assert value("telesum_undecodable_batches_total") == 2
    assert value("telesum_consumer_lag_records", topic="in", partition="0") == 8
    assert value("telesum_output_tokens_total") == 4
    ready, body = health.readiness()
    assert not ready and body["assigned_partitions"] == 2 and body["stuck_partitions"][0]["offset"] == 4
    page = board.snapshot()
    assert page["stats"]["consumed"] == 5 and page["latest"][0]["id"] == "r1"
    assert [(p["partition"], p["lag"]) for p in page["partitions"]] == [(0, 8), (1, 1)]
