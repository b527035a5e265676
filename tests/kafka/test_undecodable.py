"""A batch the worker cannot decode (its codec's library missing, or a corrupt batch) against a real
broker: its partition stops at it, visibly, nothing after it is skipped, the others are served; with
on_undecodable_batch "exit" the worker drains the others and stops."""

from __future__ import annotations

import collections
import threading

import pytest
from kafka import TopicPartition

from tests.kafka.fakes import FAKE_IN_FLIGHT, GatedSummarizer, run_capturing, wait_for
from tests.kafka.foreign import answered_ids, consume_committed, large_record, produce_foreign
from tests.kafka.helpers import committed_offset, worker_settings
from worker.kafka.loop import KafkaWorker
from worker.kafka.undecodable import UndecodableBatch

pytestmark = pytest.mark.kafka


@pytest.fixture
def two_partitions_one_zstd_batch(kafka_bootstrap, make_topic):
    """Partition 0: 3 plain records, one zstd batch of 4, 2 plain; partition 1: 8 plain records."""
    inp, out, dlq = make_topic("in", 2), make_topic("out"), make_topic("dlq")
    ids0 = produce_foreign(kafka_bootstrap, inp, [large_record(i, "p0a") for i in range(3)], partition=0)
    zstd = produce_foreign(kafka_bootstrap, inp, [large_record(i, "p0z") for i in range(4)], "zstd", partition=0)
    ids0 += zstd + produce_foreign(kafka_bootstrap, inp, [large_record(i, "p0b") for i in range(2)], partition=0)
    ids1 = produce_foreign(kafka_bootstrap, inp, [large_record(i, "p1") for i in range(8)], partition=1)
    return inp, out, dlq, ids0, ids1


def test_undecodable_batch_pauses_its_partition_serves_the_others_and_resumes(
        kafka_bootstrap, two_partitions_one_zstd_batch, monkeypatch):
    import kafka.codec

    inp, out, dlq, ids0, ids1 = two_partitions_one_zstd_batch
    monkeypatch.setattr(kafka.codec, "has_zstd", lambda: False)  # as when `zstandard` is not installed
    settings = worker_settings(kafka_bootstrap, inp, out, dlq, undecodable_retry_s=0.5)
    worker = KafkaWorker(settings, GatedSummarizer(), model_name="fake", max_in_flight=FAKE_IN_FLIGHT)
    stop = threading.Event()
    thread, raised = run_capturing(worker, stop)
    got = consume_committed(kafka_bootstrap, [out, dlq], lambda g: len(g) >= 11)
    bad = TopicPartition(inp, 0)
    wait_for(lambda: worker.consumer.undecodable_batches >= 2)  # retried, still failing
    assert collections.Counter(answered_ids(got, out)) == collections.Counter(ids0[:3] + ids1)
    stuck = worker.consumer.stuck[bad]
    assert (stuck.offset, stuck.failures >= 2) == (3, True) and "zstd" in stuck.reason
    assert bad in worker.consumer.paused() and TopicPartition(inp, 1) not in worker.consumer.stuck
    wait_for(lambda: committed_offset(kafka_bootstrap, settings.group_id, bad) == 3)  # nothing past it

    monkeypatch.undo()  # the library is back: the next retry decodes the batch
    got = consume_committed(kafka_bootstrap, [out, dlq], lambda g: len(g) >= 17)
    stop.set()
    thread.join(30)
    assert not raised
    assert collections.Counter(answered_ids(got, out)) == collections.Counter(ids0 + ids1)
    assert worker.consumer.stuck == {} and worker.counts.dead_letters == 0
    assert committed_offset(kafka_bootstrap, settings.group_id, bad) == len(ids0)


def test_corrupt_batch_is_reported_stuck_with_its_offset(kafka_bootstrap, two_partitions_one_zstd_batch,
                                                         monkeypatch):
    import kafka.record.default_records as default_records

    def corrupt(_payload):
        raise ValueError("Unknown frame descriptor")  # what zstandard says of a damaged frame

    inp, out, dlq, ids0, ids1 = two_partitions_one_zstd_batch
    monkeypatch.setattr(default_records, "zstd_decode", corrupt)
    worker = KafkaWorker(worker_settings(kafka_bootstrap, inp, out, dlq), GatedSummarizer(), model_name="fake", max_in_flight=FAKE_IN_FLIGHT)
    stop = threading.Event()
    thread, raised = run_capturing(worker, stop)
    got = consume_committed(kafka_bootstrap, [out, dlq], lambda g: len(g) >= 11)
    wait_for(lambda: TopicPartition(inp, 0) in worker.consumer.stuck)
    stop.set()
    thread.join(30)
    stuck = worker.consumer.stuck[TopicPartition(inp, 0)]
    assert (stuck.offset, stuck.reason) == (3, "ValueError: Unknown frame descriptor")
    assert collections.Counter(answered_ids(got, out)) == collections.Counter(ids0[:3] + ids1)
    assert not raised and worker.counts.drained_cleanly


def test_undecodable_batch_exit_drains_the_other_partitions_then_raises(
        kafka_bootstrap, two_partitions_one_zstd_batch, monkeypatch):
    import kafka.codec

    inp, out, dlq, ids0, ids1 = two_partitions_one_zstd_batch
    monkeypatch.setattr(kafka.codec, "has_zstd", lambda: False)
    settings = worker_settings(kafka_bootstrap, inp, out, dlq, on_undecodable_batch="exit",
                         processing_guarantee="exactly-once")
    worker = KafkaWorker(settings, GatedSummarizer(), model_name="fake", max_in_flight=FAKE_IN_FLIGHT)
    thread, raised = run_capturing(worker, threading.Event())
    thread.join(60)
    assert not thread.is_alive() and len(raised) == 1 and isinstance(raised[0], UndecodableBatch)
    assert (raised[0].stuck.tp, raised[0].stuck.offset) == (TopicPartition(inp, 0), 3)
    assert worker.counts.drained_cleanly
    got = consume_committed(kafka_bootstrap, [out, dlq], lambda g: False, wait_s=5)
    answered = set(answered_ids(got, out))
    # What was read before the stop is answered and committed; nothing of the bad batch or after it.
    assert answered <= set(ids0[:3] + ids1) and not answered & set(ids0[3:])
    committed = committed_offset(kafka_bootstrap, settings.group_id, TopicPartition(inp, 0))
    assert committed is None or committed <= 3


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_batch_expanding_beyond_the_limit_is_answered_offset_by_offset_and_passed(
        kafka_bootstrap, two_partitions_one_zstd_batch, guarantee):
    # Each record of the zstd batch is a few KB: a 4 KB limit makes the batch a "bomb".
    inp, out, dlq, ids0, ids1 = two_partitions_one_zstd_batch
    settings = worker_settings(kafka_bootstrap, inp, out, dlq, max_batch_bytes=4096,
                               processing_guarantee=guarantee)
    worker = KafkaWorker(settings, GatedSummarizer(), model_name="fake", max_in_flight=FAKE_IN_FLIGHT)
    stop = threading.Event()
    thread, raised = run_capturing(worker, stop)
    got = consume_committed(kafka_bootstrap, [out, dlq], lambda g: len(g) >= 17)
    bad = TopicPartition(inp, 0)
    wait_for(lambda: committed_offset(kafka_bootstrap, settings.group_id, bad) == len(ids0))
    stop.set()
    thread.join(30)
    assert not raised and worker.counts.drained_cleanly
    answered = answered_ids(got, out)
    assert collections.Counter(answered) == collections.Counter(
        ids0[:3] + ids0[7:] + ids1 + [f"dlq@0:{offset}" for offset in range(3, 7)])
    letters = [m for m in got if m.topic() == dlq]
    assert {dict(m.headers())["telesum-reason"] for m in letters} == {b"batch_too_large"}
    assert worker.consumer.oversized_batches == 1 and worker.consumer.stuck == {}


def test_poll_rides_out_a_broker_restart_then_raises_after_the_outage_bound(monkeypatch):
    from kafka.errors import KafkaConnectionError

    from worker.kafka import clients
    from worker.settings.kafka import KafkaSettings

    class Unreachable:
        def __init__(self) -> None:
            self.down = True
            self._fetcher = type("Fetcher", (), {"_next_in_line_exception_metadata": None})()

        def poll(self, timeout_ms):
            if self.down:
                raise KafkaConnectionError("111 ECONNREFUSED")
            return {}

    consumer = clients.Consumer(KafkaSettings())
    consumer._client = client = Unreachable()
    monkeypatch.setattr(clients.time, "sleep", lambda s: None)
    assert consumer.poll(10) == [] and consumer.poll(10) == []  # a restart: nothing, no error
    client.down = False
    assert consumer.poll(10) == []
    client.down = True
    consumer.poll(10)
    monkeypatch.setattr(clients, "BROKER_OUTAGE_S", 0.0)
    with pytest.raises(KafkaConnectionError):  # gone for longer than the bound: the worker's own failure
        consumer.poll(10)


def test_a_decode_error_kafka_python_set_aside_is_taken_before_it_can_be_dropped():
    # kafka-python keeps an error that followed returned records for its next poll, and drops it
    # when that partition is paused by then, leaving a dead iterator in line to spin on.
    from types import SimpleNamespace

    from kafka.consumer.fetcher import ExceptionMetadata

    from worker.kafka.undecodable import pending_decode_error

    def _unpack_records():  # named as kafka-python's decoder frame
        raise ValueError("Unknown frame descriptor")

    try:
        _unpack_records()
    except ValueError as exc:
        error = exc
    tp = TopicPartition("in", 0)
    in_line = SimpleNamespace(topic_partition=tp)
    fetcher = SimpleNamespace(_next_in_line_exception_metadata=ExceptionMetadata(tp, 3, error),
                              _next_partition_records=None, _paused_partition_records={tp: in_line})
    client = SimpleNamespace(_fetcher=fetcher)
    assert pending_decode_error(client) is error  # paused: put back in line and handed over
    assert fetcher._next_partition_records is in_line and fetcher._paused_partition_records == {}
    assert fetcher._next_in_line_exception_metadata is None and pending_decode_error(client) is None
    other = SimpleNamespace(topic_partition=TopicPartition("in", 1))
    fetcher._next_in_line_exception_metadata = ExceptionMetadata(tp, 3, error)
    fetcher._next_partition_records = other
    assert pending_decode_error(client) is None  # stale: its partition is no longer in line
