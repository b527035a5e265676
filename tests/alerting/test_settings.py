"""The `[alerting]` settings: off by default, URLs and static labels read, bad values refused naming the
setting, secrets masked."""

from __future__ import annotations

import pytest

from worker.alerting.alerts import labels_of, postable
from worker.settings.fields import SettingsError
from worker.settings.load import load_settings, to_environment


def test_alerting_settings_off_by_default_urls_and_labels_from_the_environment():
    assert not load_settings(env={}).settings.alerting.enabled
    s = load_settings(env={"TELESUM_ALERTMANAGER_URL": "http://am-0:9093/, https://am-1:9093/prefix",
                           "TELESUM_ALERTMANAGER_LABELS": "cluster=east, region=eu",
                           "TELESUM_ALERTMANAGER_PASSWORD": "hunter2",
                           "TELESUM_ALERTMANAGER_USERNAME": "noc"}).settings
    a = s.alerting
    assert a.enabled and a.urls() == ("http://am-0:9093", "https://am-1:9093/prefix")
    assert a.static_labels() == {"cluster": "east", "region": "eu"}
    assert "hunter2" not in repr(a) and load_settings(env=to_environment(s)).settings == s


@pytest.mark.parametrize("env, match", [
    ({"TELESUM_ALERTMANAGER_URL": "am-0:9093"}, "TELESUM_ALERTMANAGER_URL"),
    ({"TELESUM_ALERTMANAGER_URL": "http://noc:hunter2@am-0:9093"}, "may not carry a user"),
    ({"TELESUM_ALERTMANAGER_LABELS": "cluster"}, "TELESUM_ALERTMANAGER_LABELS"),
    ({"TELESUM_ALERTMANAGER_LABELS": "incident_id=x"}, "set by telesum"),
    ({"TELESUM_ALERTMANAGER_PASSWORD": "x"}, "USERNAME"),
    ({"TELESUM_ALERTMANAGER_USERNAME": "a", "TELESUM_ALERTMANAGER_PASSWORD": "x",
      "TELESUM_ALERTMANAGER_BEARER_TOKEN": "t"}, "exclusive"),
    ({"TELESUM_ALERTMANAGER_CERT_FILE": "c.pem"}, "go together"),
    ({"TELESUM_ALERTMANAGER_RESEND_S": "0"}, "TELESUM_ALERTMANAGER_RESEND_S"),
])
def test_alerting_settings_bad_value_raises_naming_it(env, match):
    with pytest.raises(SettingsError, match=match):
        load_settings(env=env)


def test_alert_times_held_to_the_clock_firing_ends_four_resends_ahead():
    from datetime import datetime, timedelta, timezone

    from tests.alerting.test_sender import event

    now = datetime(2026, 12, 4, 10, 0, 1, tzinfo=timezone.utc)
    labels = labels_of(event(), "major", {})
    firing = postable(labels, {}, now - timedelta(hours=1), None, now, 60)
    assert firing["endsAt"] == "2026-12-04T10:04:01.000Z" and firing["startsAt"] == "2026-12-04T09:00:01.000Z"
    ahead = postable(labels, {}, now + timedelta(hours=1), now + timedelta(hours=2), now, 60)  # a skewed clock
    assert ahead["startsAt"] == ahead["endsAt"] == "2026-12-04T10:00:01.000Z"
