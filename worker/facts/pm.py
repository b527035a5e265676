"""Facts from a 3GPP PM XML file: TS 32.435 `measCollecFile` or TS 28.532 `measDataFile` (the
same tree with `measEntity` for `managedElement` and the times in `fileHeader/measData` and
`fileFooter/measData`): element, counters, derived success rates, period. The older TS 32.401
`mdc` layout is read by `pm_mdc` with the same rules.

The element is the `ManagedElement` of the DN (`...,ManagedElement=RNC-Gbg-1`), else the userLabel,
else the DN's last value: never a function or cell under it (`RncFunction=RF-1`). Processing
instructions before the XML declaration (`<?xml-stylesheet?>` first) are accepted; a file whose end
precedes its begin gets its span in order and says so in facts_error. A TS 28.550 file name
(`A20261114.1000+0100-1015+0100_gNB-7.xml`), when the record carries one, supplies what the XML lacks.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict

from worker.facts.common import iso_utc, parse_iso
from worker.facts.pm_filename import PmFileName
from worker.facts.pm_kpis import ME_IN_DN as _ME_IN_DN, RATIOS, PmError, assess, local as _local, short_dn as _short_dn
from worker.facts.pm_mdc import parse_mdc
from worker.messages import Facts

__all__ = ["MAX_XML_CHARS", "RATIOS", "PmError", "element_hint", "parse"]

ROOTS = ("measCollecFile", "measDataFile")
ELEMENT_NODES = ("managedElement", "measEntity")
_DECLARATION = re.compile(r"<\?xml\s[^>]*\?>")  # anywhere: a PI may precede it in the field
_LABEL = re.compile(r"userLabel=\"([^\"]+)\"")

# Guard before parsing: bigger than any sane single PM file, and no DTDs (entity expansion).
MAX_XML_CHARS = 16 * 1024 * 1024
MAX_COUNTER_DETAILS = 12


def _children(node: ET.Element, name: str) -> list[ET.Element]:
    return [c for c in node if _local(c.tag) == name]


def _first(node: ET.Element, name: str) -> ET.Element | None:
    return next((c for c in node.iter() if _local(c.tag) == name), None)


def _element_of(node: ET.Element) -> str | None:
    dn = node.get("localDn", "")
    if _ME_IN_DN.search(dn):
        return _short_dn(dn)
    return node.get("userLabel") or _short_dn(dn) or None


def element_hint(text: str) -> str | None:
    """The managed element a PM file that does not parse still names (its DN, else a userLabel)."""
    me = _ME_IN_DN.search(text.replace("\"", ","))
    if me:
        return me.group(1).strip()
    label = _LABEL.search(text)
    return label.group(1) if label else None


def _period_seconds(duration: str | None) -> int | None:
    m = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?", duration or "")
    if not m or not any(m.groups()):
        return None
    h, mi, s = (int(g or 0) for g in m.groups())
    return h * 3600 + mi * 60 + s


def parse(text: str, file_name: PmFileName | None = None) -> Facts:
    """Facts from one PM file (`file_name`: what its 28.550 name says). Raises PmError when it cannot
    be parsed."""
    if len(text) > MAX_XML_CHARS:
        raise PmError(f"PM XML of {len(text)} characters is over the {MAX_XML_CHARS} limit")
    if "<!DOCTYPE" in text or "<!ENTITY" in text:
        raise PmError("PM XML with a DTD is refused (entity expansion)")
    try:
        root = ET.fromstring(_DECLARATION.sub("", text.lstrip("\ufeff"), count=1).strip())
    except ET.ParseError as exc:
        raise PmError(f"PM XML does not parse: {exc}") from exc
    if _local(root.tag) == "mdc":
        return parse_mdc(root)
    if _local(root.tag) not in ROOTS:
        raise PmError(f"root element is <{_local(root.tag)}>, not <measCollecFile> (TS 32.435), "
                      f"<measDataFile> (TS 28.532) or <mdc> (TS 32.401)")
    sender = _first(root, "fileSender")
    sender_name = (_short_dn(sender.get("localDn", "")) or sender.get("senderName") or None) if sender is not None \
        else None
    header = next(iter(_children(root, "fileHeader")), None)
    footer = next(iter(_children(root, "fileFooter")), None)
    stamps = [n for part in (header, footer) if part is not None for n in part.iter()]
    first_seen = next((_iso(n.get("beginTime")) for n in stamps if n.get("beginTime")), None)
    file_end = next((_iso(n.get("endTime")) for n in stamps if n.get("endTime")), None)
    # one block per measData under the root; each names its managed element (a file may hold several)
    blocks = [n for n in root if _local(n.tag) == "measData"] or [root]
    # (element, measured object) -> counter name -> value
    per_object: dict[tuple[str | None, str], dict[str, float]] = defaultdict(dict)
    totals: dict[str, float] = defaultdict(float)
    elements: list[str] = []
    period, last_seen, suspects = None, None, 0
    jobs: dict[str, None] = {}  # the PM jobs that collected the file's measurements, in order
    for block in blocks:
        node = next((n for n in block.iter() if _local(n.tag) in ELEMENT_NODES), None)
        element = (_element_of(node) if node is not None else None) or sender_name or None
        if element and element not in elements:
            elements.append(element)
        for info in (n for n in block.iter() if _local(n.tag) == "measInfo"):
            jobs.update({j.get("jobId"): None for j in _children(info, "job") if j.get("jobId")})
            gran = next(iter(_children(info, "granPeriod")), None)
            if gran is not None:
                period = period or _period_seconds(gran.get("duration"))
                last_seen = max(filter(None, [last_seen, _iso(gran.get("endTime"))]), default=None)
            names = {t.get("p"): (t.text or "").strip() for t in _children(info, "measType")}
            types_list = next(iter(_children(info, "measTypes")), None)  # 32.435 also allows one list
            if types_list is not None and types_list.text:
                names.update({str(i): n for i, n in enumerate(types_list.text.split(), start=1)})
            for value in _children(info, "measValue"):
                obj = value.get("measObjLdn", "")
                suspects += any((s.text or "").strip() == "true" for s in _children(value, "suspect"))
                rs = _children(value, "r")
                results = next(iter(_children(value, "measResults")), None)
                pairs = [(r.get("p"), r.text) for r in rs]
                if results is not None and results.text:  # the list form: values in measTypes order
                    pairs = [(str(i), v) for i, v in enumerate(results.text.split(), start=1)]
                for p, text_value in pairs:
                    name = names.get(p)
                    try:
                        number = float((text_value or "").strip())
                    except ValueError:
                        continue  # "NIL" or empty: a counter not reported this period
                    if name:
                        per_object[(element, obj)][name] = number
                        totals[name] += number
    if not totals:
        raise PmError(f"{_local(root.tag)} holds no numeric counter values")
    several = len(elements) > 1
    details: dict[str, str] = {}
    if period:
        details["granularityPeriod"] = f"{period} s"
    details["measuredObjects"] = str(len(per_object))
    if several:
        details["managedElements"] = ", ".join(elements[:8]) + (f" and {len(elements) - 8} more"
                                                                 if len(elements) > 8 else "")
    severity, problem, worst_element = assess(per_object, totals, elements, details)  # rates first
    for name in list(totals)[:MAX_COUNTER_DETAILS]:
        details[name] = f"{totals[name]:g}"
    if suspects:
        details["suspectObjects"] = str(suspects)
    if jobs:
        details["pmJobs"] = ", ".join(list(jobs)[:4])
    entity = worst_element or (elements[0] if elements else sender_name or (file_name.element if file_name else None))
    last_seen = file_end or last_seen
    if file_name is not None:
        first_seen = first_seen or iso_utc(file_name.begin)
        last_seen = last_seen or iso_utc(file_name.end)
        details["fileType"] = f"{file_name.file_type} (28.550)"
    error = None
    if first_seen and last_seen and last_seen < first_seen:
        error = f"PM file's end time {last_seen} precedes its begin time {first_seen}; span given in order"
        first_seen, last_seen = last_seen, first_seen
    return Facts(entity=entity, severity=severity, problem=problem, first_seen=first_seen,
                 last_seen=last_seen or first_seen, event_count=len(per_object), details=details,
                 facts_error=error)


def _iso(value: str | None) -> str | None:
    when = parse_iso(value) if value else None
    return iso_utc(when) if when else None
