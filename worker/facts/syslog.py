"""Facts from syslog text: RFC 5424 and RFC 3164 lines, one message or a multi-line burst."""

from __future__ import annotations

import re
from typing import NamedTuple

from worker.facts.common import clip, iso_utc, most_common, parse_iso, worst_severity
from worker.messages import Facts

# PRI severity 0..7 (emerg, alert, crit, err, warning, notice, info, debug) onto the shared scale.
PRI_SEVERITY = ("critical", "critical", "critical", "major", "warning", "info", "info", "info")
SYSLOG_NAMES = ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug")

RFC5424 = re.compile(r"^<(\d{1,3})>(\d{1,2}) (\S+) (\S+) (\S+) (\S+) (\S+)(?: (.*))?$")
RFC3164 = re.compile(
    r"^<(\d{1,3})>([A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2}) (\S+) ([^:\[\s]+)(?:\[([^\]]*)\])?: ?(.*)$"
)


class Message(NamedTuple):
    pri: int
    time: str | None  # ISO UTC, or the RFC 3164 text when no year is known
    host: str | None
    app: str | None
    msgid: str | None
    text: str

    @property
    def severity(self) -> str:
        return PRI_SEVERITY[self.pri % 8]


def _nil(value: str) -> str | None:
    return None if value == "-" else value


def _split_sd(rest: str) -> tuple[str, str]:
    """(structured data, message) from what follows MSGID; SD is `-` or `[...]...` with quoted values."""
    if rest.startswith("-"):
        return "-", rest[2:] if rest.startswith("- ") else rest[1:]
    i, depth, quoted = 0, 0, False
    while i < len(rest):
        ch = rest[i]
        if quoted:
            if ch == "\\":
                i += 1
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0 and (i + 1 == len(rest) or rest[i + 1] != "["):
                return rest[: i + 1], rest[i + 2:]
        i += 1
    return rest, ""


def parse_line(line: str) -> Message | None:
    """One syslog line as a Message, or None when it is neither RFC 5424 nor RFC 3164."""
    m = RFC5424.match(line)
    if m and int(m.group(1)) < 192:
        pri, _, stamp, host, app, _procid, msgid, rest = m.groups()
        _sd, text = _split_sd(rest or "")
        when = parse_iso(stamp) if stamp != "-" else None
        return Message(int(pri), iso_utc(when) if when else None, _nil(host), _nil(app), _nil(msgid),
                       text.lstrip("\ufeff").strip())
    m = RFC3164.match(line)
    if m and int(m.group(1)) < 192:
        pri, stamp, host, tag, _pid, text = m.groups()
        return Message(int(pri), stamp, host, tag, None, text.strip())
    return None


def parse_messages(text: str) -> list[Message]:
    """Every message in `text`; a line that is not a syslog header continues the previous message."""
    messages: list[Message] = []
    for line in text.splitlines():
        message = parse_line(line)
        if message is not None:
            messages.append(message)
        elif messages and line.strip():
            messages[-1] = messages[-1]._replace(text=f"{messages[-1].text} {line.strip()}")
    return messages


def parse(text: str) -> Facts | None:
    """Facts from a syslog burst, or None when no line is syslog. The problem is the most frequent
    message among the worst-severity ones; the element is the host that sent it most."""
    messages = parse_messages(text)
    if not messages:
        return None
    worst = worst_severity(m.severity for m in messages)
    worst_messages = [m for m in messages if m.severity == worst]
    problem_text = most_common(m.text for m in worst_messages) or ""
    lead = [m for m in worst_messages if m.text == problem_text] or worst_messages
    times = [m.time for m in messages if m.time]
    iso_times = sorted(t for t in times if t[:1].isdigit())
    first = iso_times[0] if iso_times else (times[0] if times else None)
    last = iso_times[-1] if iso_times else (times[-1] if times else None)
    hosts = list(dict.fromkeys(m.host for m in messages if m.host))
    apps = list(dict.fromkeys(m.app for m in messages if m.app))
    details = {"app": most_common(m.app for m in lead) or "", "msgid": most_common(m.msgid for m in lead) or "",
               "syslogSeverity": SYSLOG_NAMES[min(m.pri % 8 for m in lead)],
               "worstSeverityCount": str(len(worst_messages))}
    if len(hosts) > 1:
        details["hosts"] = ", ".join(hosts[:8])
    if len(apps) > 1:
        details["apps"] = ", ".join(apps[:8])
    return Facts(
        entity=most_common(m.host for m in lead) or (hosts[0] if hosts else None),
        severity=worst,
        problem=clip(problem_text) if problem_text else None,
        first_seen=first,
        last_seen=last,
        event_count=len(messages),
        details={k: v for k, v in details.items() if v},
    )
