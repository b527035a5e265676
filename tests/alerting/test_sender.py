"""The alert sender against a recording HTTP server: one alert per incident, firing then resolved, the
same alerts to every Alertmanager, retries, never blocking the caller, drops counted, secrets unlogged."""

from __future__ import annotations

import logging
import time

import pytest

from tests.alerting.helpers import Recorder, free_port
from worker.alerting import AlertSender
from worker.alerting.alerts import ALERTNAME
from worker.messages import IncidentEvent, RootCause
from worker.settings.alerting import AlertingSettings


def event(kind: str = "open", incident: str = "inc-1", sequence: int = 1, root: str = "dev-1", alarm_type: str = "A1",
          alarms: int = 3, merged_into: str | None = None, model_summary: str | None = None) -> IncidentEvent:
    return IncidentEvent(
        event=kind, incident_id=incident, sequence=sequence, time="2026-12-04T10:00:05Z",
        root_cause=RootCause(root, alarm_type, "2026-12-04T10:00:00Z", "rule: A1 causes A2; upstream, earliest"),
        summary=f"{root}: {alarm_type} with A2 on 2 elements", grouping="rules+topology", elements=[root, "dev-2"],
        counts={alarm_type: 1, "A2": alarms - 1}, alarms=alarms, active=alarms if kind != "resolve" else 0,
        first_time="2026-12-04T10:00:00Z", last_time="2026-12-04T10:00:04Z", merged_into=merged_into,
        model_summary=model_summary)


@pytest.fixture
def recorders():
    made: list[Recorder] = []

    def make(**kwargs) -> Recorder:
        made.append(Recorder(**kwargs))
        return made[-1]

    yield make
    for r in made:
        r.close()


@pytest.fixture
def sender():
    made: list[AlertSender] = []

    def make(*urls: str, **settings) -> AlertSender:
        s = AlertSender(AlertingSettings(alertmanager_url=",".join(urls), **settings))
        s.start()
        made.append(s)
        return s

    yield make
    for s in made:
        s.close(1.0)


def by_incident(alerts: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for a in alerts:
        out.setdefault(a["labels"]["incident_id"], []).append(a)
    return out


def is_resolved(alert: dict) -> bool:
    return alert["endsAt"] <= time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 1))


def test_sender_open_then_resolve_one_alert_firing_then_resolved(recorders, sender):
    am = recorders()
    s = sender(am.url, labels="cluster=east,region=eu")
    s.submit(event("open"))
    assert am.wait(lambda r: len(r.alerts()) >= 1)
    s.submit(event("update", sequence=2, alarms=7, model_summary="The power loss at dev-1 took the rest down."))
    s.submit(event("resolve", sequence=3, alarms=7))
    delays = []  # stats() hands each open delay out once

    def answered(r) -> bool:  # the sender counts a request once its answer is back, after the receiver saw it
        stats = s.stats()
        delays.extend(stats.open_delays)
        return any(is_resolved(a) for a in r.alerts()) and stats.targets[0].pending == 0

    assert am.wait(answered)
    alerts = am.alerts()
    assert {a["labels"]["incident_id"] for a in alerts} == {"inc-1"}
    first, last = alerts[0], alerts[-1]
    assert first["labels"] == {"alertname": ALERTNAME, "incident_id": "inc-1", "root_element": "dev-1",
                               "root_alarm_type": "A1", "grouping": "rules+topology", "severity": "major",
                               "cluster": "east", "region": "eu"}
    assert first["startsAt"] == "2026-12-04T10:00:00.000Z" and not is_resolved(first)
    assert first["annotations"]["summary"] == "dev-1: A1 with A2 on 2 elements"
    assert first["annotations"]["root_cause_reason"].startswith("rule: A1 causes A2")
    assert last["labels"] == first["labels"] and is_resolved(last)
    assert last["annotations"]["alarms"] == "7"
    assert last["annotations"]["description"] == "The power loss at dev-1 took the rest down."  # kept to the end
    assert am.snapshot()[0]["path"] == "/api/v2/alerts"
    stats = s.stats()
    assert stats.targets[0].sent >= 2 and stats.targets[0].requests_failed == 0 and stats.firing == 0
    assert [url for url, _ in delays + list(stats.open_delays)] == [am.url]


def test_sender_root_cause_changes_the_old_labels_are_resolved(recorders, sender):
    am = recorders()
    s = sender(am.url)
    s.submit(event("open", root="dev-5", alarm_type="A2"))
    assert am.wait(lambda r: len(r.alerts()) >= 1)  # posted (in one round with the update it would not be)
    s.submit(event("update", sequence=2, root="dev-1", alarm_type="A1"))
    assert am.wait(lambda r: any(a["labels"]["root_element"] == "dev-1" for a in r.alerts()))
    latest = {a["labels"]["root_element"]: a for a in am.alerts()}
    assert is_resolved(latest["dev-5"]) and not is_resolved(latest["dev-1"])


def test_sender_every_alertmanager_of_an_ha_pair_gets_every_alert_one_down_holds_nothing(recorders, sender):
    up, down = recorders(), recorders(status=503)
    s = sender(up.url, down.url)
    for i in range(5):
        s.submit(event("open", incident=f"inc-{i}"))
    assert up.wait(lambda r: len(by_incident(r.alerts())) == 5, 5)
    assert down.wait(lambda r: len(r.snapshot()) >= 2, 5)  # tried, failed, tried again after the backoff
    down.status = 200
    assert down.wait(lambda r: len(by_incident(r.alerts())) == 5 and s.stats().targets[1].pending == 0, 10)
    stats = {t.url: t for t in s.stats().targets}
    assert stats[down.url].requests_failed >= 1 and stats[down.url].pending == 0 and stats[down.url].up
    assert stats[up.url].requests_failed == 0


def test_sender_an_alertmanager_that_refuses_to_connect_is_retried_and_gets_the_open_incidents(recorders, sender):
    port = free_port()
    s = sender(f"http://127.0.0.1:{port}")
    s.submit(event("open", incident="inc-a"))
    s.submit(event("open", incident="inc-b"))
    s.submit(event("resolve", incident="inc-b", sequence=2))
    deadline = time.monotonic() + 5
    while s.stats().targets[0].requests_failed < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert s.stats().targets[0].requests_failed >= 1 and not s.stats().targets[0].up
    late = Recorder(port=port)  # Alertmanager comes up on the URL the sender retries
    try:
        assert late.wait(lambda r: {"inc-a", "inc-b"} <= set(by_incident(r.alerts())), 10)
        latest = {k: v[-1] for k, v in by_incident(late.alerts()).items()}
        assert not is_resolved(latest["inc-a"]) and is_resolved(latest["inc-b"])
    finally:
        late.close()


def test_sender_a_slow_alertmanager_never_blocks_submit_and_a_full_queue_drops_counted(recorders, sender, caplog):
    am = recorders(delay_s=0.5)
    s = sender(am.url, queue_size=3)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="worker.alerting.sender"):
        results = [s.submit(event("open", incident=f"inc-{i}")) for i in range(200)]
    assert time.monotonic() - started < 0.5
    assert not all(results) and s.stats().dropped_events == results.count(False)
    assert "queue is full" in caplog.text


def test_sender_sync_fires_the_open_incidents_and_forgets_the_others(recorders, sender):
    am = recorders()
    s = sender(am.url)
    s.submit(event("open", incident="inc-gone"))
    s.sync([event("update", incident="inc-restored", sequence=4)])  # e.g. after a restart: no open event seen
    assert am.wait(lambda r: "inc-restored" in by_incident(r.alerts()))
    assert am.wait(lambda r: s.stats().firing == 1)
    count = len(am.alerts())
    s.sync([event("update", incident="inc-restored", sequence=4)])  # a resend: posted again with a later endsAt
    assert am.wait(lambda r: len(r.alerts()) > count)
    assert all(not is_resolved(a) for a in am.alerts())  # nothing resolved: forgotten is not resolved


def test_sender_basic_auth_and_bearer_token_sent_never_logged(recorders, sender, caplog, tmp_path):
    am = recorders(status=500)
    token = tmp_path / "token"
    token.write_text("s3cr3t-token\n")
    with caplog.at_level(logging.DEBUG):
        s = sender(am.url, bearer_token_file=str(token))
        s.submit(event())
        assert am.wait(lambda r: len(r.snapshot()) >= 1)
        s.close(0.5)
        b = sender(am.url, username="noc", password="hunter2")
        b.submit(event())
        assert am.wait(lambda r: len(r.snapshot()) >= 2)
        b.close(0.5)
    headers = [p["headers"]["Authorization"] for p in am.snapshot()]
    assert "Bearer s3cr3t-token" in headers and "Basic bm9jOmh1bnRlcjI=" in headers
    assert "s3cr3t" not in caplog.text and "hunter2" not in caplog.text and "bm9jOmh1bnRlcjI" not in caplog.text
    assert "HTTP 500" in caplog.text
    assert "hunter2" not in repr(AlertingSettings(alertmanager_url=am.url, username="noc", password="hunter2"))


def test_sender_a_refused_batch_is_counted_and_not_retried(recorders, sender):
    am = recorders(status=400)
    s = sender(am.url)
    s.submit(event())
    assert am.wait(lambda r: s.stats().targets[0].rejected == 1)
    time.sleep(0.7)
    assert len(am.snapshot()) == 1 and s.stats().targets[0].pending == 0


def test_sender_a_burst_of_one_incidents_events_is_one_alert_of_the_latest_its_open_still_timed(recorders, sender):
    am = recorders()
    s = sender(am.url)
    s.submit(event("open"))
    for n in range(2, 200):
        s.submit(event("update", sequence=n, alarms=n + 2, model_summary="The model's text." if n == 3 else None))
    assert am.wait(lambda r: len(r.alerts()) >= 1)
    time.sleep(0.2)
    alerts = am.alerts()
    assert len(alerts) == 1 and alerts[0]["annotations"]["alarms"] == "201"
    assert alerts[0]["annotations"]["description"] == "The model's text."  # a text in the burst is kept
    assert len(s.stats().open_delays) == 1
