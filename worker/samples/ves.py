"""VES 7.x events: faults (raise and clear), measurements (CPU, memory, interfaces) and heartbeats."""

from __future__ import annotations

import random
from datetime import timedelta

from worker.facts.ves import CPU_MAJOR, CPU_MINOR, VES_SEVERITY
from worker.messages import Facts, TelemetryRecord
from worker.samples.common import gnb, iso_ms, record_start, site_of, truth

# (alarmCondition, specificProblem, eventSourceType, eventSeverity, priority, problem keywords)
FAULTS = (
    ("linkDown", "Physical link down on port {p}", "router", "MAJOR", "High", ["link", "down"]),
    ("powerSupplyFailure", "Power supply unit {p} failure", "gNodeB", "CRITICAL", "High", ["power supply"]),
    ("fanFailure", "Fan tray {p} failure", "gNodeB", "MAJOR", "Medium", ["fan"]),
    ("temperatureHigh", "Board temperature above threshold", "RadioUnit", "MINOR", "Medium", ["temperature"]),
    ("cellUnavailable", "Cell NRCellDU={p} out of service", "gNodeB", "CRITICAL", "High", ["cell", "out of service"]),
    ("lossOfSignal", "Loss of signal on CPRI port {p}", "RadioUnit", "MAJOR", "High", ["loss of signal"]),
    ("syncLoss", "GNSS synchronisation lost", "gNodeB", "MAJOR", "High", ["synchronisation"]),
    ("vswrHigh", "VSWR over threshold on antenna port {p}", "RadioUnit", "MINOR", "Medium", ["vswr"]),
    ("licenseExpiry", "Capacity license expires in {p} days", "gNodeB", "WARNING", "Low", ["license"]),
)
MICRO = 1_000_000


def _header(domain: str, name: str, source: str, index: int, start, last, priority: str) -> dict:
    return {
        "domain": domain, "eventId": f"{domain}{index:09d}", "eventName": name,
        "eventType": "O-RAN", "lastEpochMicrosec": int(last.timestamp() * MICRO), "nfNamingCode": "gNB",
        "priority": priority, "reportingEntityName": f"oam-controller-{sum(map(ord, source)) % 4 + 1}",
        "sequence": index, "sourceName": source, "startEpochMicrosec": int(start.timestamp() * MICRO),
        "version": "4.1", "vesEventListenerVersion": "7.2.1",
    }


def _words(body: dict) -> int:
    from worker.prompts import render_body
    return len(render_body(TelemetryRecord(id="-", kind="ves", body=body)).split())


def _pad_hashmap(hashmap: dict, budget: int, rng: random.Random) -> None:
    """Adds `key: value` entries (2 words each) while `budget` words remain."""
    keys = ("rack", "shelf", "slot", "port", "equipType", "vendor", "swVersion", "serialNumber", "site")
    i = 0
    while budget >= 2:
        hashmap[f"{keys[i % len(keys)]}{i // len(keys) or ''}"] = f"v{rng.randrange(10_000)}"
        budget -= 2
        i += 1


def _pad_measurements(fields: dict, budget: int, rng: random.Random) -> None:
    """Adds per-interface additionalMeasurements while `budget` words remain."""
    counters = ("receivedOctetsDelta", "transmittedOctetsDelta", "receivedDiscardedPacketsDelta",
                "transmittedErrorPacketsDelta", "receivedUnicastPacketsDelta", "transmittedUnicastPacketsDelta")
    extra = fields.setdefault("additionalMeasurements", [])
    while budget >= 4:
        n = min(len(counters), budget // 2 - 1)
        extra.append({"name": f"interface-eth{len(extra)}",
                      "hashMap": {c: str(rng.randrange(10**7)) for c in counters[:n]}})
        budget -= 2 + 2 * n


def make(index: int, target_words: int, rng: random.Random) -> tuple[TelemetryRecord, Facts]:
    """One VES event of about `target_words` flattened words (never more). Long ones are measurements."""
    source = f"{gnb(rng)}-DU"
    start = record_start(index, rng)
    roll = rng.random()
    if target_words > 300 or 0.6 <= roll < 0.85:
        return _measurement(index, target_words, rng, source, start)
    if roll >= 0.85:
        return _heartbeat(index, target_words, rng, source, start)
    return _fault(index, target_words, rng, source, start)


def _finish(index, body, kind_word, source, start, facts):
    record = TelemetryRecord(id=f"ves-{kind_word}-{index:06d}", kind="ves", body=body,
                             source=site_of(source), timestamp=iso_ms(start),
                             attributes={"format": "ves-7.2.1"})
    return record, facts


def _fault(index, target_words, rng, source, start):
    condition, problem, source_type, severity, priority, keywords = rng.choice(FAULTS)
    problem = problem.format(p=rng.randrange(1, 9))
    if rng.random() < 0.15:
        severity, problem = "NORMAL", f"{problem} cleared"
    last = start + timedelta(seconds=rng.randrange(0, 900))
    fields = {"alarmCondition": condition, "alarmInterfaceA": f"port-{rng.randrange(8)}",
              "eventSeverity": severity, "eventSourceType": source_type, "faultFieldsVersion": "4.0",
              "specificProblem": problem.removesuffix(" cleared"), "vfStatus": "Active",
              "alarmAdditionalInformation": {}}
    body = {"event": {"commonEventHeader": _header("fault", f"Fault_gNB_{condition}", source, index, start,
                                                   last, priority), "faultFields": fields}}
    _pad_hashmap(fields["alarmAdditionalInformation"], target_words - _words(body), rng)
    facts = truth(source, VES_SEVERITY[severity], problem, keywords, start, last, 1,
                  alarmCondition=condition)
    return _finish(index, body, "fault", source, start, facts)


def _measurement(index, target_words, rng, source, start):
    num_cpus = 2 if target_words < 100 else 4
    cpus = [{"cpuIdentifier": f"cpu{i}", "percentUsage": round(rng.uniform(5, 60), 1)} for i in range(num_cpus)]
    scenario = rng.random()
    if scenario < 0.6:
        hot = rng.randrange(num_cpus)
        cpus[hot]["percentUsage"] = round(rng.uniform(CPU_MAJOR + 0.5, 99.5) if scenario < 0.4
                                          else rng.uniform(CPU_MINOR + 0.5, CPU_MAJOR - 0.5), 1)
        usage = cpus[hot]["percentUsage"]
        severity = "major" if usage >= CPU_MAJOR else "minor"
        problem, keywords = f"high CPU usage {usage:.1f}% on cpu{hot}", ["cpu"]
    else:
        severity, problem, keywords = "info", "routine measurement report, resource usage normal", ["routine"]
    last = start + timedelta(seconds=300)
    fields = {"measurementFieldsVersion": "4.0", "measurementInterval": 300, "cpuUsageArray": cpus,
              "memoryUsageArray": [{"vmIdentifier": "vm0", "memoryUsed": rng.randrange(2_000, 9_000) * 1024,
                                    "memoryFree": 12_000 * 1024}]}
    body = {"event": {"commonEventHeader": _header("measurement", "Measurement_gNB_resources", source, index,
                                                   start, last, "Normal"), "measurementFields": fields}}
    _pad_measurements(fields, target_words - _words(body), rng)
    facts = truth(source, severity, problem, keywords, start, last, 1)
    return _finish(index, body, "measurement", source, start, facts)


def _heartbeat(index, target_words, rng, source, start):
    fields = {"heartbeatFieldsVersion": "3.0", "heartbeatInterval": 60, "additionalFields": {}}
    body = {"event": {"commonEventHeader": _header("heartbeat", "Heartbeat_gNB", source, index, start, start,
                                                   "Normal"), "heartbeatFields": fields}}
    _pad_hashmap(fields["additionalFields"], target_words - _words(body), rng)
    facts = truth(source, "info", "heartbeat, element alive (interval 60 s)", ["heartbeat"], start, start, 1)
    return _finish(index, body, "heartbeat", source, start, facts)
