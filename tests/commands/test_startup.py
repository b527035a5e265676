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


def test_start_summarizer_spawns_the_preprocessing_pool_before_the_model_load(tmp_path, monkeypatch):
    import worker.summarizer.preprocess
    import worker.commands.runtime
    from worker.commands.startup import start_summarizer
    from worker.settings.load import load_settings

    from tests.engine.tiny_tokenizer import tiny_tokenizer

    tiny_tokenizer().save_pretrained(tmp_path / "tok")
    settings = load_settings(env={"TELESUM_MODEL": "tiny", "TELESUM_TOKENIZER": str(tmp_path / "tok"),
                                  "TELESUM_DEVICE": "cpu", "TELESUM_MAX_NEW_TOKENS": "4"})
    monkeypatch.setattr(worker.summarizer.preprocess, "default_workers", lambda device_type: 1)
    events, pools = [], []
    start_pool, load = worker.commands.runtime.start_preprocessor, worker.commands.runtime._load_model

    def pool(*args):
        events.append("pool")
        pools.append(start_pool(*args))
        return pools[-1]

    def model(*args):
        loaded = load(*args)
        events.append("model")
        return loaded

    monkeypatch.setattr(worker.commands.runtime, "start_preprocessor", pool)
    monkeypatch.setattr(worker.commands.runtime, "_load_model", model)
    started = start_summarizer(settings, "summarize")
    try:
        assert events == ["pool", "model"]  # the pool's processes start while the model loads
        assert started.summarizer.preprocessor is pools[0] and pools[0].started[0].result(timeout=120) > 0
    finally:
        started.summarizer.close(drain=False)


@pytest.mark.parametrize("env, expected", [
    ({}, (65536, 1024)),
    ({"TELESUM_TOKEN_BUDGET": "16384", "TELESUM_MAX_SEQS_PER_BIN": "4096"}, (16384, 4096)),
])
def test_the_probe_holds_the_bin_the_worker_will_prefill(env, expected):
    """The probe's bin (its prefill graphs' tokens and logits rows) is the operator's where set,
    else the GPU default that `resolve_budgets` will give the dispatcher."""
    from worker.commands.runtime import probed_bin
    from worker.settings.budgets import resolve_budgets
    from worker.settings.load import load_settings

    loaded = load_settings(None, env)
    assert probed_bin(loaded.settings.engine, loaded) == expected
    b = resolve_budgets(loaded, "cuda")
    assert (b.token_budget, b.max_seqs_per_bin) == expected
