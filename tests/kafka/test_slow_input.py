"""One slow input holds nothing but its own answer (issue 39, item 1), against a real broker with a
test double that holds one record: the answers behind it — summaries and dead letters — reach a
read-committed consumer while it is held, in both guarantees; the commit stays at the slow input and
lists the inputs answered above it; a worker that dies there (simulated: the loop stops without its
drain, after the last commit) leaves a successor that answers only the slow input, so a
read-committed consumer sees every input answered exactly once."""

from __future__ import annotations

import collections
import threading
import time

import msgspec
import pytest
from kafka import KafkaConsumer, TopicPartition

from tests.kafka.fakes import FAKE_IN_FLIGHT, GatedSummarizer, run_capturing, run_in_thread, wait_for
from tests.kafka.helpers import produce, record, worker_settings
from worker.kafka.answered import Listed
from worker.kafka.loop import KafkaWorker
from worker.messages import Summary

pytestmark = pytest.mark.kafka

SLOW = "rec-0"


class Crash(BaseException):
    """The worker dies here: run() unwinds without draining (nothing more is published or committed)."""


class HoldingSummarizer(GatedSummarizer):
    """Answers every record at once except SLOW, held until `release` is set; raises Crash from poll
    once `crash` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release, self.crash = threading.Event(), threading.Event()
        self.slow_submitted = threading.Event()

    def submit(self, request_id, record) -> None:
        super().submit(request_id, record)
        if record.id == SLOW:
            self.slow_submitted.set()

    def poll(self, timeout: float):
        if self.crash.is_set():
            raise Crash()
        held, out = [], []
        for rid, rec in self._held:
            if rec.id == SLOW and not self.release.is_set():
                held.append((rid, rec))
            else:
                out.append((rid, Summary(id=rec.id, summary=f"summary of {rec.id}", model="fake", prompt_tokens=1,
                                         output_tokens=1)))
        self._held = held
        if not out:
            self.release.wait(min(timeout, 0.05))
        return out


class Reader:
    """A read-committed consumer of the answers, polled by the test."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        self.consumer = KafkaConsumer(*topics, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                      enable_auto_commit=False, group_id=None, isolation_level="read_committed")
        self.got: list = []

    def until(self, predicate, wait_s: float = 60) -> list:
        def read() -> bool:
            for batch in self.consumer.poll(timeout_ms=100).values():
                self.got.extend(batch)
            return predicate(self.got)
        wait_for(read, wait_s)
        return self.got

    def linger(self, wait_s: float = 2.0) -> None:
        """Read on for `wait_s`: an answer published twice would show up."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            for batch in self.consumer.poll(timeout_ms=100).values():
                self.got.extend(batch)

    def close(self) -> None:
        self.consumer.close()


def _ids(got, out: str) -> collections.Counter:
    return collections.Counter(msgspec.json.decode(r.value)["id"] if r.topic == out
                               else f"dlq@{dict(r.headers)['telesum-source-offset'].decode()}" for r in got)


def _committed(bootstrap: str, group: str, tp: TopicPartition):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             isolation_level="read_committed")
    try:
        return consumer.committed(tp, metadata=True)
    finally:
        consumer.close()


def _inputs(bootstrap: str, inp: str) -> list[str]:
    """SLOW at offset 0, eight records behind it and a message that can only be a dead letter (offset 5)."""
    values = [msgspec.json.encode(record(i)) for i in range(9)]
    values.insert(5, b'{"id": 7, "kind": "text", "body": "x"}')
    produce(bootstrap, inp, values)
    return [f"rec-{i}" for i in range(9)] + ["dlq@5"]


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_slow_input_holds_only_its_own_answer_then_every_input_is_answered_once(kafka_bootstrap, make_topic,
                                                                                guarantee):
    inp, out, dlq = make_topic("in"), make_topic("out"), make_topic("dlq")
    expected = _inputs(kafka_bootstrap, inp)
    settings = worker_settings(kafka_bootstrap, inp, out, dlq, processing_guarantee=guarantee)
    stub = HoldingSummarizer()
    worker = KafkaWorker(settings, stub, model_name="fake", max_in_flight=FAKE_IN_FLIGHT)
    stop = threading.Event()
    thread = run_in_thread(worker, stop)
    reader = Reader(kafka_bootstrap, [out, dlq])
    try:
        # Everything but the slow input is answered while it is held: the dead letter too.
        got = reader.until(lambda g: len(g) >= len(expected) - 1)
        assert stub.slow_submitted.is_set() and not stub.release.is_set()
        assert _ids(got, out) == collections.Counter(x for x in expected if x != SLOW)
        # The commit stays at the slow input and lists every input answered above it.
        tp = TopicPartition(inp, 0)
        wait_for(lambda: (c := _committed(kafka_bootstrap, settings.group_id, tp)) is not None
                 and len(Listed.from_metadata(c.metadata) or ()) == 9)
        committed = _committed(kafka_bootstrap, settings.group_id, tp)
        listed = Listed.from_metadata(committed.metadata)
        assert committed.offset == 0 and [o for o in range(12) if o in listed] == list(range(1, 10))
        stub.release.set()
        got = reader.until(lambda g: len(g) >= len(expected))
        stop.set()
        thread.join(30)
        reader.linger()
    finally:
        stop.set()
        reader.close()
    assert _ids(reader.got, out) == collections.Counter(expected)
    committed = _committed(kafka_bootstrap, settings.group_id, TopicPartition(inp, 0))
    assert committed.offset == 10 and committed.metadata == ""
    assert worker.counts.drained_cleanly and worker.tracker.in_flight() == 0


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_worker_dying_past_a_slow_input_leaves_a_successor_that_answers_only_it(kafka_bootstrap, make_topic,
                                                                                guarantee):
    inp, out, dlq = make_topic("in"), make_topic("out"), make_topic("dlq")
    expected = _inputs(kafka_bootstrap, inp)
    settings = worker_settings(kafka_bootstrap, inp, out, dlq, processing_guarantee=guarantee, worker_id="w")
    tp = TopicPartition(inp, 0)
    first = HoldingSummarizer()
    worker = KafkaWorker(settings, first, model_name="fake", max_in_flight=FAKE_IN_FLIGHT)
    stop = threading.Event()
    thread, raised = run_capturing(worker, stop)
    reader = Reader(kafka_bootstrap, [out, dlq])
    try:
        reader.until(lambda g: len(g) >= len(expected) - 1)
        # Dies once the commit listing the later answers is in, before the slow input's commit.
        wait_for(lambda: len(Listed.from_metadata(_committed(kafka_bootstrap, settings.group_id, tp).metadata)
                             or ()) == 9)
        first.crash.set()
        thread.join(30)
        assert raised and isinstance(raised[0], Crash)
        assert _committed(kafka_bootstrap, settings.group_id, tp).offset == 0
        successor = GatedSummarizer()
        second = KafkaWorker(settings, successor, model_name="fake", max_in_flight=FAKE_IN_FLIGHT)
        stop = threading.Event()
        thread = run_in_thread(second, stop)
        wait_for(lambda: _committed(kafka_bootstrap, settings.group_id, tp).offset == 10)
        stop.set()
        thread.join(30)
        reader.until(lambda g: len(g) >= len(expected))
        reader.linger()
    finally:
        stop.set()
        reader.close()
    # The successor answered the slow input alone; the nine listed inputs were skipped.
    assert second.counts.answered_before == 9 and second.counts.summaries == 1
    assert _ids(reader.got, out) == collections.Counter(expected)
