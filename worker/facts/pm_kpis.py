"""What PM counters say, shared by every PM layout (TS 32.435 / 28.532 / 32.401 files, VES perf3gpp):
success rates per measured object against thresholds, and the element a DN names."""

from __future__ import annotations

import re

ME_IN_DN = re.compile(r"(?:^|,)\s*ManagedElement=([^,\"'<>]+)")

# (name, attempts counter prefix, successes counter prefix, minor below %, major below %)
RATIOS = (
    ("RRC setup success rate", "RRC.ConnEstabAtt", "RRC.ConnEstabSucc", 98.0, 90.0),
    ("E-RAB setup success rate", "ERAB.EstabInitAttNbr", "ERAB.EstabInitSuccNbr", 98.0, 90.0),
    ("DRB setup success rate", "DRB.EstabAtt", "DRB.EstabSucc", 98.0, 90.0),
    ("handover success rate", "HO.ExeAtt", "HO.ExeSucc", 95.0, 85.0),
    # TS 28.552 (5GC and NR): appended, so the indices above stay what the samples use
    ("intra-gNB handover success rate", "MM.HoExeIntraReq", "MM.HoExeIntraSucc", 95.0, 85.0),
    ("inter-gNB handover success rate", "MM.HoExeInterReq", "MM.HoExeInterSucc", 95.0, 85.0),
    ("initial registration success rate", "RM.RegInitReq", "RM.RegInitSucc", 98.0, 90.0),
    ("PDU session setup success rate", "SM.PduSessionCreationReq", "SM.PduSessionCreationSucc", 98.0, 90.0),
)
MAX_COUNTERS_NAMED = 3


class PmError(ValueError):
    """The body is not a parseable 32.435 measCollecFile or 28.532 measDataFile."""


def local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def short_dn(dn: str) -> str:
    """`...,ManagedElement=gNB-0042,GNBDUFunction=1` -> `gNB-0042`: the ManagedElement of a DN when
    it names one, else its last RDN's value."""
    if not dn:
        return dn
    me = ME_IN_DN.search(dn)
    return me.group(1).strip() if me else dn.rsplit(",", 1)[-1].split("=", 1)[-1]


def _last_rdn(dn: str) -> str:
    """`ManagedElement=gNB-0042,NRCellDU=3` -> `NRCellDU=3` (the whole element when empty)."""
    return dn.rsplit(",", 1)[-1] if dn else "the element"


def _sum_counter(values: dict[str, float], prefix: str) -> float | None:
    """`prefix.Sum` when reported, else the sum of every `prefix` / `prefix.*` counter."""
    if f"{prefix}.Sum" in values:
        return values[f"{prefix}.Sum"]
    found = [v for k, v in values.items() if k == prefix or k.startswith(prefix + ".")]
    return sum(found) if found else None


def assess(per_object: dict[tuple[str | None, str], dict[str, float]], totals: dict[str, float],
           elements: list[str], details: dict[str, str]) -> tuple[str, str, str | None]:
    """(severity, problem, element of the worst object) from counters per (element, measured object);
    each success rate goes into `details`. Shared by PM files and VES perf3gpp events."""
    several = len(elements) > 1
    findings: list[tuple[int, str, str | None]] = []  # (0 major / 1 minor, text, element)
    computed: list[str] = []  # `RRC setup success rate 99.2%`
    used: set[str] = set()    # the counters those KPIs were computed from
    for label, att, succ, minor_below, major_below in RATIOS:
        total_att, total_succ = _sum_counter(totals, att), _sum_counter(totals, succ)
        if not total_att:
            continue
        details[label] = f"{100.0 * (total_succ or 0) / total_att:.1f}%"
        computed.append(f"{label} {details[label]}")
        used.update(k for k in totals if any(k == p or k.startswith(p + ".") for p in (att, succ)))
        rates = [(100.0 * (_sum_counter(c, succ) or 0) / a, key) for key, c in per_object.items()
                 if (a := _sum_counter(c, att))]
        worst_rate, (worst_element, worst_obj) = min(rates, key=lambda r: r[0])
        if worst_rate < minor_below:
            where = _last_rdn(worst_obj) + (f" of {worst_element}" if several and worst_element else "")
            findings.append((0 if worst_rate < major_below else 1, f"low {label} {worst_rate:.1f}% on {where}",
                             worst_element))
    if not findings:
        return "info", _report(computed, [k for k in totals if k not in used], len(per_object), elements,
                               details), None
    findings.sort(key=lambda f: f[0])
    severity = "major" if findings[0][0] == 0 else "minor"
    return severity, "; ".join(text for level, text, _ in findings if level == findings[0][0]), findings[0][2]


def _report(computed: list[str], unchecked: list[str], objects: int, elements: list[str],
            details: dict[str, str]) -> str:
    """What a report without a finding is and what was checked: the KPIs computed from its counters
    and within range, or, when it holds none of the counters a known KPI needs, its counters,
    measured objects and period, and that no known KPI was computed."""
    where = f" on all {len(elements)} managed elements" if len(elements) > 1 else ""
    if computed:
        rest = f"; {len(unchecked)} other counter{'s' if len(unchecked) > 1 else ''} not checked" if unchecked else ""
        return ", ".join(computed) + f": KPIs within normal range{where}" + rest
    named = ", ".join(unchecked[:MAX_COUNTERS_NAMED]) + (
        f" and {len(unchecked) - MAX_COUNTERS_NAMED} more" if len(unchecked) > MAX_COUNTERS_NAMED else "")
    count = f"{len(unchecked)} counter{'s' if len(unchecked) > 1 else ''}"
    scope = f"{objects} measured object{'s' if objects != 1 else ''}" + (
        f" of {len(elements)} managed elements" if len(elements) > 1 else "")
    period = f", {details['granularityPeriod']} period" if details.get("granularityPeriod") else ""
    return f"PM report of {count} ({named}) on {scope}{period}; no known KPI computed from these counters"
