"""A partition that read MAX_READ_AHEAD records past its oldest unanswered one is paused until that one
is answered (no broker: a stand-in consumer); the other partitions read on."""

from __future__ import annotations

from kafka import TopicPartition

from worker.kafka import loop
from worker.kafka.loop import KafkaWorker
from worker.settings.kafka import KafkaSettings

A, B = TopicPartition("in", 0), TopicPartition("in", 1)


class _Consumer:
    def __init__(self) -> None:
        self.stuck: dict = {}
        self._paused: set[TopicPartition] = set()

    def assignment(self) -> set[TopicPartition]:
        return {A, B}

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def pause(self, partitions) -> None:
        self._paused |= set(partitions)

    def resume(self, partitions) -> None:
        self._paused -= set(partitions)


def test_read_ahead_past_a_slow_record_pauses_only_its_partition_until_it_is_answered(monkeypatch):
    monkeypatch.setattr(loop, "MAX_READ_AHEAD", 4)
    consumer = _Consumer()
    worker = KafkaWorker(KafkaSettings(), summarizer=None, model_name="fake", max_in_flight=8,
                         consumer=consumer, producer=object())
    epoch = worker.tracker.assign(A)
    worker.tracker.assign(B)
    for offset in range(4):  # offset 0 is slow; 1..3 answered
        worker.tracker.track(A, offset)
    for offset in (1, 2, 3):
        worker.tracker.mark_done(A, offset, epoch)
    worker._apply_backpressure()
    assert consumer.paused() == {A}
    worker._apply_backpressure()
    assert consumer.paused() == {A}
    worker.tracker.mark_done(A, 0, epoch)  # the slow record is answered: its partition reads on
    worker._apply_backpressure()
    assert consumer.paused() == set()
