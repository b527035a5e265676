"""The facts layer reads at most MAX_FACT_LINE_CHARS of a line or a JSON string (issue 27): facts of a
record with a longer line are the facts of that line cut to the bound; shorter records are untouched."""

from __future__ import annotations

import copy
import json

import pytest

from worker.facts import MAX_FACT_LINE_CHARS, extract_facts
from worker.facts.bounds import bounded_record, bounded_text, bounded_value
from worker.messages import TelemetryRecord

SYSLOG_HEAD = "<131>1 2026-11-29T10:00:05.250Z gnb-0042 ngap 77 LINKDOWN - NG link to AMF-02 down: "
APP_HEAD = "2026-11-29 10:00:05,250 ERROR [main] com.example.oss.Collector - request failed: "
LONG_TAILS = {"x run": "x" * (3 * MAX_FACT_LINE_CHARS), "words": "link down BGP-5 10.0.0.1 a=b " * 1000,
              "hyphens": "a-" * (2 * MAX_FACT_LINE_CHARS)}


def _record(kind: str, body) -> TelemetryRecord:
    return TelemetryRecord(id="r1", kind=kind, body=body, timestamp="2026-11-29T10:00:06Z")


@pytest.mark.parametrize("kind", ["syslog", "text", "trace"])
@pytest.mark.parametrize("head", [SYSLOG_HEAD, APP_HEAD, ""])
@pytest.mark.parametrize("tail", list(LONG_TAILS))
def test_extract_facts_long_line_equals_line_cut_to_bound(kind, head, tail):
    line = head + LONG_TAILS[tail]
    assert len(line) > MAX_FACT_LINE_CHARS
    assert extract_facts(_record(kind, line)) == extract_facts(_record(kind, line[:MAX_FACT_LINE_CHARS]))


def test_extract_facts_long_line_among_others_cut_alone():
    short = SYSLOG_HEAD + "first\r\n"
    long_line = SYSLOG_HEAD + "y" * (2 * MAX_FACT_LINE_CHARS)
    body = short + long_line + "\n" + SYSLOG_HEAD + "last"
    cut = short + long_line[:MAX_FACT_LINE_CHARS] + "\n" + SYSLOG_HEAD + "last"
    assert bounded_text(body) == cut
    assert extract_facts(_record("syslog", body)) == extract_facts(_record("syslog", cut))


def test_extract_facts_ves_long_string_value_equals_value_cut_to_bound():
    event = {"event": {"commonEventHeader": {"domain": "fault", "eventName": "Fault_gNB_linkDown",
                                             "sourceName": "gNB-0042-DU", "startEpochMicrosec": 1764410400000000,
                                             "lastEpochMicrosec": 1764410700000000, "priority": "High"},
                       "faultFields": {"alarmCondition": "linkDown", "eventSeverity": "MAJOR",
                                       "specificProblem": "Physical link down " + "z" * (2 * MAX_FACT_LINE_CHARS)}}}
    cut = copy.deepcopy(event)
    problem = cut["event"]["faultFields"]["specificProblem"]
    cut["event"]["faultFields"]["specificProblem"] = problem[:MAX_FACT_LINE_CHARS]
    assert bounded_value(event) == cut
    assert extract_facts(_record("ves", event)) == extract_facts(_record("ves", cut))
    assert extract_facts(_record("ves", json.dumps(event))) == extract_facts(_record("ves", cut))


def test_bounded_record_within_bound_is_the_record_itself():
    record = _record("syslog", (SYSLOG_HEAD + "ok\n") * 500)
    assert bounded_record(record) is record
    ves = _record("ves", {"event": {"commonEventHeader": {"domain": "fault"}, "list": ["a", {"b": "c"}]}})
    assert bounded_record(ves) is ves


def test_bounded_record_leaves_pm_xml_whole():
    xml = "<measCollecFile>" + "<x/>" * MAX_FACT_LINE_CHARS + "</measCollecFile>"
    record = _record("pm", xml)
    assert bounded_record(record).body is xml


def test_drain_clusters_only_the_largest_groups_so_a_window_of_distinct_lines_stays_linear(monkeypatch):
    """drain3's match is quadratic in distinct groups (a 1 MB window of distinct lines took 58 s): it
    sees at most DRAIN_MAX_GROUPS of them, the largest; every message is still counted in a group."""
    import random

    from drain3.drain import Drain

    from worker.facts import groups

    seen = []
    add = Drain.add_log_message
    monkeypatch.setattr(Drain, "add_log_message", lambda self, text: (seen.append(text), add(self, text))[1])
    monkeypatch.setattr(groups, "DRAIN_MAX_GROUPS", 40)
    rng = random.Random(3)
    words = "link down fan tray sync lost ptp power supply radio unit alarm cleared board reset".split()
    distinct = [("app", " ".join(rng.choice(words) for _ in range(6)), "major", None, "h") for _ in range(300)]
    repeated = [("app", "link down on port", "major", None, "h")] * 50
    result = groups.group_messages(distinct + repeated)
    assert len(seen) == 40
    assert sum(g.count for g in result) == 350
    assert result[0].count >= 50  # the repeated message is among the clustered, and ranks first
