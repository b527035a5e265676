"""The model's text of an incident as a later update: `room.follow_up` and `incident_record`."""

from __future__ import annotations

from tests.incidents.conftest import owners, play
from worker.incidents import Alarm
from worker.incidents.snapshot import restore, snapshot
from worker.incidents.text import console_lines, incident_record


def _sequences(events, incident_id):
    return [e.sequence for e in events if e.incident_id == incident_id]


def test_follow_up_is_an_update_with_the_next_sequence_no_inputs_and_the_models_text(make_room):
    room = make_room(late_s=0.0, update_interval_s=10.0)
    events = play(room, [Alarm("a", "LOS", 0.0, input=0), Alarm("a", "LOS2", 1.0, input=1)], close=False)
    assert [e.event for e in events] == ["open"]
    incident_id = events[0].incident_id
    follow = room.follow_up(incident_id, "  a: LOS on a. The link to b is down.  ")
    assert follow.event == "update" and follow.sequence == 2
    assert follow.model_summary == "a: LOS on a. The link to b is down."
    assert follow.inputs == [] and follow.correlatedNotifications == [] and follow.absorbed == []
    assert follow.summary.startswith("a: LOS")  # the grounded summary, as every event carries it
    events.append(follow)
    events += play(room, [Alarm("a", "LOS3", 30.0, input=2)], close=True)
    assert _sequences(events, incident_id) == list(range(1, len(_sequences(events, incident_id)) + 1))
    assert sorted(owners(events)) == [0, 1, 2]  # every input listed once; the follow-up lists none
    assert [e.model_summary is not None for e in events] == [e is follow for e in events]


def test_follow_up_of_a_resolved_incident_or_an_empty_text_is_nothing(make_room):
    room = make_room(late_s=0.0)
    events = play(room, [Alarm("a", "LOS", 0.0, input=0)], close=False)
    incident_id = events[0].incident_id
    assert room.follow_up(incident_id, "   ") is None
    room.close()
    assert room.follow_up(incident_id, "the model's text") is None
    assert room.follow_up("inc-unknown", "the model's text") is None


def test_follow_up_sequence_is_kept_in_the_snapshot(make_room):
    room = make_room(late_s=0.0)
    incident_id = play(room, [Alarm("a", "LOS", 0.0, input=0)], close=False)[0].incident_id
    assert room.follow_up(incident_id, "text").sequence == 2
    again = restore(room.config, snapshot(room))
    resolved = again.close()
    assert [(e.event, e.sequence) for e in resolved] == [("resolve", 3)]


def test_incident_record_quotes_the_grounded_summary_first_and_gives_the_incident(make_room):
    room = make_room(late_s=0.0)
    event = play(room, [Alarm("a", "LOS", 0.0, input=0), Alarm("a", "FAN", 0.5, input=1)], close=False)[0]
    record = incident_record(event)
    lines = record.body.splitlines()
    assert lines[0] == event.summary
    assert record.id == f"{event.incident_id}#{event.sequence}" and record.kind == "text"
    assert record.attributes["element"] == "a"
    assert any(line.startswith("root cause: LOS on a") for line in lines)
    assert any(line.startswith("elements (1): a") for line in lines)
    assert any("first alarm 1970-01-01T00:00:00Z" in line for line in lines)


def test_console_lines_show_the_models_text(make_room):
    room = make_room(late_s=0.0)
    incident_id = play(room, [Alarm("a", "LOS", 0.0, input=0)], close=False)[0].incident_id
    lines = console_lines(room.follow_up(incident_id, "the model says"))
    assert lines[-1].strip() == "model: the model says"
