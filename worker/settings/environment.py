"""The `TELESUM_*` environment variables that are not settings, each declared once, here.

`load_settings` refuses a `TELESUM_*` variable it does not know (a typo must not be ignored); it
accepts every setting's variable (from the settings type) and the variables declared below. A module
that reads one of these imports its name from here, so the allow-list cannot drift from the readers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variable:
    name: str
    read_by: str   # the module or script that reads it
    help: str


VARIABLES: dict[str, Variable] = {}


def declare(name: str, read_by: str, help: str) -> str:
    VARIABLES[name] = Variable(name, read_by, help)
    return name


CONFIG = declare("TELESUM_CONFIG", "worker.settings.load", "TOML settings file (as --config FILE)")
CACHE_DIR = declare("TELESUM_CACHE_DIR", "worker.probe.cache",
                    "where the probe caches its budgets (default $XDG_CACHE_HOME/telesum, else ~/.cache/telesum)")
DECODE_GRAPHS = declare("TELESUM_DECODE_GRAPHS", "worker.engine.runner",
                        "0: decode steps run eagerly instead of replaying captured CUDA graphs")
COMPILE = declare("TELESUM_COMPILE", "worker.model.fused", "0: the fused elementwise ops run eagerly (no torch.compile)")
SUPERVISOR_PID = declare("TELESUM_SUPERVISOR_PID", "worker.commands.supervisor",
                         "set by the --gpus supervisor in its children's environment, so they follow it out")
CACHE = declare("TELESUM_CACHE", "scripts/kafka.sh", "where the local broker's jars and state live "
                                                     "(default ~/.cache/telesum)")
TEST_KAFKA_PORT = declare("TELESUM_TEST_KAFKA_PORT", "tests/conftest.py", "port of the tests' local broker (default 9092)")
FAULTS_KAFKA_PORT = declare("TELESUM_FAULTS_KAFKA_PORT", "worker.benchmarks.faults",
                            "port of the broker `telesum bench faults` starts and restarts (default 19193)")
