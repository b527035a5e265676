"""Facts from a VES 7.x event: fault, measurement, heartbeat, and any other domain by its header."""

from __future__ import annotations

import json
from typing import Any

from worker.facts.common import clip, epoch_micros_to_iso, worst_severity
from worker.messages import Facts

REQUIRED_HEADER_FIELDS = (
    "domain", "eventId", "eventName", "lastEpochMicrosec", "priority", "reportingEntityName",
    "sequence", "sourceName", "startEpochMicrosec", "version", "vesEventListenerVersion",
)
REQUIRED_FAULT_FIELDS = (
    "alarmCondition", "eventSeverity", "eventSourceType", "faultFieldsVersion", "specificProblem",
    "vfStatus",
)
VES_SEVERITY = {"CRITICAL": "critical", "MAJOR": "major", "MINOR": "minor", "WARNING": "warning",
                "NORMAL": "info"}
# Measurement thresholds the operator cares about (percent busy).
CPU_MAJOR, CPU_MINOR = 90.0, 80.0
MEM_MAJOR, MEM_MINOR = 90.0, 80.0


class VesError(ValueError):
    """The body is not a VES event at all (no JSON object with a commonEventHeader)."""


def events_of(body: Any) -> list[dict]:
    """The VES events in a body: {"event": …}, {"eventList": […]}, or a bare event. Raises VesError."""
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError as exc:
            raise VesError(f"VES body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise VesError(f"VES body is a JSON {type(body).__name__}, not an object")
    if isinstance(body.get("eventList"), list):
        events = [e for e in body["eventList"] if isinstance(e, dict)]
    elif isinstance(body.get("event"), dict):
        events = [body["event"]]
    else:
        events = [body]
    if not events:
        raise VesError("VES eventList holds no event objects")
    return events


def _measurement(fields: dict) -> tuple[str, str, dict[str, str]]:
    """(severity, problem, details) from measurementFields: the busiest CPU and memory."""
    details: dict[str, str] = {}
    if "measurementInterval" in fields:
        details["measurementInterval"] = f"{fields['measurementInterval']} s"
    findings: list[tuple[str, str]] = []
    cpus = [c for c in fields.get("cpuUsageArray") or [] if isinstance(c, dict) and "percentUsage" in c]
    if cpus:
        top = max(cpus, key=lambda c: float(c["percentUsage"]))
        usage = float(top["percentUsage"])
        details["cpuMaxPercent"] = f"{usage:.1f}% ({top.get('cpuIdentifier', '?')})"
        if usage >= CPU_MINOR:
            findings.append(("major" if usage >= CPU_MAJOR else "minor",
                             f"high CPU usage {usage:.1f}% on {top.get('cpuIdentifier', 'a CPU')}"))
    for mem in fields.get("memoryUsageArray") or []:
        if not isinstance(mem, dict):
            continue
        used, free = float(mem.get("memoryUsed", 0)), float(mem.get("memoryFree", 0))
        if used + free <= 0:
            continue
        percent = 100.0 * used / (used + free)
        details.setdefault("memoryMaxPercent", f"{percent:.1f}%")
        if percent >= MEM_MINOR:
            findings.append(("major" if percent >= MEM_MAJOR else "minor",
                             f"high memory usage {percent:.1f}% on {mem.get('vmIdentifier', 'a VM')}"))
    if not findings:
        return "info", "routine measurement report, resource usage normal", details
    severity = worst_severity(s for s, _ in findings)
    return severity, "; ".join(p for s, p in findings if s == severity), details


def _one_event(event: dict) -> Facts:
    errors: list[str] = []
    header = event.get("commonEventHeader")
    if not isinstance(header, dict):
        raise VesError("VES event has no commonEventHeader object")
    missing = [f for f in REQUIRED_HEADER_FIELDS if f not in header]
    if missing:
        errors.append("commonEventHeader lacks " + ", ".join(missing))
    domain = str(header.get("domain", ""))
    details = {k: str(header[k]) for k in ("domain", "eventName", "priority", "reportingEntityName",
                                            "eventType", "nfNamingCode") if header.get(k) not in (None, "")}
    severity: str | None = None
    problem: str | None = None
    if domain == "fault":
        fields = event.get("faultFields")
        if not isinstance(fields, dict):
            errors.append("fault event has no faultFields object")
            fields = {}
        missing = [f for f in REQUIRED_FAULT_FIELDS if f not in fields]
        if missing and fields:
            errors.append("faultFields lacks " + ", ".join(missing))
        raw_severity = str(fields.get("eventSeverity", "")).upper()
        severity = VES_SEVERITY.get(raw_severity)
        if raw_severity and severity is None:
            errors.append(f"unknown eventSeverity {fields['eventSeverity']!r}")
        problem = fields.get("specificProblem") or fields.get("alarmCondition")
        if problem and raw_severity == "NORMAL":
            problem = f"{problem} cleared"
        details.update({k: str(fields[k]) for k in ("alarmCondition", "eventSourceType", "vfStatus",
                                                     "alarmInterfaceA") if fields.get(k)})
        if raw_severity:
            details["eventSeverity"] = raw_severity
    elif domain == "measurement":
        fields = event.get("measurementFields")
        if isinstance(fields, dict):
            severity, problem, more = _measurement(fields)
            details.update(more)
        else:
            errors.append("measurement event has no measurementFields object")
    elif domain == "heartbeat":
        fields = event.get("heartbeatFields") if isinstance(event.get("heartbeatFields"), dict) else {}
        interval = fields.get("heartbeatInterval")
        severity = "info"
        problem = "heartbeat, element alive" + (f" (interval {interval} s)" if interval else "")
    if problem is None and header.get("eventName"):
        problem = str(header["eventName"])
    return Facts(
        entity=str(header.get("sourceName") or header.get("reportingEntityName") or "") or None,
        severity=severity,
        problem=clip(str(problem)) if problem else None,
        first_seen=epoch_micros_to_iso(header.get("startEpochMicrosec")),
        last_seen=epoch_micros_to_iso(header.get("lastEpochMicrosec", header.get("startEpochMicrosec"))),
        event_count=1,
        details=details,
        facts_error="; ".join(errors) or None,
    )


def parse(body: Any) -> Facts:
    """Facts from a VES body (object or JSON text). Raises VesError when it is not a VES event;
    missing or ill-typed fields inside an event go to facts_error instead."""
    events = events_of(body)
    facts = [_one_event(e) for e in events]
    if len(facts) == 1:
        return facts[0]
    worst = worst_severity(f.severity for f in facts)
    lead = next((f for f in facts if f.severity == worst), facts[0])
    firsts = [f.first_seen for f in facts if f.first_seen]
    lasts = [f.last_seen for f in facts if f.last_seen]
    errors = [f.facts_error for f in facts if f.facts_error]
    return Facts(entity=lead.entity, severity=worst, problem=lead.problem,
                 first_seen=min(firsts) if firsts else None, last_seen=max(lasts) if lasts else None,
                 event_count=len(facts), details=lead.details,
                 facts_error="; ".join(errors) if errors else None)
