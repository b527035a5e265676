"""The incident rooms' state topic (exactly-once): one compacted record per input partition, keyed
`<topic>:<partition>`, holding `worker.incidents.snapshot` of its room as it was when the offset committed
in the same transaction was reached. A new owner restores the room from it and goes on from the committed
offset: nothing is recomputed, and the commit never waits for an open incident (docs/incidents.md, "On
Kafka"). On by default under exactly-once: TELESUM_INCIDENT_STATE_TOPIC names it, unset it is
`<the incident loop's group>-state` (a snapshot pairs with that group's committed offsets, as Kafka
Streams names a changelog after its application), `none` turns it off.
"""

from __future__ import annotations

import logging
import time

from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

from worker.settings.incidents import STATE_TOPIC_OFF, IncidentSettings
from worker.settings.kafka import KafkaSettings

log = logging.getLogger(__name__)

# Compaction keeps one record per key; small segments let the cleaner reach them soon, so a restore
# reads little more than one snapshot per partition.
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(16 * 1024 * 1024), "min.cleanable.dirty.ratio": "0.1",
                "max.message.bytes": str(16 * 1024 * 1024)}
# A restore reads the state topic to its end; give up (and recompute nothing: start empty) after this.
READ_TIMEOUT_S = 60.0


def state_topic_of(settings: KafkaSettings, incidents: IncidentSettings) -> str | None:
    """The state topic of the loop with these (its own) [kafka] settings; None: recompute instead."""
    if not settings.exactly_once or incidents.state_topic == STATE_TOPIC_OFF:
        return None
    return incidents.state_topic or f"{settings.group_id}-state"


def state_key(tp: TopicPartition) -> bytes:
    return f"{tp.topic}:{tp.partition}".encode()


def ensure_state_topic(settings: KafkaSettings, topic: str, partitions: int = 1) -> None:
    """Create the compacted state topic unless it exists. Blocks."""
    admin = KafkaAdminClient(**settings.security_config)
    try:
        if topic not in admin.list_topics():
            admin.create_topics([NewTopic(topic, partitions, -1, topic_configs=TOPIC_CONFIG)])
            log.info("incidents: created the compacted state topic %s", topic)
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()


def read_states(settings: KafkaSettings, topic: str, keys: set[bytes]) -> dict[bytes, bytes]:
    """The last committed record of each of `keys` on the state topic (read to its end). Blocks."""
    consumer = KafkaConsumer(**settings.security_config, group_id=None, enable_auto_commit=False,
                             isolation_level="read_committed", max_partition_fetch_bytes=32 * 1024 * 1024)
    found: dict[bytes, bytes] = {}
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not parts:
            return found
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        deadline = time.monotonic() + READ_TIMEOUT_S
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            if time.monotonic() > deadline:
                log.warning("incidents: the state topic %s was not read to its end within %.0f s", topic,
                            READ_TIMEOUT_S)
                break
            for batch in consumer.poll(timeout_ms=200).values():
                for record in batch:
                    if record.key in keys and record.value is not None:
                        found[record.key] = record.value
    finally:
        consumer.close()
    return found
