"""3GPP TS 32.435 PM XML files from a gNB: RRC, DRB and handover counters per NR cell."""

from __future__ import annotations

import random
from datetime import timedelta

from worker.facts.pm import RATIOS
from worker.messages import Facts, TelemetryRecord
from worker.samples.common import gnb, record_start, site_of, truth

NS = "http://www.3gpp.org/ftp/specs/archive/32_series/32.435#measCollec"
# measInfoId -> (attempts counter, successes counter, extra counters)
MEAS_INFOS = {
    "RRC": ("RRC.ConnEstabAtt.Sum", "RRC.ConnEstabSucc.Sum", ("RRC.ConnMean", "RRC.ConnMax")),
    "DRB": ("DRB.EstabAtt.Sum", "DRB.EstabSucc.Sum", ("DRB.UEThpDl", "DRB.UEThpUl")),
    "HO": ("HO.ExeAtt", "HO.ExeSucc", ("HO.PrepAtt",)),
}
RATIO_OF = {"RRC": RATIOS[0], "DRB": RATIOS[2], "HO": RATIOS[3]}
KEYWORDS = {"RRC": ["rrc", "setup"], "DRB": ["drb", "setup"], "HO": ["handover"]}
PERIOD_S = 900


def _pair(rng: random.Random, rate: float) -> tuple[int, int]:
    attempts = rng.randrange(400, 5000)
    return attempts, round(attempts * rate / 100.0)


def _cell_values(rng, info: str, rate_low: float, rate_high: float) -> list[int]:
    att, succ = _pair(rng, rng.uniform(rate_low, rate_high))
    extras = [rng.randrange(1, 900) for _ in MEAS_INFOS[info][2]]
    return [att, succ, *extras]


def _meas_value(ldn: str, values: list[int]) -> str:
    rs = "".join(f'\n      <r p="{p}">{v}</r>' for p, v in enumerate(values, start=1))
    return f'    <measValue measObjLdn="{ldn}">{rs}\n      <suspect>false</suspect>\n    </measValue>'


def make(index: int, target_words: int, rng: random.Random) -> tuple[TelemetryRecord, Facts]:
    """One measCollecFile of about `target_words` words (never more); 70 % have one degraded cell."""
    element = gnb(rng)
    begin = record_start(index, rng).replace(second=0, microsecond=0)
    end = begin + timedelta(seconds=PERIOD_S)
    infos = list(MEAS_INFOS)[: 1 + (target_words > 90) + (target_words > 130)]
    bad_info = rng.choice(infos) if rng.random() < 0.7 else None
    head = (f'<?xml version="1.0" encoding="UTF-8"?>\n<measCollecFile xmlns="{NS}">\n'
            f'  <fileHeader fileFormatVersion="32.435 V10.0" vendorName="Acme">\n'
            f'    <measCollec beginTime="{begin.isoformat()}"/>\n  </fileHeader>\n  <measData>\n'
            f'  <managedElement localDn="ManagedElement={element}" userLabel="{element}"/>')
    tail = f'  </measData>\n  <fileFooter><measCollec endTime="{end.isoformat()}"/></fileFooter>\n</measCollecFile>'
    info_head = {i: (f'  <measInfo measInfoId="{i}">\n    <granPeriod duration="PT{PERIOD_S}S" '
                     f'endTime="{end.isoformat()}"/>\n'
                     + "".join(f'    <measType p="{p}">{n}</measType>\n' for p, n in enumerate(
                         [MEAS_INFOS[i][0], MEAS_INFOS[i][1], *MEAS_INFOS[i][2]], start=1)))
                 for i in infos}
    words = len(head.split()) + len(tail.split()) + sum(len(h.split()) + 1 for h in info_head.values())
    values: dict[str, list[str]] = {i: [] for i in infos}
    bad_cell, bad_rate = None, None
    cell, first_id = 0, rng.randrange(1, 40)
    while True:
        cell += 1
        ldn = f"ManagedElement={element},GNBDUFunction=1,NRCellDU={first_id + cell - 1}"
        fragments = {}
        for info in infos:
            if bad_cell is None and info == bad_info:
                _, _, _, minor_below, major_below = RATIO_OF[info]
                v = _cell_values(rng, info, major_below - 15, minor_below - 1)
                rate = 100.0 * v[1] / v[0]
            else:
                v = _cell_values(rng, info, RATIO_OF[info][3] + 0.5, 100.0)
            fragments[info] = _meas_value(ldn, v)
        cost = sum(len(f.split()) for f in fragments.values())
        if cell > 1 and words + cost > target_words:
            break
        for info, fragment in fragments.items():
            values[info].append(fragment)
        if bad_info is not None and bad_cell is None:
            bad_cell, bad_rate = first_id + cell - 1, rate
        words += cost
    body = "\n".join([head, *(info_head[i] + "\n".join(values[i]) + "\n  </measInfo>" for i in infos), tail])
    if bad_info is None:
        severity, problem, keywords = "info", "KPIs within normal range", ["normal"]
    else:
        label = RATIO_OF[bad_info][0]
        severity = "major" if bad_rate < RATIO_OF[bad_info][4] else "minor"
        problem, keywords = f"low {label} {bad_rate:.1f}% on NRCellDU={bad_cell}", KEYWORDS[bad_info]
    record = TelemetryRecord(id=f"pm-{index:06d}", kind="pm", body=body, source=site_of(element),
                             timestamp=begin.isoformat().replace("+00:00", "Z"),
                             attributes={"format": "3gpp-32.435"})
    facts = truth(element, severity, problem, keywords, begin, end, cell - 1, granularityPeriod=f"{PERIOD_S} s")
    return record, facts
