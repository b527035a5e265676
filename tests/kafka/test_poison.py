"""One message never stops the worker (against a real broker): an exception injected at each stage of
a message's path — decoding, staging, closing its log window, writing its summary, preparing it in the
summarizer — ends as that message's dead letter, and the messages after it are answered and committed."""

from __future__ import annotations

import threading

import msgspec
import pytest
from kafka import TopicPartition

from tests.kafka.fakes import FAKE_IN_FLIGHT, GatedSummarizer, run_capturing, wait_for
from tests.kafka.helpers import committed_offset, consume, produce, worker_settings
from worker.inputs.detect import AutoDecoder
from worker.kafka import intake, publish
from worker.kafka.loop import KafkaWorker

pytestmark = pytest.mark.kafka


class PreparingSummarizer(GatedSummarizer):
    """Fails a record the way the Summarizer reports a record whose facts or prompt raised."""

    def poll(self, timeout: float):
        return [(rid, KeyError("facts: no such field") if result.id == "prepare-bomb" else result)
                for rid, result in super().poll(timeout)]


def _envelope(record_id: str, body="a line") -> bytes:
    return msgspec.json.encode({"id": record_id, "kind": "text", "body": body})


def _line(host: str) -> bytes:
    return f"2026-12-01T14:39:12.000000+00:00 {host} bgpd[812]: neighbor 10.0.0.1 Down".encode()


@pytest.fixture
def bombs(monkeypatch):
    """Each stage raises for its own marked message."""
    real_decode, real_key, real_merged, real_output = (AutoDecoder._decode, intake.window_key, intake.merged,
                                                       publish.summary_output)

    def decode(self, message, raw):
        if b"decode-bomb" in raw:
            raise RuntimeError("the detector tripped")
        return real_decode(self, message, raw)

    def window_key(tp, record):
        if record.attributes.get("host") == "stage-bomb":
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        return real_key(tp, record)

    def merged(window):
        if window.key[1] == "merge-bomb":
            raise ValueError("no parts")
        return real_merged(window)

    def summary_output(topic, source, summary):
        if summary.id == "write-bomb":
            raise OverflowError("a number too large to encode")
        return real_output(topic, source, summary)

    monkeypatch.setattr(AutoDecoder, "_decode", decode)
    monkeypatch.setattr(intake, "window_key", window_key)
    monkeypatch.setattr(intake, "merged", merged)
    monkeypatch.setattr(publish, "summary_output", summary_output)


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_an_exception_at_every_stage_is_that_messages_dead_letter_and_the_worker_goes_on(
        kafka_bootstrap, make_topic, bombs, guarantee):
    inp, out, dlq = make_topic("in"), make_topic("out"), make_topic("dlq")
    values = [_envelope("ok-0"), b'{"decode-bomb": 1}', _line("stage-bomb"), _line("merge-bomb"),
              _envelope("write-bomb"), _envelope("prepare-bomb"),
              b'{"id": "deep", "kind": "text", "body": ' + b"[" * 5000 + b"]" * 5000 + b"}",  # the crash loop's message
              _line("core-rtr-1"), _envelope("ok-1")]
    produce(kafka_bootstrap, inp, values, keys=[None] * len(values))
    settings = worker_settings(kafka_bootstrap, inp, out, dlq, processing_guarantee=guarantee, window_s=0.2)
    worker = KafkaWorker(settings, PreparingSummarizer(), model_name="fake", max_in_flight=FAKE_IN_FLIGHT)
    stop = threading.Event()
    thread, raised = run_capturing(worker, stop)
    got = consume(kafka_bootstrap, [out, dlq], lambda g: len(g) >= len(values))
    wait_for(lambda: committed_offset(kafka_bootstrap, settings.group_id, TopicPartition(inp, 0)) == len(values))
    assert thread.is_alive(), raised
    stop.set()
    thread.join(30)
    assert not raised
    letters = {int(dict(r.headers)["telesum-source-offset"]): dict(r.headers)["telesum-reason"].decode()
               for r in got if r.topic == dlq}
    assert letters == {1: "internal_error", 2: "internal_error", 3: "internal_error", 4: "internal_error",
                       5: "summarize_failed", 6: "too_deep"}
    answered = sorted(int(dict(r.headers)["telesum-source-offset"]) for r in got if r.topic == out)
    assert answered == [0, 7, 8]
    messages = {int(dict(r.headers)["telesum-source-offset"]): msgspec.json.decode(r.value)["message"]
                for r in got if r.topic == dlq}
    assert messages[1].startswith("RuntimeError while decoding: the detector tripped")
    assert messages[4].startswith("OverflowError while writing the summary")
