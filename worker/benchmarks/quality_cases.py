"""The `grounding` section of `telesum bench quality`: host-log windows and operator notes of the
shapes whose summaries used to drop the problem or copy a worked example.

Written for this project from the documented message formats, not copied from a data set:
OpenSSH's `sshd` authentication messages (`Failed password for [invalid user] U from A port P ssh2`,
`Invalid user U from A port P`, `Connection closed by A port P [preauth]`), Linux-PAM's `pam_unix`
messages (`authentication failure; logname= uid=0 euid=0 tty=ssh ruser= rhost=A  user=U`,
`session opened for user U by (uid=0)`, `session closed for user U`) in RFC 3164 lines as
`/var/log/auth.log` holds them (`Mmm dd hh:mm:ss host app[pid]: message`), and free-text operator
notes that name an element but hold no problem the parsers know. The truth is what an operator
reading the record would say: its host, its severity, and the words of its problem.
Record i depends only on (seed, i).
"""

from __future__ import annotations

import random

from worker.messages import Facts, TelemetryRecord

SHAPES = ("failed-logins", "auth-failures", "sessions-closed", "operator-note")
_HOSTS = ("bastion-03", "edge-fw-2", "cmts-east-1", "jump01", "dns-cache-7", "olt-north-12", "pgw-sgi-4",
          "mon-collector", "ran-oam-gw2", "srv-backup-5")
_USERS = ("admin", "oracle", "test", "ubnt", "support", "pi", "guest", "ftpuser")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# (note text with {host} / {cell} / {hh}, problem keywords an operator would read in it)
_NOTES = (
    ("Operator note: cell {cell} on {host} shows RRC setup failures after the {hh}:00 change window.",
     "rrc, setup, fail"),
    ("Shift handover: the fan tray of {host} was replaced at {hh}:15, keep an eye on its temperature overnight.",
     "fan"),
    ("NOC ticket: customers behind {host} report a slow uplink since the firmware upgrade at {hh}:30.",
     "slow, uplink"),
    ("Field team on site at {host}: the battery cabinet door was found open, cabinet closed at {hh}:40.",
     "battery, cabinet"),
    ("Planned work: {host} reboots tonight at {hh}:00 for the licence update, expect a short outage.",
     "reboot"),
    ("Customer call: intermittent packet loss towards the core through {host} since {hh}:10, cause unknown.",
     "packet, loss"),
)


def _ip(rng: random.Random) -> str:
    return ".".join(str(rng.randrange(1, 255)) for _ in range(4))


def _clock(rng: random.Random) -> tuple[str, int, int]:
    """A month-day prefix (`Dec  9`, the day space-padded as RFC 3164 writes it) and a start second."""
    return f"{rng.choice(_MONTHS)} {rng.randrange(1, 29):>2}", rng.randrange(0, 20), rng.randrange(0, 86400 - 3600)


def _lines(rng: random.Random, host: str, messages: list[tuple[str, str]]) -> str:
    """`Mmm dd hh:mm:ss host app[pid]: message` lines, a few seconds apart."""
    day, _, t = _clock(rng)
    out = []
    for app, message in messages:
        t += rng.randrange(0, 4)
        out.append(f"{day} {t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d} {host} {app}[{rng.randrange(1000, 32000)}]: "
                   f"{message}")
    return "\n".join(out)


def make(index: int, rng: random.Random) -> tuple[TelemetryRecord, Facts]:
    shape = SHAPES[index % len(SHAPES)]
    host = rng.choice(_HOSTS)
    if shape == "operator-note":
        text, keywords = _NOTES[(index // len(SHAPES)) % len(_NOTES)]
        body = text.format(host=host, cell=f"NRCellDU={rng.randrange(0, 4)}", hh=f"{rng.randrange(0, 24):02d}")
        truth = Facts(entity=host, severity="info", details={"problemKeywords": keywords})
        return TelemetryRecord(id=f"grounding-{index}", kind="text", body=body,
                               attributes={"shape": shape}), truth
    n = rng.randrange(6, 40)
    if shape == "failed-logins":
        messages = []
        for _ in range(n):
            ip, port = _ip(rng), rng.randrange(1024, 65535)
            if rng.random() < 0.5:
                messages.append(("sshd", f"Failed password for root from {ip} port {port} ssh2"))
            else:
                user = rng.choice(_USERS)
                messages += [("sshd", f"Invalid user {user} from {ip} port {port}"),
                             ("sshd", f"Failed password for invalid user {user} from {ip} port {port} ssh2")]
            messages.append(("sshd", f"Connection closed by {ip} port {port} [preauth]"))
        truth = Facts(entity=host, severity="warning", details={"problemKeywords": "fail, password"})
    elif shape == "auth-failures":
        messages = [("sshd", "pam_unix(sshd:auth): authentication failure; logname= uid=0 euid=0 tty=ssh ruser= "
                             f"rhost={_ip(rng)}  user=root") for _ in range(n)]
        truth = Facts(entity=host, severity="warning", details={"problemKeywords": "authentication, fail"})
    else:  # sessions-closed: routine, info
        user = rng.choice(("root", "cyrus", "news", "backup"))
        app = rng.choice(("sshd", "su", "CRON"))
        messages = [(app, f"pam_unix({app.lower()}:session): session closed for user {user}") for _ in range(n)]
        for _ in range(n // 4):  # a few sessions of the window opened in it
            messages.insert(rng.randrange(len(messages)),
                            (app, f"pam_unix({app.lower()}:session): session opened for user {user} by (uid=0)"))
        truth = Facts(entity=host, severity="info", details={"problemKeywords": "session, closed"})
    record = TelemetryRecord(id=f"grounding-{index}", kind="syslog", body=_lines(rng, host, messages),
                             attributes={"shape": shape})
    return record, truth


def generate(n: int, seed: int = 0) -> list[tuple[TelemetryRecord, Facts]]:
    """(record, ground truth) for cases 0..n-1; raises ValueError on a negative n."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return [make(i, random.Random(f"{seed}:grounding:{i}")) for i in range(n)]


# -- the `network` section: 3GPP notifications over VES, PM reports, windows of several senders ----
# Written for this project from the specifications' field names (3GPP TS 28.532 / 28.111 notifications
# in VES 7.2 stndDefined events, TS 28.532 measDataFile, TS 28.552 counter names) and the vendors'
# documented syslog layouts (Junos event tags, Cisco IOS / NX-OS and Arista EOS mnemonics, Huawei VRP
# `%%01MOD/SEV/BRIEF`), with the filler texts simulators leave in events. Record i depends only on
# (seed, i).
NETWORK_SHAPES = ("moi-creation", "attribute-change", "moi-changes", "alarm", "file-ready", "heartbeat",
                  "pm-no-kpi", "senders")
FILLER = ("additional text details", "string", "specific problem")
_RAN = ("odu-", "oru-", "gnb-cu-", "gnb-du-", "enb-")
_CITIES = ("aveiro", "brno", "cork", "debrecen", "esbjerg", "faro", "gent", "haarlem", "izmir", "jena", "kaunas")
_CLASSES = ("NRCellDU", "NRCellCU", "NRSectorCarrier", "EUtranCellFDD", "NRCellRelation", "BWP")
_ATTRS = (("administrativeState", "UNLOCKED", "LOCKED"), ("configuredMaxTxPower", 43, 38), ("nRPCI", 211, 214),
          ("ssbFrequency", 632628, 632640), ("cellReservedForOperatorUse", "NOT_RESERVED", "RESERVED"))
_CAUSES = (("temperatureUnacceptable", "ENVIRONMENTAL_ALARM", "temperature, unacceptable"),
           ("lossOfSignal", "COMMUNICATIONS_ALARM", "loss, signal"),
           ("powerProblem", "EQUIPMENT_ALARM", "power, problem"),
           ("synchronizationSourceMismatch", "COMMUNICATIONS_ALARM", "synchroni, source"),
           ("transmitterFailure", "EQUIPMENT_ALARM", "transmitter, fail"))
_SEVERITIES = {"CRITICAL": "critical", "MAJOR": "major", "MINOR": "minor", "WARNING": "warning"}
_PM_COUNTERS = ("DRB.UEThpDl", "DRB.UEThpUl", "RRU.PrbUsedDl", "RRU.PrbUsedUl", "PEE.AvgPower", "PEE.Energy",
                "RRC.ConnMean", "RRC.ConnMax", "pmMacVolDl", "pmCellDowntimeAuto")


def _ran_element(rng: random.Random) -> str:
    return f"{rng.choice(_RAN)}{rng.choice(_CITIES)}-{rng.randrange(1, 60)}"


def _epoch_us(rng: random.Random) -> tuple[int, str]:
    seconds = 1_760_000_000 + rng.randrange(0, 8_000_000)
    from datetime import datetime, timezone

    return seconds * 1_000_000, datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _stnd_event(rng: random.Random, element: str, namespace: str, data: dict, ugly: bool) -> dict:
    micros, when = _epoch_us(rng)
    header = {"domain": "stndDefined", "eventId": f"{namespace}-{rng.randrange(10 ** 6)}",
              "eventName": f"stndDefined_{namespace}", "priority": "Normal", "reportingEntityName": element,
              "sequence": rng.randrange(1000), "sourceName": element, "startEpochMicrosec": micros,
              "lastEpochMicrosec": micros, "version": "4.1", "stndDefinedNamespace": namespace,
              "vesEventListenerVersion": "7.2.1"}
    if ugly:  # simulators leave the source out, the system DN and href as their examples
        header.pop("sourceName")
    data = {"href": "href1" if ugly else f"https://{element}.example.net/ProvMnS/v1/SubNetwork=S1/"
                                           f"ManagedElement={element}",
            "notificationId": rng.randrange(10 ** 5), "eventTime": when,
            "systemDN": "xyz" if ugly else f"SubNetwork=S1,ManagedElement={element}", **data}
    return {"event": {"commonEventHeader": header, "stndDefinedFields": {
        "schemaReference": f"https://forge.3gpp.org/rep/sa5/MnS/blob/Rel-17/OpenAPI/{namespace}.yaml",
        "stndDefinedFieldsVersion": "1.0", "data": data}}}


def _moi(element: str, cls: str, n: int) -> tuple[str, str]:
    dn = f"SubNetwork=S1,ManagedElement={element},GNBDUFunction=1,{cls}={n}"
    return dn, "https://" + element + ".example.net/ProvMnS/v1/" + dn.replace(",", "/")


def _network_event(shape: str, rng: random.Random) -> tuple[dict, str, str, list[str]]:
    """(VES event, severity, problem keywords, filler texts placed in it)."""
    element, ugly = _ran_element(rng), rng.random() < 0.4
    filler = rng.choice(FILLER)
    cls, n = rng.choice(_CLASSES), rng.randrange(1, 40)
    dn, href = _moi(element, cls, n)
    if shape == "moi-creation":
        deleted = rng.random() < 0.4
        data = {"notificationType": "notifyMOIDeletion" if deleted else "notifyMOICreation",
                "additionalText": filler, "sourceIndicator": rng.choice(("MANAGEMENT_OPERATION", "SON_OPERATION"))}
        data.update({"objectClass": cls, "objectInstance": dn} if ugly else {"href": href})
        if not deleted:
            data["attributeList"] = {"id": str(n), **{a: new for a, _, new in rng.sample(_ATTRS, 2)}}
        keywords = f"{'deleted' if deleted else 'created'}, {cls}={n}"
        return _stnd_event(rng, element, "3GPP-Provisioning", data, ugly), "info", keywords, [filler]
    if shape == "attribute-change":
        attr, old, new = rng.choice(_ATTRS)
        data = {"notificationType": "notifyMOIAttributeValueChanges", "additionalText": filler, "href": href,
                "attributeListValueChanges": [{"attributeNameValuePairSet": {attr: new},
                                               "oldAttributeNameValuePairSet": {attr: old}}]}
        event = _stnd_event(rng, element, "3GPP-Provisioning", data, False)
        return event, "info", f"{attr}, {new}", [filler]
    if shape == "moi-changes":
        attr, old, new = rng.choice(_ATTRS)
        path = "/" + dn.replace(",", "/") + f"#/attributes/{attr}"
        data = {"notificationType": "notifyMOIChanges", "additionalText": filler,
                "moiChanges": [{"notificationId": 1, "path": path, "operation": "REPLACE", "value": new, "oldValue": old}]}
        return _stnd_event(rng, element, "3GPP-Provisioning", data, ugly), "info", f"{attr}, {new}", [filler]
    if shape == "alarm":
        cause, alarm_type, keywords = rng.choice(_CAUSES)
        kind = rng.choice(("notifyNewAlarm", "notifyChangedAlarm", "notifyClearedAlarm"))
        raw = "CLEARED" if kind == "notifyClearedAlarm" else rng.choice(list(_SEVERITIES))
        data = {"notificationType": kind, "alarmId": f"ALM-{rng.randrange(10 ** 4)}", "alarmType": alarm_type,
                "probableCause": cause, "perceivedSeverity": raw, "specificProblem": rng.choice(FILLER),
                "additionalText": filler}
        data.update({"objectInstance": dn} if ugly else {"href": href})
        event = _stnd_event(rng, element, "3GPP-FaultSupervision", data, False)
        severity = "info" if raw == "CLEARED" else _SEVERITIES[raw]
        return event, severity, keywords + (", cleared" if raw == "CLEARED" else ""), [filler, data["specificProblem"]]
    if shape == "file-ready":
        job = f"pm-job-{rng.randrange(1, 99)}"
        data = {"notificationType": "notifyFileReady", "additionalText": filler,
                "href": f"https://{element}.example.net/ProvMnS/v1/SubNetwork=S1/ManagedElement={element}/"
                        f"PerfMetricJob={job}",
                "fileInfoList": [{"fileLocation": f"sftp://pm@10.0.0.{rng.randrange(2, 250)}/pm/"
                                                  f"A20251101.{rng.randrange(10, 23)}00+0000_{element}.xml.gz",
                                  "fileSize": rng.randrange(10 ** 4, 10 ** 6), "fileDataType": "Performance",
                                  "fileCompression": "gzip"}]}
        return _stnd_event(rng, element, "3GPP-PerformanceAssurance", data, False), "info", f"file, ready, {job}", \
            [filler]
    data = {"notificationType": "notifyHeartbeat", "heartbeatNtfPeriod": rng.choice((30, 60, 300))}
    return _stnd_event(rng, element, "3GPP-Heartbeat", data, ugly), "info", "heartbeat", []


def _pm_no_kpi(rng: random.Random) -> tuple[str, str, str]:
    """(a 28.532 measDataFile holding no counter a known KPI needs, its element, the first counter)."""
    element = _ran_element(rng)
    counters = rng.sample(_PM_COUNTERS, rng.randrange(2, 6))
    values = "".join(
        f'<measValue measObjLdn="ManagedElement={element},GNBDUFunction=1,NRCellDU={c}">'
        + "".join(f'<r p="{p}">{rng.randrange(0, 90000) if p == 1 else rng.choice(("NIL", rng.randrange(0, 90000)))}</r>'
                  for p in range(1, len(counters) + 1))
        + "</measValue>" for c in range(1, rng.randrange(2, 6)))
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n<measDataFile xmlns="http://www.3gpp.org/ftp/specs/archive/28_series/'
            f'28.532#measData"><fileHeader fileFormatVersion="28.532 V17.0" vendorName="Acme"><measData beginTime='
            f'"2025-11-0{rng.randrange(1, 9)}T10:00:00Z"/></fileHeader><measData><measEntity localDn="SubNetwork=S2,'
            f'ManagedElement={element}"/><measInfo><granPeriod duration="PT900S"/>'
            + "".join(f'<measType p="{p}">{c}</measType>' for p, c in enumerate(counters, start=1))
            + values + "</measInfo></measData></measDataFile>")
    return body, element, counters[0]


# (sender kind, line template with {host} {t} {a} {b}, keywords when it leads)
_LOSS = (
    ("junos", '<28>Nov 21 03:14:{t:02d} {host} rpd[2290]: BGP_PEER_STATE_CHANGED: BGP peer 198.51.100.{a} (External AS '
              '648{b:02d}) changed state from Established to Idle (event HoldTime) (instance master)', "bgp, idle"),
    ("eos", 'Nov 21 03:14:{t:02d} {host} Bgp: %BGP-5-ADJCHANGE: peer 10.1.{b}.{a} (VRF default AS 650{b:02d}) old state '
            'Established event Stop new state Idle', "peer, idle"),
    ("ios", '<189>{a}: {host}: *Nov 21 03:14:{t:02d}.220 UTC: %OSPF-5-ADJCHG: Process 1, Nbr 10.0.{b}.{a} on '
            'GigabitEthernet0/{b} from FULL to DOWN, Neighbor Down: Dead timer expired', "nbr, down"),
    ("ios", '<189>{a}: {host}: *Nov 21 03:14:{t:02d}.220 UTC: %CLNS-5-ADJCHANGE: ISIS: Adjacency to pe-{b} '
            '(GigabitEthernet0/0/0/{b}) Down, hold time expired', "adjacency, down"),
    ("huawei", '<187>Nov 21 2026 03:14:{t:02d} {host} %%01IFNET/4/LINK_STATE(l)[{a}]:The line protocol IP on the '
               'interface 100GE1/0/{b} has entered the DOWN state.', "line protocol, down"),
)
_HYGIENE = (
    ("nxos", "2026 Nov 21 03:14:{t:02d} {host} %STP-2-BLOCK_BPDUGUARD: Received BPDU on port Ethernet1/{a} with BPDU "
             "Guard enabled. Disabling port.", "critical"),
    ("junos", "<27>Nov 21 03:14:{t:02d} {host} mgd[40321]: UI_CONFIGURATION_ERROR: Process: mgd, path: [edit protocols "
              "bgp group IX], statement: neighbor 192.0.2.{a}, Missing mandatory statement: 'peer-as'", "major"),
    ("huawei", "<188>Nov 21 2026 03:14:{t:02d} {host} %%01MSTP/4/BPDU_PROTECTION(l)[{a}]:This edged-port "
               "GigabitEthernet0/0/{a} that enabled BPDU-Protection will be shutdown, because it received BPDU packet!",
     "warning"),
)
_NOISE = "Nov 21 03:14:{t:02d} {host} Ebra: %LINEPROTO-5-UPDOWN: Line protocol on Interface Ethernet{a}, changed state to up"


def _senders(rng: random.Random) -> tuple[str, str, str, str, list[str]]:
    """(window, lead sender, severity, lead keywords, senders with problems): a loss of service on one
    router beside a louder hygiene event on a switch, informational lines around them."""
    lead, guard, other = (f"{p}-{rng.choice(_CITIES)}-{rng.randrange(1, 20)}" for p in ("pe", "leaf", "spine"))
    _, loss, keywords = rng.choice(_LOSS)
    _, hygiene, level = rng.choice(_HYGIENE)
    lines = [(rng.randrange(0, 60), loss.format(host=lead, t=0, a=rng.randrange(2, 250), b=rng.randrange(1, 9)))]
    lines += [(rng.randrange(0, 60), hygiene.format(host=guard, t=0, a=rng.randrange(2, 48), b=0))
              for _ in range(rng.randrange(3, 15))]
    lines += [(rng.randrange(0, 60), _NOISE.format(host=other, t=0, a=rng.randrange(1, 48)))
              for _ in range(rng.randrange(0, 6))]
    lines.sort(key=lambda tl: tl[0])
    body = "\n".join(line.replace(":14:00", f":14:{t:02d}", 1) for t, line in lines)
    severity = "critical" if level == "critical" else "major"
    return body, lead, severity, keywords, [lead, guard]


def make_network(index: int, rng: random.Random) -> tuple[TelemetryRecord, Facts]:
    shape = NETWORK_SHAPES[index % len(NETWORK_SHAPES)]
    details = {"shape": shape}
    if shape == "pm-no-kpi":
        body, element, counter = _pm_no_kpi(rng)
        truth = Facts(entity=element, severity="info",
                      details={**details, "problemKeywords": f"counters, {counter}", "kpiComputed": "no"})
        return TelemetryRecord(id=f"network-{index}", kind="pm", body=body, attributes={"shape": shape}), truth
    if shape == "senders":
        body, lead, severity, keywords, senders = _senders(rng)
        truth = Facts(entity=lead, severity=severity,
                      details={**details, "problemKeywords": keywords, "senders": ", ".join(senders)})
        return TelemetryRecord(id=f"network-{index}", kind="syslog", body=body, timestamp="2026-11-21T04:00:00Z",
                               attributes={"shape": shape}), truth
    event, severity, keywords, filler = _network_event(shape, rng)
    header = event["event"]["commonEventHeader"]
    truth = Facts(entity=header["reportingEntityName"], severity=severity,
                  details={**details, "problemKeywords": keywords, "placeholders": "|".join(filler)})
    return TelemetryRecord(id=f"network-{index}", kind="ves", body=event, attributes={"shape": shape}), truth


def generate_network(n: int, seed: int = 0) -> list[tuple[TelemetryRecord, Facts]]:
    """(record, ground truth) for network cases 0..n-1; raises ValueError on a negative n."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return [make_network(i, random.Random(f"{seed}:network:{i}")) for i in range(n)]
