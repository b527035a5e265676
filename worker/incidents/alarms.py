"""Alarm state: one alarm per input, raise and clear, repeats folded under a reduction key.

An `Alarm` is what one input says: an element, an alarm type, its own event time, a severity, and
whether it clears. The reduction key is (element, alarm type): a repeat of a raised key is counted on
the standing alarm, a clear ends it. `alarm_from_record` reads a VES fault event directly and any other
format through its facts (entity, problem, first_seen).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from worker.facts.common import epoch_unit, parse_iso
from worker.facts.ves import VesError, events_of
from worker.messages import Facts, TelemetryRecord

# Words that say a syslog or log problem is over ("changed state to up", "alarm cleared"); they are
# dropped from the alarm type too, so the clear and its raise share one reduction key.
_CLEAR_WORDS = re.compile(r"\b(cleared|clear|up|restored|recovered|resolved|ok)\b\.?\s*$", re.I)
_STATE_WORDS = re.compile(r"\b(cleared|clear|up|down|restored|recovered|resolved|raised|set|ok|failed|failure)\b",
                          re.I)
# Envelope attributes that mark an input as a clear (`{"attributes": {"clear": "true"}}`).
CLEAR_ATTRIBUTES = ("clear", "cleared", "alarm_cleared")
_TRUE = ("1", "true", "yes", "on", "cleared")


@dataclass(frozen=True, slots=True)
class Alarm:
    """One input's alarm. `input` is the caller's opaque reference (e.g. {topic, partition, offset});
    `time` is the alarm's own event time in epoch seconds."""

    element: str
    alarm_type: str
    time: float
    severity: str = "major"
    cleared: bool = False
    input: Any = None
    text: str = ""

    @property
    def key(self) -> tuple[str, str]:
        """The reduction key: repeats of one alarm type on one element fold into one standing alarm."""
        return (self.element, self.alarm_type)


@dataclass(slots=True)
class StandingAlarm:
    """A raised key: its first alarm, how often it was repeated, when last, whether it cleared."""

    first: Alarm
    last_time: float
    count: int = 1
    cleared: bool = False
    severity: str = "major"

    @property
    def key(self) -> tuple[str, str]:
        return self.first.key


class AlarmState:
    """The standing alarms by reduction key. Only from the room's thread."""

    def __init__(self) -> None:
        self.standing: dict[tuple[str, str], StandingAlarm] = {}

    def __len__(self) -> int:
        return len(self.standing)

    def get(self, key: tuple[str, str]) -> StandingAlarm | None:
        return self.standing.get(key)

    def apply(self, alarm: Alarm) -> tuple[StandingAlarm | None, bool]:
        """Fold one alarm in: (its standing alarm, whether it is a new raise). A clear of an unknown key
        gives (None, False); a raise of a cleared key starts it again as new."""
        held = self.standing.get(alarm.key)
        if alarm.cleared:
            if held is None:
                return None, False
            held.cleared = True
            held.last_time = max(held.last_time, alarm.time)
            return held, False
        if held is None or held.cleared:
            held = StandingAlarm(alarm, alarm.time, severity=alarm.severity)
            self.standing[alarm.key] = held
            return held, True
        held.count += 1
        held.last_time = max(held.last_time, alarm.time)
        return held, False

    def forget(self, key: tuple[str, str]) -> None:
        self.standing.pop(key, None)

    def active(self) -> list[StandingAlarm]:
        """The raised, not cleared alarms."""
        return [s for s in self.standing.values() if not s.cleared]


# The count the syslog facts append to a problem ("link down (once)", "(12 times)"): not part of its type.
_COUNT = re.compile(r"\s*\((?:once|\d+ times)\)\s*$")


def alarm_type_of(problem: str) -> str:
    """A problem text as an alarm type: state words and the facts' count dropped, so a raise and its
    clear, and one line and a repeat, match."""
    problem = _COUNT.sub("", problem)
    return re.sub(r"\s+", " ", _STATE_WORDS.sub("", problem)).strip(" ,.:;-") or problem.strip()


def alarm_from_record(record: TelemetryRecord, facts: Facts | None, *, input: Any = None,
                      default_time: float | None = None) -> Alarm | None:
    """The alarm a record carries, or None when it carries none (not a fault, no element or no type).

    VES: the first fault event's `sourceName`, `alarmCondition`, `eventSeverity` (NORMAL clears) and
    `startEpochMicrosec` (a clear: `lastEpochMicrosec`). Other formats: the facts' entity, problem and
    first_seen; a problem ending in "cleared"/"up" or an envelope attribute `clear=true` clears.
    `input` defaults to the record's id; `default_time` is used when the record gives no time."""
    ref = record.id if input is None else input
    if record.kind == "ves" and isinstance(record.body, dict | str):
        alarm = _ves_alarm(record.body, ref)
        if alarm is not None:
            return alarm
    if facts is None or not facts.entity or not facts.problem:
        return None
    when = parse_iso(facts.first_seen) if facts.first_seen else None
    if when is None and record.timestamp:
        when = parse_iso(record.timestamp)
    time = when.timestamp() if when is not None else default_time
    if time is None:
        return None
    flag = next((record.attributes[k] for k in CLEAR_ATTRIBUTES if k in record.attributes), None)
    cleared = (flag is not None and flag.strip().lower() in _TRUE) or bool(_CLEAR_WORDS.search(facts.problem))
    return Alarm(facts.entity, alarm_type_of(facts.problem), time, facts.severity or "major", cleared, ref,
                 facts.problem)


def _ves_alarm(body: dict | str, ref: Any) -> Alarm | None:
    try:
        events = events_of(body)
    except VesError:
        return None
    event = events[0]
    header, fields = event.get("commonEventHeader"), event.get("faultFields")
    if not isinstance(header, dict) or not isinstance(fields, dict):
        return None
    element = header.get("sourceName") or header.get("reportingEntityName")
    condition = fields.get("alarmCondition")
    if not element or condition in (None, ""):
        return None
    raw = str(fields.get("eventSeverity", "")).upper()
    cleared = raw == "NORMAL"
    stamp = epoch_unit(header.get("lastEpochMicrosec") if cleared else header.get("startEpochMicrosec"))
    if stamp is None:
        stamp = epoch_unit(header.get("startEpochMicrosec"))
    if stamp is None:
        return None
    severity = {"CRITICAL": "critical", "MAJOR": "major", "MINOR": "minor", "WARNING": "warning",
                "NORMAL": "info"}.get(raw, "major")
    return Alarm(str(element), str(condition), stamp[1], severity, cleared, ref,
                 str(fields.get("specificProblem", "")))
