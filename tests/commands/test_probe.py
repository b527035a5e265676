"""`telesum probe`: refuses what it cannot measure, prints the budgets it gets."""

from __future__ import annotations

import pytest
import torch

from worker.cli import main
from worker.probe import ProbeResult
from worker.commands.probe import format_table


def test_probe_command_on_cpu_exits_2_with_a_reason(caplog):
    assert main(["probe", "--device", "cpu"]) == 2
    assert "engine.device (--device, TELESUM_DEVICE) must be auto, cuda or cuda:N, not cpu" in caplog.text


def test_probe_command_reads_the_engine_settings_the_worker_reads(monkeypatch, caplog):
    monkeypatch.setenv("TELESUM_DEVICE", "cpu")
    assert main(["probe"]) == 2
    assert "not cpu" in caplog.text
    monkeypatch.setenv("TELESUM_MAX_NEW_TOKENS", "0")
    assert main(["probe"]) == 2
    assert "engine.max_new_tokens (--max-new-tokens, TELESUM_MAX_NEW_TOKENS)" in caplog.text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_probe_command_without_a_gpu_exits_2(caplog):
    assert main(["probe"]) == 2
    assert "needs a CUDA GPU" in caplog.text


def test_format_table_shows_every_budget_and_its_source():
    b = ProbeResult(token_budget=576_000, kv_rows=730_112, max_decode_seqs=633, peak_bytes=135 * 2**30,
                    seconds=21.4, warmup_seconds=3.0, source="cache", bin_limit=640_000, free_bytes=124 * 2**30,
                    decode_graph_bytes=3 * 2**29, prefill_graph_bytes=2**30, headroom_bytes=4 * 2**30,
                    seq_tokens=1024, device_name="NVIDIA H200", total_bytes=140 * 2**30, cache_path="/c/x.json")
    text = format_table(b, "qwen", "bfloat16", 128)
    assert "NVIDIA H200, qwen (bfloat16)" in text
    for name in ("token_budget", "kv_rows", "max_decode_seqs"):  # the settings' names for the same budgets
        assert f"  {name} " in text
    assert "1,153 rows per sequence" in text  # 730,112 rows over 633 sequences in flight
    for needle in ("576,000", "90 % of the largest bin that ran, 640,000", "730,112", "633",
                   "135.0 GiB", "of 140.0 GiB", "1.50 GiB decode graphs, 1.00 GiB prefill graphs", "21.4", "when it was probed", "cache", "/c/x.json"):
        assert needle in text
