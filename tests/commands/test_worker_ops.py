"""`telesum worker`'s operations: with the incident loop alone, health follows that loop's consumer."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from kafka import TopicPartition

from worker.commands.worker import _Ops
from worker.settings.load import load_settings


def test_worker_ops_incident_only_health_follows_the_incident_loops_partitions_and_consumer():
    loaded = load_settings(None, env={"TELESUM_INCIDENT_TOPIC": "incidents", "TELESUM_INCIDENT_ONLY": "true"})
    ops = _Ops(loaded, threading.Event())
    consumer = SimpleNamespace(is_stable=lambda: True, paused=set, stuck={}, undecodable_batches=0)
    loop = SimpleNamespace(parts={TopicPartition("alarms", 0): None, TopicPartition("alarms", 1): None},
                           consumer=consumer)
    ops.observe_incidents(loop)
    _, body = ops.health.readiness()
    assert body["assigned_partitions"] == 2 and body["checks"]["partitions_assigned"] is True
    consumer.is_stable = lambda: False  # a rebalance under way
    ops.observe_incidents(loop)
    assert ops.health.readiness()[1]["checks"]["partitions_assigned"] is False
