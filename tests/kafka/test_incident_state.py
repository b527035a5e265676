"""Which state topic the incident loop keeps its rooms on, without a broker: on by default under
exactly-once, named after the loop's group; a default one the broker will not create falls back to
recomputing, a named one must exist."""

from __future__ import annotations

import pytest
from kafka.errors import TopicAuthorizationFailedError

from worker.incidents import RoomConfig
from worker.kafka import incident_loop
from worker.kafka.incident_loop import IncidentLoop, incident_kafka_settings
from worker.kafka.incident_state import state_topic_of
from worker.settings.incidents import IncidentSettings
from worker.settings.kafka import KafkaSettings


def _loop_settings(guarantee: str, only: bool = False) -> KafkaSettings:
    kafka = KafkaSettings(group_id="noc", processing_guarantee=guarantee)
    return incident_kafka_settings(kafka, IncidentSettings(topic="incidents", only=only))


@pytest.mark.parametrize(("guarantee", "only", "setting", "topic"), [
    ("exactly-once", False, None, "noc-incidents-state"),
    ("exactly-once", True, None, "noc-state"),
    ("exactly-once", False, "incidents.state", "incidents.state"),
    ("exactly-once", False, "none", None),
    ("at-least-once", False, None, None),
    ("at-least-once", False, "incidents.state", None),
], ids=["default", "default-incident-only", "named", "none", "at-least-once", "at-least-once-named"])
def test_state_topic_of_default_under_exactly_once_named_after_the_loops_group(guarantee, only, setting, topic):
    incidents = IncidentSettings(topic="incidents", only=only, state_topic=setting)
    assert state_topic_of(_loop_settings(guarantee, only), incidents) == topic


def _loop(state_topic: str | None) -> IncidentLoop:
    incidents = IncidentSettings(topic="incidents", state_topic=state_topic)
    return IncidentLoop(_loop_settings("exactly-once"), incidents, RoomConfig())


def _refused(settings, topic) -> None:
    raise TopicAuthorizationFailedError(f"not allowed to create {topic}")


def test_incident_loop_default_state_topic_refused_by_the_broker_recomputes_instead(monkeypatch, caplog):
    monkeypatch.setattr(incident_loop, "ensure_state_topic", _refused)
    loop = _loop(None)
    assert loop.state_topic == "noc-incidents-state"
    loop._check_state_topic()
    assert loop.state_topic is None
    assert "recomputed" in caplog.text


def test_incident_loop_named_state_topic_refused_by_the_broker_stops_the_loop(monkeypatch):
    monkeypatch.setattr(incident_loop, "ensure_state_topic", _refused)
    loop = _loop("incidents.state")
    with pytest.raises(TopicAuthorizationFailedError):
        loop._check_state_topic()
