"""3GPP TS 32.401 PM XML, the older short-tag layout still written by many RAN nodes:
`mdc` > `mfh` (`ffv`, `sn` sender DN, `st`, `vn`, `cbt` begin time) > `md` (`neid`: `neun` name,
`nedn` DN; `mi`: `mts` end time, `gp` seconds, `mt` counter names in order, `mv`: `moid`, `r` values
in order, `sf` suspect) > `mff` (`ts` end time). Times are `YYYYMMDDhhmmss` with an optional zone
(`Z`, `+0200`). Read with the same KPI rules as the other PM files (`pm.assess`)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import datetime, timedelta, timezone

from worker.facts.common import iso_utc
from worker.facts.pm_kpis import PmError, assess, local as _local, short_dn as _short_dn
from worker.messages import Facts

_TIME = re.compile(r"(\d{14})(?:\.\d+)?(Z|[+-]\d{2}:?\d{2})?")


def _time(text: str | None) -> str | None:
    m = _TIME.fullmatch((text or "").strip())
    if m is None:
        return None
    zone = timezone.utc
    if m.group(2) and m.group(2) != "Z":
        digits = m.group(2).replace(":", "")
        delta = timedelta(hours=int(digits[1:3]), minutes=int(digits[3:5]))
        zone = timezone(-delta if digits[0] == "-" else delta)
    return iso_utc(datetime.strptime(m.group(1), "%Y%m%d%H%M%S").replace(tzinfo=zone))


def _child(node: ET.Element, name: str) -> ET.Element | None:
    return next((c for c in node if _local(c.tag) == name), None)


def _text(node: ET.Element | None, name: str) -> str | None:
    child = _child(node, name) if node is not None else None
    return (child.text or "").strip() or None if child is not None else None


def parse_mdc(root: ET.Element) -> Facts:
    """Facts from an `mdc` tree. Raises PmError when it holds no counter value."""
    header, footer = _child(root, "mfh"), _child(root, "mff")
    sender = _short_dn(_text(header, "sn") or "") or None
    first_seen, last_seen = _time(_text(header, "cbt")), _time(_text(footer, "ts"))
    per_object: dict[tuple[str | None, str], dict[str, float]] = defaultdict(dict)
    totals: dict[str, float] = defaultdict(float)
    elements: list[str] = []
    period = None
    for block in (c for c in root if _local(c.tag) == "md"):
        neid = _child(block, "neid")
        element = _short_dn(_text(neid, "nedn") or "") or _text(neid, "neun") or sender
        if element and element not in elements:
            elements.append(element)
        for info in (c for c in block if _local(c.tag) == "mi"):
            period = period or _text(info, "gp")
            last_seen = last_seen or _time(_text(info, "mts"))
            names = [(c.text or "").strip() for c in info if _local(c.tag) == "mt"]
            for value in (c for c in info if _local(c.tag) == "mv"):
                obj = _text(value, "moid") or ""
                for name, r in zip(names, (c for c in value if _local(c.tag) == "r")):
                    try:
                        number = float((r.text or "").strip())
                    except ValueError:
                        continue
                    per_object[(element, obj)][name] = number
                    totals[name] += number
    if not totals:
        raise PmError("mdc holds no numeric counter values")
    details = {"measuredObjects": str(len(per_object))}
    if period:
        details["granularityPeriod"] = f"{period} s"
    if len(elements) > 1:
        details["managedElements"] = ", ".join(elements[:8])
    severity, problem, worst = assess(per_object, totals, elements, details)
    error = None
    if first_seen and last_seen and last_seen < first_seen:
        error = f"PM file's end time {last_seen} precedes its begin time {first_seen}; span given in order"
        first_seen, last_seen = last_seen, first_seen
    return Facts(entity=worst or (elements[0] if elements else sender), severity=severity, problem=problem,
                 first_seen=first_seen, last_seen=last_seen or first_seen, event_count=len(per_object),
                 details=details, facts_error=error)
