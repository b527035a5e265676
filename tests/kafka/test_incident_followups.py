"""The model's text of new incidents in the incident loop, without a broker: the loop's rooms, outbox and
follow-ups driven directly, with a fake summarizer on its own results channel."""

from __future__ import annotations

import collections
import logging

from kafka import TopicPartition

from worker.dispatch import Backpressure
from worker.facts import extract_facts
from worker.incidents import Alarm, RoomConfig
from worker.kafka.incident_followups import FOLLOW_UPS, FollowUps, model_text
from worker.kafka.incident_loop import IncidentLoop, incident_kafka_settings
from worker.kafka.incident_partition import InputRef, PartitionRoom
from worker.messages import Summary
from worker.prompts import answer_opening, with_opening
from worker.settings.incidents import IncidentSettings
from worker.settings.kafka import KafkaSettings

TP = TopicPartition("alarms", 0)


class FakeSummarizer:
    """Answers each record at once with its grounded opening followed by `continuation`; results per caller,
    as the Summarizer keeps them."""

    def __init__(self, continuation: str = " The microwave hop to dev-2 fades.", capacity: int = 100) -> None:
        self.continuation = continuation
        self.capacity = capacity
        self.boxes: dict = collections.defaultdict(list)
        self.submitted: list = []

    def submit(self, request_id, record, *, caller=None) -> None:
        if len(self.submitted) >= self.capacity:
            raise Backpressure("full")
        self.submitted.append((request_id, record, caller))
        facts = extract_facts(record)
        text = with_opening(answer_opening(record, facts), self.continuation)
        self.boxes[caller].append((request_id, Summary(id=record.id, summary=text, model="fake", prompt_tokens=1,
                                                       output_tokens=1, facts=facts)))

    def poll(self, timeout: float, *, caller=None):
        out, self.boxes[caller] = self.boxes[caller], []
        return out


def _loop(follow_ups: int = 4, state_topic: str | None = None) -> IncidentLoop:
    incidents = IncidentSettings(topic="incidents", follow_ups=follow_ups, state_topic=state_topic)
    kafka = incident_kafka_settings(KafkaSettings(group_id="noc", processing_guarantee="exactly-once"), incidents)
    return IncidentLoop(kafka, incidents, RoomConfig(late_s=0.0, update_interval_s=10.0))


def _feed(loop: IncidentLoop, alarms: list[Alarm]) -> None:
    part = loop.parts[TP]
    for alarm in alarms:
        loop._emit(TP, part.feed(alarm.input.offset, [alarm]))
        loop._take_follow_ups()


def _alarm(element: str, alarm_type: str, time: float, offset: int) -> Alarm:
    return Alarm(element, alarm_type, time, input=InputRef("alarms", 0, offset))


def _events(loop: IncidentLoop) -> list:
    return [out.event for out in loop._outbox if out.event is not None]


def _storm() -> list[Alarm]:
    """Two incidents (dev-1, dev-9: no topology, one per element), repeats and a later alarm of each."""
    return [_alarm("dev-1", "A1", 0.0, 0), _alarm("dev-9", "A4", 0.5, 1), _alarm("dev-1", "A2", 1.0, 2),
            _alarm("dev-1", "A1", 2.0, 3), _alarm("dev-9", "A5", 20.0, 4), _alarm("dev-1", "A3", 21.0, 5)]


def _with_parts(loop: IncidentLoop) -> IncidentLoop:
    loop.parts[TP] = PartitionRoom(TP, loop.config, snapshots=bool(loop.state_topic))
    return loop


def test_follow_up_update_carries_the_models_text_no_inputs_and_sequences_stay_contiguous():
    summarizer = FakeSummarizer()
    loop = _loop()
    assert loop.use_summarizer(summarizer, answer_opening)
    _with_parts(loop)
    _feed(loop, _storm())
    loop._emit(TP, loop.parts[TP].close())
    events = _events(loop)
    assert {caller for _, _, caller in summarizer.submitted} == {FOLLOW_UPS}
    assert len(summarizer.submitted) == 2  # one request per incident, on its open
    follow = [e for e in events if e.model_summary is not None]
    assert len(follow) == 2
    for event in follow:
        assert event.event == "update" and event.inputs == [] and event.correlatedNotifications == []
        # the model's words only: the grounded opening (which quotes the event's summary) is left out
        assert event.model_summary == "The microwave hop to dev-2 fades."
    by_incident = collections.defaultdict(list)
    for event in events:
        by_incident[event.incident_id].append(event)
    for incident_events in by_incident.values():
        assert [e.sequence for e in incident_events] == list(range(1, len(incident_events) + 1))
        assert [e.event for e in incident_events][:2] == ["open", "update"]  # the follow-up right after the open
        assert incident_events[-1].event == "resolve"
    listed = collections.Counter(ref.offset for e in events for ref in e.inputs)
    assert listed == {offset: 1 for offset in range(6)}  # every input listed exactly once
    assert loop.follow_ups.stats.written == 2 and loop.follow_ups.in_flight == 0


def test_no_follow_up_event_when_the_model_writes_nothing_beyond_the_opening():
    summarizer = FakeSummarizer(continuation="")
    loop = _loop()
    loop.use_summarizer(summarizer, answer_opening)
    _with_parts(loop)
    _feed(loop, _storm())
    assert len(summarizer.submitted) == 2
    assert not any(e.model_summary for e in _events(loop))
    assert loop.follow_ups.stats.empty == 2 and loop.follow_ups.stats.written == 0


def test_a_full_follow_up_bound_drops_and_counts(caplog):
    summarizer = FakeSummarizer()
    summarizer.poll = lambda timeout, *, caller=None: []  # nothing comes back: the requests stay in flight
    loop = _loop(follow_ups=1)
    loop.use_summarizer(summarizer, answer_opening)
    _with_parts(loop)
    with caplog.at_level(logging.WARNING, logger="worker.kafka.incident_followups"):
        _feed(loop, [_alarm("dev-1", "A1", 0.0, 0), _alarm("dev-2", "A1", 0.1, 1), _alarm("dev-3", "A1", 0.2, 2)])
    assert len(summarizer.submitted) == 1
    assert loop.follow_ups.stats.requested == 1 and loop.follow_ups.stats.dropped == 2
    assert "went without one since start" in caplog.text
    assert [e.event for e in _events(loop)] == ["open"] * 3  # the incidents never wait for the model


def test_the_summarizers_backpressure_drops_and_counts():
    summarizer = FakeSummarizer(capacity=0)
    loop = _loop()
    loop.use_summarizer(summarizer, answer_opening)
    _with_parts(loop)
    _feed(loop, [_alarm("dev-1", "A1", 0.0, 0)])
    assert loop.follow_ups.stats.dropped == 1 and loop.follow_ups.in_flight == 0


def test_follow_ups_need_a_state_topic_and_a_bound():
    # recomputed rooms could not know of follow-ups
    assert not _loop(state_topic="none").use_summarizer(FakeSummarizer(), answer_opening)
    assert not _loop(follow_ups=0).use_summarizer(FakeSummarizer(), answer_opening)
    at_least_once = IncidentSettings(topic="incidents")
    kafka = incident_kafka_settings(KafkaSettings(group_id="noc", processing_guarantee="at-least-once"), at_least_once)
    assert not IncidentLoop(kafka, at_least_once, RoomConfig()).use_summarizer(FakeSummarizer(), answer_opening)


def test_a_rooms_fallback_to_recomputing_sends_no_follow_ups():
    """The state topic was refused at start (state_topic None): the partitions recompute, so no requests."""
    summarizer = FakeSummarizer()
    loop = _loop()
    loop.use_summarizer(summarizer, answer_opening)
    loop.state_topic = None
    _with_parts(loop)
    _feed(loop, _storm())
    assert summarizer.submitted == [] and not any(e.model_summary for e in _events(loop))


def test_a_revoked_partitions_results_are_dropped_and_an_incident_resolved_meanwhile_gets_none():
    summarizer = FakeSummarizer()
    held: list = []
    real_poll = summarizer.poll
    summarizer.poll = lambda timeout, *, caller=None: held.pop() if held else []
    loop = _loop()
    loop.use_summarizer(summarizer, answer_opening)
    _with_parts(loop)
    _feed(loop, [_alarm("dev-1", "A1", 0.0, 0)])
    loop._emit(TP, loop.parts[TP].close())  # resolved before the model's text is back
    held.append(real_poll(0.0, caller=FOLLOW_UPS))
    loop._take_follow_ups()
    assert [e.event for e in _events(loop)] == ["open", "resolve"]
    assert loop.follow_ups.stats.stale == 1
    _feed(loop, [_alarm("dev-2", "A1", 100.0, 1)])
    loop._forget({TP})
    held.append(real_poll(0.0, caller=FOLLOW_UPS))
    assert FollowUps.take(loop.follow_ups) == [] and loop.follow_ups.stats.stale == 2


def test_model_text_is_none_for_the_opening_alone():
    summarizer = FakeSummarizer(continuation=" .")
    loop = _loop()
    loop.use_summarizer(summarizer, answer_opening)
    _with_parts(loop)
    _feed(loop, [_alarm("dev-1", "A1", 0.0, 0)])
    _, record, _ = summarizer.submitted[0]
    opening = answer_opening(record, extract_facts(record))
    summary = Summary(id=record.id, summary=opening, model="m", prompt_tokens=1, output_tokens=0,
                      facts=extract_facts(record))
    assert model_text(record, summary, answer_opening) is None
    more = Summary(id=record.id, summary=opening + " More.", model="m", prompt_tokens=1, output_tokens=1,
                   facts=extract_facts(record))
    assert model_text(record, more, answer_opening) == "More."
    assert loop.follow_ups.stats.empty == 1
