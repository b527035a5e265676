"""Storms to produce and incident events to read back, for the incident loop's broker tests."""

from __future__ import annotations

import collections
import time

import msgspec
from kafka import KafkaConsumer

from tests.kafka.helpers import produce
from worker.samples import iter_generate

STORM_TOPOLOGY = "docs/examples/storm-topology.csv"
STORM_RULES = "docs/examples/storm-rules.csv"


def produce_storm(bootstrap: str, topic: str, count: int, key_by: str = "site") -> list:
    """`count` storm records (VES faults) keyed by site (the documented key) or by element; their records."""
    pairs = list(iter_generate(count, "storm"))
    keys = [(r.source if key_by == "site" else r.body["event"]["commonEventHeader"]["sourceName"]).encode()
            for r, _ in pairs]
    produce(bootstrap, topic, [msgspec.json.encode(r) for r, _ in pairs], keys)
    return [r for r, _ in pairs]


def read_events(bootstrap: str, topic: str, until, wait_s: float = 60) -> list[dict]:
    """Incident events as a read_committed consumer sees them, from the beginning, until until(events)."""
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None, isolation_level="read_committed")
    events: list[dict] = []
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline and not until(events):
            for batch in consumer.poll(timeout_ms=200).values():
                events.extend(msgspec.json.decode(r.value) | {"_key": r.key.decode()} for r in batch)
    finally:
        consumer.close()
    return events


def listed(events: list[dict]) -> collections.Counter:
    """How often each input (partition, offset, index) is listed across all events."""
    return collections.Counter((i["partition"], i["offset"], i.get("index")) for e in events for i in e.get("inputs", []))


def all_listed(count: int):
    """until(): every one of `count` single-alarm inputs listed at least once."""
    return lambda events: len(listed(events)) >= count


def incidents_by_owner(events: list[dict]) -> dict[str, dict]:
    """incident id -> its last event, merged incidents followed to their survivor."""
    last = {}
    for e in events:
        last[e["incident_id"]] = e
    return last
