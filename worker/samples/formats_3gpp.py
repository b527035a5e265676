"""3GPP / O-RAN shaped samples of the `real-formats` profile: TS 28.532 `measDataFile` PM files and
VES alarms whose name is not in `specificProblem`."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from worker.messages import Facts, TelemetryRecord
from .common import iso_s


def make_pm_28532(index: int, begin: datetime, rng: random.Random) -> tuple[TelemetryRecord, Facts]:
    """A TS 28.532 measDataFile (a stylesheet PI before the declaration on odd indexes); one cell's
    DRB setups fail."""
    element = f"odu-{rng.choice(('sevilla', 'porto', 'brno', 'lyon'))}-{rng.randrange(1, 60)}"
    end = begin + timedelta(minutes=15)
    bad = rng.randrange(1, 5)
    values = []
    for cell in range(1, 5):
        att = rng.randrange(800, 6000)
        rate = rng.uniform(70, 86) if cell == bad else rng.uniform(99.2, 100)
        values.append(f'<measValue measObjLdn="ManagedElement={element},GNBDUFunction=1,NRCellDU={cell}">'
                      f'<r p="1">{att}</r><r p="2">{round(att * rate / 100)}</r><suspect>false</suspect></measValue>')
    stylesheet = '<?xml-stylesheet type="text/xsl" href="measData.xsl"?>\n' if index % 2 else ""
    body = (f'{stylesheet}<?xml version="1.0" encoding="UTF-8"?>\n'
            '<measDataFile xmlns="http://www.3gpp.org/ftp/specs/archive/28_series/28.532#measData">'
            f'<fileHeader fileFormatVersion="28.532 V17.1" vendorName="Acme Radio" dnPrefix="SubNetwork=south">'
            f'<fileSender senderName="ManagedElement={element}" senderType="O-DU"/>'
            f'<measData beginTime="{begin.isoformat()}"/></fileHeader>\n'
            f'<measData><measEntity localDn="SubNetwork=south,ManagedElement={element}" userLabel="O-DU {index}"/>'
            f'<measInfo measInfoId="DRB"><job jobId="15min"/><granPeriod duration="PT900S" endTime="{end.isoformat()}"/>'
            '<measType p="1">DRB.EstabAtt.5QI9</measType><measType p="2">DRB.EstabSucc.5QI9</measType>\n'
            + "\n".join(values) + f'</measInfo></measData>\n<fileFooter><measData endTime="{end.isoformat()}"/>'
            '</fileFooter></measDataFile>')
    record = TelemetryRecord(id=f"real-pm_28532-{index:06d}", kind="pm", body=body,
                             attributes={"format": "pm_28532", "shape": "real-formats"})
    truth = Facts(entity=element, severity="major", problem="low DRB setup success rate", first_seen=iso_s(begin),
                  last_seen=iso_s(end), details={"problemKeywords": "drb, setup", "shape": "pm_28532"})
    return record, truth


def make_ves_alarm(index: int, shape: str, when: datetime, rng: random.Random) -> tuple[TelemetryRecord, Facts]:
    """A VES fault whose specificProblem is a neighbour cell id (`ves_pci`), or a stndDefined
    notifyNewAlarm whose alarm name is only in additionalInformation (`ves_alarm_name`)."""
    source = rng.choice(("cell-ncsrv-0023", "oru-mad-b03", "du-oslo-77", "ru-kraków-2"))
    stamp = int(when.timestamp() * 1_000_000)
    header = {"domain": "fault", "eventId": f"{shape}-{index}", "eventName": f"Fault_{source}", "lastEpochMicrosec": stamp,
              "priority": "High", "reportingEntityName": "ves-agent", "sequence": index, "sourceName": source,
              "startEpochMicrosec": stamp, "version": "4.1", "vesEventListenerVersion": "7.2.1"}
    if shape == "ves_pci":
        body = {"event": {"commonEventHeader": header, "faultFields": {
            "alarmCondition": "RanPciCollisionConfusionOccurred", "eventSeverity": "CRITICAL", "eventSourceType": "other",
            "faultFieldsVersion": "4.0", "specificProblem": f"Chn{rng.randrange(1, 40):04d}", "vfStatus": "Active",
            "alarmAdditionalInformation": {"collisions": "1", "neighbours": f"Chn{rng.randrange(40, 99):04d}"}}}}
        truth = Facts(entity=source, severity="critical", problem="PCI collision", first_seen=iso_s(when),
                      details={"problemKeywords": "collision", "shape": shape})
    else:
        header = {**header, "domain": "stndDefined", "stndDefinedNamespace": "3GPP-FaultSupervision"}
        body = {"event": {"commonEventHeader": header, "stndDefinedFields": {"stndDefinedFieldsVersion": "1.0", "data": {
            "notificationType": "notifyNewAlarm", "eventTime": iso_s(when), "alarmId": f"ALM-{index}",
            "systemDN": f"SubNetwork=1,ManagedElement={source}", "alarmType": "COMMUNICATIONS_ALARM",
            "perceivedSeverity": "MAJOR", "additionalInformation": {"alarm-name": "lossOfSignal",
                                                                    "interface": f"fronthaul-port-{rng.randrange(4)}"}}}}}
        truth = Facts(entity=source, severity="major", problem="loss of signal", first_seen=iso_s(when),
                      details={"problemKeywords": "loss, signal", "shape": shape})
    record = TelemetryRecord(id=f"real-{shape}-{index:06d}", kind="ves", body=body,
                             attributes={"format": shape, "shape": "real-formats"})
    return record, truth
