"""`telesum worker`'s operations: with the incident loop alone, health follows that loop's consumer."""

from __future__ import annotations

import dataclasses
import threading

from worker.commands.worker import _Ops
from worker.kafka.incident_loop import IncidentLoopStats
from worker.kafka.incident_outputs import IncidentStats
from worker.kafka.loop import ConsumerStats
from worker.settings.load import load_settings


def test_worker_ops_incident_only_health_follows_the_incident_loops_partitions_and_consumer():
    loaded = load_settings(None, env={"TELESUM_INCIDENT_TOPIC": "incidents", "TELESUM_INCIDENT_ONLY": "true"})
    ops = _Ops(loaded, threading.Event())
    stable = ConsumerStats(stable=True, paused=0, stuck=(), undecodable_batches=0)
    stats = IncidentLoopStats(counts=IncidentStats(), observed=(), follow_ups=None, open_incidents=(), assigned=2,
                              consumer=stable)
    ops.observe_incidents(stats)
    _, body = ops.health.readiness()
    assert body["assigned_partitions"] == 2 and body["checks"]["partitions_assigned"] is True
    # a rebalance under way
    ops.observe_incidents(dataclasses.replace(stats, consumer=dataclasses.replace(stable, stable=False)))
    assert ops.health.readiness()[1]["checks"]["partitions_assigned"] is False
