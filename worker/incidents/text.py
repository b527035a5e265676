"""An incident's grounded one-line opening, written from its alarms (never by the model), its event, and
the record that asks the model for its text (`incident_record`)."""

from __future__ import annotations

from datetime import datetime, timezone
from functools import lru_cache
from typing import Any

from worker.incidents.alarms import Alarm
from worker.incidents.incident import Incident
from worker.messages import IncidentEvent, IncidentEventKind, RootCause, TelemetryRecord

_TYPES_SHOWN = 3


def iso(time: float) -> str:
    return _iso_second(int(time // 1))


@lru_cache(maxsize=8192)  # an event names four or five times, mostly the same few seconds
def _iso_second(second: int) -> str:
    return datetime.fromtimestamp(second, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _clock(time: float) -> str:
    return iso(time)[11:16] + " UTC"


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"


def summary_line(incident: Incident, root: Alarm, reason: str, kind: IncidentEventKind,
                 merged_into: str | None, now: float) -> str:
    """'dev-117: A3 and 2 more types on 12 elements, 43 alarms since 03:14 UTC; root cause A3 on dev-117
    (rule: A3 causes A7, A9; upstream, earliest)'."""
    others = [t for t, _ in incident.counts.most_common() if t != root.alarm_type]
    kinds = root.alarm_type
    if others:
        shown = ", ".join(others[:_TYPES_SHOWN])
        more = f" and {len(others) - _TYPES_SHOWN} more" if len(others) > _TYPES_SHOWN else ""
        kinds += f" with {shown}{more}"
    n_el = len(incident.elements)
    where = f" on {n_el} elements" if n_el > 1 else ""
    line = (f"{root.element}: {kinds}{where}, {incident.alarms} alarm{'s' if incident.alarms != 1 else ''} "
            f"since {_clock(incident.first_time)}; root cause {root.alarm_type} on {root.element} ({reason})")
    if kind == "resolve":
        if merged_into:
            line += f"; merged into {merged_into}"
        elif incident.all_cleared():
            line += f"; all alarms cleared, resolved after {_duration(incident.last_time - incident.first_time)}"
        else:
            line += f"; quiet since {_clock(incident.last_time)}, resolved"
    return line


def build_event(incident: Incident, root: Alarm, reason: str, grouping: str, kind: IncidentEventKind,
                inputs: list[Any], absorbed: list[str], now: float, merged_into: str | None = None,
                model_summary: str | None = None) -> IncidentEvent:
    root_input = root.input
    correlated = [i for i in inputs if i is not root_input and i != root_input]
    return IncidentEvent(
        event=kind, incident_id=incident.incident_id, sequence=incident.sequence, time=iso(now),
        root_cause=RootCause(root.element, root.alarm_type, iso(root.time), reason, root_input),
        summary=summary_line(incident, root, reason, kind, merged_into, now), grouping=grouping,
        elements=sorted(incident.elements), counts=dict(incident.counts), alarms=incident.alarms,
        active=incident.active, first_time=iso(incident.first_time), last_time=iso(incident.last_time),
        inputs=inputs, correlatedNotifications=correlated, merged_into=merged_into, absorbed=absorbed,
        model_summary=model_summary)


_ELEMENTS_LISTED = 20


def incident_record(event: IncidentEvent) -> TelemetryRecord:
    """The incident as a record for the model: a text whose first line is the event's grounded summary
    (so the summary's grounded opening quotes it), then the root cause and why, the elements, the
    counts per type and the time span. Its id is `<incident id>#<sequence>`."""
    root = event.root_cause
    elements = ", ".join(event.elements[:_ELEMENTS_LISTED])
    if len(event.elements) > _ELEMENTS_LISTED:
        elements += f" and {len(event.elements) - _ELEMENTS_LISTED} more"
    counts = ", ".join(f"{t} {n}" for t, n in sorted(event.counts.items(), key=lambda item: (-item[1], item[0])))
    body = "\n".join([
        event.summary,
        f"root cause: {root.alarm_type} on {root.element} at {root.time} ({root.reason})",
        f"elements ({len(event.elements)}): {elements}",
        f"alarms per type: {counts}",
        f"alarms: {event.alarms}, still active: {event.active}",
        f"first alarm {event.first_time}, last alarm {event.last_time}",
    ])
    return TelemetryRecord(id=f"{event.incident_id}#{event.sequence}", kind="text", body=body,
                           source="incidents", timestamp=event.time, attributes={"element": root.element})


def console_lines(event: IncidentEvent) -> list[str]:
    """An event as an operator's console lists it (`scripts/demo.sh`): one line of what changed, and for
    an `open`, a `resolve` or a merge the grounded summary under it.
    'update  inc-45cbbd72 #3   root A1 on dev-1   37 alarms on 13 elements (A1 1, A2 18, A3 18)   +18 inputs'."""
    counts = ", ".join(f"{t} {n}" for t, n in sorted(event.counts.items()))
    n_el = len(event.elements)
    head = (f"{event.event:<8}{event.incident_id[:12]} #{event.sequence:<3} "
            f"root {event.root_cause.alarm_type} on {event.root_cause.element}   "
            f"{event.alarms} alarm{'s' if event.alarms != 1 else ''} on {n_el} element{'s' if n_el != 1 else ''} "
            f"({counts})")
    if event.inputs:
        head += f"   +{len(event.inputs)} input{'s' if len(event.inputs) != 1 else ''}"
    if event.absorbed:
        head += f"   absorbed {', '.join(event.absorbed)}"
    lines = [head]
    if event.event != "update" or event.merged_into or event.absorbed:
        lines.append(" " * 8 + event.summary)
    if event.model_summary:
        lines.append(" " * 8 + "model: " + event.model_summary)
    return lines
