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
)


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
    for label, att, succ, minor_below, major_below in RATIOS:
        total_att, total_succ = _sum_counter(totals, att), _sum_counter(totals, succ)
        if not total_att:
            continue
        details[label] = f"{100.0 * (total_succ or 0) / total_att:.1f}%"
        rates = [(100.0 * (_sum_counter(c, succ) or 0) / a, key) for key, c in per_object.items()
                 if (a := _sum_counter(c, att))]
        worst_rate, (worst_element, worst_obj) = min(rates, key=lambda r: r[0])
        if worst_rate < minor_below:
            where = _last_rdn(worst_obj) + (f" of {worst_element}" if several and worst_element else "")
            findings.append((0 if worst_rate < major_below else 1, f"low {label} {worst_rate:.1f}% on {where}",
                             worst_element))
    if not findings:
        return "info", "KPIs within normal range" + (f" on all {len(elements)} managed elements" if several
                                                     else ""), None
    findings.sort(key=lambda f: f[0])
    severity = "major" if findings[0][0] == 0 else "minor"
    return severity, "; ".join(text for level, text, _ in findings if level == findings[0][0]), findings[0][2]
