"""The incident loop with a topology and no rules file, against a real broker: it learns the cause graph
from the alarms it reads, names storms' root causes with the learned edges' evidence, and keeps what
it learned across a restart (the room's snapshot on the state topic)."""

from __future__ import annotations

import threading

import msgspec
import pytest

from tests.kafka.helpers import produce, worker_settings
from tests.kafka.incident_helpers import STORM_TOPOLOGY, all_listed, read_events
from worker.incidents import RoomConfig
from worker.kafka.incident_loop import IncidentLoop, incident_kafka_settings
from worker.samples import iter_generate
from worker.settings.incidents import IncidentSettings

pytestmark = pytest.mark.kafka

HISTORY = 1500  # about eight days of the storm network's past: ~190 faults


def produce_records(bootstrap: str, topic: str, records) -> None:
    produce(bootstrap, topic, [msgspec.json.encode(r) for r in records], [r.source.encode() for r in records])


def serve(kafka_bootstrap, inp, out, dlq, incidents, group):
    kafka = msgspec.structs.replace(worker_settings(kafka_bootstrap, inp, out, dlq, processing_guarantee="exactly-once"),
                                    group_id=group)
    settings = IncidentSettings(topic=incidents, topology=STORM_TOPOLOGY, update_interval_s=1.0, only=True)
    loop = IncidentLoop(incident_kafka_settings(kafka, settings), settings, RoomConfig.from_settings(settings))
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    return thread, stop


def test_incident_loop_learns_causes_names_their_evidence_and_keeps_them_through_a_restart(kafka_bootstrap, make_topic):
    inp, out, dlq, incidents = (make_topic("alarms"), make_topic("out"), make_topic("dlq"), make_topic("incidents"))
    group = f"learn-{inp}"
    history = [r for r, _ in iter_generate(HISTORY, "storm-history")]
    storms = [r for r, _ in iter_generate(400, "storm")]
    produce_records(kafka_bootstrap, inp, history + storms[:200])

    thread, stop = serve(kafka_bootstrap, inp, out, dlq, incidents, group)
    events = read_events(kafka_bootstrap, incidents, all_listed(HISTORY + 200), wait_s=120)
    stop.set()
    thread.join(60)
    assert not thread.is_alive()
    first_storm = [e for e in events if any(i["offset"] >= HISTORY for i in e.get("inputs", []))]
    biggest = max(first_storm, key=lambda e: e["alarms"])
    assert biggest["root_cause"]["element"] == "dev-1" and biggest["root_cause"]["alarm_type"] == "A1"
    assert biggest["grouping"] == "learned+topology"
    assert biggest["root_cause"]["reason"].startswith("learned: A1 → A2 (A1 near ")
    assert biggest["alarms"] >= 150

    # A new worker of the same group restores the rooms from the state topic: the learned graph comes
    # with them, so the next storm's very first events already name it.
    produce_records(kafka_bootstrap, inp, storms[200:])
    thread, stop = serve(kafka_bootstrap, inp, out, dlq, incidents, group)
    later = read_events(kafka_bootstrap, incidents, all_listed(HISTORY + 400), wait_s=120)
    stop.set()
    thread.join(60)
    second = [e for e in later if any(i["offset"] >= HISTORY + 200 for i in e.get("inputs", []))]
    storm = max(second, key=lambda e: e["alarms"])["incident_id"]
    updates = [e for e in second if e["incident_id"] == storm and e["event"] == "update"]
    assert updates[0]["root_cause"]["element"] == "dev-1" and updates[0]["root_cause"]["alarm_type"] == "A1"
    assert updates[0]["root_cause"]["reason"].startswith("learned: A1 → A2")
