"""Shared fixtures: a real Kafka broker (env, testcontainers, or scripts/kafka.sh) and unique topics.

Broker order: KAFKA_BOOTSTRAP_SERVERS when set; testcontainers' Kafka module when a Docker daemon
answers; otherwise the local KRaft broker from scripts/kafka.sh on $TELESUM_TEST_KAFKA_PORT (default
9092), stopped at the end only if this fixture started it. Used by tests/kafka and the e2e benchmark test.
"""

from __future__ import annotations

import os
import uuid

import pytest

from worker.benchmarks.local_broker import kafka_sh



def _docker_answers() -> bool:
    try:
        import docker

        return bool(docker.from_env().ping())
    except Exception:  # noqa: BLE001 - no SDK, no socket, no permission: no Docker
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap():
    """Bootstrap servers of a running broker for the whole session."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        yield os.environ["KAFKA_BOOTSTRAP_SERVERS"]
        return
    if _docker_answers():
        from testcontainers.community.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as container:
            yield container.get_bootstrap_server()
        return
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
