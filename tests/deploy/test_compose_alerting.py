"""compose.yaml's `alerting` profile: Alertmanager (official image by default, a local build a variable
away) with the example route, and an incidents-only worker posting its incidents there."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.deploy.test_compose import _load
from worker.settings.load import load_settings

REPO = Path(__file__).resolve().parents[2]


def test_compose_alerting_profile_alertmanager_with_the_example_route_and_a_worker_posting_to_it():
    raw = (REPO / "compose.yaml").read_text()
    services = _load("compose.yaml")["services"]
    am, incidents = services["alertmanager"], services["incidents"]
    assert am["profiles"] == incidents["profiles"] == ["alerting"]
    assert am["image"] == "prom/alertmanager:v0.35.0" and "${TELESUM_ALERTMANAGER_IMAGE:-" in raw
    host, container = am["volumes"][0].split(":")[:2]
    assert (REPO / host).is_file() and container == "/etc/alertmanager/alertmanager.yml"
    assert f"--config.file={container}" in am["command"]
    assert yaml.safe_load((REPO / host).read_text())["route"]["routes"][0]["group_by"] == ["incident_id"]
    env = {k: str(v) for k, v in incidents["environment"].items()}
    settings = load_settings(env=env).settings
    assert settings.incidents.only and settings.incidents.topic == "incidents"
    assert settings.alerting.urls() == ("http://alertmanager:9093",)
    assert env["TELESUM_GROUP_ID"] != services["worker"]["environment"]["TELESUM_GROUP_ID"]
    assert env["TELESUM_DLQ_TOPIC"] != services["worker"]["environment"]["TELESUM_DLQ_TOPIC"]


def test_compose_alertmanager_local_image_runs_as_the_official_one():
    dockerfile = (REPO / "deploy" / "alertmanager" / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["/bin/alertmanager"]' in dockerfile and "/etc/alertmanager/alertmanager.yml" in dockerfile
    assert "alertmanager) alertmanager_image" in (REPO / "scripts" / "docker_images.sh").read_text()
