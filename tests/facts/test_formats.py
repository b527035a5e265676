"""Network gear syslog, application log layouts, TS 28.532 / 28.550 PM files and VES alarm names:
each shape read line by line, then as a window (the mixed-sender rule), as the vendors document them."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from worker.facts import extract_facts
from worker.facts.levels import message_severity
from worker.facts.loglines import parse_line
from worker.facts.pm_filename import parse_file_name
from worker.facts.ves_domains import alarm_phrase
from worker.messages import TelemetryRecord

REF = datetime(2026, 11, 20, tzinfo=timezone.utc)
UTC = timezone.utc


def _facts(kind, body, **kw):
    return extract_facts(TelemetryRecord(id="r", kind=kind, body=body, **kw))


@pytest.mark.parametrize("line, shape, host, app, severity, when", [
    # IOS: sequence number, origin-id host name, `*` (clock never set), zone name
    ("<189>521: router1: *Nov 14 10:12:01.123 UTC: %LINK-5-CHANGED: Interface Gi0/1, changed state to administratively down",
     "cisco", "router1", "%LINK-5-CHANGED", "info", datetime(2026, 11, 14, 10, 12, 1, 123000, UTC)),
    # no host in the line: never a piece of the code, the interface or the address in the text
    ("<190>522: *Nov 14 10:12:02.456 CET: %SYS-5-CONFIG_I: Configured from console by vty0 (10.0.0.9)",
     "cisco", None, "%SYS-5-CONFIG_I", "info", datetime(2026, 11, 14, 9, 12, 2, 456000, UTC)),
    # `.`: clock set but not in sync; `service timestamps log datetime year`
    ("000123: .Mar  1 2025 00:00:31.123: %SYS-2-MALLOCFAIL: Memory allocation of 65536 bytes failed",
     "cisco", None, "%SYS-2-MALLOCFAIL", "critical", datetime(2025, 3, 1, 0, 0, 31, 123000, UTC)),
    # a relay's file: its own time and the sender's address before the device's line
    ("Nov 14 10:12:03 10.1.1.1 521: *Nov 14 10:12:01.123 UTC: %LINK-3-UPDOWN: Interface Gi0/1, changed state to down",
     "cisco", "10.1.1.1", "%LINK-3-UPDOWN", "major", datetime(2026, 11, 14, 10, 12, 1, 123000, UTC)),
    # IOS-XR: host name prefix, a card (never the element), process, `%FAC-SUB-SEV-MNEM :`
    ("<187>2761: xr-pe1 RP/0/RSP0/CPU0:Nov 14 10:12:01.123 UTC: ifmgr[215]: %PKT_INFRA-LINK-3-UPDOWN : Interface "
     "HundredGigE0/0/0/1, changed state to Down", "cisco", "xr-pe1", "%PKT_INFRA-LINK-3-UPDOWN", "major",
     datetime(2026, 11, 14, 10, 12, 1, 123000, UTC)),
    ("RP/0/RP0/CPU0:2026 Nov 14 10:12:01.123 UTC: bgp[1052]: %ROUTING-BGP-5-ADJCHANGE : neighbor 192.0.2.2 Down - "
     "hold time expired", "cisco", None, "%ROUTING-BGP-5-ADJCHANGE", "info", datetime(2026, 11, 14, 10, 12, 1, 123000, UTC)),
    # NX-OS: year first, host after the time; or `<PRI>: ` and a zone without host
    ("2026 Nov 14 10:12:01 nx-leaf1 %ETHPORT-5-IF_DOWN_LINK_FAILURE: Interface Ethernet1/1 is down (Link failure)",
     "cisco", "nx-leaf1", "%ETHPORT-5-IF_DOWN_LINK_FAILURE", "info", datetime(2026, 11, 14, 10, 12, 1, tzinfo=UTC)),
    ("<186>: 2026 Nov 14 10:12:01 PST: %VPC-2-PEER_KEEP_ALIVE_RECV_FAIL: In domain 10, VPC peer keep-alive receive has failed",
     "cisco", None, "%VPC-2-PEER_KEEP_ALIVE_RECV_FAIL", "critical", datetime(2026, 11, 14, 18, 12, 1, tzinfo=UTC)),
    # ASA: `logging device-id hostname` writes `host :`; without it no host
    ("<164>Nov 14 2026 07:55:10 fw-dmz-2 : %ASA-4-106023: Deny tcp src outside:203.0.113.77/51514 dst dmz:198.51.100.20/22",
     "asa", "fw-dmz-2", "%ASA-4-106023", "warning", datetime(2026, 11, 14, 7, 55, 10, tzinfo=UTC)),
    ("<166>Nov 14 2026 10:12:01: %ASA-6-302013: Built outbound TCP connection 1234 for outside:198.51.100.7/443",
     "asa", None, "%ASA-6-302013", "info", datetime(2026, 11, 14, 10, 12, 1, tzinfo=UTC)),
    # Arista EOS: host, then the agent
    ("Nov 14 05:10:44 spine-2 Bgp: %BGP-3-NOTIFICATION: sent to neighbor 10.1.0.9 (VRF default AS 65010) 6/2",
     "cisco", "spine-2", "%BGP-3-NOTIFICATION", "major", datetime(2026, 11, 14, 5, 10, 44, tzinfo=UTC)),
    # Huawei VRP (offset zone, lower-case brief, `(t)` alarm type) and H3C (`%%10`, ISO time)
    ("<188>Nov 14 2026 04:22:31+08:00 CE6881-AGG-01 %%01IFNET/4/LINK_STATE(l)[108]:The line protocol IP on the "
     "interface 10GE1/0/7 has entered the DOWN state.", "huawei", "CE6881-AGG-01", "IFNET/4/LINK_STATE", "warning",
     datetime(2026, 11, 13, 20, 22, 31, tzinfo=UTC)),
    ("2026-11-14 03:00:07 agg-zürich-1 %%01DEVM/1/hwBoardFail_active(t)[31]:The board partially failed.",
     "huawei", "agg-zürich-1", "DEVM/1/hwBoardFail_active", "critical", datetime(2026, 11, 14, 3, 0, 7, tzinfo=UTC)),
    ("<187>2009-09-21T15:32:55 Sysname %%10IFNET/3/LINK_UPDOWN(l): Ethernet0/6 link status is DOWN.",
     "huawei", "Sysname", "IFNET/3/LINK_UPDOWN", "major", datetime(2009, 9, 21, 15, 32, 55, tzinfo=UTC)),
    # Huawei traps and H3C console lines write the code without `%%`
    ("#Nov 14 2026 10:12:01 HUAWEI IFNET/1/IF_LINKDOWN:OID 1.3.6.1.6.3.1.1.5.3 Interface 7 turned into DOWN state.",
     "huawei", "HUAWEI", "IFNET/1/IF_LINKDOWN", "critical", datetime(2026, 11, 14, 10, 12, 1, tzinfo=UTC)),
    ("%Dec  6 10:44:55:283 2006 Sysname NTP/5/NTP_LOG:- 1 - NTP service enable", "huawei", "Sysname",
     "NTP/5/NTP_LOG", "info", datetime(2006, 12, 6, 10, 44, 55, 283000, UTC)),
    # CEF / LEEF envelopes: the event's own severity and name
    ("<134>Nov 14 10:12:01 fw-cp-1 CEF:0|Check Point|VPN-1 & FireWall-1|Check Point|Log|Drop|High|act=Drop "
     "src=203.0.113.5 dst=10.0.0.9 msg=Blocked by rule 12", "cef", "fw-cp-1", None, "major",
     datetime(2026, 11, 14, 10, 12, 1, tzinfo=UTC)),
    ("<14>Nov 14 10:12:01 proxy-3 LEEF:2.0|Acme|Proxy|1.0|malware-block|cat=security\tsev=9\tsrc=10.1.1.1", "cef",
     "proxy-3", None, "critical", datetime(2026, 11, 14, 10, 12, 1, tzinfo=UTC)),
    # Cisco Meraki: an epoch where RFC 5424 has its time
    ("<134>1 1763115121.123456789 MX84 events type=vpn_connectivity_change vpn_type=site-to-site connectivity=false",
     "rfc5424", "MX84", "events", "info", datetime(2025, 11, 14, 10, 12, 1, 123457, UTC)),
    # uptime stamps instead of a time: no time, and never a host
    ("<187>000045: 1w2d: %LINK-3-UPDOWN: Interface Gi0/3, changed state to down", "cisco", None, "%LINK-3-UPDOWN",
     "major", None),
    ("router7: 000046: *00:02:15.123: %SYS-5-RESTART: System restarted", "cisco", "router7", "%SYS-5-RESTART",
     "info", None),
    # a device's line without a code keeps its year-first time (NX-OS)
    ("<189>: 2026 Nov 14 10:12:01 nx-leaf1 ntpd[22]: NTP sync lost", "rfc3164", "nx-leaf1", "ntpd", "info",
     datetime(2026, 11, 14, 10, 12, 1, tzinfo=UTC)),
    # Nokia SR OS names the X.733 severity inside its event id
    ("Nov 14 10:12:01 sros-pe-3 TMNX: 4521 Base SNMP-MAJOR-linkDown-2004 [Port 1/1/1]:  Interface 1/1/1 is not "
     "operational", "bsd", "sros-pe-3", "TMNX", "major", datetime(2026, 11, 14, 10, 12, 1, tzinfo=UTC)),
    # FortiGate key=value behind a PRI: devname is the element, level its severity
    ('<185>date=2026-11-14 time=10:12:01 devname="FGT-EDGE-1" devid="FG100F" type="event" subtype="system" '
     'level="alert" logdesc="Admin login failed" srcip=203.0.113.5 msg="Administrator admin login failed from '
     'https(203.0.113.5) because of invalid password"', "logfmt", "FGT-EDGE-1", "system", "critical",
     datetime(2026, 11, 14, 10, 12, 1, tzinfo=UTC)),
])
def test_device_line_host_code_severity_and_time(line, shape, host, app, severity, when):
    parsed = parse_line(line, REF)
    assert (parsed.shape, parsed.host, parsed.app, parsed.severity, parsed.time) == (shape, host, app, severity, when)


def test_cef_text_is_the_event_name_and_its_message():
    line = parse_line("Nov 14 10:12:01 ids-2 CEF:0|Acme|IDS|4.1|1001|SQL injection attempt|9|src=203.0.113.7 "
                      "msg=blocked at the edge dvchost=ids-sensor-2", REF)
    assert (line.text, line.severity, line.host) == ("SQL injection attempt: blocked at the edge", "critical", "ids-2")


def test_vendor_code_level_outranks_words_and_a_relays_pri():
    words = parse_line("<190>1044: br-rtr-01: *Nov 14 10:12:09.880 UTC: %CCH323-6-CALL_PRESERVED: H.225 socket "
                       "error on call 4711, call preserved", REF)
    relayed = parse_line("<13>Nov 14 10:12:09 br-rtr-01 %LINK-3-UPDOWN: Interface Gi0/2, changed state to up", REF)
    assert (words.severity, relayed.severity) == ("info", "major")
    assert message_severity("%CCH323-6-CALL_PRESERVED: socket error, FATAL retry") == "info"


@pytest.mark.parametrize("line, shape, host, app, severity, when, source", [
    ("081109 213924 19 WARN dfs.DataNode$DataXceiver: 10.251.30.6:50010:Got exception while serving blk_-29 to "
     "/10.251.90.64:", "hdfs", "10.251.30.6", "dfs.DataNode$DataXceiver", "warning",
     datetime(2008, 11, 9, 21, 39, 24, tzinfo=UTC), None),
    ("081109 203518 143 INFO dfs.DataNode$DataXceiver: Receiving block blk_-1608 src: /10.250.19.102:54106 dest: "
     "/10.250.19.102:50010", "hdfs", "10.250.19.102", "dfs.DataNode$DataXceiver", "info",
     datetime(2008, 11, 9, 20, 35, 18, tzinfo=UTC), None),
    ("nova-compute.log.1.2017-05-16_13:53:08 2017-05-16 00:00:00.008 25746 INFO nova.compute.manager "
     "[req-3ea4052c-895d-4b64-9e2d-04d64c4d94ab - - - - -] [instance: b9000564] VM Started (Lifecycle Event)",
     "oslo", None, "nova.compute.manager", "info", datetime(2017, 5, 16, 0, 0, 0, 8000, UTC), "nova-compute"),
    ("2015-07-29 19:04:12,394 - ERROR [LearnerHandler-/10.10.34.13:37112:LearnerHandler@562] - Unexpected exception",
     "applog", None, "LearnerHandler", "major", datetime(2015, 7, 29, 19, 4, 12, 394000, UTC), None),
    ("2026-11-14 10:12:01,123 - telesum.db - WARNING - connection pool 95% used", "applog", None, "telesum.db",
     "warning", datetime(2026, 11, 14, 10, 12, 1, 123000, UTC), None),
    ("[2026-02-03 22:14:07,311] ERROR [ReplicaManager broker=2] Error processing append operation "
     "(kafka.server.ReplicaManager)", "applog", None, None, "major", datetime(2026, 2, 3, 22, 14, 7, 311000, UTC), None),
    ("2026-11-14T10:12:01.123+01:00 ERROR 12345 --- [orders] [           main] c.a.OrderService : gateway timeout",
     "applog", None, "c.a.OrderService", "major", datetime(2026, 11, 14, 9, 12, 1, 123000, UTC), None),
    # the level field is the line's own: "error" in an INFO message does not raise it
    ("17/06/09 20:10:40 INFO executor.Executor: Finished task 1.0 with 0 errors", "applog", None, "executor.Executor",
     "info", datetime(2017, 6, 9, 20, 10, 40, tzinfo=UTC), None),
    ("ERROR:root:could not open /etc/telesum.toml", "python", None, "root", "major", None, None),
    ("2026/05/30 18:21:14 relay.go:140: error forwarding batch 9912 to collector-3", "go", None, "relay.go:140",
     "major", datetime(2026, 5, 30, 18, 21, 14, tzinfo=UTC), None),
    ('time="2026-11-14T10:12:01Z" level=warning msg="slow scrape" host=api-7', "logfmt", "api-7", None, "warning",
     datetime(2026, 11, 14, 10, 12, 1, tzinfo=UTC), None),
    ("E1114 10:12:01.123456   12345 reflector.go:138] failed to list *v1.Pod", "klog", None, "reflector.go:138",
     "major", datetime(2026, 11, 14, 10, 12, 1, 123456, UTC), None),
    ("2026/11/14 10:12:01 [crit] 1234#1234: *5678 SSL_do_handshake() failed, client: 192.0.2.10", "nginx", None,
     "nginx", "critical", datetime(2026, 11, 14, 10, 12, 1, tzinfo=UTC), None),
    ("[Sat Nov 14 10:12:01.123456 2026] [proxy:error] [pid 1234:tid 5678] [client 192.0.2.10:54321] AH00940: "
     "disabled connection", "apache", None, "proxy", "major", datetime(2026, 11, 14, 10, 12, 1, 123456, UTC), None),
    ("[Sat Nov 14 10:12:01 2026] [warn] [client 192.0.2.10] mod_fcgid: read data timeout", "apache", None, "httpd",
     "warning", datetime(2026, 11, 14, 10, 12, 1, tzinfo=UTC), None),
    ("40216 node-112 node psu 1163500260 1 PSU failure (ambient=31C)", "hpc", "node-112", "node", "major",
     datetime(2006, 11, 14, 10, 31, tzinfo=UTC), None),
    # a container runtime's prefix: its time gives the year the program's line lacks
    ("2025-11-14T10:12:01.123456789Z stderr F E1114 10:12:01.123456 1 reflector.go:138] failed to list *v1.Pod",
     "klog", None, "reflector.go:138", "major", datetime(2025, 11, 14, 10, 12, 1, 123456, UTC), None),
    ("[Sat Nov 14 10:12:01 2026] e1000e 0000:00:19.0 eth0: NIC Link is Down", "ctime", None, None, "major",
     datetime(2026, 11, 14, 10, 12, 1, tzinfo=UTC), None),
])
def test_app_line_layout_level_logger_time_and_no_peer_host(line, shape, host, app, severity, when, source):
    parsed = parse_line(line, REF)
    assert (parsed.shape, parsed.host, parsed.app, parsed.severity, parsed.time, parsed.source) == (
        shape, host, app, severity, when, source)


@pytest.mark.parametrize("text", ["134681 some words", "081109 2036 148 INFO x", "nova.log hello",
                                  "[not a time] ERROR x", "E1114 not klog"])
def test_app_layouts_need_their_time_and_level_fields(text):
    assert parse_line(text, REF) is None


def test_mixed_window_names_the_sender_with_the_worst_severity_then_the_most_lines():
    lines = [f"2026-11-14T03:00:{i:02d}Z sw-acc-5 {1880 + i}: *Nov 14 03:00:{i:02d}.000 UTC: %LINEPROTO-5-UPDOWN: "
             f"Line protocol on Interface Gi1/0/{i}, changed state to up" for i in range(20)]
    lines += [f"2026-11-14T03:01:0{i}Z core-{i % 2} rpd[22]: BGP_IO_ERROR_CLOSE_SESSION: BGP peer 10.0.0.{i}: "
              f"Error event" for i in range(3)]  # core-0 twice, core-1 once: all major
    f = _facts("syslog", "\n".join(lines))
    assert (f.entity, f.severity) == ("core-0", "major")
    critical = lines + ["2026-11-14T03:02:00Z agg-1 %%01DEVM/1/hwBoardFail_active(t)[31]:The board partially failed."]
    assert _facts("syslog", "\n".join(critical)).entity == "agg-1"


def test_window_without_hosts_names_the_service_of_its_log_file_never_the_file():
    body = "\n".join(f"{svc}.log.1.2026-03-12_07:00:02 2026-03-12 06:10:0{i}.114 41{i} {lvl} nova.{svc[5:]}.x msg {i}"
                     for i, (svc, lvl) in enumerate([("nova-api", "INFO")] * 3 + [("nova-compute", "ERROR")]))
    f = _facts("text", body)
    assert f.entity == "nova-compute" and "log" not in f.entity


# -- PM files: TS 28.532 measDataFile, processing instructions, reversed times, 28.550 names --------
MEAS_DATA_FILE = """<?xml version="1.0" encoding="UTF-8"?>
<measDataFile xmlns="http://www.3gpp.org/ftp/specs/archive/28_series/28.532#measData">
  <fileHeader fileFormatVersion="28.532 V17.1" vendorName="Acme"><measData beginTime="2026-05-01T10:00:00Z"/></fileHeader>
  <measData>
    <measEntity localDn="SubNetwork=1,ManagedElement=gnb-77" userLabel="gNB Seventy-Seven"/>
    <measInfo><granPeriod duration="PT900S" endTime="2026-05-01T10:15:00Z"/>
      <measType p="1">RRC.ConnEstabAtt.Sum</measType><measType p="2">RRC.ConnEstabSucc.Sum</measType>
      <measValue measObjLdn="ManagedElement=gnb-77,NRCellCU=4"><r p="1">100</r><r p="2">99</r></measValue>
    </measInfo>
  </measData>
  <fileFooter><measData endTime="2026-05-01T10:15:00Z"/></fileFooter>
</measDataFile>"""


def test_pm_measdatafile_element_times_and_counters():
    f = _facts("pm", MEAS_DATA_FILE)
    assert (f.entity, f.severity, f.first_seen, f.last_seen, f.facts_error) == (
        "gnb-77", "info", "2026-05-01T10:00:00Z", "2026-05-01T10:15:00Z", None)
    assert f.details["RRC setup success rate"] == "99.0%"


def test_pm_processing_instruction_before_declaration_and_end_before_begin():
    body = ('<?xml-stylesheet type="text/xsl" href="x.xsl"?>\n' + MEAS_DATA_FILE.replace(
        '<fileFooter><measData endTime="2026-05-01T10:15:00Z"/>', '<fileFooter><measData endTime="2026-05-01T09:45:00Z"/>'))
    f = _facts("pm", body)
    assert (f.first_seen, f.last_seen) == ("2026-05-01T09:45:00Z", "2026-05-01T10:00:00Z")
    assert "precedes its begin time" in f.facts_error


def test_pm_element_is_the_managed_element_not_a_function_even_when_the_file_is_cut():
    cut = MEAS_DATA_FILE.replace("ManagedElement=gnb-77\"", "RncFunction=RF-1,ManagedElement=gnb-77\"")[:600]
    f = _facts("pm", cut)
    assert f.entity == "gnb-77" and "does not parse" in f.facts_error


@pytest.mark.parametrize("name, begin, end, element, file_type", [
    ("A20261114.1000+0100-1015+0100_gNB-0042.xml", datetime(2026, 11, 14, 9, 0, tzinfo=UTC),
     datetime(2026, 11, 14, 9, 15, tzinfo=UTC), "gNB-0042", "A"),
    ("/pm/C20261114.2345+0000-20261115.0000+0000_SubNetwork=north,ManagedElement=enb-7_-_3.xml.gz",
     datetime(2026, 11, 14, 23, 45, tzinfo=UTC), datetime(2026, 11, 15, 0, 0, tzinfo=UTC), "enb-7", "C"),
    ("B20261114.2345-0000.xml", datetime(2026, 11, 14, 23, 45, tzinfo=UTC), datetime(2026, 11, 15, 0, 0, tzinfo=UTC),
     None, "B"),
])
def test_pm_file_name_28550(name, begin, end, element, file_type):
    parsed = parse_file_name(name)
    assert (parsed.begin, parsed.end, parsed.element, parsed.file_type) == (begin, end, element, file_type)


def test_pm_file_name_supplies_what_the_xml_lacks():
    bare = MEAS_DATA_FILE.replace('<measData beginTime="2026-05-01T10:00:00Z"/>', "").replace(
        '<fileFooter><measData endTime="2026-05-01T10:15:00Z"/></fileFooter>', "").replace(
        ' endTime="2026-05-01T10:15:00Z"', "").replace('localDn="SubNetwork=1,ManagedElement=gnb-77" userLabel="gNB Seventy-Seven"', "")
    f = _facts("pm", bare, attributes={"fileName": "A20260501.1200+0200-1215+0200_gnb-77.xml"})
    assert (f.entity, f.first_seen, f.last_seen) == ("gnb-77", "2026-05-01T10:00:00Z", "2026-05-01T10:15:00Z")
    assert parse_file_name("measurements-today.xml") is None


# -- VES: the alarm is the problem, identifiers are details -------------------------------------
@pytest.mark.parametrize("value, phrase", [
    ("Chn0001", None), ("notifyNewAlarm", None), ("12", None), ("lossOfSignal", "loss of signal"),
    ("LOSS_OF_SIGNAL", "loss of signal"), ("RanPciCollisionConfusionOccurred", "ran pci collision confusion occurred"),
    ("Fronthaul link failure on port 2", "Fronthaul link failure on port 2"), ("linkDown", "link down"),
    ("NRCellDU=3", None), ("5G_link_failure", "5G_link_failure"), ("Fault_vFW_highCPUusage", "Fault_vFW_highCPUusage"),
])
def test_alarm_phrase_identifiers_are_not_problems(value, phrase):
    assert alarm_phrase(value) == phrase


def test_ves_fault_with_an_id_as_specific_problem_names_the_alarm_and_keeps_the_id():
    event = {"event": {"commonEventHeader": {"domain": "fault", "eventName": "Fault_x", "sourceName": "cell-9",
                                             "startEpochMicrosec": 1716462000000000},
                       "faultFields": {"alarmCondition": "RanPciCollisionConfusionOccurred", "eventSeverity": "MAJOR",
                                       "specificProblem": "Chn0001"}}}
    f = _facts("ves", json.dumps(event))
    assert f.problem == "ran pci collision confusion occurred" and f.details["specificProblem"] == "Chn0001"


def test_ves_stnd_defined_alarm_name_elsewhere_in_the_event_is_the_problem():
    data = {"notificationType": "notifyNewAlarm", "perceivedSeverity": "CRITICAL", "systemDN": "ManagedElement=ru-1",
            "alarmInformation": {"alarmName": "lossOfSignal", "alarmId": "A-17"}}
    event = {"event": {"commonEventHeader": {"domain": "stndDefined", "sourceName": "ru-1", "eventName": "x"},
                       "stndDefinedFields": {"data": data}}}
    f = _facts("ves", event)
    assert (f.problem, f.severity, f.details["notificationType"]) == ("loss of signal", "critical", "notifyNewAlarm")


def test_stack_trace_frames_continue_their_line_and_keep_a_text_record_a_log_window():
    head = ["2026-02-03 22:14:07,311 ERROR [main] org.acme.Collector: flush failed",
            "2026-02-03 22:14:08,001 INFO [main] org.acme.Collector: retrying"]
    trace = ["java.io.IOException: Broken pipe", *[f"\tat org.acme.Io.write(Io.java:{i})" for i in range(8)],
             "Caused by: java.net.SocketException: Connection reset", "\t... 12 more"]
    f = _facts("text", "\n".join([head[0], *trace, head[1]]), attributes={"host": "collector-4"})
    assert (f.entity, f.severity, f.event_count) == ("collector-4", "major", 2)
    assert f.problem.startswith("flush failed") and f.details["unparsedLines"] == "1"  # the exception's own line


def test_free_text_takes_the_element_from_the_records_host_attribute_over_a_host_like_word():
    body = ("disk /var nearly full on backup-srv-2 (94 %)\n"
            "ERROR replication to db-replica-7.example.net failed: timeout after 30 s")
    guessed = _facts("text", body)
    labelled = _facts("text", body, attributes={"hostname": "edge-gw-12"})
    assert guessed.entity == "db-replica-7"  # the guess: a host-like word in the worst line
    assert labelled.entity == "edge-gw-12" and labelled.problem == guessed.problem


# -- stndDefined 3GPP notifications: what happened, never a field's filler text -------------------
@pytest.mark.parametrize("value, key, filler", [
    ("additional text details", "additionalText", True), ("string", "additionalText", True),
    ("href1", "href", True), ("xyz", "systemDN", True), ("specific problem", "specificProblem", True),
    ("n/a", "additionalText", True), ("Fan 2 replaced, temperature back to normal", "additionalText", False),
    ("lossOfSignal", "alarmName", False), ("Power amplifier output power degraded", "specificProblem", False),
])
def test_placeholder_texts_are_told_from_content(value, key, filler):
    from worker.facts.ves_domains import is_placeholder

    assert is_placeholder(value, key) is filler


def _stnd(data, source="du-9"):
    header = {"domain": "stndDefined", "eventName": "x", "sourceName": source, "startEpochMicrosec": 1761121509000000}
    return _facts("ves", {"event": {"commonEventHeader": header, "stndDefinedFields": {"data": data}}})


def test_stnd_alarm_with_only_filler_texts_names_its_probable_cause_and_object():
    f = _stnd({"notificationType": "notifyNewAlarm", "perceivedSeverity": "MINOR", "specificProblem": "string",
               "additionalText": "additional text details", "probableCause": "powerProblem",
               "href": "https://x.example/FaultSupervisionMnS/v1/SubNetwork=1/ManagedElement=du-9/PowerSupply=1"})
    assert (f.severity, f.problem) == ("minor", "power problem on PowerSupply=1")


def test_stnd_new_alarm_without_severity_is_indeterminate_and_says_so():
    f = _stnd({"notificationType": "notifyNewAlarm", "probableCause": "lossOfSignal"})
    assert f.severity == "warning" and "INDETERMINATE" in f.details["perceivedSeverity"]


def test_stnd_provisioning_without_an_object_says_so_and_quotes_real_text():
    f = _stnd({"notificationType": "notifyMOICreation", "href": "href1", "additionalText": "cell added for the fair"})
    assert f.problem == "MOI created (the notification names no object) (cell added for the fair)"


def test_stnd_attribute_changes_as_a_name_value_list_and_an_unknown_type_in_words():
    f = _stnd({"notificationType": "notifyMOIAttributeValueChanges", "objectInstance": "ManagedElement=du-9,Fan=1",
               "attributeListValueChanges": {"attributeNameValuePairSet": [{"name": "speed", "value": 80}],
                                             "oldAttributeNameValuePairSet": [{"name": "speed", "value": 40}]}})
    assert f.problem == "MOI Fan=1 changed: speed 40 -> 80"
    assert _stnd({"notificationType": "notifyThresholdCrossing"}).problem == "threshold crossing notification"


def test_stnd_element_from_the_managed_object_when_the_header_names_none():
    f = _stnd({"notificationType": "notifyHeartbeat", "systemDN": "xyz",
               "href": "https://x/ProvMnS/v1/SubNetwork=1/ManagedElement=ru-3/HeartbeatControl=1"}, source=None)
    assert (f.entity, f.problem) == ("ru-3", "heartbeat, element alive")


# -- PM reports say what they are and what was checked ------------------------------------------
def test_pm_report_without_a_known_kpi_claims_no_check():
    body = MEAS_DATA_FILE.replace("RRC.ConnEstabAtt.Sum", "DRB.UEThpDl").replace("RRC.ConnEstabSucc.Sum", "DRB.UEThpUl")
    f = _facts("pm", body)
    assert f.severity == "info" and "normal" not in f.problem
    assert f.problem == ("PM report of 2 counters (DRB.UEThpDl, DRB.UEThpUl) on 1 measured object, 900 s period; "
                         "no known KPI computed from these counters")


def test_pm_report_with_a_computed_kpi_names_it_and_what_was_not_checked():
    f = _facts("pm", MEAS_DATA_FILE)
    assert f.problem == "RRC setup success rate 99.0%: KPIs within normal range"
    extra = MEAS_DATA_FILE.replace('<measType p="2">RRC.ConnEstabSucc.Sum</measType>',
                                   '<measType p="2">RRC.ConnEstabSucc.Sum</measType><measType p="3">PEE.Energy</measType>'
                                   ).replace('<r p="2">99</r>', '<r p="2">99</r><r p="3">7</r>')
    assert _facts("pm", extra).problem.endswith("KPIs within normal range; 1 other counter not checked")


@pytest.mark.parametrize("att, succ, label", [
    ("MM.HoExeIntraReq", "MM.HoExeIntraSucc", "intra-gNB handover success rate"),
    ("RM.RegInitReq", "RM.RegInitSucc", "initial registration success rate"),
    ("SM.PduSessionCreationReq.snssai1", "SM.PduSessionCreationSucc.snssai1", "PDU session setup success rate"),
])
def test_pm_28552_kpis_are_computed_from_their_counters(att, succ, label):
    body = MEAS_DATA_FILE.replace("RRC.ConnEstabAtt.Sum", att).replace("RRC.ConnEstabSucc.Sum", succ)
    f = _facts("pm", body.replace('<r p="2">99</r>', '<r p="2">70</r>'))
    assert (f.severity, f.problem) == ("major", f"low {label} 70.0% on NRCellCU=4")


# -- windows of several senders: loss of service first, each sender with its own problem ----------
@pytest.mark.parametrize("app, text, impact", [
    ("rpd", "BGP_PEER_STATE_CHANGED: BGP peer 192.0.2.9 (External AS 64801) changed state from Established to Idle "
            "(event HoldTime)", "service"),
    ("rpd", "BGP_PEER_STATE_CHANGED: BGP peer 192.0.2.9 (External AS 64801) changed state from OpenConfirm to "
            "Established (event RecvKeepAlive)", "other"),
    ("%BGP-5-ADJCHANGE", "neighbor 192.0.2.2 Down BGP Notification sent", "service"),
    ("%BGP-5-ADJCHANGE", "peer 192.0.2.7 (VRF default AS 65010) old state Established event Stop new state Idle",
     "service"),
    ("%OSPF-5-ADJCHG", "Process 1, Nbr 10.0.0.3 on Gi0/1 from LOADING to FULL, Loading Done", "other"),
    ("%CLNS-5-ADJCHANGE", "ISIS: Adjacency to pe-3 (Gi0/0/0/2) Down, hold time expired", "service"),
    ("OSPF/3/NBR_DOWN_REASON", "Neighbor state left full or changed to Down. (ProcessId=1)", "service"),
    ("mib2d", "SNMP_TRAP_LINK_DOWN: ifIndex 526, ifAdminStatus up(1), ifOperStatus down(2), ifName xe-0/0/3",
     "service"),
    ("%LINK-5-CHANGED", "Interface Gi0/1, changed state to administratively down", "other"),
    ("%SYS-5-RELOAD", "Reload requested by admin on vty0. Reload Reason: Reload Command.", "service"),
    ("%ETHPORT-2-IF_DOWN_ERROR_DISABLED", "Interface Ethernet1/12 is down (Error disabled. Reason:BPDUGuard)",
     "hygiene"),
    ("MSTP/4/BPDU_PROTECTION", "This edged-port GE0/0/5 that enabled BPDU-Protection will be shutdown", "hygiene"),
    ("mgd", "UI_CONFIGURATION_ERROR: Process: mgd, path: [edit protocols bgp], Missing mandatory statement", "hygiene"),
    ("rpd", "bgp_read_message:2891: NOTIFICATION received from 192.0.2.2 (External AS 65002): code 6 (Cease)",
     "service"),
    ("%DUAL-5-NBRCHANGE", "EIGRP-IPv4 100: Neighbor 10.1.1.2 (GigabitEthernet0/1) is down: holding time expired",
     "service"),
    ("%ROUTING-OSPF-5-ADJCHG", ": Process 1, Nbr 10.0.0.2 on Gi0/0/0/0 in area 0 from FULL to DOWN, dead timer",
     "service"),
    ("OSPF/2/ospfNbrStateChange_clear", "The status of the non-virtual neighbor has changed. (NbrState=Full)",
     "other"),
    ("sshd", "Connection closed by 192.0.2.4 port 52211 [preauth]", "other"),
    ("nginx", "recv() failed (104: Connection reset by peer) while reading response header", "other"),
])
def test_message_impact_by_vendor_code_and_the_state_it_goes_to(app, text, impact):
    from worker.facts.impact import HYGIENE, OTHER, SERVICE, classify

    assert classify(app, text) == {"service": SERVICE, "other": OTHER, "hygiene": HYGIENE}[impact]


def test_session_down_at_notice_level_leads_a_louder_bpdu_guard_and_counts_as_major():
    guard = [f"2026 Nov 21 03:14:{i:02d} leaf-7 %STP-2-BLOCK_BPDUGUARD: Received BPDU on port Ethernet1/{i} with BPDU "
             f"Guard enabled. Disabling port." for i in range(10, 22)]
    bgp = "<189>Nov 21 03:14:30 core-2 %BGP-5-ADJCHANGE: neighbor 192.0.2.2 Down BGP Notification sent"
    alone = _facts("syslog", bgp, timestamp="2026-11-21T04:00:00Z")
    assert alone.severity == "major"
    f = _facts("syslog", "\n".join(guard + [bgp]), timestamp="2026-11-21T04:00:00Z")
    assert (f.entity, f.severity) == ("core-2", "critical")
    assert f.problem.startswith("neighbor 192.0.2.2 Down BGP Notification sent (once); leaf-7: Received BPDU on port")
    assert "(12 times)" in f.problem and f.details["sendersWithProblems"] == "2"


def test_senders_beyond_the_bound_are_counted():
    lines = [f"<187>Nov 21 03:14:{i:02d} rtr-{i} %LINK-3-UPDOWN: Interface Gi0/{i}, changed state to down"
             for i in range(5)]
    f = _facts("syslog", "\n".join(lines), timestamp="2026-11-21T04:00:00Z")
    assert f.entity == "rtr-0" and f.problem.count("changed state to down") == 1
    assert f.problem.endswith("(once), also on rtr-1 (once), rtr-2 (once), rtr-3 (once) and 1 more")
    other = "<187>Nov 21 03:15:00 rtr-9 %SYS-3-CPUHOG: Task ran for 2004 msec, process = BGP Router"
    both = _facts("syslog", "\n".join(lines + [other]), timestamp="2026-11-21T04:00:00Z")
    assert both.problem.endswith("and 1 more; rtr-9: Task ran for 2004 msec, process = BGP Router (once)")


def test_stnd_attribute_changes_in_the_specifications_positional_form_and_new_values_only():
    spec = _stnd({"notificationType": "notifyMOIAttributeValueChanges", "objectInstance": "ManagedElement=du-9,Fan=1",
                  "attributeListValueChanges": [{"speed": 80, "mode": "AUTO"}, {"speed": 40}]})
    assert spec.problem == "MOI Fan=1 changed: speed 40 -> 80; mode set to AUTO"
    only_new = _stnd({"notificationType": "notifyMOIAttributeValueChanges", "href": "x",
                      "attributeListValueChanges": [{"attributeNameValuePairSet": {"faults-enabled": True}}]})
    assert only_new.problem == "MOI (the notification names no object) changed: faults-enabled set to true"


def test_stnd_payload_encoded_twice_and_a_pm_streaming_payload_without_a_notification_type():
    twice = _stnd(json.dumps({"notificationType": "notifyHeartbeat", "heartbeatNtfPeriod": 30}))
    assert twice.problem == "heartbeat, element alive (period 30 s)"
    ref = ("/du:network-function/distributed-unit-functions[id='du-9']/cell[id='c1']/supported-measurements"
           "[measurement-type='user-equipment-average-throughput-uplink']")
    stream = _stnd({"id": "pm-1", "job-tag": "job-7", "granularity-period": 10,
                    "measurements": [{"measurement-type-instance-reference": ref, "value": 53861, "unit": "kbit/s"},
                                     {"measurement-type-instance-reference": ref.replace("uplink", "downlink"),
                                      "value": 91001, "unit": "kbit/s"}]})
    assert stream.severity == "info" and stream.problem.startswith(
        "PM measurements of job job-7, 2 measurements, no known KPI computed: user-equipment-average-throughput-uplink "
        "53861 kbit/s, ")


def test_ves_measurement_without_cpu_or_memory_claims_no_check():
    header = {"domain": "measurement", "eventName": "Measurement_x", "sourceName": "vnf-3"}
    fields = {"measurementInterval": 60, "nicPerformanceArray": [{"nicIdentifier": "eth0", "receivedOctetsDelta": 9}]}
    f = _facts("ves", {"event": {"commonEventHeader": header, "measurementFields": fields}})
    assert f.problem == "routine measurement report (nicPerformanceArray), no CPU or memory usage in it to check"


def test_stnd_example_attribute_pairs_are_filler_and_left_out():
    f = _stnd({"notificationType": "notifyMOICreation", "href": "href1",
               "attributeList": {"attribute1": "value1", "attribute2": "value2", "nRPCI": 17}})
    assert f.problem == "MOI created (the notification names no object) with nRPCI 17"


def test_a_loss_of_service_read_from_words_keeps_the_lines_own_level():
    line = "2026-11-14 10:12:01,123 WARN [ipc] org.acme.Client: connect to 10.0.0.9 failed: No route to host"
    assert _facts("text", line).severity == "warning"


def test_ios_xr_codes_with_a_subfacility_name_the_session():
    from worker.facts.impact import coded

    assert coded("%L2-BFD-6-SESSION_STATE_DOWN", "BFD session to neighbor 192.0.2.2 has gone down")
    assert coded("%ROUTING-ISIS-4-ADJCHANGE", "Adjacency to rtr-2 (Gi0/0/0/1) (L2) Down, Neighbor forgot us")
    assert not coded("sshd", "Connection closed by 192.0.2.4 port 52211 [preauth]")


def test_stnd_managed_object_from_an_encoded_href_and_a_dn_whose_value_holds_a_slash():
    encoded = _stnd({"notificationType": "notifyMOIDeletion",
                     "href": "https://x/ProvMnS/v1/SubNetwork%3DS1/ManagedElement%3Ddu-9/NRCellDU%3D4"})
    slash = _stnd({"notificationType": "notifyMOIDeletion",
                   "objectInstance": "SubNetwork=S1,ManagedElement=du-9,EthernetPort=1/0/2"})
    assert (encoded.problem, slash.problem) == ("MOI NRCellDU=4 deleted", "MOI EthernetPort=1/0/2 deleted")


def test_stnd_moi_change_replacing_a_resource_names_its_attributes():
    f = _stnd({"notificationType": "notifyMOIChanges", "moiChanges": [
        {"path": "/SubNetwork=S1/ManagedElement=du-9/NRCellDU=2", "operation": "REPLACE",
         "value": {"id": "2", "attributes": {"nRPCI": 18}}, "oldValue": {"id": "2", "attributes": {"nRPCI": 17}}}]})
    assert f.problem == "MOI changes: NRCellDU=2 nRPCI 17 -> 18"
