"""Facts from multi-line signalling traces (handover, call and session procedures).

A line is `<time> <element> [-> <peer>] [PROTOCOL] <EventName> key=value ...`; the parser only relies
on the leading time, the CamelCase event name, `src -> dst` when present and `cause=` values.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import NamedTuple

from worker.facts.common import ISO_TIME, clip, iso_utc, most_common, parse_iso
from worker.messages import Facts

LEADING_TIME = re.compile(rf"^\s*(?:{ISO_TIME.pattern}|\d{{2}}:\d{{2}}:\d{{2}}(?:\.\d+)?)")
EVENT = re.compile(r"^[A-Z][A-Za-z]{5,}$")
CAUSE = re.compile(r"\bcause[=:]\s*\"?([^\s\",;]+)", re.IGNORECASE)
KEY_VALUE = re.compile(r"\b(\w+)=(\"[^\"]*\"|\S+)")
FAILURE_NAME = re.compile(r"Fail|Reject|Timeout|Abort|Error|Drop", re.IGNORECASE)
# Causes that end a procedure normally; any other cause on a release marks an abnormal end.
NORMAL_CAUSE = re.compile(
    r"normal|user-inactivity|successful|handover-desirable|deregist|ue-context-release-due-to-ho|"
    r"redirection|load-balanc|time-critical-handover|resource-optimisation",
    re.IGNORECASE,
)


class TraceEvent(NamedTuple):
    time: str
    source: str | None
    peer: str | None
    name: str
    cause: str | None

    @property
    def is_failure(self) -> bool:
        if FAILURE_NAME.search(self.name):
            return True
        return self.cause is not None and not NORMAL_CAUSE.search(self.cause)


def parse_line(line: str) -> TraceEvent | None:
    """One trace line as a TraceEvent, or None without a leading time and an event name."""
    m = LEADING_TIME.match(line)
    if not m:
        return None
    stamp = m.group(0).strip()
    tokens = line[m.end():].split()
    source = peer = None
    if len(tokens) >= 3 and tokens[1] in ("->", "→"):
        source, peer = tokens[0], tokens[2]
        rest = tokens[3:]
    elif tokens:
        source, rest = tokens[0], tokens[1:]
    else:
        return None
    name = next((t for t in rest if "=" not in t and EVENT.match(t) and not t.isupper()), None)
    if name is None:
        return None
    cause = CAUSE.search(line)
    when = parse_iso(stamp)
    return TraceEvent(iso_utc(when) if when else stamp, source, peer, name, cause.group(1) if cause else None)


def readable_event(name: str) -> str:
    """`HandoverPreparationFailure` -> `handover preparation failure` (acronyms such as UE kept)."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", " ", name).split()
    return " ".join(w if w.isupper() and len(w) > 1 else w.lower() for w in words)


def readable_cause(cause: str) -> str:
    """`radioNetwork:no-radio-resources-available` -> `no radio resources available` (the cause
    group before the colon is dropped: the value alone says what happened)."""
    return cause.rsplit(":", 1)[-1].replace("-", " ").replace("_", " ")


def parse(text: str) -> Facts | None:
    """Facts from a trace, or None when no line is a trace event. The problem is the most frequent
    failure (event and cause); the element is the node that reported it."""
    events = [e for e in map(parse_line, text.splitlines()) if e is not None]
    if not events:
        return None
    failures = [e for e in events if e.is_failure]
    elements = list(dict.fromkeys(x for e in events for x in (e.source, e.peer) if x))
    ues = {v for line in text.splitlines() for k, v in KEY_VALUE.findall(line) if k.lower() in ("ue", "imsi", "supi")}
    details = {"elements": ", ".join(elements[:8]), "procedures": ", ".join(
        name for name, _ in Counter(e.name for e in events).most_common(6))}
    if ues:
        details["ues"] = str(len(ues))
    iso_times = sorted(e.time for e in events if e.time[:1].isdigit() and "T" in e.time)
    first, last = (iso_times[0], iso_times[-1]) if iso_times else (events[0].time, events[-1].time)
    if failures:
        key = most_common(f"{e.name}|{e.cause or ''}" for e in failures)
        name, cause = key.split("|", 1)
        lead = [e for e in failures if e.name == name and (e.cause or "") == cause]
        details["failureCount"] = str(len(failures))
        if cause:
            details["cause"] = cause
        problem = readable_event(name) + (f": {readable_cause(cause)}" if cause else "")
        if len(failures) > 1:
            problem += f" ({len(failures)} failures)"
        entity = most_common(e.source for e in lead)
        severity = "major"
    else:
        problem = f"no failures in {len(events)} signalling events"
        entity = most_common(e.source for e in events)
        severity = "info"
    return Facts(entity=entity, severity=severity, problem=clip(problem), first_seen=first,
                 last_seen=last, event_count=len(events), details=details)
