"""schemas/ stays in step with worker/messages.py."""

from __future__ import annotations

import json

import msgspec

from worker.cli import main
from worker.messages import TelemetryRecord
from worker.commands.schemas import DEFAULT_DIR, SCHEMA_TYPES, drift


def test_schemas_committed_files_match_message_types():
    assert drift(DEFAULT_DIR) == [], "run `telesum schemas` and commit schemas/"


def test_schemas_check_edited_file_reports_drift(tmp_path, capsys):
    assert main(["schemas", "--out", str(tmp_path)]) == 0
    assert main(["schemas", "--check", "--out", str(tmp_path)]) == 0
    path = tmp_path / "summary.json"
    path.write_text(path.read_text().replace('"summary"', '"summary_text"'))
    assert main(["schemas", "--check", "--out", str(tmp_path)]) == 1
    assert "summary.json" in capsys.readouterr().err


def test_schemas_record_schema_requires_id_kind_body():
    schema = json.loads((DEFAULT_DIR / "telemetry_record.json").read_text())
    record = schema["$defs"]["TelemetryRecord"]
    assert set(record["required"]) == {"id", "kind", "body"}
    assert set(record["properties"]["kind"]["enum"]) == {"ves", "syslog", "pm", "trace", "text"}
    assert set(SCHEMA_TYPES) == {p.name for p in DEFAULT_DIR.glob("*.json")}
    msgspec.json.decode(b'{"id": "a", "kind": "pm", "body": "x"}', type=TelemetryRecord)
