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
CACHE_DIR = declare("TELESUM_CACHE_DIR", "worker.settings.cache",
                    "telesum's cache folder: the probe's budgets (probe/), GGUF tokenizers converted once "
                    "(tokenizer/), compiled Triton kernels (triton/); default $XDG_CACHE_HOME/telesum, "
                    "else ~/.cache/telesum")
DECODE_GRAPHS = declare("TELESUM_DECODE_GRAPHS", "worker.engine.runner",
                        "0: decode steps run eagerly instead of replaying captured CUDA graphs")
PREFILL_GRAPHS = declare("TELESUM_PREFILL_GRAPHS", "worker.engine.runner",
                         "1: packed bins' prefills replay a CUDA graph per bucket instead of running eagerly (off by "
                         "default: a bucket first met mid-stream is captured there, which stalls the stream's tail)")
COMPILE = declare("TELESUM_COMPILE", "worker.model.fused", "0: the fused elementwise ops run as eager PyTorch ops instead of Triton kernels")
SUPERVISOR_PID = declare("TELESUM_SUPERVISOR_PID", "worker.commands.supervisor",
                         "set by the --gpus supervisor in its children's environment, so they follow it out")
CACHE = declare("TELESUM_CACHE", "scripts/kafka.sh", "where the local broker's jars and state live "
                                                     "(default ~/.cache/telesum)")
TEST_KAFKA_PORT = declare("TELESUM_TEST_KAFKA_PORT", "tests/conftest.py", "port of the tests' local broker (default 9092)")
DEMO_ALERTMANAGER_PORT = declare("TELESUM_DEMO_ALERTMANAGER_PORT", "scripts/demo.sh",
                                 "port of the demo's Alertmanager (default 19093; its webhook receiver's is the next)")
FAULTS_KAFKA_PORT = declare("TELESUM_FAULTS_KAFKA_PORT", "worker.benchmarks.faults",
                            "port of the broker `telesum bench faults` starts and restarts (default 19193)")

# Read by `docker compose` (compose.yaml interpolates them on the host) and by the container scripts,
# never by the worker; accepted so an operator's shell that exports them still starts `telesum`.
for _name, _help in (
        ("TELESUM_KAFKA_IMAGE", "compose: the Kafka image (default apache/kafka; telesum/kafka is built locally)"),
        ("TELESUM_PROMETHEUS_IMAGE", "compose: the Prometheus image of the monitoring profile"),
        ("TELESUM_WORKER_BASE_IMAGE", "compose: the worker image's base (build argument BASE_IMAGE)"),
        ("TELESUM_PULL_POLICY", "compose: pull_policy of the images (never where no registry answers)"),
        ("TELESUM_KAFKA_PORT", "compose: the broker port published on 127.0.0.1"),
        ("TELESUM_WORKER_PORT", "compose: the worker's HTTP port published on 127.0.0.1"),
        ("TELESUM_PROMETHEUS_PORT", "compose: Prometheus's port published on 127.0.0.1"),
        ("TELESUM_GRAFANA_PORT", "compose: Grafana's port published on 127.0.0.1"),
        ("TELESUM_ALERTMANAGER_IMAGE", "compose: the Alertmanager image of the alerting profile"),
        ("TELESUM_ALERTMANAGER_PORT", "compose: Alertmanager's port published on 127.0.0.1"),
        ("TELESUM_BASE_IMAGE", "scripts/docker_start.sh: the name of the locally built Debian base image"),
        ("TELESUM_TEST_KAFKA_IMAGE", "tests/conftest.py: the Kafka image testcontainers starts (default telesum/kafka)")):
    declare(_name, "compose.yaml / scripts/docker_*.sh", _help)
