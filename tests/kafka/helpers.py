"""Produce/consume helpers and a worker subprocess for the Kafka integration tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import msgspec
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from worker.messages import TelemetryRecord
from worker.settings.kafka import KafkaSettings

# How long a test waits for answers before giving up (a failure, not a timing assertion).
ANSWER_WAIT_S = 120


def record(i: int, words: int = 12) -> TelemetryRecord:
    body = f"<134>1 2026-01-0{1 + i % 9}T10:00:00Z gnb-{i % 7} rrc - - - " + " ".join(
        f"handover{j} failed cell {i}" for j in range(words // 4))
    return TelemetryRecord(id=f"rec-{i}", kind="syslog", body=body, source=f"gnb-{i % 7}")


def produce(bootstrap: str, topic: str, values: list[bytes], keys: list[bytes | None] | None = None,
            headers: list[list[tuple[str, bytes]]] | None = None) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=16 * 1024 * 1024)
    try:
        for i, value in enumerate(values):
            producer.send(topic, value=value, key=keys[i] if keys else f"k{i}".encode(),
                          headers=headers[i] if headers else None)
        producer.flush(timeout=60)
    finally:
        producer.close()


def produce_records(bootstrap: str, topic: str, ids: range) -> list[str]:
    produce(bootstrap, topic, [msgspec.json.encode(record(i)) for i in ids])
    return [f"rec-{i}" for i in ids]


def consume(bootstrap: str, topics: list[str], until, wait_s: float = ANSWER_WAIT_S) -> list:
    """Read `topics` from the beginning until until(records) is true or wait_s passes."""
    consumer = KafkaConsumer(*topics, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None, fetch_max_bytes=64 * 1024 * 1024,
                             max_partition_fetch_bytes=32 * 1024 * 1024)
    got: list = []
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline and not until(got):
            for batch in consumer.poll(timeout_ms=200).values():
                got.extend(batch)
    finally:
        consumer.close()
    return got


def answer_ids(records, output_topic: str) -> list[str]:
    """Input ids of the summaries (output topic) and dead letters (by provenance offset) received."""
    ids = []
    for r in records:
        if r.topic == output_topic:
            ids.append(msgspec.json.decode(r.value)["id"])
        else:
            ids.append(f"dlq@{dict(r.headers)['telesum-source-partition'].decode()}:"
                       f"{dict(r.headers)['telesum-source-offset'].decode()}")
    return ids


class WorkerProcess:
    """`telesum worker` in a subprocess with a tiny random-weight model."""

    def __init__(self, bootstrap: str, input_topic: str, output_topic: str, dlq_topic: str, group: str,
                 tokenizer: Path, log_path: Path, **extra: str) -> None:
        args = {"bootstrap-servers": bootstrap, "input-topic": input_topic, "output-topic": output_topic,
                "dlq-topic": dlq_topic, "group-id": group, "model": "tiny", "tokenizer": str(tokenizer),
                "device": "cpu", "max-new-tokens": "4", "token-budget": "4096", "max-context": "2048",
                # Small group timeouts: a killed worker's partitions move within seconds.
                "session-timeout-ms": "6000", "heartbeat-interval-ms": "500", "commit-interval-s": "0.2",
                "drain-timeout-s": "60", **extra}
        cmd = [sys.executable, "-m", "worker.cli", "worker"]
        for name, value in args.items():
            cmd += [f"--{name}", value]
        env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._log.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait()

    def kill(self) -> None:
        self.proc.kill()
        self.wait()

    def log(self) -> str:
        return Path(self.log_path).read_text(errors="replace")


def worker_settings(bootstrap: str, inp: str, out: str, dlq: str, **kw) -> KafkaSettings:
    """[kafka] settings of an in-process worker: a fresh group, short timeouts so tests settle fast."""
    return KafkaSettings(bootstrap_servers=bootstrap, input_topic=inp, output_topic=out, dlq_topic=dlq,
                         group_id=f"g-{uuid.uuid4().hex}", session_timeout_ms=6000, heartbeat_interval_ms=500,
                         commit_interval_s=0.1, poll_timeout_ms=50, **kw)


def committed_offset(bootstrap: str, group: str, tp: TopicPartition) -> int | None:
    """The group's committed offset of `tp` (None: nothing committed)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return consumer.committed(tp)
    finally:
        consumer.close()
