"""`telesum worker`'s incident loop is built only when TELESUM_INCIDENT_TOPIC is set; its failure stops the
worker with the exit code the summaries loop gives the same failure."""

from __future__ import annotations

import threading

import pytest
from kafka import TopicPartition

from worker.commands.exit_codes import EXIT_FAILED, EXIT_UNDECODABLE
from worker.commands.incident_thread import IncidentThread, build_incident_loop
from worker.commands.startup import StartupError
from worker.kafka.undecodable import StuckPartition, UndecodableBatch
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


class _Raising:
    """An incident loop whose run() ends as a real one does on `error`."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def run(self, stop: threading.Event):
        raise self.error


def _undecodable() -> UndecodableBatch:
    return UndecodableBatch(StuckPartition(TopicPartition("alarms", 0), 3, "UnsupportedCodecError: zstd", 0.0))


@pytest.mark.parametrize(("error", "code"), [(_undecodable(), EXIT_UNDECODABLE), (RuntimeError("broker"), EXIT_FAILED)],
                         ids=["undecodable", "other"])
def test_incident_thread_failure_stops_the_worker_with_the_summaries_loops_exit_code(error, code):
    stop = threading.Event()
    thread = IncidentThread(_Raising(error))
    thread.start(stop)
    assert thread.join(10) == code
    assert stop.is_set()  # the summaries loop drains and stops too; worker.py exits with the larger code
