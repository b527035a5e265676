"""KafkaWorker's poll loop against a real broker with a test double for the summarizer:
backpressure pauses and resumes, and holds only the partitions with their share waiting; a rebalance
drops the revoked partitions' unfinished work."""

from __future__ import annotations

import collections
import threading
import uuid

import msgspec
import pytest
from kafka import KafkaProducer

from tests.kafka.fakes import FAKE_IN_FLIGHT, GatedSummarizer, run_in_thread, wait_for
from tests.kafka.helpers import answer_ids, consume, produce_records, record
from worker.kafka.loop import KafkaWorker
from worker.settings.kafka import KafkaSettings

pytestmark = pytest.mark.kafka


def _settings(bootstrap, inp, out, dlq, group, **kw) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=bootstrap, input_topic=inp, output_topic=out, dlq_topic=dlq,
                          group_id=group, session_timeout_ms=6000, heartbeat_interval_ms=500,
                          commit_interval_s=0.1, poll_timeout_ms=50, **kw)


def test_loop_backpressure_pauses_then_answers_every_id(kafka_bootstrap, make_topic):
    inp, out, dlq = make_topic("in", 2), make_topic("out"), make_topic("dlq")
    ids = produce_records(kafka_bootstrap, inp, range(60))
    fake = GatedSummarizer(capacity=5)
    # 10 in flight over 2 partitions: a partition with 5 records waiting is paused while the summarizer is full.
    worker = KafkaWorker(_settings(kafka_bootstrap, inp, out, dlq, f"g-{uuid.uuid4().hex}", max_poll_records=20),
                         fake, model_name="fake", max_in_flight=10)
    stop = threading.Event()
    thread = run_in_thread(worker, stop)
    got = consume(kafka_bootstrap, [out, dlq], lambda g: len(g) >= 60)
    stop.set()
    thread.join(30)
    assert collections.Counter(answer_ids(got, out)) == collections.Counter(ids)
    assert fake.backpressure_raised > 0 and worker.counts.backpressure_pauses > 0
    assert worker.counts.drained_cleanly and worker.tracker.in_flight() == 0


def test_loop_backpressure_holds_only_the_busy_partition(kafka_bootstrap, make_topic):
    """Partition 0's records fill a summarizer that answers nothing: partition 0 is paused, partition 1
    keeps reading, so its dead letters are answered at once and its records wait their turn."""
    inp, out, dlq = make_topic("in", 2), make_topic("out"), make_topic("dlq")
    busy = [msgspec.json.encode(record(i)) for i in range(40)]
    _produce_to(kafka_bootstrap, inp, 0, busy)
    held = GatedSummarizer(capacity=5, open_gate=False)
    worker = KafkaWorker(_settings(kafka_bootstrap, inp, out, dlq, f"g-{uuid.uuid4().hex}", max_poll_records=20),
                         held, model_name="fake", max_in_flight=10)
    stop = threading.Event()
    thread = run_in_thread(worker, stop)
    wait_for(lambda: worker.counts.backpressure_pauses > 0)
    _produce_to(kafka_bootstrap, inp, 1, [b"", b"\xff\xfe not text", *(msgspec.json.encode(record(i)) for i in
                                                                     range(40, 43))])
    letters = consume(kafka_bootstrap, [dlq], lambda g: len(g) >= 2, wait_s=30)
    assert sorted(dict(m.headers)["telesum-source-partition"] for m in letters) == [b"1", b"1"]
    assert not held.gate.is_set() and worker.counts.summaries == 0  # partition 0's records still wait
    held.gate.set()
    got = consume(kafka_bootstrap, [out, dlq], lambda g: len(g) >= 45)
    stop.set()
    thread.join(30)
    assert collections.Counter(answer_ids(got, out)) == collections.Counter(
        [f"rec-{i}" for i in range(43)] + ["dlq@1:0", "dlq@1:1"])


def _produce_to(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for value in values:
            producer.send(topic, value=value, partition=partition)
        producer.flush(timeout=60)
    finally:
        producer.close()


def test_loop_rebalance_drops_revoked_work_and_loses_nothing(kafka_bootstrap, make_topic):
    inp, out, dlq = make_topic("in", 4), make_topic("out"), make_topic("dlq")
    group = f"g-{uuid.uuid4().hex}"
    ids = produce_records(kafka_bootstrap, inp, range(40))
    held = GatedSummarizer(open_gate=False)  # the first member holds everything it reads
    first = KafkaWorker(_settings(kafka_bootstrap, inp, out, dlq, group), held, model_name="fake", max_in_flight=FAKE_IN_FLIGHT)
    stop_first, stop_second = threading.Event(), threading.Event()
    t1 = run_in_thread(first, stop_first)
    wait_for(lambda: first.counts.consumed >= 40)
    second = KafkaWorker(_settings(kafka_bootstrap, inp, out, dlq, group), GatedSummarizer(), model_name="fake", max_in_flight=FAKE_IN_FLIGHT)
    t2 = run_in_thread(second, stop_second)
    # The group rebalanced: the first member settled its smaller share, the second one reads.
    wait_for(lambda: len(first.tracker.partitions()) == 2 and second.counts.consumed > 0)
    held.gate.set()
    got = consume(kafka_bootstrap, [out, dlq], lambda g: set(answer_ids(g, out)) >= set(ids))
    stop_first.set(), stop_second.set()
    t1.join(30), t2.join(30)
    assert set(answer_ids(got, out)) == set(ids)
    # Results for partitions it lost were not published; those it kept were (their position was kept).
    assert first.counts.stale_dropped > 0 and first.counts.summaries > 0
    assert first.counts.stale_dropped + first.counts.summaries == 40
