"""telesum's cache folder: the probe's budgets (`probe/`), GGUF tokenizers converted once
(`tokenizer/`) and the compiled Triton kernels (`triton/`). One folder, so one volume keeps a
restarted worker's start short."""

from __future__ import annotations

import os
from pathlib import Path

from worker.settings.environment import CACHE_DIR


def cache_root() -> Path:
    """`$TELESUM_CACHE_DIR`, else `$XDG_CACHE_HOME/telesum`, else `~/.cache/telesum`."""
    if os.environ.get(CACHE_DIR):
        return Path(os.environ[CACHE_DIR])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "telesum"
