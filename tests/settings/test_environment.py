"""Every `TELESUM_*` variable the project documents or reads is accepted at start-up; a typo is not."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from worker.settings.environment import VARIABLES
from worker.settings.fields import SettingsError
from worker.settings.load import accepted_environment_names, load_settings

ROOT = Path(__file__).resolve().parents[2]
# Places an operator or a developer meets variable names.
MENTIONS = ("README.md", "docs/*.md", "worker/**/*.py", "scripts/*", "bench/*.py", "compose*.yaml", "Dockerfile",
            "deploy/**/*.yaml", ".ci/run", "tests/conftest.py")
# Written on purpose as the example of a typo the loader rejects.
TYPO_EXAMPLES = {"TELESUM_TOKEN_BUDGT"}
NAME = re.compile(r"\bTELESUM_[A-Z0-9_]*[A-Z0-9]\b")


def mentioned_names() -> dict[str, str]:
    """Variable name -> one file that mentions it."""
    found: dict[str, str] = {}
    for pattern in MENTIONS:
        for path in ROOT.glob(pattern):
            if path.is_file():
                for name in NAME.findall(path.read_text(errors="replace")):
                    found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def test_every_mentioned_variable_is_accepted():
    found = mentioned_names()
    assert "TELESUM_CACHE_DIR" in found and "TELESUM_DECODE_GRAPHS" in found  # the scan sees the readers
    unknown = {name: where for name, where in found.items()
               if name not in accepted_environment_names() and name not in TYPO_EXAMPLES}
    assert not unknown, f"TELESUM_* variables mentioned but refused at start-up: {unknown}"


def test_declared_variables_load_and_a_typo_still_fails():
    env = {name: "0" for name in VARIABLES if name != "TELESUM_CONFIG"}
    load_settings(None, env)
    with pytest.raises(SettingsError, match="TELESUM_CACHE_DRI .did you mean TELESUM_CACHE_DIR"):
        load_settings(None, {"TELESUM_CACHE_DRI": "/tmp"})


@pytest.mark.parametrize("name", ["TELESUM_CACHE_DIR", "TELESUM_DECODE_GRAPHS"])
def test_config_command_starts_with_a_documented_engine_variable_set(name, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TELESUM_")}
    env[name] = str(tmp_path) if name.endswith("DIR") else "0"
    done = subprocess.run([sys.executable, "-m", "worker.cli", "config"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "engine.token_budget" in done.stdout
