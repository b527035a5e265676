"""`telesum incidents learn` as an operator runs it: a history in the producers' own shapes (ONAP VES
fault events, rsyslog lines, Fluent Bit JSON) from files or a topic, a topology file, the rules file the
worker reads and the report."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from tests.incidents.learn_history import SITES, history
from worker.cli import main
from worker.commands.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_SETTINGS
from worker.incidents.graph import load_rules

EPOCH = 1_796_000_000.0  # 2026-11-29


def as_message(alarm, n: int) -> bytes:
    """POWER as an ONAP VES fault event, LINK_DOWN as an rsyslog line, TEMP_HIGH as Fluent Bit JSON."""
    when = EPOCH + alarm.time
    if alarm.alarm_type == "POWER":
        micros = int(when * 1e6)
        return json.dumps({"event": {
            "commonEventHeader": {"domain": "fault", "eventId": f"fault{n:06d}", "eventName": "Fault_eNodeB_PowerLoss",
                                  "lastEpochMicrosec": micros, "priority": "High", "reportingEntityName": "ves-collector",
                                  "sequence": n, "sourceName": alarm.element, "startEpochMicrosec": micros,
                                  "version": "4.1", "vesEventListenerVersion": "7.2.1"},
            "faultFields": {"alarmCondition": "POWER", "eventSeverity": "CRITICAL", "eventSourceType": "site",
                            "faultFieldsVersion": "4.0", "specificProblem": "Mains power lost", "vfStatus": "Active"}}}).encode()
    stamp = dt.datetime.fromtimestamp(when, dt.timezone.utc).isoformat(timespec="microseconds")
    if alarm.alarm_type == "LINK_DOWN":
        return f"{stamp} {alarm.element} radiod[2211]: Radio link 1 down".encode()
    return json.dumps({"@timestamp": when, "host": alarm.element, "log": "Temperature high on board 2"}).encode()


@pytest.fixture
def history_files(tmp_path):
    values = tmp_path / "alarms.jsonl"
    values.write_bytes(b"".join(as_message(a, n) + b"\n" for n, a in enumerate(history())))
    topology = tmp_path / "topology.csv"
    topology.write_text("element_a,element_b\n" + "".join(f"{a},{b}\n" for a, b in zip(SITES, SITES[1:] + SITES[:1])))
    return values, topology


def test_learn_from_files_writes_rules_the_worker_reads_and_a_report(history_files, tmp_path, capsys):
    values, topology = history_files
    rules, report = tmp_path / "rules.csv", tmp_path / "report.json"
    code = main(["incidents", "learn", str(values), "--topology", str(topology), "-o", str(rules),
                 "--report", str(report)])
    assert code == EXIT_OK
    assert load_rules(rules).direct == {"POWER": {"Radio link 1"}}
    found = json.loads(report.read_text())
    assert found["alarms"] == found["messages"] == len(history()) and found["alarm_types"] == 3
    assert found["edges"][0]["cause"] == "POWER" and found["edges"][0]["cause_with_effect"] > 0.9
    assert found["topology"] == {"elements": 12, "links": 12} and found["seconds"] >= 0
    assert "1 cause -> effect edges among 3 alarm types" in capsys.readouterr().err


def test_learn_since_until_keeps_only_that_time(history_files, tmp_path):
    values, topology = history_files
    rules, report = tmp_path / "rules.csv", tmp_path / "report.json"
    until = dt.datetime.fromtimestamp(EPOCH + 3600, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert main(["incidents", "learn", str(values), "--topology", str(topology), "-o", str(rules),
                 "--report", str(report), "--until", until]) == EXIT_OK
    found = json.loads(report.read_text())
    assert 0 < found["alarms"] < 20 and found["outside_time_range"] == len(history()) - found["alarms"]


@pytest.mark.parametrize("argv, problem", [
    (["-o", "r.csv"], "either FILE"),
    (["missing.jsonl", "-o", "r.csv"], "does not exist"),
    (["{values}", "--topic", "t", "-o", "r.csv"], "either FILE"),
    (["{values}", "--topology", "{values}", "-o", "r.csv"], "unknown suffix"),
    (["{values}", "--since", "yesterday", "-o", "r.csv"], "--since 'yesterday'"),
])
def test_learn_refuses_bad_arguments_naming_the_problem(history_files, tmp_path, caplog, argv, problem):
    values, _ = history_files
    argv = [a.replace("{values}", str(values)).replace("r.csv", str(tmp_path / "r.csv")) for a in argv]
    assert main(["incidents", "learn", *argv]) == EXIT_SETTINGS
    assert problem in caplog.text and not (tmp_path / "r.csv").exists()


def test_learn_from_a_history_without_alarms_fails_and_says_so(tmp_path, caplog):
    values = tmp_path / "metrics.jsonl"
    values.write_text("".join(json.dumps({"metric": "cpu", "value": n}) + "\n" for n in range(5)))
    assert main(["incidents", "learn", str(values), "-o", str(tmp_path / "r.csv")]) == EXIT_FAILED
    assert "no alarm in 5 messages" in caplog.text


def test_learn_from_a_topic_a_foreign_producer_filled(history_files, tmp_path, kafka_bootstrap, make_topic):
    from confluent_kafka import Producer

    values, topology = history_files
    topic = make_topic("learn", partitions=3)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "compression.type": "zstd", "linger.ms": 20})
    lines = values.read_bytes().splitlines()
    for n, line in enumerate(lines):
        producer.produce(topic, line, key=SITES[n % len(SITES)].encode())
    assert producer.flush(30) == 0
    rules, report = tmp_path / "rules.csv", tmp_path / "report.json"
    assert main(["incidents", "learn", "--topic", topic, "--bootstrap-servers", kafka_bootstrap,
                 "--topology", str(topology), "-o", str(rules), "--report", str(report)]) == EXIT_OK
    assert load_rules(rules).direct == {"POWER": {"Radio link 1"}}
    assert json.loads(report.read_text())["messages"] == len(lines)


def test_learn_from_the_demo_storm_networks_past_finds_the_experts_rules(tmp_path):
    history, rules = tmp_path / "history.jsonl", tmp_path / "rules.csv"
    assert main(["produce", "--profile", "storm-history", "--count", "3000", "-o", str(history)]) == EXIT_OK
    assert main(["incidents", "learn", str(history), "--topology", "docs/examples/storm-topology.csv",
                 "-o", str(rules)]) == EXIT_OK
    learned, experts = load_rules(rules), load_rules("docs/examples/storm-rules.csv")
    assert learned.direct == {"A1": {"A2"}, "A2": {"A3"}}
    assert learned.effects_of == experts.effects_of  # the same causes, read transitively
