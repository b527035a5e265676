"""A real Alertmanager (scripts/alertmanager.sh builds it once into the cache) with a recording webhook
receiver, and the incident loop serving in a thread with its alerts going there. The Kafka fixtures are
tests/conftest.py's."""

from __future__ import annotations

import os
import shutil
import threading

import msgspec
import pytest

from tests.alerting.helpers import Alertmanager, Recorder, alertmanager_binary
from tests.kafka.helpers import worker_settings
from tests.kafka.incident_helpers import STORM_RULES, STORM_TOPOLOGY
from worker.alerting import AlertSender
from worker.incidents import RoomConfig
from worker.kafka.incident_loop import IncidentLoop, incident_kafka_settings
from worker.settings.alerting import AlertingSettings
from worker.settings.incidents import IncidentSettings


@pytest.fixture
def receiver():
    r = Recorder()
    yield r
    r.close()


@pytest.fixture
def alertmanager_binary_or_skip():
    """Without an Alertmanager cached and without Go to build it: skipped, but failed in CI (.ci/run builds
    it and sets REQUIRE_ALERTMANAGER_TESTS)."""
    if alertmanager_binary() is None and shutil.which("go") is None:
        if os.environ.get("REQUIRE_ALERTMANAGER_TESTS"):
            pytest.fail("no Alertmanager and no Go to build it (scripts/alertmanager.sh build)")
        pytest.skip("no Alertmanager cached and no Go to build it (scripts/alertmanager.sh build)")


@pytest.fixture
def alertmanager(tmp_path, receiver, alertmanager_binary_or_skip):
    """A real Alertmanager on a free loopback port, its webhook receiver `receiver`."""
    am = Alertmanager(tmp_path / "alertmanager", receiver)
    am.start()
    yield am
    am.stop()


@pytest.fixture
def alerting_loop(kafka_bootstrap):
    """Factory: an in-process IncidentLoop (storm topology and rules) whose alerts go to `urls`; stopped
    (drained, its sender closed) at the end."""
    running: dict[int, tuple[threading.Thread, threading.Event]] = {}

    def start(inp, out, dlq, incidents, group, urls: str, idle_s: float = 20.0, resend_s: float = 2.0,
              **room) -> IncidentLoop:
        kafka = msgspec.structs.replace(worker_settings(kafka_bootstrap, inp, out, dlq), group_id=group)
        settings = IncidentSettings(topic=incidents, topology=STORM_TOPOLOGY, rules=STORM_RULES, update_interval_s=1.0,
                                    idle_s=idle_s, **room)
        loop = IncidentLoop(incident_kafka_settings(kafka, settings), settings, RoomConfig.from_settings(settings))
        loop.use_alerts(AlertSender(AlertingSettings(alertmanager_url=urls, resend_s=resend_s)))
        stop = threading.Event()
        thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
        thread.start()
        running[id(loop)] = (thread, stop)
        return loop

    def stop(loop: IncidentLoop) -> None:
        thread, event = running.pop(id(loop))
        event.set()
        thread.join(30)

    start.stop = stop
    yield start
    for thread, event in running.values():
        event.set()
        thread.join(30)
