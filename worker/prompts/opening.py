"""The answer's opening, written from the facts before the model writes a word.

A 135M model asked to name the element, the problem and the time sometimes drops the problem,
writes an address or a date in its place, or copies a worked example. So the prompt ends with the
first words of the answer, rendered from the facts: the element, the severity, the problem with
its count and the time span. The model continues that text (it elaborates, it no longer chooses)
and the summary is the opening followed by the continuation.

A record whose facts hold no problem gets an opening that says what the record is (its kind,
element, event count and span) and states that no known problem was recognised: the model then
describes its content without inventing a fault for it.

The opening is the last message of the prompt, with the role `assistant`: `tokenize_messages`
renders it after the chat template's generation prompt, unclosed, so it belongs to the per-record
tail and the shared head of a record kind stays cached. It never holds a newline (the answer stops
at the first one).
"""

from __future__ import annotations

import re

from worker.messages import Facts, TelemetryRecord
from worker.prompts.text import withhold_instructions

OPENING_ROLE = "assistant"
# two problems of a log window with their counts, or three senders' own problems (facts.syslog);
# more drowns the sentence
MAX_PROBLEM_CHARS = 340
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_ISO_UTC = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}:\d{2}:\d{2})(?:\.\d+)?Z$")
_WHITESPACE = re.compile(r"\s+")
# A PAM module's tag (`pam_unix(sshd:auth): `) before a message: where it came from, not what went wrong
_MODULE_TAG = re.compile(r"(^|; )[\w.-]+\([\w:.-]+\): ")
_KIND_WORDS = {"ves": ("VES event", "event", "events"), "syslog": ("syslog window", "line", "lines"),
               "pm": ("3GPP PM report", "measurement", "measurements"),
               "trace": ("signalling trace", "message", "messages"), "text": ("log text", "line", "lines")}


def _one_line(text: str) -> str:
    return _WHITESPACE.sub(" ", text).strip()


def _day_and_time(iso: str, yearless: bool) -> tuple[str, str] | None:
    """(`2026-11-29`, `00:00:50`), or (`Nov 29`, ...) when the record gave no year; None when not ISO UTC."""
    m = _ISO_UTC.match(iso)
    if m is None:
        return None
    year, month, day, clock = m.groups()
    return (f"{_MONTHS[int(month) - 1]} {day}" if yearless else f"{year}-{month}-{day}"), clock


def time_span_words(facts: Facts) -> str | None:
    """The facts' span as an operator reads it: `on 2026-11-29 from 00:00:50 to 00:01:47 UTC`,
    `on ... at ... UTC` for one instant; no year when the record gave none (a year taken from the receive
    time would be an invented fact). None when the facts have no time."""
    first, last = facts.first_seen, facts.last_seen
    if not first and not last:
        return None
    yearless = facts.year_source == "receive time"
    first, last = first or last, last or first
    a, b = _day_and_time(first, yearless), _day_and_time(last, yearless)
    if a is None or b is None:  # not the parsers' ISO UTC form: shown as it is
        return f"at {first}" if first == last else f"from {first} to {last}"
    if a == b:
        return f"on {a[0]} at {a[1]} UTC"
    if a[0] == b[0]:
        return f"on {a[0]} from {a[1]} to {b[1]} UTC"
    return f"from {a[0]} {a[1]} to {b[0]} {b[1]} UTC"


def _problem_phrase(problem: str) -> str:
    """The facts' problem on one line, cut at a `; ` boundary past `MAX_PROBLEM_CHARS`."""
    text = _MODULE_TAG.sub(r"\1", _one_line(problem))
    if len(text) <= MAX_PROBLEM_CHARS:
        return text
    parts = text.split("; ")
    kept = parts[0]
    for part in parts[1:]:
        if len(kept) + 2 + len(part) > MAX_PROBLEM_CHARS:
            break
        kept += "; " + part
    return kept if len(kept) <= MAX_PROBLEM_CHARS else kept[:MAX_PROBLEM_CHARS].rsplit(" ", 1)[0] + " ..."


def _count_words(record: TelemetryRecord, facts: Facts) -> str | None:
    """`1 line`, `12 events`: how much the record holds, from the facts."""
    count = facts.event_count
    if count is None and facts.details.get("lines", "").isdigit():
        count = int(facts.details["lines"])
    if count is None:
        return None
    _, one, many = _KIND_WORDS.get(record.kind, ("record", "item", "items"))
    return f"{count} {one if count == 1 else many}"


def answer_opening(record: TelemetryRecord, facts: Facts) -> str:
    """The first words of the summary of `record`, from its facts (see the module docstring) and,
    when the facts name no problem, the record's first line. One line: the model continues it."""
    element = _one_line(facts.entity) if facts.entity else "No element named"
    span = time_span_words(facts)
    severity = f", severity {facts.severity}" if facts.severity else ""
    if facts.problem and facts.problem.strip():
        return f"{element}{severity}: {_problem_phrase(facts.problem)}" + (f", {span}." if span else ".")
    what = _KIND_WORDS.get(record.kind, (record.kind,))[0]
    counted = _count_words(record, facts)
    told = ", ".join(p for p in (what + (f" of {counted}" if counted else ""), span) if p)
    quote = _first_line(record)
    return f"{element}{severity}: {told}, no known problem recognised" + (f'; it reads "{quote}"' if quote else ".")


def _first_line(record: TelemetryRecord) -> str | None:
    """The first line of a text record, as the record says it (lines aimed at the model withheld),
    cut at `MAX_PROBLEM_CHARS`; None for VES and PM bodies, whose first line is structure."""
    if record.kind in ("ves", "pm") or not isinstance(record.body, str):
        return None
    line = next((_one_line(x) for x in withhold_instructions(record.body).splitlines() if x.strip()), None)
    if line is None or len(line) <= MAX_PROBLEM_CHARS:
        return line
    return line[:MAX_PROBLEM_CHARS].rsplit(" ", 1)[0] + " ..."


def opening_message(record: TelemetryRecord, facts: Facts) -> dict[str, str]:
    """The opening as the prompt's last message (see `worker.summarizer.preprocess.tokenize_messages`)."""
    return {"role": OPENING_ROLE, "content": answer_opening(record, facts)}


def split_opening(messages: list[dict[str, str]]) -> tuple[list[dict[str, str]], str]:
    """(the messages before the opening, the opening text); "" when the prompt has none."""
    if messages and messages[-1]["role"] == OPENING_ROLE:
        return messages[:-1], messages[-1]["content"]
    return messages, ""


def with_opening(opening: str, continuation: str) -> str:
    """The summary: the opening and the model's continuation of it, as one line."""
    if not opening:
        return continuation.strip()
    return opening + continuation.rstrip()
