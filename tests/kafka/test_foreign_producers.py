"""Every producer shape, produced by an independent client (confluent-kafka / librdkafka) to the real
broker, through `telesum worker` in exactly-once mode, read back with `isolation.level=read_committed`:
summaries for valid input (0 dead letters), each hostile variant (empty, binary, truncated, wrong
types, oversized) a dead letter with its reason and its original bytes, every log line in exactly
one window."""

from __future__ import annotations

import collections
import time
import uuid

import msgspec
import pytest

from tests.kafka.helpers import ANSWER_WAIT_S, WorkerProcess
from tests.inputs.helpers import SHAPES, fixture, otlp_proto
from worker.messages import DeadLetter

confluent_kafka = pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.kafka

VES_IDS = ["fault0000245", "meas-cu-17-000311", "hb-cu-17-8812"]


def _codec(name: str):
    from kafka import codec

    has = {"gzip": codec.has_gzip, "snappy": codec.has_snappy, "lz4": codec.has_lz4, "zstd": codec.has_zstd}[name]
    return pytest.param(name, marks=pytest.mark.skipif(not has(), reason=f"kafka-python cannot decode {name} here"))


def _produce(bootstrap: str, topic: str, values: list[bytes], codec: str = "none", headers=None) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                                         "linger.ms": 20, "message.max.bytes": 16 * 1024 * 1024})
    for i, value in enumerate(values):
        producer.produce(topic, value=value, headers=headers[i] if headers else None)
    assert producer.flush(30) == 0


def _read_committed(bootstrap: str, topics: list[str], until, wait_s: float = ANSWER_WAIT_S,
                    settle_s: float = 0.0) -> list:
    """Read `topics` as a read-committed consumer until until(got), then `settle_s` more (to see extras)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                         "isolation.level": "read_committed"})
    consumer.subscribe(topics)
    got: list = []
    deadline, settled = time.monotonic() + wait_s, None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg)
            if settled is None and until(got):
                settled = time.monotonic() + settle_s
            if settled is not None and time.monotonic() >= settled:
                break
    finally:
        consumer.close()
    return got


def _headers(msg) -> dict[str, bytes]:
    return dict(msg.headers() or [])


def _answers(got, out: str):
    summaries = [m for m in got if m.topic() == out]
    letters = [m for m in got if m.topic() != out]
    return summaries, letters


def _window_records(summaries) -> int:
    return sum(int(_headers(m).get("telesum-window-records", b"0")) for m in summaries)


@pytest.fixture
def run_worker(kafka_bootstrap, tokenizer_dir, tmp_path, make_topic):
    started: list[WorkerProcess] = []

    def run(inp: str, **extra: str):
        out, dlq = make_topic("out"), make_topic("dlq")
        worker = WorkerProcess(kafka_bootstrap, inp, out, dlq, f"g-{uuid.uuid4().hex}", tokenizer_dir,
                               tmp_path / f"worker-{len(started)}.log", **{"processing-guarantee": "exactly-once",
                                                                            "window-s": "1", **extra})
        started.append(worker)
        return worker, out, dlq

    yield run
    for worker in started:
        if worker.proc.poll() is None:
            worker.kill()


# Per format: ids of the records answered alone, and how many records the log windows hold.
# json-log: 3 single events and the events of a Fluent Bit (3) and a Vector (2) HTTP batch.
OWN = {"ves": (VES_IDS, 0), "syslog": ([], 4), "json-log": ([], 8), "otlp": ([], 4)}


@pytest.mark.parametrize("fmt", list(OWN))
def test_producer_shapes_in_their_own_format_are_all_summarised(fmt, kafka_bootstrap, make_topic, run_worker):
    values = [make() for _, f, make, _, _ in SHAPES if f == fmt]
    if fmt == "syslog":
        values = fixture("syslog_lines.txt").splitlines()
    inp = make_topic("in")
    _produce(kafka_bootstrap, inp, values)
    worker, out, dlq = run_worker(inp, **{"input-format": fmt})
    ids, window_records = OWN[fmt]
    got = _read_committed(kafka_bootstrap, [out, dlq], lambda g: len(_answers(g, out)[0]) >= len(ids) and
                          _window_records(_answers(g, out)[0]) >= window_records, settle_s=2)
    assert worker.stop() == 0, worker.log()
    summaries, letters = _answers(got, out)
    assert letters == [], [m.value()[:300] for m in letters]
    assert sorted(msgspec.json.decode(m.value())["id"] for m in summaries if "telesum-window-records" not in
                  _headers(m)) == sorted(ids)
    assert _window_records(summaries) == window_records
    assert {_headers(m)["telesum-input-format"] for m in summaries} == {fmt.encode()}


@pytest.mark.parametrize("codec", [_codec("gzip"), _codec("snappy"), _codec("lz4"), _codec("zstd")])
def test_every_shape_in_auto_summarised_once_and_hostile_variants_dead_lettered(codec, kafka_bootstrap, make_topic,
                                                                                  run_worker):
    valid = [fixture("ves_fault.json"), fixture("ves_measurement_eventlist.json"), *fixture(
        "syslog_lines.txt").splitlines(), fixture("fluentbit_syslog.json"), fixture("fluentbit_tail.json"),
        fixture("vector_syslog.json"), fixture("otlp_logs.json"), otlp_proto()]
    envelope_msgpack = msgspec.msgpack.encode({"id": "env-1", "kind": "text", "body": "cell 7 restarted",
                                               "timestamp": 1796135952254, "attributes": {"cell": 7}})
    # Over the work cap (--max-record-tokens 4096 with --over-cap dead_letter): a 150 KB syslog line
    # alone in its host's window is too_long, and so is a VES event with a 150 KB
    # alarmAdditionalInformation (the cap counts a record's body tokens, within the context too).
    oversized_line = ("2026-12-01T14:40:00.000000+00:00 big-host-1 app[1]: " +
                      " ".join(f"field{i}=value{i}" for i in range(8000))).encode()
    oversized_ves = msgspec.json.encode({"event": {"commonEventHeader": {"domain": "fault", "eventId": "big-1",
                                                                         "sourceName": "big-host-2"},
                                                   "faultFields": {"alarmAdditionalInformation": {
                                                       f"k{i}": f"value {i}" for i in range(10000)}}}})
    hostile = {oversized_line: "too_long", oversized_ves: "too_long",
               b"": "empty_record", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00": "invalid_utf8",
               fixture("ves_fault.json")[:200]: "invalid_json",
               b'{"event": {"commonEventHeader": "fault"}}': "invalid_field",
               b'{"id": "x", "kind": "alarm", "body": "b"}': "invalid_field",
               b'{"message": "   ", "host": "h"}': "empty_body"}
    inp = make_topic("in")
    _produce(kafka_bootstrap, inp, valid, codec)
    _produce(kafka_bootstrap, inp, [envelope_msgpack], codec, [[("content-type", b"application/msgpack; charset=utf-8")]])
    _produce(kafka_bootstrap, inp, list(hostile), codec)
    worker, out, dlq = run_worker(inp, **{"max-record-tokens": "4096", "over-cap": "dead_letter"})
    singles = [*VES_IDS, "env-1"]
    got = _read_committed(kafka_bootstrap, [out, dlq], lambda g: len(_answers(g, out)[1]) >= len(hostile) and
                          _window_records(_answers(g, out)[0]) >= 11 and
                          len([m for m in _answers(g, out)[0] if "telesum-window-records" not in _headers(m)])
                          >= len(singles), settle_s=2)
    assert worker.stop() == 0, worker.log()
    summaries, letters = _answers(got, out)
    assert sorted(msgspec.json.decode(m.value())["id"] for m in summaries
                  if "telesum-window-records" not in _headers(m)) == sorted(singles)
    # 4 syslog lines, 2 Fluent Bit, 1 Vector, 2 resources in each of the two OTLP messages
    assert _window_records(summaries) == 11
    formats = collections.Counter(_headers(m)["telesum-input-format"] for m in summaries)
    assert formats[b"ves"] == 3 and formats[b"envelope"] == 1
    dead = [msgspec.json.decode(m.value(), type=DeadLetter) for m in letters]
    assert sorted((d.original, d.reason) for d in dead) == sorted(hostile.items())
