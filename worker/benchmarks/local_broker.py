"""The development broker: `scripts/kafka.sh` of a source checkout, for the tests and benchmarks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

KAFKA_SH = Path(__file__).resolve().parents[2] / "scripts" / "kafka.sh"


def kafka_sh(action: str, port: int, state_dir: Path | None = None) -> subprocess.CompletedProcess:
    """Run `scripts/kafka.sh <action> --port <port>` (fetch/start/stop/status); raises
    CalledProcessError with its output unless the action is `status`."""
    env = dict(os.environ, KAFKA_PORT=str(port), PATH=_path_without_venv())
    env.pop("VIRTUAL_ENV", None)  # the script must work from a fresh shell: give it one
    if state_dir is not None:
        env["KAFKA_STATE_DIR"] = str(state_dir)
    # start waits for the broker to answer; the first JVM start on a busy 2-core machine is slow
    return subprocess.run(["bash", str(KAFKA_SH), action, "--port", str(port)], env=env,
                          check=action != "status", capture_output=True, text=True, timeout=300)


def _path_without_venv() -> str:
    """PATH without this interpreter's virtual environment (the script needs only the system's python3)."""
    venv_bin = str(Path(sys.prefix) / "bin")
    return os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
