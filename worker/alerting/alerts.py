"""An incident event as one Alertmanager alert (the `postableAlert` of Alertmanager's API v2).

Alertmanager identifies an alert by its label set, so the labels name the incident and what operators
route on; everything that changes while the incident grows is an annotation. A root cause or severity
that changes mid-incident changes the label set: the sender resolves the old alert (`sender.py`).
Pure functions: no I/O, no clock but the `now` given.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from worker.control_chars import clean_text
from worker.messages import IncidentEvent

ALERTNAME = "TelesumIncident"
# A firing alert says it ends this many resend intervals after it was posted, unless posted again
# (Prometheus' rule: 4 x its resend delay), so an alert whose source stopped resolves on its own.
ENDS_AFTER_RESENDS = 4
# Names of elements listed in the `elements` annotation; the count says how many there are.
_ELEMENTS_SHOWN = 20
# An annotation is text for a page or a chat message: a runaway one is cut.
_ANNOTATION_CHARS = 4000

Labels = tuple[tuple[str, str], ...]   # sorted (name, value) pairs: an alert's identity in Alertmanager


def labels_of(event: IncidentEvent, severity: str, static: dict[str, str]) -> Labels:
    """The labels that identify an incident's alert: the incident, its root cause, how it was grouped."""
    root = event.root_cause
    labels = {**static, "alertname": ALERTNAME, "incident_id": event.incident_id,
              "root_element": clean_text(root.element), "root_alarm_type": clean_text(root.alarm_type),
              "grouping": event.grouping, "severity": severity}
    return tuple(sorted(labels.items()))


def annotations_of(event: IncidentEvent, model_summary: str | None) -> dict[str, str]:
    """What an operator reads: the grounded summary, why this root cause, the counts, the model's text."""
    root = event.root_cause
    shown = ", ".join(event.elements[:_ELEMENTS_SHOWN]) + (" …" if len(event.elements) > _ELEMENTS_SHOWN else "")
    out = {"summary": event.summary,
           "root_cause": f"{root.alarm_type} on {root.element} at {root.time}",
           "root_cause_reason": root.reason,
           "alarms": str(event.alarms), "active": str(event.active),
           "elements": f"{len(event.elements)}: {shown}",
           "counts": ", ".join(f"{kind}={n}" for kind, n in sorted(event.counts.items(), key=lambda kv: -kv[1])),
           "first_alarm": event.first_time, "last_alarm": event.last_time}
    if model_summary:
        out["description"] = model_summary
    if event.merged_into:
        out["merged_into"] = event.merged_into
    return {k: clean_text(v)[:_ANNOTATION_CHARS] for k, v in out.items()}


def parse_time(text: str) -> datetime:
    """An event's ISO UTC time ("2026-12-02T03:14:02Z", fractions allowed) as an aware datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)


def iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def postable(labels: Labels, annotations: dict[str, str], starts_at: datetime, ends_at: datetime | None,
             now: datetime, resend_s: float) -> dict:
    """The JSON object Alertmanager takes. Firing (`ends_at` None): it ends ENDS_AFTER_RESENDS resends from
    now unless posted again. Resolved: it ended at `ends_at`, never later than now. Times the alarms
    carry ahead of this clock are held to it (Alertmanager refuses an end before the start)."""
    starts = min(starts_at, now)
    ends = now + timedelta(seconds=ENDS_AFTER_RESENDS * resend_s) if ends_at is None else max(starts, min(ends_at, now))
    return {"labels": dict(labels), "annotations": annotations, "startsAt": iso(starts), "endsAt": iso(ends)}
