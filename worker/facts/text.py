"""Facts from text of no known format: hosts, severity words, error words, time span."""

from __future__ import annotations

import re

from worker.facts.common import ISO_TIME, clip, most_common, time_span, worst_severity
from worker.messages import Facts

# Words that mark a line's severity on the shared scale, checked worst first.
SEVERITY_WORDS = (
    ("critical", re.compile(r"\b(critical|fatal|emerg(ency)?|panic|alert)\b", re.IGNORECASE)),
    ("major", re.compile(r"\b(major|err(or)?s?|fail(ed|ure|ing)?|down|unreachable|crash(ed)?|lost)\b",
                         re.IGNORECASE)),
    ("minor", re.compile(r"\bminor\b", re.IGNORECASE)),
    ("warning", re.compile(r"\b(warn(ing)?|degraded|retry(ing)?|timeout|timed out|high)\b", re.IGNORECASE)),
)
ERROR_WORDS = re.compile(
    r"\b(error|fail(?:ed|ure)?|timeout|timed out|down|unreachable|refused|lost|overload(?:ed)?|"
    r"drop(?:ped)?|crash(?:ed)?|reset|congestion|degraded|exceeded|denied|panic)\b",
    re.IGNORECASE,
)
HOST = re.compile(
    r"\b(?:host=|node=|ne=|element=)?((?:\d{1,3}\.){3}\d{1,3}|[A-Za-z][A-Za-z0-9]*+(?:[-_.][A-Za-z0-9]++){0,31}[-_]\d++[A-Za-z0-9]*+)\b"  # {0,31}: linear (issue 27); no host name has more labels
)
HOST_KEY = re.compile(r"\b(?:host|hostname|node|ne|element|source)[=:]\s*([A-Za-z0-9][\w.-]*)", re.IGNORECASE)


LEADING_TIME = re.compile(rf"^\s*(?:{ISO_TIME.pattern}|[A-Z][a-z]{{2}} [ \d]\d \d{{2}}:\d{{2}}:\d{{2}})\s*")


def line_severity(line: str) -> str:
    return next((name for name, pattern in SEVERITY_WORDS if pattern.search(line)), "info")


def _hosts(line: str) -> list[str]:
    keyed = HOST_KEY.findall(line)
    return keyed or [h for h in HOST.findall(line) if not h[:1].isdigit() or h.count(".") == 3]


def parse(text: str, host: str | None = None) -> Facts:
    """Facts from any text. The problem is the first line of the worst severity seen. host: the element
    the record's own attributes name (a collector's label); without it the entity is a guess from
    host-like words in the text."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    severities = [line_severity(line) for line in lines]
    worst = worst_severity(severities) or "info"
    problem_lines = [line for line, s in zip(lines, severities) if s == worst] if worst != "info" else []
    entity = host or most_common(h for line in problem_lines for h in _hosts(line)) or most_common(
        h for line in lines for h in _hosts(line))
    first, last = time_span(lines)
    errors = list(dict.fromkeys(w.lower() for w in ERROR_WORDS.findall(text)))
    details = {"errorWords": ", ".join(errors[:10])} if errors else {}
    details["lines"] = str(len(lines))
    return Facts(
        entity=entity,
        severity=worst,
        problem=clip(LEADING_TIME.sub("", problem_lines[0])) if problem_lines else None,
        first_seen=first,
        last_seen=last,
        event_count=len(problem_lines) or None,
        details=details,
    )
