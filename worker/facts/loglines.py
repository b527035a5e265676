"""One log line of any supported shape as a `LogLine`: who logged it, when, how severe, what.

Shapes, tried in this order (a collector's own fields in front of a line are peeled off first):

- RFC 5424: `<PRI>1 TIMESTAMP HOST APP PROCID MSGID [SD] MSG`
- RFC 3164 / BSD, with or without `<PRI>`: `Mmm dd hh:mm:ss HOST TAG[PID]: MSG` (days padded with
  a space, an optional year or fraction after the day/time, or the year first as NX-OS writes it,
  HOST optional when TAG ends in `:`)
- network gear lines with a vendor message code (`devicelog`) and application layouts (`applog`)
  are tried before these; a container runtime's prefix (CRI: `TIME stdout|stderr F|P LINE`) is
  peeled off first
- rsyslog high-precision and ISO-stamped files: `2026-03-02T08:14:05.123456+01:00 HOST TAG[PID]: MSG`
- collector-prefixed: leading `-` or an upper-case alert tag, an epoch, a `YYYY.MM.DD` date, an ISO
  time, a sequence number or the sender's address, then one of the shapes above, or
  `NODE [TIME] [NODE] MSG` (RAS-style); the epoch, when present, is the line's time.

The host is the one that logged (the HOST field, the sender a collector recorded, or a RAS node),
never an address inside the message. A year missing from a BSD time comes from `reference`
(the record's timestamp, else the receive time) and `year_known` says so.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from worker.facts.common import epoch_unit, parse_iso
from worker.facts import applog, cef, devicelog
from worker.facts.levels import LEVEL_NAMES, PRI_SEVERITY, message_severity, vendor_level
from worker.facts.logline import MONTHS, LogLine

__all__ = ["LogLine", "parse_line"]


_PRI = re.compile(r"<(\d{1,3})>")
_RFC5424 = re.compile(r"(\d{1,2}) (\S+) (\S+) (\S+) (\S+) (\S+)(?: (.*))?$")
_BSD_TIME = re.compile(
    r"\*?(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) (?:(\d{4}) )?(\d{2}):(\d{2}):(\d{2})"
    r"(?:\.(\d{1,9}))?(?: ?(Z|UTC|GMT|[+-]\d{2}:?\d{2}))?:? +")
_ISO_TIME = re.compile(
    r"(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?) +")
_TAG = re.compile(r"(?<![^\s\[\]:])([^\s\[\]:]{1,64})(?:\[([^\]\s]*)\])?:$")
# Fields a collector or an archive puts before the line itself.
_EPOCH = re.compile(r"\d{10}(?:\d{3}(?:\d{3})?)?(?:\.\d+)?")
_PREFIX_TOKEN = re.compile(
    r"-|\d{4}[.-]\d{2}[.-]\d{2}|\d{1,9}|\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?|"
    r"\d{4}-\d{2}-\d{2}-\d{2}\.\d{2}\.\d{2}(?:\.\d+)?|\d{2}:\d{2}:\d{2}(?:[.,]\d+)?")
_ALERT_TAG = re.compile(r"[A-Z][A-Z_]{2,15}")
_ADDRESS = re.compile(r"(?:\d{1,3}\.){3}\d{1,3}|[0-9a-fA-F]{0,4}(?::[0-9a-fA-F]{0,4}){2,7}")
_NODE = re.compile(r"[^\W_][\w.:@/-]*")
_RAS_HEAD = re.compile(
    r"(?<![A-Z_])((?:[A-Z][A-Z_]++ ){1,2})(?=(?:EMERG|ALERT|CRIT|CRITICAL|FATAL|PANIC|ERR|ERROR|SEVERE|FAILURE|WARN|"
    r"WARNING|NOTICE|INFO|DEBUG)\b)")
_CRI = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})) (?:stdout|stderr) [FP] (.*)")
_YEAR_FIRST = re.compile(r"^(<\d{1,3}>)?(?::\s*)?((?:19|20)\d\d) ((?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2})"
                         r"(?= \d{2}:\d{2}:\d{2})")
_UPTIME = re.compile(r"^\[\s*\d+\.\d+\]\s*")
_MAX_PREFIX_TOKENS = 5


def _nil(value: str | None) -> str | None:
    return None if value in (None, "-", "") else value


def _bsd_time(m: re.Match, reference: datetime) -> tuple[datetime | None, bool]:
    mon, day, year, hh, mi, ss, frac, zone = m.groups()
    micro = int((frac or "0")[:6].ljust(6, "0"))
    tz = timezone.utc
    if zone and zone[0] in "+-":
        digits = zone.replace(":", "")
        delta = timedelta(hours=int(digits[1:3]), minutes=int(digits[3:5]))
        tz = timezone(delta if zone[0] == "+" else -delta)
    try:
        if year:
            return datetime(int(year), MONTHS[mon], int(day), int(hh), int(mi), int(ss), micro, tz), True
        when = datetime(reference.year, MONTHS[mon], int(day), int(hh), int(mi), int(ss), micro, tz)
        if when > reference + timedelta(days=2):  # December lines read in January: last year
            when = when.replace(year=reference.year - 1)
        return when, False
    except ValueError:  # Feb 30, 25:00 ...
        return None, False


def _host_tag_message(rest: str) -> tuple[str | None, str | None, str | None, str]:
    """(host, app, pid, message) from what follows a BSD or ISO time."""
    first, _, after = rest.partition(" ")
    if first.rstrip(":").upper() in LEVEL_NAMES or first[:1] in "[({<\"'":  # `INFO [main] ...`: no host
        return None, None, None, rest
    tag = _TAG.match(first)
    if tag and not _ADDRESS.fullmatch(first[:-1]):  # `sshd[12]: ...` with no host
        return None, tag.group(1), tag.group(2), after
    host = first.split("/", 1)[0].rsplit("@", 1)[-1] or None  # `dn228/dn228`, `local@tbird-admin1`
    second, _, message = after.partition(" ")
    tag = _TAG.match(second)
    if tag:  # `/apps/x86_64/sbin/gmetad[1682]:` is the program gmetad
        return host, tag.group(1).rstrip("/").rsplit("/", 1)[-1] or tag.group(1), tag.group(2), message
    return host, None, None, after


def _message(text: str) -> str:
    return _UPTIME.sub("", text.lstrip("\ufeff").strip())


def _finish(pri, when, year_known, host, app, msgid, text, shape) -> LogLine:
    text = _message(text)
    envelope = cef.parse(text) if text[:4] in ("CEF:", "LEEF") else None
    if envelope is not None:  # the event's own severity and name, the device it names
        severity = envelope.severity or (PRI_SEVERITY[pri % 8] if pri is not None else "info")
        return LogLine(when, year_known, _nil(host) or envelope.device, _nil(app), _nil(msgid), pri, severity,
                       envelope.text, "cef")
    # a vendor code is the message's own level: a relay stamps `<13>` on lines that came without a PRI
    severity = vendor_level(text) or (PRI_SEVERITY[pri % 8] if pri is not None else message_severity(text))
    return LogLine(when, year_known, _nil(host), _nil(app), _nil(msgid), pri, severity, text, shape)


def _parse_header(line: str, reference: datetime) -> LogLine | None:
    """A line starting with a syslog header (PRI, RFC 5424, BSD or ISO time), or None."""
    pri = None
    m = _PRI.match(line)
    if m:
        pri = int(m.group(1))
        if pri > 191:
            return None
        line = line[m.end():]
        m5 = _RFC5424.match(line)
        if m5 and m5.group(1) != "0":
            _version, stamp, host, app, procid, msgid, rest = m5.groups()
            when = parse_iso(stamp) if stamp != "-" else None
            if when is None and _EPOCH.fullmatch(stamp):  # Cisco Meraki: `<134>1 EPOCH HOST CATEGORY key=value ...`
                unit = epoch_unit(stamp)
                when = datetime.fromtimestamp(unit[1], tz=timezone.utc) if unit else None
                text = " ".join(p for p in (procid, msgid, rest) if p)
                return _finish(pri, when, True, host, app, None, text, "rfc5424")
            return _finish(pri, _aware(when), True, host, app, msgid, _strip_sd(rest or ""), "rfc5424")
    m = _BSD_TIME.match(line)
    if m:
        when, year_known = _bsd_time(m, reference)
        host, app, _pid, text = _host_tag_message(line[m.end():])
        return _finish(pri, when, year_known, host, app, None, text, "rfc3164" if pri is not None else "bsd")
    m = _ISO_TIME.match(line)
    if m:
        when = parse_iso(m.group(1).replace(",", "."))
        host, app, _pid, text = _host_tag_message(line[m.end():])
        return _finish(pri, _aware(when), True, host, app, None, text, "iso")
    return None


def _aware(when: datetime | None) -> datetime | None:
    if when is not None and when.tzinfo is None:
        return when.replace(tzinfo=timezone.utc)
    return when


def _strip_sd(rest: str) -> str:
    """The message after RFC 5424 structured data (`-` or `[...]...`, quoted values may hold `]`)."""
    if rest.startswith("-"):
        return rest[2:] if rest.startswith("- ") else rest[1:]
    if not rest.startswith("["):
        return rest
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
                return rest[i + 2:]
        i += 1
    return ""


def _nested(outer: LogLine, reference: datetime) -> LogLine:
    """A collector line whose message is itself a syslog line: the inner fields, the outer as fallback."""
    inner = _parse_header(outer.text, outer.time or reference)
    if inner is None:
        return outer
    if inner.year_known or outer.time is None:
        return inner._replace(host=inner.host or outer.host)
    return inner._replace(host=inner.host or outer.host, time=outer.time, year_known=outer.year_known)


def _prefixed(line: str, reference: datetime) -> LogLine | None:
    """A line behind a collector's or archive's own fields (see the module docstring), or None."""
    tokens = line.split(" ")
    epoch: float | None = None
    sender: str | None = None
    i = 0
    while i < len(tokens) and i < _MAX_PREFIX_TOKENS:
        token = tokens[i]
        if token == "":
            i += 1
            continue
        if _EPOCH.fullmatch(token):
            unit = epoch_unit(token)
            epoch = unit[1] if unit else epoch
        elif _PREFIX_TOKEN.fullmatch(token) or (i == 0 and _ALERT_TAG.fullmatch(token) and len(tokens) > 1
                                            and _EPOCH.fullmatch(tokens[1])):
            pass
        elif _ADDRESS.fullmatch(token) and sender is None and i > 0:
            sender = token
        else:
            break
        i += 1
    if i == 0 or i >= len(tokens):
        return None
    rest = " ".join(tokens[i:])
    when = datetime.fromtimestamp(epoch, tz=timezone.utc) if epoch else None
    parsed = _parse_header(rest, when or reference)
    if parsed is not None:
        parsed = _nested(parsed, reference)
        return parsed._replace(host=parsed.host or sender, time=when or parsed.time,
                               year_known=True if when else parsed.year_known)
    if epoch is None and sender is None:
        return None  # a bare number in front of free text is no evidence of a log line
    node, _, after = rest.partition(" ")
    if not _NODE.fullmatch(node) or not after:
        return _finish(None, when, True, sender, None, None, rest, "ras") if sender else None
    first, _, tail = after.partition(" ")
    if _PREFIX_TOKEN.fullmatch(first):  # the node's own time stamp
        after = tail
    if after.split(" ", 1)[0] == node:  # RAS names the node twice
        after = after.partition(" ")[2]
    inner = _parse_header(after, when or reference)
    if inner is not None:
        return inner._replace(host=inner.host or node, time=when or inner.time, year_known=True if when else
                              inner.year_known)
    app = None
    head = _RAS_HEAD.match(after)
    if head:  # `RAS KERNEL FATAL msg`: component words, then the level
        app = head.group(1).strip().lower()
        after = after[head.end():]
    return _finish(None, when, True, node, app, None, after, "ras")


def parse_line(line: str, reference: datetime | None = None) -> LogLine | None:
    """One log line as a LogLine, or None when it has no recognisable header. `reference` supplies
    the year of BSD times without one (default: now, the receive time)."""
    line = line.strip()
    if not line:
        return None
    reference = reference or datetime.now(timezone.utc)
    cri = _CRI.match(line) if line[:1].isdigit() else None
    if cri:  # a container runtime's own time and stream before the program's line
        when = _aware(parse_iso(cri.group(1)))
        inner = parse_line(cri.group(2), when or reference) if cri.group(2).strip() else None
        if inner is None:
            text = _message(cri.group(2))
            return LogLine(when, True, None, None, None, None, message_severity(text), text, "cri")
        return inner if inner.time and inner.year_known else inner._replace(time=inner.time or when, year_known=True)
    device = devicelog.parse(line, reference)
    if device is not None:
        return device
    app = applog.parse(line, reference)
    if app is not None:
        return app
    if line[:1] in "<12":  # NX-OS and others write the year first: `2026 Nov 14 10:12:01 host ...`
        line = _YEAR_FIRST.sub(r"\1\3 \2", line, count=1)
    parsed = _parse_header(line, reference)
    if parsed is not None:
        if parsed.shape == "iso" and _PRI.match(parsed.text) or _BSD_TIME.match(parsed.text):
            return _nested(parsed, reference)
        return parsed
    return _prefixed(line, reference)
