"""docs/incidents.md's example alertmanager.yml is one a real Alertmanager loads."""

from __future__ import annotations

import re
from pathlib import Path

from tests.alerting.helpers import ROOT, Alertmanager


def example_config() -> str:
    text = (ROOT / "docs" / "incidents.md").read_text()
    section = text.split("**Routing telesum's incidents to a team**", 1)[1]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


def test_docs_example_alertmanager_yml_loads_in_a_real_alertmanager(tmp_path: Path, alertmanager_binary_or_skip,
                                                                      receiver):
    am = Alertmanager(tmp_path, receiver)  # its own config, then the example's in its place
    (tmp_path / "alertmanager.yml").write_text(example_config())
    am.start()
    try:
        status = am.api("status")
        assert "ran-transport-oncall" in status["config"]["original"]
    finally:
        am.stop()
