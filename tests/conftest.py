"""Shared fixtures: a real Kafka broker (env, testcontainers, or scripts/kafka.sh) and unique topics.

Broker order: KAFKA_BOOTSTRAP_SERVERS when set; else a container of the locally built Kafka image
($TELESUM_TEST_KAFKA_IMAGE, default telesum/kafka:4.1.1 from scripts/docker_images.sh) through
testcontainers when a Docker engine answers; else the local KRaft broker from scripts/kafka.sh on
$TELESUM_TEST_KAFKA_PORT (default 9092), stopped at the end only if this fixture started it. Falling
back from containers says why in one line; in CI (CI=true) it fails instead, since CI must prove the
container path. Used by tests/kafka and the e2e benchmark test.
"""

from __future__ import annotations

import os
import socket
import uuid
import warnings

import pytest

from worker.benchmarks.local_broker import kafka_sh

TEST_KAFKA_IMAGE = os.environ.get("TELESUM_TEST_KAFKA_IMAGE", "telesum/kafka:4.1.1")


def docker_engine_problem() -> str | None:
    """Why no container can be started here, or None when a Docker engine answers."""
    try:
        import docker
    except ImportError:
        return "the docker SDK is not installed"
    try:
        client = docker.from_env()
        try:
            client.ping()
        finally:
            client.close()
    except Exception as error:  # noqa: BLE001 - no socket, no permission, no daemon: all mean no engine
        return f"no Docker engine answers ({type(error).__name__})"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _kafka_container(image: str):
    """A single-node KRaft broker in a container, published on 127.0.0.1 only. Its host port is chosen
    here, not by Docker: the broker must advertise the address clients connect to."""
    import re

    from testcontainers.core.config import testcontainers_config
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    if "TESTCONTAINERS_RYUK_DISABLED" not in os.environ:
        # Ryuk's image comes from Docker Hub; the container is removed when the session ends instead.
        testcontainers_config.ryuk_disabled = True
    port = _free_port()
    container = DockerContainer(image)
    container.ports[29092] = ("127.0.0.1", port)
    for key, value in {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9093,HOST://:29092",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://localhost:9092,HOST://127.0.0.1:{port}",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,HOST:PLAINTEXT",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS": "4",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        # Worker tests send 5 MB records, as with scripts/kafka.sh.
        "KAFKA_MESSAGE_MAX_BYTES": "16777216",
        "KAFKA_REPLICA_FETCH_MAX_BYTES": "16777216",
    }.items():
        container.with_env(key, value)
    container.with_kwargs(labels={"telesum.test": "kafka"})
    container.start()
    try:
        waiter = LogMessageWaitStrategy(re.compile(r"Kafka Server started"))
        waiter.with_startup_timeout(180)
        waiter.wait_until_ready(container)
    except BaseException:
        container.stop()
        raise
    return container, f"127.0.0.1:{port}"


def _container_or_reason():
    """(container, bootstrap) of a fresh broker container, or (None, why not) outside CI."""
    problem = docker_engine_problem()
    if problem is None:
        import docker

        client = docker.from_env()
        try:
            if not client.images.list(name=TEST_KAFKA_IMAGE):
                problem = f"image {TEST_KAFKA_IMAGE} is not built (scripts/docker_images.sh kafka)"
        finally:
            client.close()
    if problem is None:
        try:
            return _kafka_container(TEST_KAFKA_IMAGE)
        except Exception as error:  # noqa: BLE001 - any failure to start means: use the script's broker
            problem = f"the {TEST_KAFKA_IMAGE} container did not start: {type(error).__name__}: {error}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI runs the Kafka tests in a container, but {problem}", pytrace=False)
    return None, problem


# The broker container, started once collection shows a test needs it: its start (about 20 s) then
# counts against no single test's timeout.
_early_broker: dict = {}


def pytest_collection_finish(session):
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        return
    if any("kafka_bootstrap" in getattr(item, "fixturenames", ()) for item in session.items):
        try:
            _early_broker["started"] = _container_or_reason()
        except pytest.fail.Exception as failure:  # CI without containers: the tests that need one fail
            _early_broker["failure"] = failure


def pytest_sessionfinish(session):
    container, _ = _early_broker.pop("started", (None, None))
    if container is not None:
        container.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap():
    """Bootstrap servers of a running broker for the whole session."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        yield os.environ["KAFKA_BOOTSTRAP_SERVERS"]
        return
    if "failure" in _early_broker:
        raise _early_broker["failure"]
    container, found = _early_broker.get("started") or _container_or_reason()
    if container is not None:
        yield found
        return
    warnings.warn(f"Kafka tests use scripts/kafka.sh's broker: {found}", stacklevel=1)
    port = int(os.environ.get("TELESUM_TEST_KAFKA_PORT", "9092"))
    started = kafka_sh("status", port).returncode != 0
    if started:
        kafka_sh("start", port)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        if started:
            kafka_sh("stop", port)


@pytest.fixture
def make_topic(kafka_bootstrap):
    """Factory: make_topic(name, partitions=1) creates a topic unique to this test and returns its name."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    created: list[str] = []

    def make(name: str, partitions: int = 1) -> str:
        topic = f"test-{name}-{uuid.uuid4().hex[:10]}"
        admin.create_topics([NewTopic(topic, partitions, 1, topic_configs={"max.message.bytes": "16777216"})])
        created.append(topic)
        return topic

    yield make
    try:
        admin.delete_topics(created)
    except Exception:  # noqa: BLE001 - cleanup only; a broker restarted by the test may refuse
        pass
    admin.close()


@pytest.fixture(scope="session")
def docker_engine():
    """A Docker engine with compose v2 that the container tests can use: skipped with a one-line reason
    where none answers, a failure in CI (CI=true), which must prove the containers."""
    import shutil
    import subprocess

    problem = docker_engine_problem()
    if problem is None and shutil.which("docker") is None:
        problem = "no docker CLI on PATH"
    if problem is None:
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        if probe.returncode != 0:
            problem = "docker compose v2 is not installed (scripts/docker_start.sh installs it)"
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs the container tests, but {problem}", pytrace=False)
        pytest.skip(f"{problem}: start one with scripts/docker_start.sh")
