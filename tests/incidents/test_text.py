from __future__ import annotations

import msgspec

from worker.incidents import Alarm
from worker.messages import IncidentEvent

from tests.incidents.conftest import chain, play


def test_text_summary_names_root_elements_count_and_start_time(make_room):
    room = make_room(chain("dev-1", "dev-2", "dev-3"), [("A3", "A7"), ("A3", "A9")])
    alarms = [Alarm("dev-1", "A3", 11640.0 + i, input={"topic": "t", "partition": 0, "offset": i}) for i in range(3)]
    alarms += [Alarm("dev-2", "A7", 11650.0, input={"topic": "t", "partition": 0, "offset": 3}),
               Alarm("dev-3", "A9", 11651.0, input={"topic": "t", "partition": 0, "offset": 4})]
    events = play(room, alarms)
    assert events[-1].summary.startswith("dev-1: A3 with A7, A9 on 3 elements, 5 alarms since 03:14 UTC; "
                                         "root cause A3 on dev-1 (rule: A3 causes A7, A9; upstream, earliest)")
    assert events[-1].root_cause.input == {"topic": "t", "partition": 0, "offset": 0}


def test_text_event_round_trips_through_json_schema_type(make_room):
    events = play(make_room(), [Alarm("a", "LOS", 0.0, input={"topic": "t", "partition": 1, "offset": 9})])
    for event in events:
        assert msgspec.json.decode(msgspec.json.encode(event), type=IncidentEvent) == event
    assert msgspec.to_builtins(events[0])["inputs"] == [{"topic": "t", "partition": 1, "offset": 9}]
