"""ArcSight CEF and IBM LEEF, the key=value envelopes security gear (firewalls, IDS, proxies) puts in a
syslog message: `CEF:Version|Vendor|Product|DeviceVersion|SignatureID|Name|Severity|ext` and
`LEEF:Version|Vendor|Product|Version|EventID|ext` (extension `key=value` pairs; `|` and `=` escaped
with a backslash). The event name and `msg=` are the text; the severity is CEF's 0-10 (or
Low/Medium/High/Very-High) or LEEF's `sev=` 1-10; `dvchost=` / `dvc=` name the device."""

from __future__ import annotations

import re
from typing import NamedTuple

_SPLIT = re.compile(r"(?<!\\)\|")
_PAIR = re.compile(r"(?<!\w)(\w++)=((?:[^=\\]|\\.)*?)(?=(?<!\s)\s++\w++=|$)")
_WORDS = {"unknown": None, "low": 2, "medium": 5, "high": 8, "very-high": 10, "very high": 10}


class Envelope(NamedTuple):
    text: str
    severity: str | None
    device: str | None


def _scale(number: int | None) -> str | None:
    """CEF/LEEF 0-10 onto the shared scale: 9-10 critical, 7-8 major, 4-6 warning, 0-3 info."""
    if number is None:
        return None
    return "critical" if number >= 9 else "major" if number >= 7 else "warning" if number >= 4 else "info"


def _number(value: str) -> int | None:
    value = value.strip().lower()
    if value.isdigit():
        return min(int(value), 10)
    return _WORDS.get(value)


def parse(message: str) -> Envelope | None:
    """The CEF or LEEF envelope in `message` (at its start), or None when it is neither."""
    if message.startswith("CEF:"):
        parts = _SPLIT.split(message, 7)
        if len(parts) < 7:
            return None
        extension = dict(_PAIR.findall(parts[7])) if len(parts) > 7 else {}
        name, severity = parts[5].replace("\\|", "|"), _scale(_number(parts[6]))
    elif message.startswith("LEEF:"):
        parts = _SPLIT.split(message, 5)
        if len(parts) < 5:
            return None
        extension = dict(_PAIR.findall(parts[5].replace("\t", " "))) if len(parts) > 5 else {}
        name, severity = parts[4], _scale(_number(extension.get("sev", "")))
    else:
        return None
    detail = extension.get("msg") or extension.get("reason") or ""
    text = f"{name}: {detail}" if detail and detail != name else name
    return Envelope(text.replace("\\=", "=").strip(), severity, extension.get("dvchost") or extension.get("dvc"))
