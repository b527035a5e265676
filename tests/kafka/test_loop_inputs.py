"""The poll loop with the input layer, against a real broker with a test double for the summarizer:
a batch message is committed only after all its answers; log lines are answered per host window,
every line in exactly one window, and open windows are answered in the drain."""

from __future__ import annotations

import collections
import threading

import msgspec
import pytest
from kafka import KafkaConsumer, TopicPartition

from tests.kafka.fakes import FAKE_IN_FLIGHT, GatedSummarizer, run_in_thread, wait_for
from tests.kafka.helpers import committed_offset, consume, produce, worker_settings
from worker.kafka.loop import KafkaWorker

pytestmark = pytest.mark.kafka


class RecordingSummarizer(GatedSummarizer):
    def __init__(self) -> None:
        super().__init__()
        self.records: list = []

    def submit(self, request_id, record) -> None:
        super().submit(request_id, record)
        self.records.append(record)


def _line(host: str, i: int) -> bytes:
    return f"2026-12-01T14:{i // 60:02d}:{i % 60:02d}.000000+00:00 {host} ptp4l[812]: clock step {i}".encode()


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_loop_batch_message_answers_every_item_then_commits_its_offset(kafka_bootstrap, make_topic, guarantee):
    inp, out, dlq = make_topic("in"), make_topic("out"), make_topic("dlq")
    events = {"eventList": [{"commonEventHeader": {"domain": "fault", "eventId": f"e{i}", "sourceName": "ru-1"}}
                            for i in range(3)] + [42]}
    produce(kafka_bootstrap, inp, [msgspec.json.encode(events), b"<13>1 - h1 app - - - one line"], keys=[None, None])
    settings = worker_settings(kafka_bootstrap, inp, out, dlq, processing_guarantee=guarantee, window_s=0.0)
    worker = KafkaWorker(settings, GatedSummarizer(), model_name="fake", max_in_flight=FAKE_IN_FLIGHT)
    stop = threading.Event()
    thread = run_in_thread(worker, stop)
    got = consume(kafka_bootstrap, [out, dlq], lambda g: len(g) >= 5)
    stop.set()
    thread.join(30)
    summaries = [r for r in got if r.topic == out]
    letters = [r for r in got if r.topic == dlq]
    assert sorted(msgspec.json.decode(r.value)["id"] for r in summaries)[:3] == ["e0", "e1", "e2"]
    assert [dict(r.headers)["telesum-source-index"] for r in letters] == [b"3"]
    assert {dict(r.headers)["telesum-input-format"] for r in summaries} == {b"ves", b"syslog"}
    assert committed_offset(kafka_bootstrap, settings.group_id, TopicPartition(inp, 0)) == 2


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_loop_log_lines_are_answered_per_host_window_each_line_once(kafka_bootstrap, make_topic, guarantee):
    inp, out, dlq = make_topic("in", 2), make_topic("out"), make_topic("dlq")
    hosts = ["gnb-1", "gnb-2", "upf-3"]
    lines = [_line(hosts[i % 3], i) for i in range(60)]
    produce(kafka_bootstrap, inp, lines, keys=[hosts[i % 3].encode() for i in range(60)])
    settings = worker_settings(kafka_bootstrap, inp, out, dlq, processing_guarantee=guarantee, window_s=1.0,
                         window_max_lines=8)
    fake = RecordingSummarizer()
    worker = KafkaWorker(settings, fake, model_name="fake", max_in_flight=FAKE_IN_FLIGHT)
    stop = threading.Event()
    thread = run_in_thread(worker, stop)
    got = consume(kafka_bootstrap, [out, dlq], lambda g: sum(
        len(rec.body.splitlines()) for rec in fake.records) >= 60 and len(g) >= len(fake.records))
    stop.set()
    thread.join(30)
    seen = collections.Counter()
    for record in fake.records:
        body_hosts = {line.split()[1] for line in record.body.splitlines()}
        assert body_hosts == {record.attributes["host"]} and len(record.body.splitlines()) <= 8
        seen.update(record.body.splitlines())
    assert seen == collections.Counter(line.decode() for line in lines)
    answered = {msgspec.json.decode(r.value)["id"] for r in got if r.topic == out}
    assert answered == {r.id for r in fake.records} and not [r for r in got if r.topic == dlq]
    window = next(r for r in got if r.topic == out)
    first, last = int(dict(window.headers)["telesum-source-offset"]), int(dict(window.headers)["telesum-source-last-offset"])
    assert first < last
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap)
    ends = consumer.end_offsets([TopicPartition(inp, 0), TopicPartition(inp, 1)])
    consumer.close()
    for tp, end in ends.items():
        assert committed_offset(kafka_bootstrap, settings.group_id, tp) == end


def test_loop_open_windows_are_answered_in_the_drain(kafka_bootstrap, make_topic):
    inp, out, dlq = make_topic("in"), make_topic("out"), make_topic("dlq")
    produce(kafka_bootstrap, inp, [_line("gnb-1", i) for i in range(5)], keys=[None] * 5)
    settings = worker_settings(kafka_bootstrap, inp, out, dlq, processing_guarantee="exactly-once", window_s=600.0)
    fake = RecordingSummarizer()
    worker = KafkaWorker(settings, fake, model_name="fake", max_in_flight=FAKE_IN_FLIGHT)
    stop = threading.Event()
    thread = run_in_thread(worker, stop)
    wait_for(lambda: worker.counts.consumed == 5)
    assert not fake.records  # the window is still open
    stop.set()
    thread.join(30)
    got = consume(kafka_bootstrap, [out], lambda g: len(g) >= 1, wait_s=10)
    assert len(got) == 1 and msgspec.json.decode(got[0].value)["id"] == f"gnb-1@{inp}:0:0-4"
    assert worker.counts.drained_cleanly
    assert committed_offset(kafka_bootstrap, settings.group_id, TopicPartition(inp, 0)) == 5
