"""scripts/kafka.sh and its readiness check from a fresh shell (no virtual environment on PATH):
ready against a real broker, and errors that say what is wrong."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
READY = REPO / "scripts" / "kafka_ready.py"
FRESH_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}


def _system_python() -> str:
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if Path(candidate).exists() and not candidate.startswith(sys.prefix):
            return candidate
    pytest.skip("no system python3 outside the virtual environment")


def _ready(host: str, port: int, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([_system_python(), str(READY), host, str(port), *extra], env=FRESH_ENV,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.kafka
def test_kafka_ready_system_python_against_a_real_broker(kafka_bootstrap):
    host, _, port = kafka_bootstrap.split(",")[0].rpartition(":")
    result = _ready(host, int(port))
    assert result.returncode == 0, result.stderr


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_kafka_ready_nothing_listening_says_so():
    result = _ready("127.0.0.1", _closed_port())
    assert result.returncode == 1 and "nothing is listening on 127.0.0.1:" in result.stderr


def test_kafka_ready_non_kafka_peer_says_so():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def answer() -> None:  # an HTTP server's reply to bytes it does not understand
        conn, _ = server.accept()
        conn.recv(1024)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        conn.close()

    threading.Thread(target=answer, daemon=True).start()
    result = _ready("127.0.0.1", server.getsockname()[1])
    server.close()
    assert result.returncode == 1 and "is not a Kafka broker" in result.stderr, result.stderr


def test_kafka_sh_start_on_a_busy_port_names_the_port(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = dict(FRESH_ENV, KAFKA_STATE_DIR=str(tmp_path / "state"),
                   TELESUM_CACHE=os.environ.get("TELESUM_CACHE", str(Path.home() / ".cache" / "telesum")))
        result = subprocess.run(["bash", str(REPO / "scripts" / "kafka.sh"), "start", "--port", str(port)],
                                env=env, capture_output=True, text=True, timeout=300)
    if "jars" in result.stderr and "mvn" in result.stderr:
        pytest.skip("the broker jars are not cached and cannot be fetched here")
    assert result.returncode == 1 and f"port {port} is already in use by another process" in result.stderr, \
        result.stdout + result.stderr


def _kafka_sh(*args: str, extra_env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(FRESH_ENV, TELESUM_CACHE=os.environ.get("TELESUM_CACHE", str(Path.home() / ".cache" / "telesum")),
               **(extra_env or {}))
    return subprocess.run(["bash", str(REPO / "scripts" / "kafka.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_kafka_sh_cluster_ids_are_kraft_uuids_never_starting_with_a_dash():
    import base64

    # 1 in 64 random ids begins with "-": 5,000 of them would hold ~78.
    ids = _kafka_sh("cluster-id", "5000").stdout.split()
    assert len(ids) == len(set(ids)) == 5000
    assert not [cluster_id for cluster_id in ids if cluster_id.startswith("-")]
    assert all(len(base64.urlsafe_b64decode(cluster_id + "==")) == 16 for cluster_id in ids)


def test_kafka_sh_formats_and_serves_with_a_cluster_id_starting_with_a_dash(tmp_path):
    port, state = _closed_port(), tmp_path / "state"
    cluster_id = "-" + _kafka_sh("cluster-id").stdout.strip()[1:]
    env = {"KAFKA_STATE_DIR": str(state), "KAFKA_CLUSTER_ID": cluster_id}
    started = _kafka_sh("start", "--port", str(port), extra_env=env)
    try:
        if "jars" in started.stderr and "mvn" in started.stderr:
            pytest.skip("the broker jars are not cached and cannot be fetched here")
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"cluster.id={cluster_id}" in (state / "data" / "meta.properties").read_text()
        assert _ready("127.0.0.1", port).returncode == 0
    finally:
        _kafka_sh("stop", "--port", str(port), extra_env=env)
