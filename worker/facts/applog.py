"""Application log layouts that are not syslog, read from their libraries' documented patterns:

- log4j / logback / Java, Python logging, Zookeeper, Spring Boot, Go zap, Spark, Windows CBS: a time
  (`yyyy-MM-dd HH:mm:ss,SSS`, ISO 8601, `yy/MM/dd HH:mm:ss`, optionally in `[...]`), then up to a few
  fields — `-`, a pid, `[thread]`, a logger followed by `-` — around a level word (`ERROR`,
  `[ERROR]`, `Info`, `WARNING`, `SEVERE` ...), then the logger and the message;
- Hadoop/HDFS (log4j `%d{yyMMdd HHmmss} pid %p %c: %m`): `081109 203615 148 INFO dfs.DataNode$...: msg`;
- OpenStack (oslo.log): `2017-05-16 00:00:00.008 25746 INFO nova.compute.manager [req-...] msg`;
- Python logging's default `ERROR:name:message`; Go's `log` (`2026/11/14 10:12:01 msg`) and
  logfmt (`time=... level=error msg="..."`, logrus, slog); glog/klog (`E1114 10:12:01.123456 12 f.go:42] msg`);
- nginx error log (`2026/11/14 10:12:01 [error] 1234#1234: *5 msg`) and Apache error log
  (`[Sat Nov 14 10:12:01.123 2026] [core:error] [pid 1:tid 2] [client 192.0.2.1:5] msg`);
- HPC cluster logs (LANL layout `id node component state epoch flag message`); `dmesg -T`
  (`[Sat Nov 14 10:12:01 2026] msg`);
- key=value device logs (FortiGate `date=... time=... devname="FGT-1" level="alert" msg="..."`,
  behind a PRI or not), HealthApp-style `yyyyMMdd-HH:mm:ss:SSS|component|pid|msg`, and
  Proxifier-style `[MM.dd HH:mm:ss] program - msg`; Android logcat `MM-DD HH:MM:SS.mmm pid tid L tag: msg`.

A line may start with the name of the log file it came from (`nova-compute.log.1.2017-05-16_13:53:08 ...`):
the file is never the element; its service (`nova-compute`) is the line's `source`. These layouts name
no host of their own but for HDFS, whose DataNode writes its own `address:port:` before a message
(`10.251.30.6:50010:Got exception while serving blk_1 to /10.251.90.64:` is logged by host 10.251.30.6;
the client after `to` is a peer) and names itself as `dest:` when it starts receiving a block, logfmt's `host=` and the HPC node. The level field is the line's severity; words in the message
count only when there is none.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from worker.facts.common import parse_iso
from worker.facts.levels import LEVEL_NAMES, PRI_SEVERITY, message_severity
from worker.facts.logline import MONTH_NAMES, MONTHS, LogLine, with_year

APP_LEVELS = {**LEVEL_NAMES, "NOTIFICATION": "info", "INFORMATION": "info", "FINE": "info", "FINER": "info", "FINEST": "info", "CONFIG": "info",
              "VERBOSE": "info", "DBG": "info", "WRN": "warning", "ERR": "major", "CRT": "critical"}
_SINGLE_LETTER = {"V": "info", "D": "info", "I": "info", "W": "warning", "E": "major", "F": "critical",
                  "A": "critical"}
_APACHE_LEVEL = {"emerg": 0, "alert": 1, "crit": 2, "error": 3, "warn": 4, "notice": 5, "info": 6, "debug": 7}
MAX_FIELDS_BEFORE_LEVEL = 4

# Leading lookbehinds and possessive quantifiers (`*+`, `++`) keep a search linear in the line (issue 27);
# at the start of the string, where these are matched, they change nothing.
_PRI_KV = re.compile(r"<\d{1,3}>(?=(?:date|time|ts|level|logver)=)")
_FILE_PREFIX = re.compile(r"(?<![\w.:-])(?=[\w.:-]++ )(?P<file>[\w.-]+?\.(?:log|out|err)[.\w:-]*+) +")
_LEAD_TIME = re.compile(
    r"\[?(?P<iso>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?: ?(?:Z|[+-]\d{2}:?\d{2}))?)\]?,?(?= )|"
    r"\[?(?P<slash>(?P<y4>\d{4}|\d{2})/(?P<mo>\d{2})/(?P<dd>\d{2}) (?P<hms>\d{2}:\d{2}:\d{2})(?:[.,](?P<f>\d{1,9}))?)\]?(?= )|"
    r"(?P<hdfs>(?P<hy>\d{2})(?P<hmo>[01]\d)(?P<hd>[0-3]\d) (?P<hh>[0-2]\d)(?P<hmi>[0-5]\d)(?P<hs>[0-5]\d))(?= \d+ [A-Z])")
_KLOG = re.compile(r"(?P<lvl>[IWEF])(?P<mo>[01]\d)(?P<dd>[0-3]\d) (?P<hms>\d{2}:\d{2}:\d{2})\.(?P<f>\d{1,6}) +\d+ "
                   r"(?P<caller>[\w./-]+:\d+)\] ?(?P<msg>.*)")
_LOGCAT = re.compile(r"(?P<mo>[01]\d)-(?P<dd>[0-3]\d) (?P<hms>\d{2}:\d{2}:\d{2})\.(?P<f>\d{3}) +\d+ +\d+ "
                     r"(?P<lvl>[VDIWEFA]) (?P<tag>[^:]+?) *: ?(?P<msg>.*)")
_APACHE = re.compile(r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>" + MONTH_NAMES + r") +(?P<dd>\d{1,2}) "
                     r"(?P<hms>\d{2}:\d{2}:\d{2})(?:\.(?P<f>\d{1,6}))? (?P<y>\d{4})\] \[(?:(?P<mod>[\w-]+):)?"
                     r"(?P<lvl>[a-z]+\d?)\](?: \[pid \d+(?::tid \d+)?\])?(?: \[client [^\]]+\])? ?(?P<msg>.*)")
_CTIME = re.compile(r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>" + MONTH_NAMES + r") +(?P<dd>\d{1,2}) "
                    r"(?P<hms>\d{2}:\d{2}:\d{2})(?:\.\d{1,6})? (?P<y>\d{4})\] (?P<msg>.*)")
_PY_DEFAULT = re.compile(r"(?P<lvl>CRITICAL|ERROR|WARNING|INFO|DEBUG):(?P<logger>[\w.]+):(?P<msg>.*)")
_HPC = re.compile(r"(?<!\d)\d++ (?P<node>[\w.-]++) (?P<comp>\S++) (?P<state>\S++) (?P<epoch>\d{9,10}) \d++ (?P<msg>.*)")
_LOGFMT_PAIR = re.compile(r'(?<![\w.])\.*+(\w[\w.]*+)=("(?:[^"\\]|\\.)*+"|\S*)')  # a key starts a run of [\w.]
_PIPES = re.compile(r"(?P<d>\d{8})-(?P<hms>\d{2}:\d{2}:\d{2}):(?P<f>\d{3})\|(?P<comp>[^|]+)\|\d+\|(?P<msg>.*)")
_BRACKET_SHORT = re.compile(r"\[(?P<mo>[01]\d)\.(?P<dd>[0-3]\d) (?P<hms>\d{2}:\d{2}:\d{2})\] (?P<prog>\S+) - (?P<msg>.*)")
_NGINX = re.compile(r"\[(?P<lvl>emerg|alert|crit|error|warn|notice|info|debug)\] \d+#\d+: (?:\*\d+ )?(?P<msg>.*)")
_SELF_ADDRESS = re.compile(r"(?<![\w.-])(?P<host>(?:\d{1,3}\.){3}\d{1,3}|[\w-]++(?:\.[\w-]++)++):\d+:(?=\S)")
_RECEIVING_DEST = re.compile(r"\bdest: /((?:\d{1,3}\.){3}\d{1,3}|[\w-]+(?:\.[\w-]+)+):\d+")
_OSLO = re.compile(r" \d+ [A-Z]+ [a-z_]+(?:\.\w+)+ ")  # oslo.log: pid, level, dotted logger
_LOGGER = re.compile(r"[A-Za-z_][\w.$/@-]*(?::\d+)?:?")
_SKIPPED = re.compile(r"-+|\||\d+|\[\S*|\(\S*\)")
_LEAD_FIELD = re.compile(r"(?<!\S)(?:(?:\d+|-{1,3}|\|)(?:\s+|$)|\[req-[^\]]*\]\s*|\[\S*\](?:\s+|$)|\[[^\]]*\]\s*)")
_AT_CLASS = re.compile(r"(?<!\w)\d*+([A-Za-z_]\w*+)(?:\$\w++)?@\d+\]")  # from a word's first letter
_LOGGER_AT = re.compile(
    r"(?<![\w$/@.-])(?P<logger>[A-Za-z_][\w$/@-]*+(?:\.[\w$/@-]++)*+(?::\d++)?)(?:\s*+:\s+|\s++[-|]\s+|:(?=\S)|\s*+:$)|"
    r"(?<![\w$/@.-])(?P<dotted>[A-Za-z_][\w$-]*+(?:\.[\w$-]++)++)\s+")


def _service(file: str | None) -> str | None:
    """`nova-compute.log.1.2017-05-16_13:53:08` -> `nova-compute`: the service a log file is named for."""
    return file.split(".log", 1)[0].split(".out", 1)[0].split(".err", 1)[0] or None if file else None


def _line(when, year_known, host, app, severity, text, shape, source) -> LogLine:
    return LogLine(when, year_known, host, app, None, None, severity, text.strip(), shape, source)


def _lead_time(m: re.Match, reference: datetime) -> datetime | None:
    if m.group("iso"):
        when = parse_iso(m.group("iso").replace(",", ".").replace(" +", "+").replace(" -", "-"))
    elif m.group("slash"):
        year = int(m.group("y4"))
        year += 2000 if year < 100 else 0
        frac = (m.group("f") or "0")[:6].ljust(6, "0")
        try:
            when = datetime(year, int(m.group("mo")), int(m.group("dd")),
                            *map(int, m.group("hms").split(":")), int(frac))
        except ValueError:
            return None
    else:
        try:
            when = datetime(2000 + int(m.group("hy")), int(m.group("hmo")), int(m.group("hd")), int(m.group("hh")),
                            int(m.group("hmi")), int(m.group("hs")))
        except ValueError:
            return None
    if when is not None and when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when


def _no_year(mo: str, dd: str, hms: str, frac: str | None, reference: datetime) -> datetime | None:
    micro = int((frac or "0")[:6].ljust(6, "0"))
    return with_year(int(mo), int(dd), tuple(map(int, hms.split(":"))), micro, timezone.utc, reference)


def _level_word(token: str) -> str | None:
    word = token.strip("[]:,")
    return APP_LEVELS.get(word.upper()) if word.isalpha() and (word.isupper() or word.istitle()) else None


def _fields(rest: str) -> tuple[str, str | None, str] | None:
    """(severity, logger, message) from what follows a time, or None when no level field is near."""
    tokens = rest.split()
    logger = None
    for i, token in enumerate(tokens[:MAX_FIELDS_BEFORE_LEVEL + 1]):
        severity = _level_word(token)
        if severity is not None:
            after = rest.split(token, 1)[1]
            return severity, logger, after
        if _SKIPPED.fullmatch(token):
            continue
        if logger is None and _LOGGER.fullmatch(token) and i + 1 < len(tokens) and tokens[i + 1] in ("-", "|"):
            logger = token  # Python `%(name)s - %(levelname)s`
            continue
        return None
    return None


def _skip_fields(text: str) -> tuple[str, str | None]:
    """`text` without its leading pid, `---`, `[thread]` and `[req-...]` fields, and the class a
    log4j `[thread:Class@line]` field names (Zookeeper's layout), if any."""
    named = None
    for _ in range(6):
        m = _LEAD_FIELD.match(text)
        if m is None:
            break
        at = _AT_CLASS.search(m.group(0))
        named = named or (at.group(1) if at else None)
        text = text[m.end():]
    return text, named


def _split_logger(after: str, logger: str | None) -> tuple[str | None, str]:
    """The logger and the message from what follows the level (`[thread] com.x.Foo: msg`, `Foo - msg`)."""
    text, named = _skip_fields(after.lstrip(" -|:,"))
    if logger is None:
        m = _LOGGER_AT.match(text)
        if m:
            logger = m.group("logger") or m.group("dotted")
            text, _ = _skip_fields(text[m.end():])
    return logger or named, text.lstrip(" -|:")


def _timed(line: str, reference: datetime, source: str | None) -> LogLine | None:
    m = _LEAD_TIME.match(line)
    if m is None:
        return None
    rest = line[m.end():]
    if m.group("slash"):
        nginx = _NGINX.match(rest.lstrip())
        if nginx:
            return _line(_lead_time(m, reference), True, None, "nginx",
                         PRI_SEVERITY[_APACHE_LEVEL[nginx.group("lvl")]], nginx.group("msg"), "nginx", source)
    fields = _fields(rest)  # before the time is read: most ISO-stamped lines are syslog, not this
    when = _lead_time(m, reference) if fields is not None or m.group("slash") else None
    if fields is None:
        if m.group("slash") and len(m.group("y4")) == 4:  # Go's `log`: no level field, words decide
            text = rest.strip()
            caller = re.match(r"([\w./-]+\.go:\d+): ", text)
            app = caller.group(1) if caller else None
            text = text[caller.end():] if caller else text
            return _line(when, True, None, app, message_severity(text), text, "go", source)
        return None
    severity, logger, after = fields
    logger, message = _split_logger(after, logger)
    host = None
    if m.group("hdfs"):
        shape = "hdfs"
    elif _OSLO.match(rest):
        shape = "oslo"
    else:
        shape = "applog"
    own = _SELF_ADDRESS.match(message)
    if own:  # Hadoop's DataNode names itself first: `10.251.30.6:50010:Got exception ...`
        host, message = own.group("host"), message[own.end():]
    elif shape == "hdfs" and message.startswith("Receiving block"):
        dest = _RECEIVING_DEST.search(message)  # DataXceiver logs its own address as `dest:`
        host = dest.group(1) if dest else None
    return _line(when, True, host, logger, severity, message, shape, source)


def _logfmt(line: str, reference: datetime, source: str | None) -> LogLine | None:
    pairs = {k.lower(): v.strip('"') for k, v in _LOGFMT_PAIR.findall(line)}
    level = pairs.get("level") or pairs.get("lvl") or pairs.get("severity")
    stamp = pairs.get("time") or pairs.get("ts") or pairs.get("timestamp")
    if level is None and stamp is None:
        return None
    if pairs.get("date") and stamp and ":" in stamp and "-" not in stamp:  # FortiGate: date=... time=...
        stamp = f"{pairs['date']}T{stamp}{pairs.get('tz', '')}"
    when = parse_iso(stamp) if stamp else None
    if when is not None and when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    severity = APP_LEVELS.get(level.upper(), None) if level else None
    message = pairs.get("msg") or pairs.get("message") or pairs.get("logdesc") or pairs.get("error") or line
    return _line(when, True, pairs.get("host") or pairs.get("hostname") or pairs.get("devname"),
                 pairs.get("logger") or pairs.get("component") or pairs.get("caller") or pairs.get("subtype"),
                 severity or message_severity(message), message, "logfmt", source)


def parse(line: str, reference: datetime) -> LogLine | None:
    """An application log line (see the module docstring) as a LogLine, or None."""
    first = line[:1]
    if first == "<":
        pri = _PRI_KV.match(line)  # key=value behind a PRI (FortiGate)
        return _logfmt(line[pri.end():], reference, None) if pri else None
    if line[:3] in MONTHS:  # syslog
        return None
    source = None
    prefix = _FILE_PREFIX.match(line) if not first.isdigit() and first != "[" else None
    if prefix:
        source, line = _service(prefix.group("file")), line[prefix.end():]
        first = line[:1]
    if first.isdigit():
        timed = _timed(line, reference, source)
        if timed is not None:
            return timed
        hpc = _HPC.fullmatch(line)
        if hpc:
            when = datetime.fromtimestamp(int(hpc.group("epoch")), tz=timezone.utc)
            text = hpc.group("msg")
            severity = message_severity(f"{hpc.group('state')} {text}")
            return _line(when, True, hpc.group("node"), hpc.group("comp"), severity, text, "hpc", source)
        pipes = _PIPES.fullmatch(line)
        if pipes:
            try:
                when = datetime.strptime(pipes["d"] + pipes["hms"] + pipes["f"], "%Y%m%d%H:%M:%S%f").replace(tzinfo=timezone.utc)
            except ValueError:
                when = None
            return _line(when, True, None, pipes["comp"], message_severity(pipes["msg"]), pipes["msg"], "pipes", source)
        logcat = _LOGCAT.fullmatch(line)
        if logcat:
            when = _no_year(logcat["mo"], logcat["dd"], logcat["hms"], logcat["f"], reference)
            return LogLine(when, False, None, logcat["tag"].strip(), None, None, _SINGLE_LETTER[logcat["lvl"]],
                           logcat["msg"].strip(), "logcat", source)
        return None
    if first == "[":
        apache = _APACHE.fullmatch(line)
        if apache:
            try:
                when = datetime(int(apache["y"]), MONTHS[apache["mon"]], int(apache["dd"]),
                                *map(int, apache["hms"].split(":")), int((apache["f"] or "0").ljust(6, "0")[:6]),
                                timezone.utc)
            except ValueError:
                when = None
            level = apache["lvl"].rstrip("0123456789")
            severity = PRI_SEVERITY[_APACHE_LEVEL.get(level, 7)]
            return _line(when, True, None, apache["mod"] or "httpd", severity, apache["msg"], "apache", source)
        ctime = _CTIME.fullmatch(line)
        if ctime:  # `dmesg -T`, and other programs that print ctime(3) in brackets
            try:
                when = datetime(int(ctime["y"]), MONTHS[ctime["mon"]], int(ctime["dd"]),
                                *map(int, ctime["hms"].split(":")), tzinfo=timezone.utc)
            except ValueError:
                when = None
            text = ctime["msg"].strip()
            return _line(when, True, None, None, message_severity(text), text, "ctime", source)
        short = _BRACKET_SHORT.fullmatch(line)
        if short:
            when = _no_year(short["mo"], short["dd"], short["hms"], None, reference)
            return LogLine(when, False, None, short["prog"], None, None, message_severity(short["msg"]),
                           short["msg"].strip(), "proxifier", source)
        return _timed(line, reference, source)
    if first in "IWEF" and line[1:2].isdigit():
        klog = _KLOG.fullmatch(line)
        if klog:
            when = _no_year(klog["mo"], klog["dd"], klog["hms"], klog["f"], reference)
            return LogLine(when, False, None, klog["caller"], None, None, _SINGLE_LETTER[klog["lvl"]],
                           klog["msg"].strip(), "klog", source)
    if line.startswith(("time=", "ts=", "level=", "lvl=", "t=", "date=", "logver=")):
        return _logfmt(line, reference, source)
    py = _PY_DEFAULT.fullmatch(line)
    if py:
        return _line(None, True, None, py["logger"], APP_LEVELS[py["lvl"]], py["msg"], "python", source)
    return None
