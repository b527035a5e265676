"""`telesum worker` end to end against a real broker, with the real Summarizer on a tiny random-weight
model (SmolLM2's tokenizer, 2 layers of hidden 64, 4 new tokens)."""

from __future__ import annotations

import collections
import re
import signal
import time
import uuid

import msgspec
import pytest

from tests.kafka.helpers import WorkerProcess, answer_ids, consume, produce, produce_records
from worker.benchmarks.local_broker import kafka_sh
from worker.messages import DeadLetter, TelemetryRecord

pytestmark = pytest.mark.kafka


@pytest.fixture
def topics(make_topic):
    def make(partitions: int = 2):
        return make_topic("in", partitions), make_topic("out"), make_topic("dlq")
    return make


@pytest.fixture
def start_worker(kafka_bootstrap, tokenizer_dir, tmp_path):
    started: list[WorkerProcess] = []

    def start(inp, out, dlq, group, bootstrap=None, **extra) -> WorkerProcess:
        log = tmp_path / f"worker-{len(started)}.log"
        w = WorkerProcess(bootstrap or kafka_bootstrap, inp, out, dlq, group, tokenizer_dir, log, **extra)
        started.append(w)
        return w

    yield start
    for w in started:
        if w.proc.poll() is None:
            w.kill()


def _ids(got, out):
    return collections.Counter(answer_ids(got, out))


def _wait_log(worker: WorkerProcess, pattern: str, wait_s: float = 60) -> None:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if re.search(pattern, worker.log()):
            return
        assert worker.proc.poll() is None, f"worker exited:\n{worker.log()[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} not in worker log:\n{worker.log()[-3000:]}")


def test_worker_n_records_exactly_n_answers_by_id(kafka_bootstrap, topics, start_worker):
    inp, out, dlq = topics(3)
    ids = produce_records(kafka_bootstrap, inp, range(30))
    worker = start_worker(inp, out, dlq, f"g-{uuid.uuid4().hex}")
    got = consume(kafka_bootstrap, [out, dlq], lambda g: len(g) >= 30)
    assert worker.stop() == 0, worker.log()[-3000:]
    time.sleep(0.5)  # anything published late would show up in a second read
    counts = _ids(consume(kafka_bootstrap, [out, dlq], lambda g: False, wait_s=2), out)
    assert counts == collections.Counter(ids)
    first = next(r for r in got if r.topic == out)
    headers = dict(first.headers)
    assert headers["telesum-source-topic"] == inp.encode()
    assert headers["telesum-model"] == b"tiny-random"
    summary = msgspec.json.decode(first.value)
    assert first.key == f"k{int(summary['id'].split('-')[1])}".encode() == summary["key"].encode()
    # The structured facts travel with every summary (each record comes from gnb-N's rrc app, severity info).
    for r in (r for r in got if r.topic == out):
        facts = msgspec.json.decode(r.value)["facts"]
        i = int(msgspec.json.decode(r.value)["id"].split("-")[1])
        assert facts["entity"] == f"gnb-{i % 7}" and facts["severity"] == "info", facts


def test_worker_sigkill_mid_stream_restart_answers_every_id(kafka_bootstrap, topics, start_worker):
    inp, out, dlq = topics(2)
    ids = produce_records(kafka_bootstrap, inp, range(80))
    group = f"g-{uuid.uuid4().hex}"
    first = start_worker(inp, out, dlq, group, **{"max-poll-records": "8", "max-in-flight": "8"})
    consume(kafka_bootstrap, [out, dlq], lambda g: len(g) >= 10)
    first.signal(signal.SIGKILL)
    first.wait()
    second = start_worker(inp, out, dlq, group)
    got = consume(kafka_bootstrap, [out, dlq], lambda g: set(_ids(g, out)) >= set(ids))
    assert second.stop() == 0
    counts = _ids(got, out)
    assert set(counts) == set(ids), f"missing: {set(ids) - set(counts)}"
    duplicates = sum(n - 1 for n in counts.values())
    print(f"SIGKILL replay: {duplicates} duplicate answers of {len(ids)}")


def test_worker_sigterm_drains_and_restart_reanswers_nothing(kafka_bootstrap, topics, start_worker):
    inp, out, dlq = topics(2)
    ids = produce_records(kafka_bootstrap, inp, range(40))
    group = f"g-{uuid.uuid4().hex}"
    first = start_worker(inp, out, dlq, group, **{"max-poll-records": "8", "max-in-flight": "8"})
    consume(kafka_bootstrap, [out, dlq], lambda g: len(g) >= 5)
    assert first.stop() == 0, first.log()[-3000:]  # mid-stream: drains what it holds, commits
    assert "drained (clean)" in first.log()
    second = start_worker(inp, out, dlq, group)
    got = consume(kafka_bootstrap, [out, dlq], lambda g: set(_ids(g, out)) >= set(ids))
    assert second.stop() == 0
    counts = _ids(got, out)
    assert counts == collections.Counter(ids), "some id was answered twice or never"


def test_worker_sigterm_drain_deadline_exits_3_without_abort_and_loses_nothing(kafka_bootstrap, topics,
                                                                                 start_worker):
    inp, out, dlq = topics(1)
    ids = produce_records(kafka_bootstrap, inp, range(150))
    group = f"g-{uuid.uuid4().hex}"
    # A zero drain deadline with records in flight: the documented exit code, no native abort.
    first = start_worker(inp, out, dlq, group, **{"drain-timeout-s": "0", "max-new-tokens": "64"})
    consume(kafka_bootstrap, [out], lambda g: len(g) >= 1)
    first.signal(signal.SIGTERM)
    assert first.wait() == 3, first.log()[-3000:]
    assert "drained (deadline hit)" in first.log() and "terminate called" not in first.log()
    second = start_worker(inp, out, dlq, group)
    got = consume(kafka_bootstrap, [out, dlq], lambda g: set(_ids(g, out)) >= set(ids))
    assert second.stop() == 0
    assert set(_ids(got, out)) == set(ids)  # what the first left uncommitted, the second answered


def test_worker_bad_inputs_dead_letters_and_keeps_running(kafka_bootstrap, topics, start_worker):
    inp, out, dlq = topics(1)
    good = msgspec.json.encode(TelemetryRecord(id="good-1", kind="text", body="link down on port 3"))
    huge = b'{"id": "huge", "kind": "nonsense", "body": "' + b"x" * (5 * 1024 * 1024) + b'"}'
    values = [b"{not json", b'{"id": 7, "kind": "text", "body": "x"}', b'{"id": "e", "kind": "text", "body": ""}',
              b"\xff\xfe\x00garbage", huge, b"", good,
              msgspec.msgpack.encode(TelemetryRecord(id="good-mp", kind="text", body="fan failure"))]
    headers = [[] for _ in values]
    headers[-1] = [("content-type", b"application/msgpack")]
    produce(kafka_bootstrap, inp, values, headers=headers)
    # 1 MB produce requests: the 5 MB record's full dead letter cannot be published, a compact one is.
    worker = start_worker(inp, out, dlq, f"g-{uuid.uuid4().hex}", **{"max-request-size": str(1024 * 1024)})
    got = consume(kafka_bootstrap, [out, dlq], lambda g: len(g) >= len(values))
    assert worker.proc.poll() is None, "the worker died on bad input"
    assert worker.stop() == 0
    reasons = {int(dict(r.headers)["telesum-source-offset"]): dict(r.headers)["telesum-reason"].decode()
               for r in got if r.topic == dlq}
    # The 5 MB record's dead letter is too large to publish whole: a compact one keeps its own reason.
    assert reasons == {0: "invalid_json", 1: "invalid_field", 2: "empty_body", 3: "invalid_utf8",
                       4: "invalid_field", 5: "empty_record"}
    letters = {int(dict(r.headers)["telesum-source-offset"]): msgspec.json.decode(r.value, type=DeadLetter)
               for r in got if r.topic == dlq}
    assert letters[4].original == huge[:1024] and "could not be published" in letters[4].message
    assert letters[3].original and letters[0].offset == 0 and letters[0].topic == inp
    assert sorted(msgspec.json.decode(r.value)["id"] for r in got if r.topic == out) == ["good-1", "good-mp"]


def test_worker_two_in_group_split_partitions_without_loss(kafka_bootstrap, topics, start_worker):
    inp, out, dlq = topics(4)
    group = f"g-{uuid.uuid4().hex}"
    a, b = start_worker(inp, out, dlq, group), start_worker(inp, out, dlq, group)
    for w in (a, b):  # both members hold partitions before any record exists
        _wait_log(w, r"assigned \[\('")
    time.sleep(1.0)
    ids = produce_records(kafka_bootstrap, inp, range(80))
    got = consume(kafka_bootstrap, [out, dlq], lambda g: set(_ids(g, out)) >= set(ids))
    assert a.stop() == 0 and b.stop() == 0
    assert set(_ids(got, out)) == set(ids)
    consumed = [int(re.findall(r"worker stopped: WorkerStats\(consumed=(\d+)", w.log())[-1]) for w in (a, b)]
    assert all(n > 0 for n in consumed) and sum(consumed) >= len(ids), consumed


def test_worker_broker_restart_mid_stream_survives(tmp_path, make_topic, start_worker):
    port = 19192  # a broker of this test's own: it is stopped and started again
    state = tmp_path / "broker"
    kafka_sh("start", port, state)
    bootstrap = f"127.0.0.1:{port}"
    try:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(t, 2 if t == "in" else 1, 1) for t in ("in", "out", "dlq")])
        admin.close()
        ids = produce_records(bootstrap, "in", range(40))
        worker = start_worker("in", "out", "dlq", "g-restart", bootstrap=bootstrap,
                              **{"max-poll-records": "4", "max-in-flight": "4"})
        consume(bootstrap, ["out"], lambda g: len(g) >= 5)
        kafka_sh("stop", port, state)
        time.sleep(2.0)
        kafka_sh("start", port, state)
        ids += produce_records(bootstrap, "in", range(40, 60))
        got = consume(bootstrap, ["out", "dlq"], lambda g: set(_ids(g, "out")) >= set(ids))
        assert set(_ids(got, "out")) == set(ids), f"missing: {set(ids) - set(_ids(got, 'out'))}"
        assert worker.proc.poll() is None
        assert worker.stop() == 0
    finally:
        kafka_sh("stop", port, state)
