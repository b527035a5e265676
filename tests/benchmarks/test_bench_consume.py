"""`telesum bench consume`: the record sizes it builds, and one small run against the real broker."""

from __future__ import annotations

import json

import msgspec
import pytest

from worker.benchmarks.consume import VARIANTS, large_values
from worker.cli import main
from worker.messages import TelemetryRecord


def test_bench_consume_records_are_envelopes_of_the_asked_size():
    values = large_values(3, 64 * 1024, seed=1)
    records = [msgspec.json.decode(v, type=TelemetryRecord) for v in values]
    assert [r.id for r in records] == ["large-0", "large-1", "large-2"]
    assert all(60 * 1024 <= len(v) <= 66 * 1024 for v in values)
    assert len({r.body for r in records}) == 3  # three different log files, not one repeated


@pytest.mark.kafka
def test_bench_consume_measures_every_variant_with_the_crc_it_names(kafka_bootstrap, capsys):
    code = main(["bench", "consume", "--bootstrap-servers", kafka_bootstrap, "--records", "6",
                 "--record-bytes", "32768", "--rounds", "1", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code in (0, 1) and code == (0 if result["goal_met"] else 1)
    assert [(v["codec"], v["crc"]) for v in result["variants"]] == list(VARIANTS)
    assert all(v["median_mb_per_s"] > 0 and len(v["runs_mb_per_s"]) == 1 for v in result["variants"])
    assert result["records"] == 6 and 30000 < result["record_bytes"] <= 32768 + 1024
