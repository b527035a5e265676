"""`telesum worker`'s incident loop is built only when TELESUM_INCIDENT_TOPIC is set."""

from __future__ import annotations

import pytest

from worker.commands.incident_thread import build_incident_loop
from worker.commands.startup import StartupError
from worker.settings.load import load_settings


def test_build_incident_loop_topic_unset_is_off():
    assert build_incident_loop(load_settings(None, env={}).settings) is None


def test_build_incident_loop_topic_set_own_group_and_transactional_id():
    settings = load_settings(None, env={"TELESUM_INCIDENT_TOPIC": "incidents", "TELESUM_GROUP_ID": "noc"}).settings
    loop = build_incident_loop(settings)
    assert loop.settings.group_id == "noc-incidents" and loop.topic == "incidents"
    assert loop.settings.transactional_id != settings.kafka.transactional_id
    assert loop.config.grouping == "element+time"


def test_build_incident_loop_incident_only_uses_the_group_itself():
    settings = load_settings(None, env={"TELESUM_INCIDENT_TOPIC": "incidents", "TELESUM_INCIDENT_ONLY": "true",
                                        "TELESUM_GROUP_ID": "noc"}).settings
    assert build_incident_loop(settings).settings.group_id == "noc"


def test_build_incident_loop_missing_topology_file_is_a_startup_error(tmp_path):
    env = {"TELESUM_INCIDENT_TOPIC": "incidents", "TELESUM_INCIDENT_TOPOLOGY": str(tmp_path / "missing.csv")}
    with pytest.raises(StartupError, match="incidents"):
        build_incident_loop(load_settings(None, env=env).settings)
