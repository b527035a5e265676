"""What each VES 7.x domain's fields say: (severity, problem, details) per event.

fault, measurement, heartbeat, thresholdCrossingAlert, notification, pnfRegistration, stateChange,
syslog, and perf3gpp (a PM file as ONAP's PM mapper publishes it; `ves_perf3gpp`).
stndDefined (3GPP notifications) is read by `ves_stnd`; a domain in neither is read by its header
alone (see `ves.py`).

The problem is the alarm: `specificProblem`, else the alarm's name, else `alarmCondition` /
`probableCause`. An identifier in one of those fields (a neighbour cell id such as `Chn0001`, a
notification type such as `notifyNewAlarm`) is a detail, never the problem; a camelCase alarm name
is written out in words (`lossOfSignal` -> `loss of signal`) so that it reads as a phrase.
"""

from __future__ import annotations

import re

from worker.facts.common import worst_severity
from worker.facts.levels import PRI_SEVERITY
from worker.facts.ves_perf3gpp import perf3gpp

REQUIRED_FAULT_FIELDS = (
    "alarmCondition", "eventSeverity", "eventSourceType", "faultFieldsVersion", "specificProblem",
    "vfStatus",
)
VES_SEVERITY = {"CRITICAL": "critical", "MAJOR": "major", "MINOR": "minor", "WARNING": "warning",
                "NORMAL": "info"}
# 3GPP TS 28.532 / X.733 perceivedSeverity
PERCEIVED_SEVERITY = {"CRITICAL": "critical", "MAJOR": "major", "MINOR": "minor", "WARNING": "warning",
                      "INDETERMINATE": "warning", "CLEARED": "info"}
SYSLOG_SEV = {"emergency": 0, "alert": 1, "critical": 2, "error": 3, "warning": 4, "notice": 5, "info": 6,
              "debug": 7}
NEW_STATE_SEVERITY = {"outofservice": "major", "maintenance": "warning"}
# Measurement thresholds the operator cares about (percent busy).
CPU_MAJOR, CPU_MINOR = 90.0, 80.0
MEM_MAJOR, MEM_MINOR = 90.0, 80.0

Reading = tuple[str | None, str | None, dict[str, str], list[str]]  # severity, problem, details, errors

# Keys (compared without case, `-` or `_`) that name an alarm, in the order they are trusted.
ALARM_KEYS = ("specificproblem", "alarmname", "alarmtext", "alarmcondition", "probablecause", "additionaltext")
NOTIFICATION_TYPES = ("notifynewalarm", "notifychangedalarm", "notifyclearedalarm", "notifyalarmlistrebuilt",
                      "notifycorrelatednotificationchanged", "notifyackstatechanged", "notifycomments")
# Leading lookbehinds and possessive quantifiers: linear searches (issue 27), the same full matches.
_IDENTIFIER = re.compile(r"(?<![\w.:/=,-])(?=[\w.:/=,-]*?\d)[\w.:/=,-]++")  # one token holding a digit: `Chn0001`, `NRCellDU=3`
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[A-Za-z]{3,}")
# Names written in words: `lossOfSignal`, `RanPciCollision`, `LOSS_OF_SIGNAL` (mixed forms stay as they are).
_CAMEL_NAME = re.compile(r"(?<![a-z])[a-z]++(?:[A-Z][a-z]++)++|(?<![A-Za-z])(?:[A-Z][a-z]++){2,}")
_SNAKE_NAME = re.compile(r"(?<![A-Z0-9])[A-Z][A-Z0-9]*+(?:_[A-Z0-9]++)++|(?<![a-z0-9])[a-z][a-z0-9]*+(?:_[a-z0-9]++)++")


# Words of a field's filler text: an OpenAPI example or a simulator's default left in the event
# ("additional text details", "string", "xyz"), never what happened.
FILLER_WORDS = frozenset((
    "additional", "details", "detail", "text", "info", "information", "string", "value", "values", "description",
    "desc", "example", "sample", "test", "testing", "placeholder", "dummy", "here", "some", "any", "xyz", "abc",
    "foo", "bar", "baz", "tbd", "todo", "na", "none", "null", "nil", "unknown", "undefined", "default", "lorem",
    "ipsum", "dolor", "specific", "problem", "alarm", "href", "uri", "dn", "name", "data", "field", "notification",
    "of", "the", "a", "an", "for", "to", "be", "filled", "in", "goes", "your", "my", "xxx", "yyy", "zzz",
    "attribute", "attributes", "attr", "param", "parameter", "key", "val"))


def is_placeholder(value, key: str = "") -> bool:
    """True when `value` is filler rather than content: every word of it is a filler word or a word
    of its own field's name (`additionalText: "additional text details"`, `specificProblem:
    "specific problem"`, `href: "href1"`), or it holds no letters at all."""
    text = str(value).strip()
    words = [w.lower() for w in re.findall(r"[A-Za-z]+", _CAMEL.sub(" ", text))]
    if not words:
        return True
    own = {w.lower() for w in re.findall(r"[A-Za-z]+", _CAMEL.sub(" ", key))}
    return all(len(w) == 1 or w in FILLER_WORDS or w in own for w in words)


def _is_identifier(value: str) -> bool:
    """One token with a digit and at most one word in it (`Chn0001`, `NRCellDU=3`, `FM001`, but not
    `5G_link_failure`), or a notification type."""
    value = value.strip()
    if not value or value.replace("_", "").lower() in NOTIFICATION_TYPES:
        return True
    return _IDENTIFIER.fullmatch(value) is not None and len(_WORD.findall(value)) <= 1


def alarm_phrase(value) -> str | None:
    """An alarm field as the problem: None for an identifier; a camelCase or SNAKE_CASE name in words."""
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        return None
    text = str(value).strip()
    if _is_identifier(text) or is_placeholder(text):
        return None
    if _CAMEL_NAME.fullmatch(text):
        return _CAMEL.sub(" ", text).lower()
    if _SNAKE_NAME.fullmatch(text):
        return text.replace("_", " ").lower()
    return text


def find_alarm(fields: dict, depth: int = 3) -> tuple[str, str] | None:
    """(key, phrase) of the first alarm-naming field in `fields` or below it (ALARM_KEYS order)."""
    found: dict[str, str] = {}

    def walk(node, level):
        if level > depth or not isinstance(node, dict):
            return
        for key, value in node.items():
            norm = str(key).replace("-", "").replace("_", "").lower()
            if norm in ALARM_KEYS and norm not in found:
                phrase = alarm_phrase(value) if not is_placeholder(value, str(key)) else None
                if phrase:
                    found[norm] = phrase
            elif isinstance(value, dict):
                walk(value, level + 1)
            elif isinstance(value, list):
                for item in value[:16]:
                    walk(item, level + 1)

    walk(fields, 0)
    return next(((k, found[k]) for k in ALARM_KEYS if k in found), None)


def _str_fields(fields: dict, names) -> dict[str, str]:
    return {k: str(fields[k]) for k in names if fields.get(k) not in (None, "", [], {})}


def fault(event: dict) -> Reading:
    errors: list[str] = []
    fields = event.get("faultFields")
    if not isinstance(fields, dict):
        return None, None, {}, ["fault event has no faultFields object"]
    missing = [f for f in REQUIRED_FAULT_FIELDS if f not in fields]
    if missing:
        errors.append("faultFields lacks " + ", ".join(missing))
    raw = str(fields.get("eventSeverity", "")).upper()
    severity = VES_SEVERITY.get(raw)
    if raw and severity is None:
        errors.append(f"unknown eventSeverity {fields['eventSeverity']!r}")
    alarm = find_alarm(fields)
    problem = alarm[1] if alarm else None
    if problem and raw == "NORMAL":
        problem = f"{problem} cleared"
    details = _str_fields(fields, ("alarmCondition", "eventSourceType", "vfStatus", "alarmInterfaceA"))
    if fields.get("specificProblem") and (alarm is None or alarm[0] != "specificproblem"):
        details["specificProblem"] = str(fields["specificProblem"])
    if raw:
        details["eventSeverity"] = raw
    return severity, problem, details, errors


def measurement(event: dict) -> Reading:
    """The busiest CPU and memory against the thresholds above."""
    fields = event.get("measurementFields")
    if not isinstance(fields, dict):
        return None, None, {}, ["measurement event has no measurementFields object"]
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
    if not findings and not ("cpuMaxPercent" in details or "memoryMaxPercent" in details):
        arrays = [k for k, v in fields.items() if isinstance(v, (list, dict)) and v][:4]
        return "info", "routine measurement report" + (f" ({', '.join(arrays)})" if arrays else "") + \
            ", no CPU or memory usage in it to check", details, []
    if not findings:
        return "info", "routine measurement report, resource usage normal", details, []
    severity = worst_severity(s for s, _ in findings)
    return severity, "; ".join(p for s, p in findings if s == severity), details, []


def heartbeat(event: dict) -> Reading:
    fields = event.get("heartbeatFields") if isinstance(event.get("heartbeatFields"), dict) else {}
    interval = fields.get("heartbeatInterval")
    return "info", "heartbeat, element alive" + (f" (interval {interval} s)" if interval else ""), {}, []


def threshold_crossing(event: dict) -> Reading:
    fields = event.get("thresholdCrossingAlertFields")
    if not isinstance(fields, dict):
        return None, None, {}, ["thresholdCrossingAlert event has no thresholdCrossingAlertFields object"]
    raw = str(fields.get("eventSeverity", "")).upper()
    severity = VES_SEVERITY.get(raw)
    errors = [f"unknown eventSeverity {fields['eventSeverity']!r}"] if raw and severity is None else []
    action = str(fields.get("alertAction", "")).upper()
    crossed = [str(p.get("thresholdCrossed")) for p in fields.get("additionalParameters") or []
               if isinstance(p, dict) and p.get("thresholdCrossed")]
    what = fields.get("alertDescription") or fields.get("alertType") or "threshold crossed"
    problem = f"threshold crossed: {what}" + (f" ({', '.join(crossed[:3])})" if crossed else "")
    if action == "CLEAR":
        problem, severity = f"{problem} cleared", "info"
    details = _str_fields(fields, ("alertType", "alertAction", "elementType", "interfaceName",
                                   "networkService", "possibleRootCause"))
    if raw:
        details["eventSeverity"] = raw
    return severity, problem, details, errors


def notification(event: dict) -> Reading:
    fields = event.get("notificationFields")
    if not isinstance(fields, dict):
        return None, None, {}, ["notification event has no notificationFields object"]
    change = fields.get("changeType") or fields.get("changeIdentifier") or "notification"
    old, new = fields.get("oldState"), fields.get("newState")
    problem = str(change)
    if new:
        problem += f": state {old} -> {new}" if old else f": new state {new}"
    if fields.get("stateInterface"):
        problem += f" on {fields['stateInterface']}"
    severity = NEW_STATE_SEVERITY.get(str(new or "").lower(), "info")
    details = _str_fields(fields, ("changeIdentifier", "changeType", "changeContact", "stateInterface"))
    files = [m for m in fields.get("arrayOfNamedHashMap") or [] if isinstance(m, dict) and m.get("name")]
    if files:
        details["files"] = ", ".join(str(m["name"]) for m in files[:4]) + (
            f" and {len(files) - 4} more" if len(files) > 4 else "")
        if not new:
            problem += f" ({len(files)} file{'s' if len(files) > 1 else ''} ready)"
    return severity, problem, details, []


def pnf_registration(event: dict) -> Reading:
    fields = event.get("pnfRegistrationFields")
    if not isinstance(fields, dict):
        return None, None, {}, ["pnfRegistration event has no pnfRegistrationFields object"]
    what = " ".join(str(fields[k]) for k in ("vendorName", "modelNumber", "unitType") if fields.get(k))
    problem = "PNF registration" + (f" of {what}" if what else "")
    if fields.get("serialNumber"):
        problem += f", serial {fields['serialNumber']}"
    address = fields.get("oamV4IpAddress") or fields.get("oamV6IpAddress")
    if address:
        problem += f", OAM address {address}"
    details = _str_fields(fields, ("vendorName", "modelNumber", "serialNumber", "softwareVersion", "unitType",
                                   "oamV4IpAddress", "oamV6IpAddress"))
    return "info", problem, details, []


def state_change(event: dict) -> Reading:
    fields = event.get("stateChangeFields")
    if not isinstance(fields, dict):
        return None, None, {}, ["stateChange event has no stateChangeFields object"]
    new, old = fields.get("newState"), fields.get("oldState")
    problem = f"state change {old} -> {new}" + (f" on {fields['stateInterface']}" if fields.get("stateInterface")
                                                 else "")
    return NEW_STATE_SEVERITY.get(str(new or "").lower(), "info"), problem, {}, []


def syslog(event: dict) -> Reading:
    fields = event.get("syslogFields")
    if not isinstance(fields, dict):
        return None, None, {}, ["syslog event has no syslogFields object"]
    sev = SYSLOG_SEV.get(str(fields.get("syslogSev", "")).lower())
    severity = PRI_SEVERITY[sev] if sev is not None else None
    details = _str_fields(fields, ("syslogTag", "syslogProc", "eventSourceHost", "syslogSev"))
    return severity, fields.get("syslogMsg"), details, []


READERS = {
    "fault": fault, "measurement": measurement, "measurementsForVfScaling": measurement,
    "heartbeat": heartbeat, "thresholdCrossingAlert": threshold_crossing, "notification": notification,
    "pnfRegistration": pnf_registration, "stateChange": state_change, "syslog": syslog,
    "perf3gpp": perf3gpp,  # stndDefined: `ves_stnd` (it reads alarms with this module's rules)
}
