from __future__ import annotations

import msgspec

from worker.incidents import Alarm
from worker.incidents.text import console_lines
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


def test_text_console_lines_one_line_per_update_summary_under_open_and_resolve(make_room):
    room = make_room(chain("dev-1", "dev-2"), [("A1", "A2")], update_interval_s=60.0)
    alarms = [Alarm("dev-1", "A1", 11640.0, input={"topic": "t", "partition": 0, "offset": 0})]
    alarms += [Alarm("dev-2", "A2", 11642.0 + i, input={"topic": "t", "partition": 0, "offset": 1 + i})
               for i in range(3)]
    events = play(room, alarms + [Alarm("dev-9", "A9", 11800.0, input={"topic": "t", "partition": 0, "offset": 4})])
    events = [e for e in events if e.root_cause.element == "dev-1"]
    shown = {e.event: console_lines(e) for e in events}
    assert set(shown) == {"open", "update", "resolve"}
    assert len(shown["update"]) == 1 and len(shown["open"]) == len(shown["resolve"]) == 2
    update = shown["update"][0]
    assert update.startswith("update  inc-") and "root A1 on dev-1" in update
    assert "4 alarms on 2 elements (A1 1, A2 3)" in update and update.endswith("+3 inputs")
    assert shown["resolve"][1].strip() == events[-1].summary and "+" not in shown["resolve"][0]
