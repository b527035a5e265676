"""The codec self-check, and every codec through `telesum worker` with a foreign producer and consumer
(confluent-kafka / librdkafka), in both delivery modes."""

from __future__ import annotations

import collections
import json
import logging
import os
import re
import socket
import time
import urllib.error
import urllib.request
import uuid

import pytest

from tests.kafka.foreign import CODECS, answered_ids, consume_committed, large_record, produce_foreign
from tests.kafka.helpers import WorkerProcess
from worker.kafka.codecs import MissingCodecError, check_codecs, missing_codecs, native_crc32c


def test_codecs_installed_all_decodable_with_native_crc():
    assert missing_codecs() == [] and native_crc32c()


def test_codecs_missing_library_refuses_naming_it(monkeypatch):
    import kafka.codec

    monkeypatch.setattr(kafka.codec, "has_snappy", lambda: False)
    with pytest.raises(MissingCodecError, match=r"snappy \(module 'snappy', pip install python-snappy\)"):
        check_codecs(allow_missing=False)


def test_codecs_missing_library_allowed_warns(monkeypatch, caplog):
    import kafka.codec

    monkeypatch.setattr(kafka.codec, "has_zstd", lambda: False)
    with caplog.at_level(logging.WARNING, logger="worker.kafka.codecs"):
        check_codecs(allow_missing=True)
    assert "zstd (module 'zstandard', pip install zstandard)" in caplog.text and "starting anyway" in caplog.text


def test_codecs_pure_python_crc_warns(monkeypatch, caplog):
    from kafka.record import _crc32c, util

    monkeypatch.setattr(util.calc_crc32c, "__defaults__", (_crc32c.crc,))
    assert not native_crc32c()
    with caplog.at_level(logging.WARNING, logger="worker.kafka.codecs"):
        check_codecs(allow_missing=False)
    assert "pure Python" in caplog.text and "pip install crc32c" in caplog.text


@pytest.fixture
def without_zstandard(tmp_path):
    """A PYTHONPATH on which `import zstandard` fails, as on an install without kafka-python's zstd extra."""
    (tmp_path / "zstandard.py").write_text("raise ImportError('zstandard is not installed here')\n")
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.kafka
@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_codecs_every_codec_answered_once_for_a_read_committed_consumer(kafka_bootstrap, make_topic, tokenizer_dir,
                                                                         tmp_path, guarantee):
    inp, out, dlq = make_topic("in", 2), make_topic("out"), make_topic("dlq")
    ids = []
    for codec in CODECS:
        ids += produce_foreign(kafka_bootstrap, inp, [large_record(i, codec) for i in range(4)], codec)
    ids += produce_foreign(kafka_bootstrap, inp, [large_record(i, "plain") for i in range(2)])
    worker = WorkerProcess(kafka_bootstrap, inp, out, dlq, f"g-{uuid.uuid4().hex}", tokenizer_dir,
                           tmp_path / "worker.log", **{"processing-guarantee": guarantee})
    try:
        got = consume_committed(kafka_bootstrap, [out, dlq], lambda g: len(g) >= len(ids))
    finally:
        code = worker.stop()
    assert code == 0, worker.log()[-3000:]
    assert collections.Counter(answered_ids(got, out)) == collections.Counter(ids)
    assert "compression codecs: gzip, snappy, lz4, zstd all decodable" in worker.log()


@pytest.mark.kafka
def test_codecs_worker_without_a_codec_library_exits_5_naming_it(kafka_bootstrap, tokenizer_dir, tmp_path,
                                                                   without_zstandard, monkeypatch):
    for name, value in without_zstandard.items():
        monkeypatch.setenv(name, value)
    worker = WorkerProcess(kafka_bootstrap, "in", "out", "dlq", "g", tokenizer_dir, tmp_path / "worker.log")
    assert worker.wait(60) == 5
    assert "zstd (module 'zstandard', pip install zstandard)" in worker.log()


@pytest.mark.kafka
def test_codecs_worker_exit_on_undecodable_exits_6_after_serving_the_others(
        kafka_bootstrap, make_topic, tokenizer_dir, tmp_path, without_zstandard, monkeypatch):
    for name, value in without_zstandard.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TELESUM_ALLOW_MISSING_CODECS", "true")
    inp, out, dlq = make_topic("in", 2), make_topic("out"), make_topic("dlq")
    plain = produce_foreign(kafka_bootstrap, inp, [large_record(i, "plain") for i in range(3)], partition=1)
    produce_foreign(kafka_bootstrap, inp, [large_record(i, "zstd") for i in range(3)], "zstd", partition=0)
    worker = WorkerProcess(kafka_bootstrap, inp, out, dlq, f"g-{uuid.uuid4().hex}", tokenizer_dir,
                           tmp_path / "worker.log", **{"on-undecodable-batch": "exit"})
    assert worker.wait(120) == 6, worker.log()[-3000:]
    log = worker.log()
    assert f"undecodable batch at {inp}[0] offset 0" in log and "zstd" in log
    got = consume_committed(kafka_bootstrap, [out, dlq], lambda g: False, wait_s=5)
    assert set(answered_ids(got, out)) <= set(plain)


@pytest.mark.kafka
def test_codecs_worker_stuck_partition_on_readyz_and_metrics_while_the_other_is_served(
        kafka_bootstrap, make_topic, tokenizer_dir, tmp_path, without_zstandard, monkeypatch):
    for name, value in without_zstandard.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TELESUM_ALLOW_MISSING_CODECS", "true")
    inp, out, dlq = make_topic("in", 2), make_topic("out"), make_topic("dlq")
    before = produce_foreign(kafka_bootstrap, inp, [large_record(i, "before") for i in range(2)], partition=0)
    produce_foreign(kafka_bootstrap, inp, [large_record(i, "zstd") for i in range(3)], "zstd", partition=0)
    plain = produce_foreign(kafka_bootstrap, inp, [large_record(i, "plain") for i in range(4)], partition=1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    worker = WorkerProcess(kafka_bootstrap, inp, out, dlq, f"g-{uuid.uuid4().hex}", tokenizer_dir,
                           tmp_path / "worker.log", **{"metrics-port": str(port), "bind-address": "127.0.0.1"})
    try:
        got = consume_committed(kafka_bootstrap, [out, dlq], lambda g: len(g) >= len(before + plain))
        assert collections.Counter(answered_ids(got, out)) == collections.Counter(before + plain)
        deadline = time.monotonic() + 30  # the loop publishes its state after each step
        while True:
            code, body = _get(f"http://127.0.0.1:{port}/readyz")
            ready = json.loads(body)
            if ready["stuck_partitions"] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert code == 503 and ready["checks"]["no_stuck_partitions"] is False
        [stuck] = ready["stuck_partitions"]
        assert (stuck["topic"], stuck["partition"], stuck["offset"]) == (inp, 0, 2) and "zstd" in stuck["reason"]
        metrics = _get(f"http://127.0.0.1:{port}/metrics")[1].decode()
        assert re.search(r'^telesum_stuck_partitions\{[^}]*\} 1\.0$', metrics, re.M)
        assert re.search(r'^telesum_undecodable_batches_total\{[^}]*\} [1-9]', metrics, re.M)
        assert f"partition {inp}[0] stuck: the batch at offset 2 cannot be decoded" in worker.log()
    finally:
        code = worker.stop()
    assert code == 0, worker.log()[-3000:]  # the stuck partition does not stop a clean drain


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
