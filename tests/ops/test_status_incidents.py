"""The incident loop's figures: metrics (alarms in, incidents open, alarms per incident, time to open) and
the status page's open incidents."""

from __future__ import annotations

import dataclasses

from kafka import TopicPartition

from tests.kafka.incident_helpers import STORM_RULES, STORM_TOPOLOGY
from worker.incidents import RoomConfig, load_rules, load_topology
from worker.kafka.incident_loop import IncidentLoopStats
from worker.kafka.incident_outputs import IncidentStats, alarm_of
from worker.kafka.loop import ConsumerStats
from worker.kafka.incident_partition import InputRef, PartitionRoom
from worker.metrics import WorkerMetrics
from worker.ops.status import StatusBoard
from worker.samples import iter_generate


def _loop_after_a_storm():
    config = RoomConfig(topology=load_topology(STORM_TOPOLOGY), rules=load_rules(STORM_RULES))
    part = PartitionRoom(TopicPartition("alarms", 0), config)
    for i, (record, _) in enumerate(iter_generate(30, "storm")):
        part.feed(i, [alarm_of(record, InputRef("alarms", 0, i), None)])
    counts = IncidentStats(alarms=30, events=12, opened=5, resolved=2)
    return IncidentLoopStats(counts=counts, observed=(("open_s", 0.4), ("alarms", 7)), follow_ups=None,
                             open_incidents=tuple(part.room.open_incidents()), assigned=1,
                             consumer=ConsumerStats(stable=True, paused=0, stuck=(), undecodable_batches=0))


def test_metrics_observe_incidents_alarms_open_sizes_and_time_to_open():
    metrics = WorkerMetrics("cpu", "w0")
    metrics.observe_incidents(_loop_after_a_storm())
    value = lambda name: metrics.registry.get_sample_value(name, metrics.labels)  # noqa: E731
    assert value("telesum_incident_alarms_total") == 30
    assert value("telesum_incidents_open") == 3
    assert value("telesum_incident_alarms_per_incident_sum") == 7
    assert value("telesum_incident_open_seconds_count") == 1


def test_status_board_observe_incidents_lists_open_incidents_with_their_root():
    metrics = WorkerMetrics("cpu", "w0")
    board = StatusBoard(metrics, {"worker": "w0"}, [])
    loop = _loop_after_a_storm()
    board.observe_incidents(loop)
    rows = board.snapshot()["open_incidents"]
    assert len(rows) == len(loop.open_incidents) >= 1
    assert rows[0]["root_cause"] == "A1 on dev-1" and rows[0]["alarms"] >= rows[-1]["alarms"]


def test_status_board_without_an_incident_loop_has_no_incident_list():
    assert "open_incidents" not in StatusBoard(WorkerMetrics("cpu", "w0"), {}, []).snapshot()


def test_metrics_count_the_model_text_requests_by_outcome_as_deltas():
    from worker.kafka.incident_followups import FollowUpStats

    metrics = WorkerMetrics("cpu", "w0")
    loop = _loop_after_a_storm()
    metrics.observe_incidents(dataclasses.replace(loop, follow_ups=FollowUpStats(requested=3, dropped=1, written=2)))
    metrics.observe_incidents(dataclasses.replace(loop, observed=(), follow_ups=FollowUpStats(
        requested=5, dropped=1, written=2, empty=1)))
    value = lambda outcome: metrics.registry.get_sample_value(  # noqa: E731
        "telesum_incident_follow_ups_total", {**metrics.labels, "outcome": outcome})
    assert (value("requested"), value("dropped"), value("written"), value("empty"), value("failed")) == (5, 1, 2, 1, 0)
