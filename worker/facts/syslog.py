"""Facts from a window of log lines: syslog in every shape `loglines` reads, one line or 50,000.

The lines are grouped into templates (`groups`); the problem is the dominant templates, ranked by
count weighted by severity (each step of the scale weighs ten times the next: one `critical` line
outranks 9 `major` ones, 38 failed logins outrank one `error`), written with their counts. The
severity is the worst seen. What a message costs the network weighs in (`impact`): a loss of
service leads among equals (at least major when a vendor's code names it), a hygiene event ranks as
at most warning.
When two or more senders have problems of their own, the problem names each (up to
`MAX_SENDERS_NAMED`) with its count. The element is the sender of the leading problem, else the one
with the worst severity, then the most lines (lines addressing the model do not count); a window
whose lines name no sender (application logs) takes the service its log file is named for, else none
(the record's attributes).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from worker.facts.common import SEVERITY_RANK, SEVERITY_WEIGHT as WEIGHT, aimed_at_model, clip, iso_utc
from worker.facts.groups import Group, group_messages
from worker.facts.impact import HYGIENE, SERVICE, classify, coded
from worker.facts.levels import PRI_SEVERITY
from worker.facts.loglines import LogLine, parse_line
from worker.messages import Facts, ProblemGroup

__all__ = ["PRI_SEVERITY", "SYSLOG_NAMES", "parse", "parse_lines"]

SYSLOG_NAMES = ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug")
MAX_PROBLEM_GROUPS = 5   # in Facts.problems
PROBLEM_TEXT_GROUPS = 2  # in the one-line problem a small model reads
MAX_LOG_PROBLEM_CHARS = 200
MAX_SENDERS_NAMED = 3         # senders with a problem of their own named in the problem
LEAD_PHRASE_CHARS = 100       # the first sender's problem, bracketed asides dropped first
SENDER_PHRASE_CHARS = 72      # each other one's
MAX_SENDERS_PROBLEM_CHARS = 340
HYGIENE_RANK = SEVERITY_RANK["warning"]
# How the lines after a Java or Python error begin (they belong to the line before).
CONTINUATIONS = ("at ", "Caused by:", "Traceback ", "File \"", "...", "Exception in thread", "\tat ")


def parse_lines(text: str, reference: datetime | None = None) -> tuple[list[LogLine], int, int]:
    """(the log lines of `text`, how many non-blank lines were not log lines, how many of those
    continue the line before: a stack trace's frames, an indented detail)."""
    lines: list[LogLine] = []
    unparsed = continued = 0
    for raw in text.splitlines():
        if not raw.strip():
            continue
        line = parse_line(raw, reference)
        if line is None:
            unparsed += 1
            continued += bool(lines) and (raw[:1].isspace() or raw.startswith(CONTINUATIONS))
        else:
            lines.append(line)
    return lines, unparsed, continued


def _ranked(groups: list[Group], impacts: dict[int, int]) -> list[Group]:
    """The groups worth reporting, leading first: the non-info ones when there are any, by count
    weighted by severity, a hygiene event's severity counting as at most warning (`impact`), a loss
    of service first among equals; the worst group is always among the first two."""
    def rank(group: Group) -> tuple[int, int, int]:
        impact = impacts[id(group)]
        level = group.severity if impact != HYGIENE or SEVERITY_RANK[group.severity] >= HYGIENE_RANK else "warning"
        return (-group.count * WEIGHT[level], impact, SEVERITY_RANK[group.severity])

    serious = [g for g in groups if g.severity != "info"] or groups
    ranked = sorted(serious, key=rank)
    worst = min(serious, key=lambda g: (SEVERITY_RANK[g.severity], impacts[id(g)], -g.count))
    if worst not in ranked[:PROBLEM_TEXT_GROUPS]:  # the worst line is always named
        ranked = [ranked[0], worst] + [g for g in ranked[1:] if g is not worst]
    return ranked


def _with_impact(groups: list[Group]) -> dict[int, int]:
    """Each group's impact class (`impact.classify`); a loss of service a vendor's code names counts as
    at least major."""
    impacts = {}
    for group in groups:
        text = group.text()
        impacts[id(group)] = classify(group.app, text)
        if impacts[id(group)] == SERVICE and SEVERITY_RANK[group.severity] > SEVERITY_RANK["major"] \
                and coded(group.app, text):
            group.severity = "major"
    return impacts


def _last_aside(text: str, end: int) -> tuple[int, int] | None:
    """(start, end) of the last bracketed aside of `text` (one line) that closes before `end`, the spaces
    before it included, or None. Found from the end with `rfind`: a regex for "an aside with none after
    it" rescanned the rest of the line from every aside, cubic over `_compact`'s loop (issue 27)."""
    while True:
        close = max(text.rfind(")", 0, end), text.rfind("]", 0, end))
        if close < 0:
            return None
        before = max(text.rfind(c, 0, close) for c in "()[]")
        if before >= 0 and text[before] in "([":
            start = before
            while start and text[start - 1].isspace():
                start -= 1
            return start, close + 1
        end = close


def _compact(text: str, limit: int) -> str:
    """`text` within `limit` characters: bracketed asides dropped from the end, then its middle (the
    head and the end kept, cut at words)."""
    end = len(text)
    while len(text) > limit:
        aside = _last_aside(text, end)
        if aside is None:
            break
        start, stop = aside
        # after the cut, only the tail's first bracket can close a new aside: those after it did not
        first = min((i for i in (text.find(c, stop) for c in "()[]") if i >= 0), default=None)
        end = start if first is None else start + (first - stop) + 1
        text = text[:start] + text[stop:]
    if len(text) <= limit:
        return text
    # the head says what, the end of a state change says how it ended (`has entered the DOWN state.`)
    head = text[: int(limit * 0.6)].rsplit(" ", 1)[0]
    tail = text[len(text) - (limit - len(head) - 5):]
    tail = tail.split(" ", 1)[1] if " " in tail else tail
    return f"{head} ... {tail}"


def _senders_with_problems(ranked: list[Group]) -> list[tuple[str, Group, int]]:
    """(host, its leading group, that host's lines in it) for every host with a problem of its own,
    in the order of their leading groups."""
    out: dict[str, tuple[Group, int]] = {}
    for group in ranked:
        if group.severity == "info":
            continue
        for host, n in group.hosts.most_common():
            out.setdefault(host, (group, n))
    return [(host, group, n) for host, (group, n) in out.items()]


def _senders_phrase(senders: list[tuple[str, Group, int]]) -> str:
    """`<problem> (2 times), also on rtr-2 (once); leaf-7: <its problem> (12 times); 3 more senders
    with problems`: each sender's leading problem with its count, senders sharing one problem named
    together; up to `MAX_SENDERS_NAMED` problems and as many senders beside each, while they fit in
    `MAX_SENDERS_PROBLEM_CHARS` (a phrase is never cut off), the rest counted.
    The first sender is the element, named before the problem."""
    by_group: dict[int, list[tuple[str, Group, int]]] = {}
    for sender in senders:
        by_group.setdefault(id(sender[1]), []).append(sender)
    parts, named = [], 0
    for i, members in enumerate(list(by_group.values())[:MAX_SENDERS_NAMED]):
        (host, group, n), others = members[0], members[1:]
        limit = LEAD_PHRASE_CHARS if i == 0 else SENDER_PHRASE_CHARS
        text = (f"{host}: " if i else "") + f"{_compact(group.text(), limit)} ({_times(n)})"
        if others:
            shown = others[:MAX_SENDERS_NAMED]
            text += ", also on " + ", ".join(f"{h} ({_times(k)})" for h, _, k in shown)
            if len(others) > len(shown):
                text += f" and {len(others) - len(shown)} more"
        if parts and sum(len(p) + 2 for p in parts) + len(text) > MAX_SENDERS_PROBLEM_CHARS - 40:
            break  # the rest are counted: a cut phrase would lose what happened
        parts.append(text)
        named += len(members)
    rest = len(senders) - named
    if rest:
        parts.append(f"{rest} more sender{'s' if rest > 1 else ''} with problems")
    return "; ".join(parts)


def _times(n: int) -> str:
    return f"{n} times" if n > 1 else "once"


def _sender(lines: list[LogLine], addressed: list[Group], field: str) -> str | None:
    """The `field` (host, or a log file's service) with the worst severity, then the most lines;
    None when no line names one."""
    worst: dict[str, int] = {}
    count: Counter = Counter()
    for line in lines:
        name = getattr(line, field)
        if name is None or (addressed and aimed_at_model(line.text)):
            continue
        rank = SEVERITY_RANK[line.severity]
        worst[name] = min(rank, worst.get(name, rank))
        count[name] += 1
    if not count:
        return None
    return min(count, key=lambda host: (worst[host], -count[host]))  # first seen on ties


def _phrase(group: Group, with_app: bool) -> str:
    text = group.text()
    if with_app and group.app:
        text = f"{group.app}: {text}"
    return f"{text} ({_times(group.count)})"


def _iso(when: datetime | None) -> str | None:
    return iso_utc(when) if when is not None else None


def parse(text: str, reference: datetime | None = None, reference_source: str = "receive time") -> Facts | None:
    """Facts from a log window, or None when no line is a log line. `reference` gives the year of
    BSD times without one; `reference_source` names where it came from (for `Facts.year_source`)."""
    lines, unparsed, continued = parse_lines(text, reference)
    if not lines:
        return None
    details: dict[str, str] = {}
    groups = group_messages((line.app, line.text, line.severity, line.time, line.host) for line in lines)
    addressed = [g for g in groups if aimed_at_model(g.text())]
    trusted = [g for g in groups if g not in addressed] or groups
    impacts = _with_impact(trusted)
    ranked = _ranked(trusted, impacts)
    leading = ranked[:MAX_PROBLEM_GROUPS]
    worst = min((g.severity for g in trusted), key=SEVERITY_RANK.__getitem__)
    hosts = Counter(line.host for line in lines if line.host)
    apps = Counter(line.app for line in lines if line.app)
    senders = _senders_with_problems(ranked)
    entity = (senders[0][0] if senders else None) or _sender(lines, addressed, "host") or \
        _sender(lines, addressed, "source")
    times = [line.time for line in lines if line.time is not None]
    shown = leading[:PROBLEM_TEXT_GROUPS]
    if len(senders) > 1:  # each sender with a problem of its own, up to a bound, with its count
        problem = _senders_phrase(senders)
        details["sendersWithProblems"] = str(len(senders))
    else:
        # the lead's app is in details: a small model that reads `sshd: ...` first drifts into log lines
        problem = "; ".join(_phrase(g, with_app=i > 0 and g.app != shown[0].app) for i, g in enumerate(shown))
    if leading[0].app:
        details["app"] = leading[0].app
    pris = [line.pri for line in lines if line.pri is not None and line.severity == worst]
    if pris:
        details["syslogSeverity"] = SYSLOG_NAMES[min(p % 8 for p in pris)]
    msgids = Counter(line.msgid for line in lines if line.msgid and line.severity == worst)
    if msgids:
        details["msgid"] = msgids.most_common(1)[0][0]
    details["worstSeverityCount"] = str(sum(line.severity == worst for line in lines))
    if len(groups) > 1:
        details["templates"] = str(len(groups))
    if len(hosts) > 1:
        details["hosts"] = ", ".join(h for h, _ in hosts.most_common(8))
    if len(apps) > 1:
        details["apps"] = ", ".join(a for a, _ in apps.most_common(8))
    if unparsed > continued:  # a stack trace's frames belong to the line before them
        details["unparsedLines"] = str(unparsed - continued)
    if addressed:
        details["linesAddressingModel"] = str(sum(g.count for g in addressed))
    year_source = reference_source if any(not line.year_known for line in lines if line.time) else None
    return Facts(
        entity=entity,
        severity=worst,
        problem=clip(problem, MAX_LOG_PROBLEM_CHARS if len(senders) < 2 else MAX_SENDERS_PROBLEM_CHARS),
        first_seen=_iso(min(times)) if times else None,
        last_seen=_iso(max(times)) if times else None,
        event_count=len(lines),
        details=details,
        problems=[ProblemGroup(text=clip(g.text()), count=g.count, severity=g.severity, element=g.main_host(),
                               first_seen=_iso(g.first), last_seen=_iso(g.last)) for g in leading],
        year_source=year_source,
    )
