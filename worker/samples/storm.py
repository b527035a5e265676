"""An alarm storm with a known root cause (`telesum produce --profile storm`): VES fault events.

One element's fault (`dev-1`, a microwave hub: `A1`, power loss), then the alarms of the elements behind
it: their links (`A2`, link down, on the hub's neighbours `dev-2`..`dev-5`) and the cells behind those
(`A3`, loss of signal, on `dev-6`..`dev-13`), repeating as standing alarms do. Every 25th record is an
unrelated alarm far away (`dev-90`..`dev-93`, `A4`, high temperature), its own incident. The topology and
rules that explain it are docs/examples/storm-topology.csv and storm-rules.csv (`TOPOLOGY`, `RULES`).
Every record carries `source` = its site (`site-1`, the unrelated ones `site-9`): key producers by it
so a storm's alarms meet in one partition (docs/incidents.md). Record i depends only on (seed, i).

`telesum produce --profile storm-history` is the same network's past, to learn its cause graph from
(`telesum incidents learn`): an event every 40-80 minutes at a random hub of `HUBS` (dev-1 and the
hops-1 elements, each a hub of the elements behind it): a power loss (`A1`) that takes some of the
hub's links down (`A2` on its neighbours, a few seconds before or after it: the link alarms need no
integration time) and the cells behind them (`A3`), or a power dip the hub rides through on its
batteries (`A1` alone); now and then a temperature alarm far away (`A4`). One alarm per record.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

from worker.messages import Facts, TelemetryRecord
from worker.samples.common import iso_ms, truth

ROOT = "dev-1"
HOPS_1 = [f"dev-{i}" for i in range(2, 6)]
HOPS_2 = [f"dev-{i}" for i in range(6, 14)]
FAR = [f"dev-{i}" for i in range(90, 94)]
TOPOLOGY = ([(ROOT, e) for e in HOPS_1] + [(HOPS_1[i // 2], e) for i, e in enumerate(HOPS_2)]
            + [(FAR[i], FAR[i + 1]) for i in range(len(FAR) - 1)])
RULES = [("A1", "A2"), ("A2", "A3"), ("A1", "A3")]
START = datetime(2026, 12, 1, 3, 14, tzinfo=timezone.utc)
# Alarms of one storm arrive over about this long (event time) before it starts again.
STORM_SPAN_S = 120.0
UNRELATED_EVERY = 25
_TYPES = {"A1": ("Power supply lost at the hub", "CRITICAL", "power"),
          "A2": ("Microwave link down towards the hub", "MAJOR", "link down"),
          "A3": ("Loss of signal on the radio interface", "MAJOR", "loss of signal"),
          "A4": ("Board temperature above threshold", "MINOR", "temperature")}
MICRO = 1_000_000


def storm_records(n: int | None, seed: int = 0) -> Iterator[tuple[TelemetryRecord, Facts]]:
    """(record, facts) for records 0..n-1 (forever when n is None): storms of `storm_size` alarms, one
    every STORM_SPAN_S * 10 seconds of event time, each starting with the root's fault."""
    index = 0
    while n is None or index < n:
        rng = random.Random(f"{seed}:storm:{index}")
        storm, step = divmod(index, 200)
        start = START + timedelta(seconds=storm * STORM_SPAN_S * 10)
        if step == 0:
            element, alarm_type, at = ROOT, "A1", start
        elif step % UNRELATED_EVERY == 0:
            element, alarm_type = FAR[(step // UNRELATED_EVERY) % len(FAR)], "A4"
            at = start + timedelta(seconds=STORM_SPAN_S * step / 200)
        else:
            behind = HOPS_1 if step < 12 or rng.random() < 0.35 else HOPS_2
            element, alarm_type = rng.choice(behind), "A2" if behind is HOPS_1 else "A3"
            at = start + timedelta(seconds=STORM_SPAN_S * step / 200 + rng.uniform(0, 0.4))
        yield _record(index, element, alarm_type, at)
        index += 1


def _record(index: int, element: str, alarm_type: str, at: datetime,
            prefix: str = "storm") -> tuple[TelemetryRecord, Facts]:
    problem, severity, keyword = _TYPES[alarm_type]
    stamp = int(at.timestamp() * MICRO)
    header = {"domain": "fault", "eventId": f"storm{index:09d}", "eventName": f"Fault_MW_{alarm_type}",
              "lastEpochMicrosec": stamp, "priority": "High", "reportingEntityName": "oam-controller-1",
              "sequence": index, "sourceName": element, "startEpochMicrosec": stamp, "version": "4.1",
              "vesEventListenerVersion": "7.2.1"}
    fields = {"alarmCondition": alarm_type, "eventSeverity": severity, "eventSourceType": "microwave",
              "faultFieldsVersion": "4.0", "specificProblem": problem, "vfStatus": "Active"}
    site = "site-9" if element in FAR else "site-1"
    record = TelemetryRecord(id=f"{prefix}-{index:06d}", kind="ves",
                             body={"event": {"commonEventHeader": header, "faultFields": fields}},
                             source=site, timestamp=iso_ms(at), attributes={"format": "ves-7.2.1"})
    facts = truth(element, severity.lower(), problem, [keyword], at, at, 1, alarmCondition=alarm_type)
    return record, facts


HISTORY_START = START - timedelta(days=14)


def _hubs() -> dict[str, list[str]]:
    """Each element with the elements one hop further from dev-1 (dev-1 -> hops 1 -> hops 2)."""
    behind: dict[str, list[str]] = {ROOT: list(HOPS_1)}
    for a, b in TOPOLOGY:
        if a in HOPS_1:
            behind.setdefault(a, []).append(b)
    return behind


def storm_history_records(n: int | None, seed: int = 0) -> Iterator[tuple[TelemetryRecord, Facts]]:
    """(record, facts) for records 0..n-1 of the network's past (see the module docstring)."""
    hubs = _hubs()
    index, event, at = 0, 0, HISTORY_START
    while n is None or index < n:
        rng = random.Random(f"{seed}:storm-history:{event}")
        at += timedelta(seconds=rng.uniform(2400, 4800))
        hub = rng.choice(list(hubs))
        alarms = [(hub, "A1", at)]
        if rng.random() < 0.7:  # the links go down; else the hub rides the dip through on its batteries
            for element in hubs[hub]:
                if rng.random() < 0.8:
                    alarms.append((element, "A2", at + timedelta(seconds=rng.uniform(-8, 8))))
                    for cell in hubs.get(element, ()):
                        alarms.append((cell, "A3", at + timedelta(seconds=rng.uniform(-5, 20))))
        if rng.random() < 0.3:
            alarms.append((rng.choice(FAR), "A4", at + timedelta(seconds=rng.uniform(600, 1800))))
        for element, alarm_type, when in sorted(alarms, key=lambda a: a[2]):
            if n is not None and index >= n:
                return
            yield _record(index, element, alarm_type, when, prefix="storm-history")
            index += 1
        event += 1
