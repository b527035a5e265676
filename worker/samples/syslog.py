"""RFC 5424 syslog bursts: one fault repeated among routine messages from a network element."""

from __future__ import annotations

import random
from datetime import timedelta

from worker.facts.syslog import PRI_SEVERITY
from worker.messages import Facts, TelemetryRecord
from worker.samples.common import gnb, iso_ms, record_start, site_of, truth

# (app, msgid, syslog severity 0..7, message template, problem keywords)
FAULTS = (
    ("ngap", "LINKDOWN", 3, "NG link to {amf} down: SCTP association lost", ["ng link", "down"]),
    ("ptp4l", "SYNC", 2, "PTP clock synchronisation lost, entering holdover", ["synchronisation"]),
    ("rrumgr", "VSWR", 3, "VSWR alarm on antenna port {port}: return loss above threshold", ["vswr"]),
    ("bgpd", "BGP", 3, "BGP session with peer {ip} down: hold timer expired", ["bgp", "down"]),
    ("thermald", "THERMAL", 2, "board temperature {temp} C above critical threshold", ["temperature"]),
    ("sshd", "AUTH", 4, "repeated authentication failures for user admin from {ip}", ["authentication"]),
    ("fanctl", "FAN", 4, "fan {port} speed below minimum, cooling degraded", ["fan"]),
    ("charon", "IKE", 3, "IPsec tunnel to {ip} down: IKE SA rekey failed", ["ipsec", "down"]),
    ("cprid", "LINK", 3, "CPRI link {port} to radio unit RU-{port} lost", ["cpri"]),
    ("oamd", "DISK", 4, "disk /var/log {temp}% full", ["disk"]),
)
ROUTINE = (
    ("oamd", "HEARTBEAT", 6, "heartbeat sent to OSS, sequence {n}"),
    ("confd", "COMMIT", 5, "configuration commit {n} by user oam succeeded"),
    ("cellmgr", "STATE", 6, "cell NRCellDU={port} operational state enabled"),
    ("chronyd", "NTP", 6, "NTP synchronised to {ip} stratum 2, offset {n} us"),
    ("pmd", "UPLOAD", 6, "PM file A{n}.xml uploaded to collector"),
    ("ngap", "SCTP", 6, "SCTP association to {amf} established, streams {port}"),
    ("licd", "LICENSE", 6, "license check passed, {port}00 of 4000 capacity units used"),
    ("kernel", "-", 7, "eth{port}: link speed 25000 Mb/s full duplex"),
)
FACILITY = 16  # local0


def _fill(template: str, rng: random.Random) -> str:
    return template.format(amf=f"AMF-{rng.randrange(1, 9):02d}", port=rng.randrange(0, 8),
                           ip=f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}",
                           temp=rng.randrange(91, 99), n=rng.randrange(1000, 99999))


def _line(pri_severity: int, when, host: str, app: str, msgid: str, text: str, rng: random.Random) -> str:
    pri = FACILITY * 8 + pri_severity
    sd = f'[meta sequenceId="{rng.randrange(1, 1 << 20)}"]' if rng.random() < 0.3 else "-"
    return f"<{pri}>1 {iso_ms(when)} {host} {app} {rng.randrange(100, 9999)} {msgid} {sd} {text}"


def make(index: int, target_words: int, rng: random.Random) -> tuple[TelemetryRecord, Facts]:
    """A burst of about `target_words` words (never more): the fault 1-5 times, routine lines around it."""
    host = gnb(rng)
    app, msgid, severity, template, keywords = rng.choice(FAULTS)
    fault_text = _fill(template, rng)
    when = record_start(index, rng)
    fault_at = rng.randrange(0, 4)
    fault_cost = len(_line(severity, when, host, app, msgid, fault_text, rng).split()) + 2
    lines, words, times, fault_lines = [], 0, [], 0
    repeats = rng.randrange(1, 6)
    while True:
        owed = max(0, repeats - fault_lines) * fault_cost
        is_fault = fault_lines < repeats and (len(lines) >= fault_at or words + owed + 24 > target_words)
        if is_fault:
            line = _line(severity, when, host, app, msgid, fault_text, rng)
        else:
            r_app, r_msgid, r_sev, r_template = rng.choice(ROUTINE)
            line = _line(r_sev, when, host, r_app, r_msgid, _fill(r_template, rng), rng)
        cost = len(line.split())
        if words + cost > target_words and fault_lines >= 1:
            break
        lines.append(line)
        words += cost
        times.append(when)
        fault_lines += is_fault
        when += timedelta(milliseconds=rng.randrange(50, 20_000))
    body = "\n".join(lines)
    record = TelemetryRecord(id=f"syslog-{index:06d}", kind="syslog", body=body, source=site_of(host),
                             timestamp=iso_ms(times[0]), attributes={"format": "rfc5424"})
    facts = truth(host, PRI_SEVERITY[severity], fault_text, keywords, min(times), max(times), len(lines),
                  app=app, msgid=msgid)
    return record, facts
