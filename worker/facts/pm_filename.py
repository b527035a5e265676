"""3GPP PM file names (TS 28.550, formerly TS 32.432):
`<Type><Startdate>.<Starttime>-[<Enddate>.]<Endtime>[_<UniqueId>][_-_<RC>].<ext>`, e.g.
`A20261114.1000+0100-1015+0100_gNB-0042.xml` or
`C20261114.2345+0000-20261115.0000+0000_SubNetwork=north,ManagedElement=gNB-7.xml.gz`.

Type A: one element, one granularity period; B: several elements; C: one element, several
periods; D: several and several. The unique id names the sending element (a name or a DN).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

_NAME = re.compile(
    r"(?P<type>[ABCD])(?P<date>\d{8})\.(?P<start>\d{4})(?P<tz1>[+-]\d{4})?-(?:(?P<end_date>\d{8})\.)?"
    r"(?P<end>\d{4})(?P<tz2>[+-]\d{4})?(?:_(?P<id>.+?))?(?:_-_(?P<rc>\d+))?(?:\.[A-Za-z0-9]+)*")
# Record attributes that carry a file's name (OpenTelemetry, Vector, Fluent Bit, our own).
FILE_ATTRIBUTES = ("fileName", "filename", "file", "log.file.name", "log.file.path", "path")
ELEMENTS_BY_TYPE = {"A": "one", "B": "several", "C": "one", "D": "several"}


class PmFileName(NamedTuple):
    begin: datetime
    end: datetime
    element: str | None
    file_type: str


def _zone(text: str | None) -> timezone:
    if not text:
        return timezone.utc
    delta = timedelta(hours=int(text[1:3]), minutes=int(text[3:5]))
    return timezone(-delta if text[0] == "-" else delta)


def _element(unique_id: str | None) -> str | None:
    """`SubNetwork=north,ManagedElement=gNB-7` -> `gNB-7`; a plain name as it is."""
    if not unique_id:
        return None
    rdns = dict(p.split("=", 1) for p in unique_id.split(",") if "=" in p)
    return rdns.get("ManagedElement") or (unique_id.rsplit(",", 1)[-1].split("=", 1)[-1] if rdns else unique_id)


def parse_file_name(name: str) -> PmFileName | None:
    """The period and element a PM file's name states, or None when it is not a 28.550 name."""
    m = _NAME.fullmatch(name.replace("\\", "/").rsplit("/", 1)[-1])
    if m is None:
        return None
    try:
        begin = datetime.strptime(m["date"] + m["start"], "%Y%m%d%H%M").replace(tzinfo=_zone(m["tz1"]))
        end = datetime.strptime((m["end_date"] or m["date"]) + m["end"], "%Y%m%d%H%M").replace(
            tzinfo=_zone(m["tz2"] or m["tz1"]))
    except ValueError:
        return None
    if end < begin and not m["end_date"]:  # `2345-0000`: the period ends the next day
        end += timedelta(days=1)
    return PmFileName(begin, end, _element(m["id"]), m["type"])
