"""deploy/: the Kubernetes recipe (Deployment + KEDA ScaledObject) and the monitoring provisioning,
checked for structure and for agreement with the code: settings that exist, probes on the worker's
port, a grace period that covers the drain, replicas capped by partitions, dashboard series that
the worker exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from worker.commands.supervisor import DRAIN_MARGIN_S
from worker.metrics import WorkerMetrics
from worker.settings.load import environment_names, load_settings

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "kubernetes"
MONITORING = REPO / "deploy" / "monitoring"


def _docs() -> dict[str, dict]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    out = {}
    for name in kustomization["resources"]:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            out[doc["kind"]] = doc
    return out


def test_deploy_kustomization_lists_every_manifest():
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}


def test_deploy_settings_are_real_settings_and_load():
    docs = _docs()
    env = dict(docs["ConfigMap"]["data"])
    assert set(env) <= environment_names(), set(env) - environment_names()
    assert set(docs["Secret"]["stringData"]) <= environment_names()
    env.update(docs["Secret"]["stringData"])  # empty values: unset
    settings = load_settings(None, env).settings  # raises naming any bad value
    assert settings.engine.device == "cuda" and settings.http.metrics_port > 0


def test_deploy_worker_probes_port_gpu_and_grace_period():
    docs = _docs()
    env = docs["ConfigMap"]["data"]
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"configMapRef": {"name": docs["ConfigMap"]["metadata"]["name"]}} in container["envFrom"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == int(env["TELESUM_METRICS_PORT"])
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["terminationGracePeriodSeconds"] >= float(env["TELESUM_DRAIN_TIMEOUT_S"]) + DRAIN_MARGIN_S
    assert docs["Service"]["spec"]["selector"] == docs["Deployment"]["spec"]["selector"]["matchLabels"]


def test_deploy_keda_scales_the_worker_on_its_group_lag_capped_by_partitions():
    docs = _docs()
    env, scaled = docs["ConfigMap"]["data"], docs["ScaledObject"]
    assert scaled["apiVersion"].startswith("keda.sh/")
    assert scaled["spec"]["scaleTargetRef"]["name"] == docs["Deployment"]["metadata"]["name"]
    (trigger,) = scaled["spec"]["triggers"]
    meta = trigger["metadata"]
    assert trigger["type"] == "kafka"
    assert meta["consumerGroup"] == env["TELESUM_GROUP_ID"] and meta["topic"] == env["TELESUM_INPUT_TOPIC"]
    assert meta["bootstrapServers"] == env["KAFKA_BOOTSTRAP_SERVERS"]
    assert meta.get("allowIdleConsumers", "false") == "false" and int(meta["lagThreshold"]) > 0
    job = docs["Job"]["spec"]["template"]["spec"]["containers"][0]["args"][0]
    partitions = int(re.search(r'--topic "\$TELESUM_INPUT_TOPIC" --partitions (\d+)', job).group(1))
    assert 1 <= scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"] == partitions


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl here; structural tests run instead")
def test_deploy_kubectl_kustomize_renders():
    result = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def _exported_series() -> set[str]:
    names = set()
    for family in WorkerMetrics("cpu", "w").registry.collect():
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(family.type, [""])
        names |= {family.name + s for s in suffixes}
    return names


def test_deploy_dashboard_queries_only_series_the_worker_exports():
    dashboard = json.loads((MONITORING / "grafana" / "dashboards" / "telesum.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\btelesum_[a-z_]+", e)}
    assert len(dashboard["panels"]) >= 10 and used
    assert used <= _exported_series(), used - _exported_series()
    for needed in ("telesum_summaries_published_total", "telesum_consumer_lag_records",
                   "telesum_dead_letters_total", "telesum_bin_fill_ratio", "telesum_engine_busy_ratio"):
        assert needed in used
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_deploy_monitoring_provisioning_points_at_prometheus_and_the_dashboard():
    prom = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    assert prom["scrape_configs"][0]["static_configs"][0]["targets"] == ["worker:9400"]
    ds = yaml.safe_load((MONITORING / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    dashboard = json.loads((MONITORING / "grafana" / "dashboards" / "telesum.json").read_text())
    uids = {p["datasource"]["uid"] for p in dashboard["panels"]}
    assert uids == {ds["datasources"][0]["uid"]} and ds["datasources"][0]["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((MONITORING / "grafana" / "provisioning" / "dashboards" / "telesum.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
