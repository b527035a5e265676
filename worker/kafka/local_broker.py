"""The development broker: `scripts/kafka.sh` of a source checkout, for the tests and benchmarks."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

KAFKA_SH = Path(__file__).resolve().parents[2] / "scripts" / "kafka.sh"


def kafka_sh(action: str, port: int, state_dir: Path | None = None) -> subprocess.CompletedProcess:
    """Run `scripts/kafka.sh <action> --port <port>` (fetch/start/stop/status); raises
    CalledProcessError with its output unless the action is `status`."""
    env = dict(os.environ, KAFKA_PORT=str(port))
    if state_dir is not None:
        env["KAFKA_STATE_DIR"] = str(state_dir)
    # start waits for the broker to answer; the first JVM start on a busy 2-core machine is slow
    return subprocess.run(["bash", str(KAFKA_SH), action, "--port", str(port)], env=env,
                          check=action != "status", capture_output=True, text=True, timeout=300)
