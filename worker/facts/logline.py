"""What every log-line reader returns, and the time pieces they share (month names, zone names)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo
from typing import NamedTuple

MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}
MONTH_NAMES = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"

# Zone names network gear appends to its times (`clock timezone`, `show-timezone`), as UTC offsets in
# minutes. Ambiguous abbreviations take their most common meaning in operations (IST: India).
ZONE_MINUTES = {
    "UTC": 0, "GMT": 0, "Z": 0, "WET": 0, "WEST": 60, "BST": 60, "CET": 60, "MET": 60, "CEST": 120,
    "MEST": 120, "EET": 120, "EEST": 180, "MSK": 180, "IST": 330, "ICT": 420, "WIB": 420, "CST": -360,
    "CDT": -300, "EST": -300, "EDT": -240, "MST": -420, "MDT": -360, "PST": -480, "PDT": -420, "AKST": -540,
    "HST": -600, "HKT": 480, "SGT": 480, "AWST": 480, "JST": 540, "KST": 540, "AEST": 600, "AEDT": 660,
    "NZST": 720, "NZDT": 780, "BRT": -180, "ART": -180,
}


class LogLine(NamedTuple):
    time: datetime | None  # timezone-aware; a time without zone is read as UTC
    year_known: bool       # False when the year came from the reference time
    host: str | None
    app: str | None
    msgid: str | None
    pri: int | None
    severity: str          # on the shared scale (from a vendor code, PRI or level words)
    text: str
    shape: str             # rfc5424, rfc3164, bsd, iso, ras, a vendor (cisco, huawei ...) or an app layout
    source: str | None = None  # the service a log file prefix names (`nova-compute`), never the element


def zone_of(text: str | None) -> tzinfo | None:
    """`UTC`, `CET`, `+08:00`, `UTC+8`, `GMT-05:00` as a tzinfo; None for an unknown name."""
    if not text:
        return timezone.utc
    text = text.strip().removesuffix(" DST").strip()
    name = text.rstrip("+-:0123456789")
    offset = text[len(name):]
    if name and name not in ZONE_MINUTES:
        return None
    minutes = ZONE_MINUTES.get(name, 0)
    if offset:
        sign = -1 if offset[0] == "-" else 1
        digits = offset[1:].replace(":", "")
        if not digits.isdigit():
            return None
        hours, mins = (int(digits[:-2] or 0), int(digits[-2:])) if len(digits) > 2 else (int(digits), 0)
        minutes += sign * (hours * 60 + mins)
    return timezone(timedelta(minutes=minutes))


def with_year(month: int, day: int, hms: tuple[int, int, int], micro: int, tz: tzinfo,
              reference: datetime) -> datetime | None:
    """A time without a year, in the reference's year (last year when that lands 2 days past it)."""
    try:
        when = datetime(reference.year, month, day, *hms, micro, tz)
    except ValueError:
        return None
    if when > reference + timedelta(days=2):  # December lines read in January: last year
        when = when.replace(year=reference.year - 1)
    return when
