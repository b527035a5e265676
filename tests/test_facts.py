"""Fact extraction: each parser on real-shaped and malformed input; never raises; agrees with the
ground truth of generated telemetry."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.facts import SEVERITIES, extract_facts, pm
from worker.messages import TelemetryRecord
from worker.telemetry import generate

VES_FAULT = {"event": {
    "commonEventHeader": {
        "domain": "fault", "eventId": "fault0000000042", "eventName": "Fault_gNB_linkDown",
        "eventType": "O-RAN", "lastEpochMicrosec": 1764410700000000, "nfNamingCode": "gNB",
        "priority": "High", "reportingEntityName": "oam-controller-1", "sequence": 42,
        "sourceName": "gNB-0042-DU", "startEpochMicrosec": 1764410400000000, "version": "4.1",
        "vesEventListenerVersion": "7.2.1"},
    "faultFields": {
        "alarmCondition": "linkDown", "eventSeverity": "MAJOR", "eventSourceType": "router",
        "faultFieldsVersion": "4.0", "specificProblem": "Physical link down on port 3",
        "vfStatus": "Active", "alarmAdditionalInformation": {"port": "3"}}}}

SYSLOG_BURST = """\
<134>1 2026-11-29T10:00:00.100Z gnb-0042 oamd 311 HEARTBEAT - heartbeat sent to OSS
<131>1 2026-11-29T10:00:05.250+01:00 gnb-0042 ngap 77 LINKDOWN [meta note="a ] in quotes" seq="1"] NG link to AMF-02 down: SCTP association lost
<131>1 2026-11-29T10:00:09.000Z gnb-0042 ngap 77 LINKDOWN - NG link to AMF-02 down: SCTP association lost
<132>1 2026-11-29T10:00:10.000Z gnb-0042 fanctl 90 FAN - fan 2 speed below minimum
<134>1 2026-11-29T10:02:00.000Z gnb-0043 oamd 12 HEARTBEAT - heartbeat sent to OSS
  continued detail line of the heartbeat"""

PM_XML = """<?xml version="1.0" encoding="UTF-8"?>
<measCollecFile xmlns="http://www.3gpp.org/ftp/specs/archive/32_series/32.435#measCollec">
  <fileHeader fileFormatVersion="32.435 V10.0" vendorName="Acme">
    <measCollec beginTime="2026-11-29T10:00:00+01:00"/>
  </fileHeader>
  <measData>
    <managedElement localDn="ManagedElement=gNB-0042" userLabel="gNB-0042"/>
    <measInfo measInfoId="RRC">
      <granPeriod duration="PT900S" endTime="2026-11-29T10:15:00+01:00"/>
      <measType p="1">RRC.ConnEstabAtt.Sum</measType>
      <measType p="2">RRC.ConnEstabSucc.Sum</measType>
      <measValue measObjLdn="ManagedElement=gNB-0042,GNBDUFunction=1,NRCellDU=1">
        <r p="1">1000</r><r p="2">995</r>
      </measValue>
      <measValue measObjLdn="ManagedElement=gNB-0042,GNBDUFunction=1,NRCellDU=2">
        <r p="1">1000</r><r p="2">800</r><suspect>true</suspect>
      </measValue>
      <measValue measObjLdn="ManagedElement=gNB-0042,GNBDUFunction=1,NRCellDU=3">
        <r p="1">NIL</r><r p="2">NIL</r>
      </measValue>
    </measInfo>
  </measData>
</measCollecFile>"""

TRACE = """\
2026-11-29T10:00:00.000Z gNB-0042 -> AMF-01 NGAP HandoverRequired ue=7 target=gNB-0077 cause=radioNetwork:handover-desirable-for-radio-reasons
2026-11-29T10:00:00.100Z AMF-01 -> gNB-0077 NGAP HandoverRequest ue=7
2026-11-29T10:00:00.400Z gNB-0077 -> AMF-01 NGAP HandoverFailure ue=7 cause=radioNetwork:no-radio-resources-available-in-target-cell
2026-11-29T10:00:03.000Z gNB-0042 -> AMF-01 NGAP UEContextReleaseRequest ue=8 cause=radioNetwork:user-inactivity"""


def _facts(kind, body, **kw):
    return extract_facts(TelemetryRecord(id="r", kind=kind, body=body, **kw))


def test_ves_fault_all_fields_extracted():
    f = _facts("ves", VES_FAULT)
    assert (f.entity, f.severity, f.problem) == ("gNB-0042-DU", "major", "Physical link down on port 3")
    assert (f.first_seen, f.last_seen) == ("2025-11-29T10:00:00Z", "2025-11-29T10:05:00Z")
    assert f.details["alarmCondition"] == "linkDown" and f.details["priority"] == "High"
    assert f.details["eventName"] == "Fault_gNB_linkDown" and f.facts_error is None


def test_ves_fault_as_json_text_same_facts():
    import json
    assert _facts("ves", json.dumps(VES_FAULT)) == _facts("ves", VES_FAULT)


def test_ves_normal_severity_reads_as_cleared():
    event = copy.deepcopy(VES_FAULT)
    event["event"]["faultFields"]["eventSeverity"] = "NORMAL"
    f = _facts("ves", event)
    assert f.severity == "info" and f.problem.endswith("cleared")


def test_ves_event_list_worst_severity_and_count():
    minor = copy.deepcopy(VES_FAULT["event"])
    minor["faultFields"].update(eventSeverity="MINOR", specificProblem="Fan tray 1 failure")
    f = _facts("ves", {"eventList": [minor, VES_FAULT["event"]]})
    assert (f.severity, f.event_count) == ("major", 2)
    assert f.problem == "Physical link down on port 3; Fan tray 1 failure"  # every event counts
    assert [(p.text, p.severity, p.count) for p in f.problems] == [
        ("Physical link down on port 3", "major", 1), ("Fan tray 1 failure", "minor", 1)]


def test_ves_missing_header_fields_named_in_facts_error():
    event = copy.deepcopy(VES_FAULT)
    del event["event"]["commonEventHeader"]["sequence"], event["event"]["faultFields"]["vfStatus"]
    f = _facts("ves", event)
    assert f.entity == "gNB-0042-DU" and f.severity == "major"
    assert "sequence" in f.facts_error and "vfStatus" in f.facts_error


@pytest.mark.parametrize("body, error", [
    ("{not json", "not JSON"),
    ("[1, 2]", "list"),
    ({"event": {"faultFields": {}}}, "commonEventHeader"),
    ({"event": {"commonEventHeader": "oops"}}, "commonEventHeader"),
    ({"event": {"commonEventHeader": {"domain": "fault", "sourceName": "x"}, "faultFields": {
        "eventSeverity": "TERRIBLE"}}}, "TERRIBLE"),
    ({"event": {"commonEventHeader": {"domain": "measurement", "sourceName": "x"}, "measurementFields": {
        "cpuUsageArray": [{"cpuIdentifier": "c", "percentUsage": "lots"}]}}}, "parser failed"),
])
def test_ves_malformed_yields_facts_error_not_exception(body, error):
    f = _facts("ves", body)
    assert f.facts_error is not None and error in f.facts_error


def test_ves_heartbeat_and_busy_measurement():
    hb = {"event": {"commonEventHeader": {"domain": "heartbeat", "sourceName": "du-1"},
                    "heartbeatFields": {"heartbeatInterval": 60}}}
    assert _facts("ves", hb).problem == "heartbeat, element alive (interval 60 s)"
    busy = {"event": {"commonEventHeader": {"domain": "measurement", "sourceName": "du-1"},
                      "measurementFields": {"cpuUsageArray": [{"cpuIdentifier": "cpu1", "percentUsage": 93.4}]}}}
    f = _facts("ves", busy)
    assert (f.severity, f.problem) == ("major", "high CPU usage 93.4% on cpu1")


def test_syslog_burst_worst_severity_problem_span_and_count():
    f = _facts("syslog", SYSLOG_BURST)
    assert f.entity == "gnb-0042" and f.severity == "major"
    assert f.problem == "ngap: NG link to AMF-02 down: SCTP association lost (2 times); fanctl: fan 2 speed below minimum"
    assert (f.first_seen, f.last_seen) == ("2026-11-29T09:00:05Z", "2026-11-29T10:02:00Z")
    assert f.event_count == 5
    assert f.details["app"] == "ngap" and f.details["msgid"] == "LINKDOWN"
    assert f.details["syslogSeverity"] == "err" and f.details["worstSeverityCount"] == "2"
    assert f.details["hosts"] == "gnb-0042, gnb-0043" and f.details["unparsedLines"] == "1"


def test_syslog_rfc3164_host_app_and_severity_from_pri():
    f = _facts("syslog", "<10>Nov 29 10:00:00 core-rtr-1 bgpd[812]: BGP peer 10.0.0.1 down\n"
                         "<14>Nov 29 10:00:03 core-rtr-1 sshd[22]: session opened", timestamp="2026-12-01T00:00:00Z")
    assert (f.entity, f.severity, f.details["app"]) == ("core-rtr-1", "critical", "bgpd")
    assert f.problem == "bgpd: BGP peer 10.0.0.1 down"
    assert (f.first_seen, f.year_source) == ("2026-11-29T10:00:00Z", "record timestamp")


def test_syslog_without_syslog_lines_falls_back_with_error():
    f = _facts("syslog", "router-7 reports: interface ge-0/0/1 down, ERROR")
    assert "syslog" in f.facts_error and f.entity == "router-7" and f.severity == "major"


def test_pm_ratio_worst_cell_granularity_and_times():
    f = _facts("pm", PM_XML)
    assert f.entity == "gNB-0042" and f.severity == "major"  # 80 % is under the 90 % major line
    assert f.problem == "low RRC setup success rate 80.0% on NRCellDU=2"
    assert f.details["RRC setup success rate"] == "89.8%"  # 1795 / 2000, NIL values skipped
    assert f.details["granularityPeriod"] == "900 s" and f.details["suspectObjects"] == "1"
    assert (f.first_seen, f.last_seen) == ("2026-11-29T09:00:00Z", "2026-11-29T09:15:00Z")


@pytest.mark.parametrize("body, error", [
    ("<measCollecFile><measData>", "does not parse"),
    ("<other/>", "not <measCollecFile>"),
    ('<!DOCTYPE x [<!ENTITY a "aaaa">]><measCollecFile/>', "DTD"),
    ("<measCollecFile><measData/></measCollecFile>", "no numeric"),
])
def test_pm_malformed_yields_facts_error(body, error):
    f = _facts("pm", body)
    assert error in f.facts_error


def test_pm_oversized_refused_before_parsing(monkeypatch):
    monkeypatch.setattr(pm, "MAX_XML_CHARS", 100)
    assert "over the 100 limit" in _facts("pm", PM_XML).facts_error


def test_trace_failure_event_cause_entity_and_span():
    f = _facts("trace", TRACE)
    assert f.entity == "gNB-0077" and f.severity == "major"
    assert f.problem == "handover failure: no radio resources available in target cell"
    assert (f.first_seen, f.last_seen, f.event_count) == ("2026-11-29T10:00:00Z", "2026-11-29T10:00:03Z", 4)
    assert f.details["elements"] == "gNB-0042, AMF-01, gNB-0077" and f.details["ues"] == "2"


def test_trace_without_failures_is_info():
    f = _facts("trace", TRACE.replace("HandoverFailure", "HandoverRequestAcknowledge").replace(
        " cause=radioNetwork:no-radio-resources-available-in-target-cell", ""))
    assert f.severity == "info" and f.problem == "no failures in 4 signalling events"


def test_trace_garbage_falls_back_with_error():
    assert "no trace line" in _facts("trace", "hello world").facts_error


def test_text_generic_hosts_severity_error_words_span():
    f = _facts("text", "at 2026-11-29 10:00:00 core-router-7 WARNING high temperature\n"
                       "at 2026-11-29 10:05:00 core-router-7 CRITICAL power supply 2 failed\nall good")
    assert (f.entity, f.severity) == ("core-router-7", "critical")
    assert f.problem == "at 2026-11-29 10:05:00 core-router-7 CRITICAL power supply 2 failed"
    assert (f.first_seen, f.last_seen) == ("2026-11-29T10:00:00Z", "2026-11-29T10:05:00Z")
    assert "failed" in f.details["errorWords"]


def test_text_of_log_lines_read_as_a_log_window():
    f = _facts("text", "2026-11-29 10:00:00 core-router-7 WARNING high temperature\n"
                       "2026-11-29 10:05:00 core-router-7 CRITICAL power supply 2 failed")
    assert (f.entity, f.severity, f.event_count) == ("core-router-7", "critical", 2)
    assert f.problem.startswith("CRITICAL power supply 2 failed")


def test_record_timestamp_used_when_body_has_no_time():
    f = _facts("text", "link flapping on edge-3", timestamp="2026-11-29T10:00:00Z")
    assert f.first_seen == f.last_seen == "2026-11-29T10:00:00Z"


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["ves", "syslog", "pm", "trace", "text"]), body=st.text(min_size=1, max_size=300))
def test_extract_facts_arbitrary_text_never_raises(kind, body):
    f = _facts(kind, body)
    assert f.severity is None or f.severity in SEVERITIES


@pytest.mark.parametrize("profile", ["mixed", "oam"])
def test_extract_facts_agrees_with_generated_ground_truth(profile):
    for record, truth in generate(60, profile, seed=21):
        f = extract_facts(record)
        assert (f.entity, f.severity) == (truth.entity, truth.severity), record.id
        assert (f.first_seen, f.last_seen, f.event_count) == (truth.first_seen, truth.last_seen,
                                                              truth.event_count), record.id
        for keyword in truth.details["problemKeywords"].split(", "):
            assert keyword in f.problem.lower(), (record.id, keyword, f.problem)
        assert f.facts_error is None
