"""Both long-running commands start the same way: a bad setting or a wrong model is one logged
sentence naming the setting and exit code 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from worker.commands.exit_codes import EXIT_SETTINGS


def _telesum(*argv: str, env: dict[str, str] | None = None, cwd=None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TELESUM_")}
    return subprocess.run([sys.executable, "-m", "worker.cli", *argv], env={**clean, **(env or {})}, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", [["worker"], ["summarize", "in.jsonl", "-o", "out.jsonl"]])
def test_wrong_model_exits_2_naming_the_setting(command, tmp_path):
    (tmp_path / "in.jsonl").write_text('{"id": "a", "kind": "text", "body": "link down"}\n')
    missing = str(tmp_path / "no-such-model.gguf")
    done = _telesum(*command, "--model", missing, "--device", "cpu", cwd=tmp_path)
    assert done.returncode == EXIT_SETTINGS, done.stderr
    assert f"engine.model (--model, TELESUM_MODEL) '{missing}'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", [["worker"], ["summarize", "in.jsonl", "-o", "out.jsonl"], ["config"]])
def test_bad_setting_exits_2_before_any_model_loads(command):
    done = _telesum(*command, env={"TELESUM_MAX_SEQS_PER_BIN": "0"})
    assert done.returncode == EXIT_SETTINGS, done.stderr
    assert "engine.max_seqs_per_bin (--max-seqs-per-bin, TELESUM_MAX_SEQS_PER_BIN)" in done.stderr
    assert "got '0' from env TELESUM_MAX_SEQS_PER_BIN" in done.stderr and "Traceback" not in done.stderr
