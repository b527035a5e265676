"""The alert sender's outcomes in the metrics and on the status page, from the incident loop's stats()."""

from __future__ import annotations

import dataclasses

from worker.alerting import AlertStats, TargetStats
from worker.kafka.incident_loop import IncidentLoopStats
from worker.kafka.incident_outputs import IncidentStats
from worker.kafka.loop import ConsumerStats
from worker.metrics import WorkerMetrics
from worker.ops.status import StatusBoard

UP = TargetStats("http://am-0:9093", sent=12, requests_ok=5, requests_failed=0, rejected=0, dropped=0, pending=0,
                 last_ok=1_765_000_000.0, last_error=None, up=True)
DOWN = TargetStats("http://am-1:9093", sent=0, requests_ok=0, requests_failed=3, rejected=1, dropped=2, pending=7,
                   last_ok=None, last_error="ConnectionRefusedError: [Errno 111] \x1b[31mrefused", up=False)


def _stats(alerts: AlertStats | None) -> IncidentLoopStats:
    return IncidentLoopStats(counts=IncidentStats(), observed=(), follow_ups=None, open_incidents=(), assigned=1,
                             consumer=ConsumerStats(stable=True, paused=0, stuck=(), undecodable_batches=0),
                             alerts=alerts)


def test_metrics_alert_outcomes_per_alertmanager_as_deltas():
    metrics = WorkerMetrics("cpu", "w0")
    alerts = AlertStats((UP, DOWN), queued=2, dropped_events=4, firing=3, open_delays=(("http://am-0:9093", 0.2),))
    metrics.observe_incidents(_stats(alerts))
    metrics.observe_incidents(_stats(dataclasses.replace(alerts, targets=(dataclasses.replace(UP, sent=15), DOWN),
                                                         open_delays=())))
    value = lambda name, **kw: metrics.registry.get_sample_value(name, {**metrics.labels, **kw})  # noqa: E731
    assert value("telesum_alertmanager_alerts_total", url=UP.url, outcome="sent") == 15
    assert value("telesum_alertmanager_alerts_total", url=DOWN.url, outcome="dropped") == 2
    assert value("telesum_alertmanager_requests_total", url=DOWN.url, outcome="failed") == 3
    assert value("telesum_alertmanager_up", url=DOWN.url) == 0 and value("telesum_alertmanager_up", url=UP.url) == 1
    assert value("telesum_alertmanager_pending_alerts", url=DOWN.url) == 7
    assert value("telesum_alertmanager_open_seconds_count", url=UP.url) == 1
    assert value("telesum_alertmanager_dropped_events_total") == 4 and value("telesum_alertmanager_firing") == 3


def test_status_board_alertmanager_panel_only_when_alerts_are_on_errors_cleaned():
    board = StatusBoard(WorkerMetrics("cpu", "w0"), {}, [])
    board.observe_incidents(_stats(None))
    assert "alerting" not in board.snapshot()
    board.observe_incidents(_stats(AlertStats((UP, DOWN), 0, 0, 3, ())))
    panel = board.snapshot()["alerting"]
    assert panel["firing"] == 3 and [t["url"] for t in panel["targets"]] == [UP.url, DOWN.url]
    assert panel["targets"][1]["up"] is False and "\x1b" not in panel["targets"][1]["last_error"]


def test_status_page_has_the_alertmanager_panel():
    from worker.ops.page import HTML, JS

    assert 'id="alertsbox"' in HTML and "d.alerting" in JS


def test_build_incident_loop_hands_the_loop_an_alert_sender_only_when_a_url_is_set(caplog):
    from worker.commands.incident_thread import build_incident_loop
    from worker.settings.load import load_settings

    env = {"TELESUM_INCIDENT_TOPIC": "incidents"}
    assert build_incident_loop(load_settings(env=env).settings).alerts is None
    loop = build_incident_loop(load_settings(env=env | {"TELESUM_ALERTMANAGER_URL": "http://am-0:9093,http://am-1:9093"})
                               .settings)
    assert loop.alerts is not None and loop.alerts.urls == ("http://am-0:9093", "http://am-1:9093")
    assert build_incident_loop(load_settings(env={"TELESUM_ALERTMANAGER_URL": "http://am-0:9093"}).settings) is None
    assert "incidents are off" in caplog.text
