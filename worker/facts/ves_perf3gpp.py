"""VES `perf3gpp` events: a 3GPP PM file as ONAP's PM mapper publishes it
(`perf3gppFields.measDataCollection`: `measuredEntityDn`, `granularityPeriod`, `measInfoList` of
`measTypes.sMeasTypesList` and `measValuesList[].measResults[] {p, iValue|rValue|sValue|isNull}`),
read with the PM files' KPI rules (`pm.assess`)."""

from __future__ import annotations

from collections import defaultdict

from worker.facts.pm_kpis import assess, short_dn as _short_dn

Reading = tuple[str | None, str | None, dict[str, str], list[str]]  # severity, problem, details, errors


def _number(result: dict) -> float | None:
    if str(result.get("isNull", "false")).lower() == "true":
        return None
    for key in ("iValue", "rValue", "sValue"):
        if key in result:
            try:
                return float(result[key])
            except (TypeError, ValueError):
                return None
    return None


def perf3gpp(event: dict) -> Reading:
    fields = event.get("perf3gppFields")
    collection = fields.get("measDataCollection") if isinstance(fields, dict) else None
    if not isinstance(collection, dict):
        return None, None, {}, ["perf3gpp event has no perf3gppFields.measDataCollection object"]
    element = _short_dn(str(collection.get("measuredEntityDn") or "")) or collection.get("measuredEntityUserName") or None
    per_object: dict[tuple[str | None, str], dict[str, float]] = defaultdict(dict)
    totals: dict[str, float] = defaultdict(float)
    suspects = 0
    for info in collection.get("measInfoList") or []:
        if not isinstance(info, dict):
            continue
        types = (info.get("measTypes") or {}).get("sMeasTypesList") or []
        for value in info.get("measValuesList") or []:
            if not isinstance(value, dict):
                continue
            suspects += str(value.get("suspectFlag", "false")).lower() == "true"
            obj = str(value.get("measObjInstId", ""))
            for result in value.get("measResults") or []:
                if not isinstance(result, dict):
                    continue
                p, number = result.get("p"), _number(result)
                if number is None or not isinstance(p, int) or not 1 <= p <= len(types):
                    continue
                per_object[(element, obj)][types[p - 1]] = number
                totals[types[p - 1]] += number
    details = {"measuredObjects": str(len(per_object))}
    if collection.get("granularityPeriod"):
        details["granularityPeriod"] = f"{collection['granularityPeriod']} s"
    if suspects:
        details["suspectObjects"] = str(suspects)
    if not totals:
        return "info", "PM report with no counter values", details, ["perf3gpp event holds no numeric counter values"]
    severity, problem, _ = assess(per_object, totals, [element] if element else [], details)
    return severity, problem, details, []
