"""How much of a record the facts layer reads: at most `MAX_FACT_LINE_CHARS` of any one line, and of
any one string (key or value) of a VES/JSON body, so that no single message costs unbounded CPU time.

The parsers' regexes are linear-time, but each line meets dozens of them; the bound keeps the worst
line at a fixed cost (issue 27). It applies to what the facts read only: the record that is summarised
is not changed. A PM body goes to the XML parser whole (its lines are not matched; `pm.MAX_XML_CHARS`
bounds it); its text fallback is bounded like any other text.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from worker.messages import TelemetryRecord

# rsyslog's default maxMessageSize (8k) already cuts longer syslog lines on the way here; the longest
# real lines we have seen (Java/app lines with a request inside, VES additionalText, PM XML pretty-
# printed) are under 1,000 characters, and the facts keep at most the first ~200 of a message anyway.
MAX_FACT_LINE_CHARS = 8192


def bounded_text(text: str) -> str:
    """`text` with each of its lines (as `str.splitlines` splits them) cut to MAX_FACT_LINE_CHARS,
    line ends kept; `text` itself when no line is longer."""
    if len(text) <= MAX_FACT_LINE_CHARS:
        return text
    lines = text.splitlines(keepends=True)
    if all(len(line) <= MAX_FACT_LINE_CHARS for line in lines):
        return text
    cut = []
    for line in lines:
        content = line.splitlines()[0] if line else line
        cut.append(content[:MAX_FACT_LINE_CHARS] + line[len(content):])
    return "".join(cut)


def bounded_value(value: Any) -> Any:
    """A JSON value with every string in it (keys too) cut to MAX_FACT_LINE_CHARS; `value` itself
    when nothing is longer."""
    if isinstance(value, str):
        return value[:MAX_FACT_LINE_CHARS] if len(value) > MAX_FACT_LINE_CHARS else value
    if isinstance(value, dict):
        items = [(bounded_value(k), bounded_value(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items())):
            return value
        return dict(items)
    if isinstance(value, list):
        items = [bounded_value(v) for v in value]
        return value if all(v is v0 for v, v0 in zip(items, value)) else items
    return value


def _bounded_body(record: TelemetryRecord) -> str | dict[str, Any]:
    body = record.body
    if isinstance(body, dict):
        return bounded_value(body)
    if record.kind == "pm":
        return body
    if record.kind == "ves" and len(body) > MAX_FACT_LINE_CHARS:
        try:
            decoded = json.loads(body)
        except ValueError:
            return bounded_text(body)  # not JSON: the VES parser refuses it, the text fallback reads it
        bounded = bounded_value(decoded)
        return body if bounded is decoded or not isinstance(bounded, dict) else bounded
    return bounded_text(body)


def bounded_record(record: TelemetryRecord) -> TelemetryRecord:
    """The record as the facts layer reads it: its body, id and attribute values bounded as above;
    `record` itself when nothing is longer."""
    body = _bounded_body(record)
    attributes = bounded_value(record.attributes)
    record_id = bounded_value(record.id)
    if body is record.body and attributes is record.attributes and record_id is record.id:
        return record
    return msgspec.structs.replace(record, body=body, attributes=attributes, id=record_id)
