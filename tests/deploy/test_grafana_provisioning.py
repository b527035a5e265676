"""Grafana's part of the `monitoring` profile, which cannot run here (no Grafana image can be built
without a registry): its provisioning files and the dashboard checked against the structure Grafana
documents for them (provisioning `apiVersion: 1` data sources and file providers; the classic dashboard
JSON model with its 24-column grid), and against where compose.yaml mounts them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "deploy" / "monitoring" / "grafana"
DASHBOARD = json.loads((GRAFANA / "dashboards" / "telesum.json").read_text())
GRID_COLUMNS = 24
VARIABLE_TYPES = {"query", "custom", "constant", "datasource", "interval", "textbox", "adhoc", "groupby"}


def _grafana_service() -> dict:
    text = re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", (REPO / "compose.yaml").read_text())
    return yaml.safe_load(text)["services"]["grafana"]


def test_grafana_datasource_provisioning_has_the_documented_fields():
    provisioning = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert provisioning["apiVersion"] == 1
    sources = provisioning["datasources"]
    assert sum(bool(source.get("isDefault")) for source in sources) <= 1
    for source in sources:
        assert source["name"] and source["type"] and source["access"] in {"proxy", "direct"}
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", source["uid"])
    assert {(s["type"], s["url"]) for s in sources} == {("prometheus", "http://prometheus:9090")}


def test_grafana_dashboard_provider_reads_the_folder_compose_mounts():
    provisioning = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "telesum.yml").read_text())
    assert provisioning["apiVersion"] == 1
    (provider,) = provisioning["providers"]
    assert provider["name"] and provider["type"] == "file"
    mounts = dict(volume.rsplit(":", 2)[:2] for volume in _grafana_service()["volumes"])
    assert mounts["./deploy/monitoring/grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./deploy/monitoring/grafana/provisioning"] == "/etc/grafana/provisioning"
    home = _grafana_service()["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(provider["options"]["path"] + "/")
    assert (GRAFANA / "dashboards" / Path(home).name).is_file()


def test_grafana_dashboard_follows_the_classic_json_model():
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", DASHBOARD["uid"]) and DASHBOARD["title"]
    assert isinstance(DASHBOARD["schemaVersion"], int) and DASHBOARD["schemaVersion"] >= 36
    assert set(DASHBOARD["time"]) == {"from", "to"}
    for variable in DASHBOARD["templating"]["list"]:
        assert variable["name"] and variable["type"] in VARIABLE_TYPES
    ids = [panel["id"] for panel in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    for panel in DASHBOARD["panels"]:
        assert panel["type"] and panel["title"], panel
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        assert all(target["expr"].strip() for target in panel["targets"]), panel["title"]


def test_grafana_dashboard_panels_fit_the_grid_without_overlapping():
    cells: dict[tuple[int, int], str] = {}
    for panel in DASHBOARD["panels"]:
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in ("x", "y", "w", "h")), panel["title"]
        assert grid["x"] >= 0 and grid["y"] >= 0 and grid["h"] >= 1, panel["title"]
        assert 1 <= grid["w"] and grid["x"] + grid["w"] <= GRID_COLUMNS, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]
