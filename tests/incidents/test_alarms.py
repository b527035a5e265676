from __future__ import annotations

import json
from pathlib import Path

from worker.incidents.alarms import Alarm, AlarmState, alarm_from_record, alarm_type_of
from worker.messages import Facts, TelemetryRecord

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "inputs"


def ves_record(severity: str = "MAJOR", **header) -> TelemetryRecord:
    body = json.loads((FIXTURES / "ves_fault.json").read_text())
    body["event"]["faultFields"]["eventSeverity"] = severity
    body["event"]["commonEventHeader"].update(header)
    return TelemetryRecord(id="r1", kind="ves", body=body)


def test_alarm_state_repeat_of_raised_key_folded_and_counted():
    state = AlarmState()
    first, new = state.apply(Alarm("ne-1", "LOS", 10.0, input=1))
    again, repeat_new = state.apply(Alarm("ne-1", "LOS", 12.0, input=2))
    assert new and not repeat_new and again is first
    assert first.count == 2 and first.last_time == 12.0
    assert [s.key for s in state.active()] == [("ne-1", "LOS")]


def test_alarm_state_clear_ends_standing_alarm_and_unknown_clear_is_none():
    state = AlarmState()
    state.apply(Alarm("ne-1", "LOS", 10.0))
    held, new = state.apply(Alarm("ne-1", "LOS", 20.0, cleared=True))
    assert held.cleared and not new and state.active() == []
    assert state.apply(Alarm("ne-9", "LOS", 20.0, cleared=True)) == (None, False)


def test_alarm_state_raise_after_clear_starts_new_alarm():
    state = AlarmState()
    state.apply(Alarm("ne-1", "LOS", 10.0))
    state.apply(Alarm("ne-1", "LOS", 20.0, cleared=True))
    held, new = state.apply(Alarm("ne-1", "LOS", 30.0))
    assert new and held.count == 1 and not held.cleared


def test_alarm_from_record_ves_fault_reads_source_condition_severity_and_start():
    alarm = alarm_from_record(ves_record(), None, input={"topic": "t", "partition": 0, "offset": 7})
    assert (alarm.element, alarm.alarm_type, alarm.severity, alarm.cleared) == ("gnb-du-0412", "28", "major", False)
    assert alarm.time == 1796135952.254811
    assert alarm.input == {"topic": "t", "partition": 0, "offset": 7}
    assert alarm.text.startswith("Fronthaul link down")


def test_alarm_from_record_ves_normal_severity_clears_at_last_epoch():
    alarm = alarm_from_record(ves_record("NORMAL", lastEpochMicrosec=1796135999000000), None)
    assert alarm.cleared and alarm.time == 1796135999.0 and alarm.input == "r1"


def test_alarm_from_record_syslog_up_clears_the_down_alarm_key():
    record = TelemetryRecord(id="s", kind="syslog", body="...")
    down = alarm_from_record(record, Facts(entity="rtr-1", problem="Interface Gi0/1 changed state to down",
                                           first_seen="2026-12-01T03:14:00Z", severity="major"))
    up = alarm_from_record(record, Facts(entity="rtr-1", problem="Interface Gi0/1 changed state to up",
                                         first_seen="2026-12-01T03:20:00Z"))
    assert not down.cleared and up.cleared and down.key == up.key
    assert alarm_type_of("LOS alarm cleared") == alarm_type_of("LOS alarm raised") == "LOS alarm"


def test_alarm_from_record_envelope_clear_attribute_clears():
    record = TelemetryRecord(id="e", kind="text", body="x", attributes={"clear": "true"})
    alarm = alarm_from_record(record, Facts(entity="ne-2", problem="fan failure", first_seen="2026-12-01T03:14:00Z"))
    assert alarm.cleared and alarm.alarm_type == "fan"


def test_alarm_from_record_without_element_or_time_returns_none():
    record = TelemetryRecord(id="e", kind="text", body="x")
    assert alarm_from_record(record, None) is None
    assert alarm_from_record(record, Facts(problem="fan failure", first_seen="2026-12-01T03:14:00Z")) is None
    assert alarm_from_record(record, Facts(entity="ne", problem="fan")) is None
    assert alarm_from_record(record, Facts(entity="ne", problem="fan"), default_time=5.0).time == 5.0
    measurement = TelemetryRecord(id="m", kind="ves", body={"event": {"commonEventHeader": {"domain": "measurement"}}})
    assert alarm_from_record(measurement, None) is None
