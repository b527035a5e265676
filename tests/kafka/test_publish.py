"""The publish unit without a broker: a fake producer that refuses large values the way kafka-python
does (the error reaches the callback), and the frozen request each output carries."""

from __future__ import annotations

import msgspec
from kafka import TopicPartition
from kafka.errors import KafkaTimeoutError, MessageSizeTooLargeError

from worker.kafka.publish import AckPublisher, Answers, Request, RequestId
from worker.kafka.records import COMPACT_ORIGINAL_BYTES, Source
from worker.messages import DeadLetter, Summary

TP = TopicPartition("in", 0)


class RefusingProducer:
    """Accepts values up to `limit` bytes; larger ones fail with MessageSizeTooLargeError."""

    def __init__(self, limit: int, fail_first: BaseException | None = None) -> None:
        self.limit, self.fail_first = limit, fail_first
        self.sent: list[tuple[str, bytes]] = []

    def send(self, topic, key, value, headers, on_done) -> None:
        if self.fail_first is not None:
            error, self.fail_first = self.fail_first, None
            on_done(error)
        elif len(value) > self.limit:
            on_done(MessageSizeTooLargeError(f"{len(value)} bytes"))
        else:
            self.sent.append((topic, value))
            on_done(None)


def _request(offset: int, original: bytes, kind="summary", reason=None) -> Request:
    return Request(RequestId(TP, offset, 1), Source("in", 0, offset, b"k"), original, "r1", kind, reason)


def _publisher(limit: int, **kw) -> tuple[AckPublisher, RefusingProducer]:
    producer = RefusingProducer(limit, **kw)
    # The producer's own limit is far above `limit`, so only the broker-side refusal triggers the fallback.
    return AckPublisher(producer, Answers("out", "dlq", "m", 64 * 1024 * 1024)), producer


def test_publish_summary_too_large_dead_letters_the_input_bytes() -> None:
    publisher, producer = _publisher(limit=2000)
    original = b'{"id":"r1","kind":"text","body":"' + b"y" * 300 + b'"}'
    summary = Summary(id="r1", summary="s" * 5000, model="m", prompt_tokens=1, output_tokens=1)
    publisher.send(*publisher.answers.summary(_request(7, original), summary))
    (acked,) = publisher.poll(lambda rid: True)
    request, output = acked
    letter = msgspec.json.decode(output.value, type=DeadLetter)
    assert output.topic == "dlq" and letter.reason == "output_too_large" and request.reason == "output_too_large"
    assert letter.original == original  # the input's bytes, not the summary's
    assert request.rid == RequestId(TP, 7, 1) and request.compact and publisher.unacked == 0


def test_publish_dead_letter_too_large_keeps_its_reason_and_cuts_the_input() -> None:
    publisher, producer = _publisher(limit=4000)
    original = b"\xff" * 100_000  # not UTF-8: dead-lettered as invalid_utf8, too large to publish whole
    publisher.send(*publisher.answers.dead_letter(_request(3, original, "dead_letter", "invalid_utf8"), "bad"))
    (acked,) = publisher.poll(lambda rid: True)
    letter = msgspec.json.decode(acked[1].value, type=DeadLetter)
    assert letter.reason == "invalid_utf8" and acked[0].reason == "invalid_utf8"
    assert letter.original == original[:COMPACT_ORIGINAL_BYTES] and str(len(original)) in letter.message


def test_publish_over_producer_limit_falls_back_before_sending() -> None:
    producer = RefusingProducer(limit=10**9)
    answers = Answers("out", "dlq", "m", max_request_size=4096)
    summary = Summary(id="r1", summary="s" * 10_000, model="m", prompt_tokens=1, output_tokens=1)
    request, output = answers.summary(_request(1, b"input"), summary)
    assert output.topic == "dlq" and request.reason == "output_too_large"
    assert msgspec.json.decode(output.value, type=DeadLetter).original == b"input"


def test_publish_retriable_error_republishes_after_backoff(monkeypatch) -> None:
    import worker.kafka.publish as publish

    monkeypatch.setattr(publish, "REPUBLISH_BACKOFF_S", 0.0)
    publisher, producer = _publisher(limit=10**6, fail_first=KafkaTimeoutError("broker away"))
    publisher.send(*publisher.answers.dead_letter(_request(2, b"x", "dead_letter", "invalid_json"), "bad"))
    assert publisher.poll(lambda rid: True) == [] and publisher.busy
    (acked,) = publisher.poll(lambda rid: True)
    assert acked[0].reason == "invalid_json" and publisher.republished == 1 and not publisher.busy
    assert len(producer.sent) == 1


def test_dead_letter_request_without_a_reason_is_refused():
    import pytest

    with pytest.raises(ValueError, match="reason"):
        _request(1, b"x", "dead_letter", None)


def test_transaction_stuck_after_a_broker_restart_reopens_the_producer_and_retries_its_answers():
    from worker.kafka.clients import TransactionStuck
    from worker.kafka.publish import TransactionalPublisher

    class StuckOnce:
        def __init__(self) -> None:
            self.calls: list[str] = []
            self.stuck = True

        def begin_transaction(self):
            self.calls.append("begin")

        def send(self, topic, key, value, headers, on_error):
            self.calls.append("send")

        def send_offsets(self, offsets, group_metadata, metadata=None):
            if self.stuck:
                raise TransactionStuck("the transaction's send_offsets got no answer in 60000 ms")
            self.calls.append(f"offsets {offsets}")

        def commit_transaction(self):
            self.calls.append("commit")

        def reopen(self):
            self.calls.append("reopen")
            self.stuck = False

    producer = StuckOnce()
    publisher = TransactionalPublisher(producer, Answers("out", "dlq", "m", 1_000_000))
    request = _request(4, b"{}")
    publisher.stage(*publisher.answers.summary(request, Summary(id="r1", summary="s", model="m", prompt_tokens=1,
                                                                output_tokens=1)))
    assert publisher.commit({TP: 5}, None) is None  # stuck: nothing published, the answer stays staged
    assert producer.calls[-1] == "reopen" and publisher.staged == 1 and publisher.aborts == 1
    assert len(publisher.commit({TP: 5}, None)) == 1 and publisher.staged == 0
    assert producer.calls[-2:] == [f"offsets {{{TP!r}: 5}}", "commit"]
