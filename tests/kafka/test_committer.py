"""The Committer without a broker: acknowledged answers move their partition's commit; a partition
being revoked is never committed; exactly-once answers are done when staged, counted when their
transaction commits."""

from __future__ import annotations

from kafka import TopicPartition

from tests.kafka.test_publish import RefusingProducer
from worker.kafka.committer import Committer
from worker.kafka.loop import WorkerStats
from worker.kafka.offsets import OffsetTracker
from worker.kafka.publish import Answers, Request, RequestId
from worker.kafka.records import Source
from worker.messages import Summary
from worker.settings.kafka import KafkaSettings

A, B = TopicPartition("in", 0), TopicPartition("in", 1)


class CommittingConsumer:
    def __init__(self) -> None:
        self.commits: list[dict[TopicPartition, int]] = []
        self.metadata: list[dict[TopicPartition, str]] = []

    def commit(self, offsets, metadata=None) -> None:
        self.commits.append(dict(offsets))
        self.metadata.append(dict(metadata or {}))


def _committer(**settings) -> tuple[Committer, CommittingConsumer, OffsetTracker, WorkerStats]:
    consumer, tracker, stats = CommittingConsumer(), OffsetTracker(), WorkerStats()
    kafka = KafkaSettings(**{"commit_interval_s": 0.0, **settings})
    answers = Answers("out", "dlq", "m", 1_000_000)
    return Committer(kafka, consumer, RefusingProducer(1_000_000), answers, tracker, stats), consumer, tracker, stats


def _answer(committer: Committer, tracker: OffsetTracker, tp: TopicPartition, offset: int) -> None:
    epoch = tracker.track(tp, offset)
    request = Request(RequestId(tp, offset, epoch), Source(tp.topic, tp.partition, offset, b"k"), b"{}", "r",
                      "summary")
    committer.answer(*committer.publisher.answers.summary(request, Summary(id="r", summary="s", model="m",
                                                                           prompt_tokens=1, output_tokens=1)))


def test_acknowledged_answers_are_committed_but_never_for_a_partition_being_revoked():
    committer, consumer, tracker, stats = _committer()
    for tp in (A, B):
        tracker.assign(tp)
        _answer(committer, tracker, tp, 0)
    committer.handle_acks()
    assert stats.summaries == 2 and not committer.busy
    committer.maybe_commit(force=False, revoking={B})
    assert consumer.commits == [{A: 1}] and stats.commits == 1
    committer.maybe_commit(force=True, revoking=set())
    assert consumer.commits[-1] == {B: 1}  # A did not move; B, no longer revoking, is committed now
