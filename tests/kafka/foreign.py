"""A second, independent Kafka client for the tests: confluent-kafka (librdkafka), as producers in
the field and downstream consumers use it."""

from __future__ import annotations

import time

import msgspec
from confluent_kafka import Consumer, Producer

from tests.kafka.helpers import ANSWER_WAIT_S
from worker.messages import TelemetryRecord

CODECS = ("gzip", "snappy", "lz4", "zstd")


def large_record(i: int, tag: str, lines: int = 40) -> TelemetryRecord:
    """An envelope of a few KB: librdkafka leaves very small batches uncompressed."""
    body = "\n".join(f"2026-12-01T10:{n % 60:02d}:00Z gnb-{i % 5} rrc[{400 + n}]: RRC connection re-establishment "
                     f"failed cause=handoverFailure cell={i}-{n} ue=0x{(i * 7919 + n) % 65536:04x}"
                     for n in range(lines))
    return TelemetryRecord(id=f"{tag}-{i}", kind="syslog", body=body, source=f"gnb-{i % 5}")


def produce_foreign(bootstrap: str, topic: str, records: list[TelemetryRecord], codec: str = "none",
                    partition: int | None = None) -> list[str]:
    """Send `records` through librdkafka with `compression.type` = codec, in one batch per partition
    when they fit (a linger long enough to gather them)."""
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 100,
                         "enable.idempotence": True})
    for rec in records:
        kwargs = {} if partition is None else {"partition": partition}
        producer.produce(topic, value=msgspec.json.encode(rec), key=rec.id.encode(),
                         headers=[("content-type", b"application/json")], **kwargs)
    assert producer.flush(30) == 0, "librdkafka could not deliver every record"
    return [r.id for r in records]


def consume_committed(bootstrap: str, topics: list[str], until, wait_s: float = ANSWER_WAIT_S) -> list:
    """Read `topics` from the beginning as a downstream read-committed consumer does, until
    until(messages) is true or wait_s passes."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.subscribe(topics)
    got: list = []
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline and not until(got):
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
    finally:
        consumer.close()
    return got


def answered_ids(messages, output_topic: str) -> list[str]:
    """Input ids of the summaries, and `dlq@partition:offset` of the dead letters, received."""
    ids = []
    for m in messages:
        if m.topic() == output_topic:
            ids.append(msgspec.json.decode(m.value())["id"])
        else:
            headers = dict(m.headers() or [])
            ids.append(f"dlq@{headers['telesum-source-partition'].decode()}:"
                       f"{headers['telesum-source-offset'].decode()}")
    return ids
