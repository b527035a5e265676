"""VES 7.x bodies as collectors in the field send them, and PM files with several managed elements:
`eventList` batches (every event counts), stndDefined 3GPP TS 28.532 alarm notifications,
notification (file ready, state change), pnfRegistration, heartbeat, thresholdCrossingAlert, an
unknown domain, and `startEpochMicrosec` holding milliseconds or seconds. Some carry a field aimed
at the model ("ignore the above ...") that must not change the facts.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from worker.messages import Facts, TelemetryRecord
from worker.samples.common import iso_s
from worker.samples.logs_real import INJECTIONS

SHAPES = ("batch", "stnd", "notification", "pnf", "heartbeat_ms", "tca", "unknown", "pm_multi")
ELEMENTS = ("O-DU-1123", "ru-sector-b-07", "pnf-smallcell-31", "vnf-upf-2", "SharedNode-7", "nodeb-lyon-04",
            "oru-東京-3")
ALARMS = (  # (specificProblem, probableCause, alarmType, severity, keywords)
    ("Link failure on fronthaul port", "LOSS_OF_SIGNAL", "COMMUNICATIONS_ALARM", "MAJOR", ["link", "fail"]),
    ("Temperature too high in radio unit", "TEMPERATURE_UNACCEPTABLE", "ENVIRONMENTAL_ALARM", "MINOR", ["temperature"]),
    ("Power amplifier degraded", "EQUIPMENT_MALFUNCTION", "EQUIPMENT_ALARM", "CRITICAL", ["amplifier"]),
)
SEVERITY = {"CRITICAL": "critical", "MAJOR": "major", "MINOR": "minor", "WARNING": "warning", "NORMAL": "info"}


def _when(rng: random.Random) -> datetime:
    return datetime(rng.randint(2019, 2025), rng.randint(1, 12), rng.randint(1, 28), rng.randrange(24),
                    rng.randrange(60), rng.randrange(60), tzinfo=timezone.utc)


def _header(domain: str, source: str, when: datetime, seq: int, unit: str = "us", **extra) -> dict:
    scale = {"us": 1_000_000, "ms": 1_000, "s": 1}[unit]
    stamp = int(when.timestamp() * scale)
    return {"domain": domain, "eventId": f"{domain}-{seq:08d}", "eventName": f"{domain}_{source}",
            "lastEpochMicrosec": stamp, "priority": extra.pop("priority", "Normal"),
            "reportingEntityName": extra.pop("reporting", "ves-collector-1"), "sequence": seq,
            "sourceName": source, "startEpochMicrosec": stamp, "version": "4.1",
            "vesEventListenerVersion": "7.2.1", **extra}


def _fault(source, when, seq, alarm, rng, unit="us"):
    problem, _cause, _type, severity, _ = alarm
    return {"commonEventHeader": _header("fault", source, when, seq, unit, priority="High"),
            "faultFields": {"alarmCondition": problem.split()[0].lower(), "eventSeverity": severity,
                            "eventSourceType": "O-RAN-DU", "faultFieldsVersion": "4.0", "specificProblem": problem,
                            "vfStatus": "Active", "alarmAdditionalInformation": {"port": str(rng.randrange(8))}}}


def _record(index: int, shape: str, body, when: datetime, kind: str = "ves") -> TelemetryRecord:
    return TelemetryRecord(id=f"real-{shape}-{index:06d}", kind=kind, body=body,
                           timestamp=iso_s(when) if index % 2 else None,
                           attributes={"format": shape, "shape": "real-ves"})


def _truth(entity, severity, problem, keywords, when, count, shape) -> Facts:
    return Facts(entity=entity, severity=severity, problem=problem, first_seen=iso_s(when), last_seen=None,
                 event_count=count, details={"problemKeywords": ", ".join(keywords), "shape": shape})


def make(index: int, size: int, rng: random.Random) -> tuple[TelemetryRecord, Facts]:
    """One body of `SHAPES[index % len(SHAPES)]`; `size` events in a batch or elements in a PM file."""
    shape = SHAPES[index % len(SHAPES)]
    source = rng.choice(ELEMENTS)
    when = _when(rng)
    inject = rng.random() < 0.3
    if shape == "batch":
        lead = rng.choice([a for a in ALARMS if a[3] in ("MAJOR", "CRITICAL")])
        others = [a for a in ALARMS if a[3] == "MINOR"]
        n = max(3, size)
        events = [_fault(source, when + timedelta(seconds=i * 7), i, lead if i % 3 != 2 else rng.choice(others), rng)
                  for i in range(n)]
        if inject:
            events[-1]["faultFields"]["alarmAdditionalInformation"]["note"] = rng.choice(INJECTIONS)
        worst = min((SEVERITY[e["faultFields"]["eventSeverity"]] for e in events),
                    key=("critical", "major", "minor", "warning", "info").index)
        return (_record(index, shape, {"eventList": events}, when),
                _truth(source, worst, lead[0], lead[4], when, n, shape))
    if shape == "stnd":
        alarm = rng.choice(ALARMS)
        problem, cause, alarm_type, severity, keywords = alarm
        data = {"href": f"https://{source}.example/3GPPManagement/FaultSupervisionMnS/v1/alarms/{index}",
                "notificationId": index, "notificationType": "notifyNewAlarm", "eventTime": iso_s(when),
                "systemDN": f"DC=operator.example,SubNetwork=1,ManagedElement={source}",
                "alarmId": f"alarm-{index}", "alarmType": alarm_type, "probableCause": cause,
                "specificProblem": problem, "perceivedSeverity": severity, "backedUpStatus": False,
                "trendIndication": "MORE_SEVERE", "proposedRepairActions": "Check the unit",
                "additionalText": rng.choice(INJECTIONS) if inject else "raised by the unit"}
        header = _header("stndDefined", source, when, index, "us", stndDefinedNamespace="3GPP-FaultSupervision")
        body = {"event": {"commonEventHeader": header, "stndDefinedFields": {
            "schemaReference": "https://forge.3gpp.org/rep/sa5/MnS/blob/Rel-16/OpenAPI/faultMnS.yaml#components/schemas/NotifyNewAlarm",
            "data": data, "stndDefinedFieldsVersion": "1.0"}}}
        return _record(index, shape, body, when), _truth(source, SEVERITY[severity], problem, keywords, when, 1, shape)
    if shape == "notification":
        files = [{"name": f"A{when:%Y%m%d.%H%M}+0000-{when:%H%M}+0000_{source}-{i}.xml.gz",
                  "hashMap": {"location": f"sftp://collector.example/pm/{i}.xml.gz", "compression": "gzip",
                              "fileFormatType": "org.3GPP.32.435#measCollec", "fileFormatVersion": "V10"}}
                 for i in range(max(1, size // 10))]
        body = {"event": {"commonEventHeader": _header("notification", source, when, index, "ms"),
                          "notificationFields": {"changeIdentifier": "PM_MEAS_FILES", "changeType": "FileReady",
                                                 "notificationFieldsVersion": "2.0", "arrayOfNamedHashMap": files}}}
        return _record(index, shape, body, when), _truth(source, "info", "FileReady", ["file"], when, 1, shape)
    if shape == "pnf":
        body = {"event": {"commonEventHeader": _header("pnfRegistration", source, when, index, "us"),
                          "pnfRegistrationFields": {"pnfRegistrationFieldsVersion": "2.1", "serialNumber": f"SN{index:07d}",
                                                    "vendorName": "Acme", "modelNumber": "ORU-4T4R", "unitType": "radio",
                                                    "oamV4IpAddress": f"10.20.{rng.randrange(256)}.{rng.randrange(1, 255)}",
                                                    "softwareVersion": "2.4.1"}}}
        return _record(index, shape, body, when), _truth(source, "info", "PNF registration", ["registration"],
                                                         when, 1, shape)
    if shape == "heartbeat_ms":  # milliseconds where microseconds belong
        body = {"event": {"commonEventHeader": _header("heartbeat", source, when, index, "ms"),
                          "heartbeatFields": {"heartbeatFieldsVersion": "3.0", "heartbeatInterval": 60}}}
        return _record(index, shape, body, when), _truth(source, "info", "heartbeat", ["heartbeat"], when, 1, shape)
    if shape == "tca":
        body = {"event": {"commonEventHeader": _header("thresholdCrossingAlert", source, when, index, "s"),
                          "thresholdCrossingAlertFields": {
                              "thresholdCrossingFieldsVersion": "4.0", "alertAction": "SET",
                              "alertDescription": "packet loss above threshold", "alertType": "INTERFACE-ANOMALY",
                              "collectionTimestamp": when.strftime("%a, %d %b %Y %H:%M:%S +0000"),
                              "eventSeverity": "MAJOR", "eventStartTimestamp": when.strftime("%a, %d %b %Y %H:%M:%S +0000"),
                              "interfaceName": "eth1", "elementType": "vRouter",
                              "additionalParameters": [{"criticality": "MAJ", "thresholdCrossed": "packetLoss",
                                                        "hashMap": {"packetLoss": "3.2"}}]}}}
        return _record(index, shape, body, when), _truth(source, "major", "packet loss above threshold",
                                                         ["packet loss"], when, 1, shape)
    if shape == "unknown":
        body = {"event": {"commonEventHeader": _header("perf3gppX", source, when, index, "us", priority="High"),
                          "perf3gppXFields": {"note": rng.choice(INJECTIONS) if inject else "vendor payload"}}}
        return _record(index, shape, body, when), _truth(source, "major", f"perf3gppX_{source}", ["perf3gppx"],
                                                         when, 1, shape)
    return _pm_multi(index, max(2, min(size, 12)), rng, when)


def _pm_multi(index: int, elements: int, rng: random.Random, when: datetime) -> tuple[TelemetryRecord, Facts]:
    """A 32.435 file with one measData per managed element; one element has a degraded cell."""
    when = when.replace(second=0)
    end = when + timedelta(minutes=15)
    names = [f"gNB-site{rng.randrange(100, 999)}-{i}" for i in range(elements)]
    bad = rng.randrange(elements)
    blocks = []
    for i, name in enumerate(names):
        cells = []
        for c in range(1, 4):
            att = rng.randrange(500, 5000)
            rate = rng.uniform(70, 85) if (i == bad and c == 2) else rng.uniform(99, 100)
            cells.append(f'<measValue measObjLdn="ManagedElement={name},GNBDUFunction=1,NRCellDU={c}">'
                         f'<r p="1">{att}</r><r p="2">{round(att * rate / 100)}</r></measValue>')
        blocks.append(f'<measData><managedElement localDn="ManagedElement={name}" userLabel="{name}"/>'
                      f'<measInfo measInfoId="RRC"><granPeriod duration="PT900S" endTime="{end.isoformat()}"/>'
                      f'<measType p="1">RRC.ConnEstabAtt.Sum</measType><measType p="2">RRC.ConnEstabSucc.Sum</measType>'
                      + "\n".join(cells) + "</measInfo></measData>")
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n<measCollecFile xmlns="http://www.3gpp.org/ftp/specs/archive/'
            '32_series/32.435#measCollec"><fileHeader fileFormatVersion="32.435 V10.0" vendorName="Acme">'
            '<fileSender localDn="SubNetwork=north,MeContext=oss-1"/>'
            f'<measCollec beginTime="{when.isoformat()}"/></fileHeader>\n' + "\n".join(blocks)
            + f'\n<fileFooter><measCollec endTime="{end.isoformat()}"/></fileFooter></measCollecFile>')
    return (_record(index, "pm_multi", body, when, kind="pm"),
            _truth(names[bad], "major", "low RRC setup success rate", ["rrc", "setup"], when, elements * 3, "pm_multi"))
