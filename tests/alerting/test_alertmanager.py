"""Incidents through a real broker and the incident loop to a real Alertmanager, whose webhook receiver
records what it sends: one notification per incident with its root cause, then its resolution; a silence
on the root element silences it; an Alertmanager stopped for a while gets every open incident back."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.alerting.helpers import notifications
from tests.kafka.incident_helpers import produce_storm, read_events

pytestmark = pytest.mark.kafka


@pytest.fixture
def topics(make_topic):
    return make_topic("alarms", 1), make_topic("out"), make_topic("dlq"), make_topic("incidents", 1)


def resolved_all(count: int):
    return lambda events: sum(e["event"] == "resolve" for e in events) >= count


def by_incident(receiver) -> dict[str, list[tuple[str, dict]]]:
    """incident id -> [(notification status, its alert)] in the order the receiver got them."""
    out: dict[str, list[tuple[str, dict]]] = {}
    for n in notifications(receiver):
        for alert in n["alerts"]:
            out.setdefault(alert["labels"]["incident_id"], []).append((alert["status"], alert))
    return out


def wait_until(check, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def test_alertmanager_storm_one_notification_per_incident_with_its_root_cause_then_resolved(
        kafka_bootstrap, topics, alertmanager, receiver, alerting_loop):
    inp, out, dlq, incidents = topics
    produce_storm(kafka_bootstrap, inp, 200)
    alerting_loop(inp, out, dlq, incidents, f"g-{uuid.uuid4().hex}", alertmanager.url)
    events = read_events(kafka_bootstrap, incidents, resolved_all(2), wait_s=90)
    opens = {e["incident_id"]: e for e in events if e["event"] == "open"}
    last = {e["incident_id"]: e for e in events}
    assert len(opens) == 2 and all(e["event"] == "resolve" for e in last.values())
    assert wait_until(lambda: all(s == "resolved" for s, _ in
                                  [v[-1] for v in by_incident(receiver).values()]) and len(by_incident(receiver)) == 2,
                      30), by_incident(receiver)
    got = by_incident(receiver)
    assert set(got) == set(opens)
    for incident_id, sent in got.items():
        statuses = [s for s, _ in sent]
        assert statuses == ["firing", "resolved"], (incident_id, statuses)  # one page, then its resolution
        root = last[incident_id]["root_cause"]
        alert = sent[0][1]
        assert (alert["labels"]["root_element"], alert["labels"]["root_alarm_type"]) == (root["element"],
                                                                                        root["alarm_type"])
        assert alert["annotations"]["root_cause_reason"] == root["reason"]
        assert alert["labels"]["alertname"] == "TelesumIncident"
    storm = max(last.values(), key=lambda e: e["alarms"])
    assert got[storm["incident_id"]][0][1]["labels"]["root_element"] == "dev-1"
    assert f"root cause A1 on dev-1" in got[storm["incident_id"]][1][1]["annotations"]["summary"]
    # Nothing left firing at Alertmanager after the incidents resolved.
    assert [a for a in alertmanager.alerts(active=True)] == []


def test_alertmanager_silence_on_the_root_element_silences_that_incident_only(
        kafka_bootstrap, topics, alertmanager, receiver, alerting_loop):
    inp, out, dlq, incidents = topics
    alertmanager.silence({"alertname": "TelesumIncident", "root_element": "dev-1"})
    produce_storm(kafka_bootstrap, inp, 200)
    alerting_loop(inp, out, dlq, incidents, f"g-{uuid.uuid4().hex}", alertmanager.url, idle_s=3600)
    events = read_events(kafka_bootstrap, incidents, lambda ev: sum(e["event"] == "open" for e in ev) >= 2)
    roots = {e["incident_id"]: e["root_cause"]["element"] for e in events if e["event"] == "open"}
    assert wait_until(lambda: len(alertmanager.alerts(active=None)) >= 2, 10)
    storm = next(i for i, root in roots.items() if root == "dev-1")
    other = next(i for i in roots if i != storm)
    assert wait_until(lambda: other in by_incident(receiver), 10)
    time.sleep(1.0)  # a group_wait and a group_interval more: the silenced one would have come by now
    assert storm not in by_incident(receiver)
    state = {a["labels"]["incident_id"]: a["status"]["state"] for a in alertmanager.alerts()}
    assert state[storm] == "suppressed" and state[other] == "active"


def test_alertmanager_stopped_for_a_while_gets_every_open_incident_back(
        kafka_bootstrap, topics, alertmanager, receiver, alerting_loop):
    from tests.kafka.helpers import produce
    from worker.samples import iter_generate

    import msgspec

    inp, out, dlq, incidents = topics
    records = [r for r, _ in iter_generate(200, "storm")]
    first = [r for r in records[:20] if r.body["event"]["faultFields"]["alarmCondition"] != "A4"]  # dev-1's only
    produce(kafka_bootstrap, inp, [msgspec.json.encode(r) for r in first])
    loop = alerting_loop(inp, out, dlq, incidents, f"g-{uuid.uuid4().hex}", alertmanager.url, idle_s=3600)
    assert wait_until(lambda: len(alertmanager.alerts(active=True)) == 1, 30)
    alertmanager.stop()  # its alerts are in memory only: gone with it
    produce(kafka_bootstrap, inp, [msgspec.json.encode(r) for r in records[20:]])  # A4's incident opens meanwhile
    events = read_events(kafka_bootstrap, incidents, lambda ev: sum(e["event"] == "open" for e in ev) >= 2)
    assert wait_until(lambda: loop.alerts.stats().targets[0].requests_failed >= 1, 10)
    time.sleep(3.0)  # down for a while: several resends fail
    alertmanager.start()
    opened = {e["incident_id"] for e in events if e["event"] == "open"}
    assert wait_until(lambda: {a["labels"]["incident_id"] for a in alertmanager.alerts(active=True)} == opened, 15)
    assert wait_until(lambda: set(by_incident(receiver)) == opened, 10)
    # The open incidents' periodic re-post may reach it first: the failed batch's retry, still in its
    # backoff, then empties the queue.
    assert wait_until(lambda: loop.alerts.stats().targets[0].pending == 0, 10)


@pytest.mark.parametrize("state_topic", [None, "none"], ids=["restored", "recomputed"])
def test_alertmanager_restarted_with_the_worker_gets_the_open_incidents_back_without_a_new_alarm(
        kafka_bootstrap, topics, alertmanager, receiver, alerting_loop, state_topic):
    inp, out, dlq, incidents = topics
    group = f"g-{uuid.uuid4().hex}"
    produce_storm(kafka_bootstrap, inp, 200)
    first = alerting_loop(inp, out, dlq, incidents, group, alertmanager.url, idle_s=3600, resend_s=60,
                          state_topic=state_topic)
    events = read_events(kafka_bootstrap, incidents, lambda ev: sum(e["event"] == "open" for e in ev) >= 2)
    opened = {e["incident_id"] for e in events if e["event"] == "open"}
    assert wait_until(lambda: {a["labels"]["incident_id"] for a in alertmanager.alerts(active=True)} == opened, 15)
    alerting_loop.stop(first)  # the worker stops (its alerts stay firing) ...
    alertmanager.stop()        # ... and Alertmanager restarts: it has forgotten them
    alertmanager.start()
    assert alertmanager.alerts(active=True) == []
    alerting_loop(inp, out, dlq, incidents, group, alertmanager.url, idle_s=3600, resend_s=60,
                  state_topic=state_topic)  # no new alarm, a resend a minute away: the rooms' open incidents
    assert wait_until(lambda: {a["labels"]["incident_id"] for a in alertmanager.alerts(active=True)} == opened, 20)
