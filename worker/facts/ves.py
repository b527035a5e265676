"""Facts from a VES 7.x body: one event, `{"event": ...}`, or an `eventList` batch where every event
counts. Each domain's fields are read by `ves_domains` (stndDefined by `ves_stnd`); any other domain
by its header alone.

Times come from `startEpochMicrosec` / `lastEpochMicrosec` read by magnitude: collectors in the
field often put milliseconds (or seconds) there, which as microseconds would date the event 1970.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from worker.facts.common import SEVERITY_RANK, SEVERITY_WEIGHT, clip, epoch_to_iso, epoch_unit, iso_utc, parse_iso
from worker.facts.ves_domains import CPU_MAJOR, CPU_MINOR, READERS as DOMAIN_READERS, REQUIRED_FAULT_FIELDS, VES_SEVERITY
from worker.facts.ves_stnd import moi_dn, stnd_defined
from worker.messages import Facts, ProblemGroup

__all__ = ["CPU_MAJOR", "CPU_MINOR", "REQUIRED_FAULT_FIELDS", "REQUIRED_HEADER_FIELDS", "VES_SEVERITY",
           "VesError", "events_of", "parse"]

REQUIRED_HEADER_FIELDS = (
    "domain", "eventId", "eventName", "lastEpochMicrosec", "priority", "reportingEntityName",
    "sequence", "sourceName", "startEpochMicrosec", "version", "vesEventListenerVersion",
)
HEADER_DETAILS = ("domain", "eventName", "priority", "reportingEntityName", "eventType", "nfNamingCode",
                  "nfVendorName")
PROBLEM_TEXT_GROUPS = 2


READERS = {**DOMAIN_READERS, "stndDefined": stnd_defined}


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


def _last_rdn_value(dn: str) -> str | None:
    """`DC=x,SubNetwork=1,ManagedElement=gNB-7` -> `gNB-7`: the managed element of a DN when named."""
    parts = [p.split("=", 1) for p in str(dn).split(",") if "=" in p]
    for key, value in parts:
        if key.strip() == "ManagedElement":
            return value.strip() or None
    return parts[-1][1].strip() or None if parts else None


def _times(header: dict, event: dict, details: dict[str, str]) -> tuple[str | None, str | None]:
    start, last = header.get("startEpochMicrosec"), header.get("lastEpochMicrosec", header.get("startEpochMicrosec"))
    unit = epoch_unit(start)
    if unit is not None and unit[0] != "microseconds":
        details["epochUnit"] = f"{unit[0]} (in startEpochMicrosec)"
    first_seen, last_seen = epoch_to_iso(start), epoch_to_iso(last)
    if first_seen is None:  # stndDefined payloads carry their own ISO eventTime
        data = (event.get("stndDefinedFields") or {}).get("data") if isinstance(event.get("stndDefinedFields"),
                                                                                dict) else None
        when = parse_iso(str(data.get("eventTime", ""))) if isinstance(data, dict) else None
        if when is not None:
            first_seen = iso_utc(when)
    return first_seen, last_seen or first_seen


def _one_event(event: dict) -> Facts:
    errors: list[str] = []
    header = event.get("commonEventHeader")
    if not isinstance(header, dict):
        raise VesError("VES event has no commonEventHeader object")
    missing = [f for f in REQUIRED_HEADER_FIELDS if f not in header]
    if missing:
        errors.append("commonEventHeader lacks " + ", ".join(missing))
    domain = str(header.get("domain", ""))
    details = {k: str(header[k]) for k in HEADER_DETAILS if header.get(k) not in (None, "")}
    reader = READERS.get(domain)
    severity = problem = None
    if reader is not None:
        severity, problem, more, more_errors = reader(event)
        details.update(more)
        errors.extend(more_errors)
    if problem is None and header.get("eventName"):
        problem = str(header["eventName"])
    if severity is None and reader is None:  # an unknown domain: its priority is all there is
        severity = {"high": "major", "medium": "minor"}.get(str(header.get("priority", "")).lower(), "info")
    entity = header.get("sourceName") or header.get("reportingEntityName") or None
    if not entity and isinstance(event.get("stndDefinedFields"), dict):
        data = event["stndDefinedFields"].get("data")
        if isinstance(data, dict):  # the system's DN, else the managed object's element
            entity = _last_rdn_value(data.get("systemDN", "")) or _last_rdn_value(moi_dn(data) or "")
    first_seen, last_seen = _times(header, event, details)
    return Facts(
        entity=str(entity) if entity else None,
        severity=severity,
        problem=clip(str(problem)) if problem else None,
        first_seen=first_seen,
        last_seen=last_seen,
        event_count=1,
        details=details,
        facts_error="; ".join(errors) or None,
    )


def _group_rank(item) -> tuple[int, int]:
    (_, _, severity), members = item
    severity = severity or "info"
    return (-len(members) * SEVERITY_WEIGHT[severity], SEVERITY_RANK[severity])


def _worst_rank(item) -> tuple[int, int]:
    (_, _, severity), members = item
    return (SEVERITY_RANK[severity or "info"], -len(members))


def _batch(facts: list[Facts]) -> Facts:
    """One batch's facts: the dominant (element, problem) groups by count weighted by severity;
    the worst group is always among those named."""
    groups: dict[tuple, list[Facts]] = {}
    for f in facts:
        groups.setdefault((f.entity, f.problem, f.severity), []).append(f)
    ranked = sorted(groups.items(), key=_group_rank)
    worst = min((f.severity for f in facts if f.severity), key=SEVERITY_RANK.__getitem__, default=None)
    worst_key = min(groups.items(), key=_worst_rank)[0]
    if worst_key not in [k for k, _ in ranked[:PROBLEM_TEXT_GROUPS]]:
        ranked = [ranked[0], (worst_key, groups[worst_key])] + [kv for kv in ranked[1:] if kv[0] != worst_key]
    lead_entity = ranked[0][0][0]
    phrases = []
    for (entity, problem, _), members in ranked[:PROBLEM_TEXT_GROUPS]:
        text = problem or "event"
        if entity != lead_entity and entity:
            text += f" on {entity}"
        phrases.append(text + (f" ({len(members)} events)" if len(members) > 1 else ""))
    firsts = [f.first_seen for f in facts if f.first_seen]
    lasts = [f.last_seen for f in facts if f.last_seen]
    errors = list(dict.fromkeys(f.facts_error for f in facts if f.facts_error))
    elements = Counter(f.entity for f in facts if f.entity)
    details = dict(ranked[0][1][0].details)
    domains = Counter(f.details.get("domain", "?") for f in facts)
    details["domains"] = ", ".join(f"{d} {n}" for d, n in domains.most_common())
    if len(elements) > 1:
        details["elements"] = ", ".join(e for e, _ in elements.most_common(8))
    problems = [ProblemGroup(text=problem or "event", count=len(members), severity=severity, element=entity,
                             first_seen=min((m.first_seen for m in members if m.first_seen), default=None),
                             last_seen=max((m.last_seen for m in members if m.last_seen), default=None))
                for (entity, problem, severity), members in ranked[:5]]
    return Facts(entity=lead_entity, severity=worst, problem=clip("; ".join(phrases), 200),
                 first_seen=min(firsts) if firsts else None, last_seen=max(lasts) if lasts else None,
                 event_count=len(facts), details=details, facts_error="; ".join(errors) if errors else None,
                 problems=problems)


def parse(body: Any) -> Facts:
    """Facts from a VES body (object or JSON text). Raises VesError when it is not a VES event;
    missing or ill-typed fields inside an event go to facts_error instead."""
    facts = [_one_event(e) for e in events_of(body)]
    return facts[0] if len(facts) == 1 else _batch(facts)
