"""Sample telemetry: seeded, shaped like the real formats, on its length profiles; `telesum produce`."""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from pathlib import Path

import msgspec
import pytest

from worker.commands import produce
from worker.facts.loglines import parse_line
from worker.facts.ves import REQUIRED_FAULT_FIELDS, REQUIRED_HEADER_FIELDS
from worker.inputs.envelope import decode_envelope
from worker.samples import count_words, generate

SAMPLE = Path(__file__).resolve().parents[2] / "bench" / "samples" / "telemetry.jsonl"


def _args(**overrides) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    produce.add_arguments(parser)
    args = parser.parse_args([])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_generate_same_seed_same_records_other_seed_differs():
    a, b, c = generate(30, "mixed", 5), generate(30, "mixed", 5), generate(30, "mixed", 6)
    assert [msgspec.json.encode(r) for r, _ in a] == [msgspec.json.encode(r) for r, _ in b]
    assert [f for _, f in a] == [f for _, f in b]
    assert [r.body for r, _ in a] != [r.body for r, _ in c]


def test_generate_longer_run_extends_shorter_one():
    assert generate(10, "uniform", 2) == generate(25, "uniform", 2)[:10]


def test_generate_mixed_profile_interleaves_short_and_long():
    words = [count_words(r) for r, _ in generate(120, "mixed", 11)]
    assert all(45 <= w <= 130 for w in words[0::2]), words[0::2]
    assert all(1820 <= w <= 2000 for w in words[1::2]), words[1::2]


def test_generate_uniform_profile_within_range_and_spread():
    words = [count_words(r) for r, _ in generate(120, "uniform", 12)]
    assert all(50 <= w <= 1900 for w in words)
    assert min(words) < 300 and max(words) > 1600  # spread over the range, not clustered


def test_generate_oam_profile_has_long_tail_of_logs():
    pairs = generate(150, "oam", 13)
    words = [count_words(r) for r, _ in pairs]
    assert all(50 <= w <= 38_000 for w in words)
    assert sorted(words)[len(words) // 2] < 1000  # most records are short
    assert max(words) > 10_000
    assert all(r.kind != "ves" for r, _ in pairs if count_words(r) > 2000)


def test_generate_unknown_profile_raises():
    with pytest.raises(ValueError, match="unknown profile"):
        generate(1, "huge")


def test_generate_kinds_filter_only_those_kinds():
    assert {r.kind for r, _ in generate(20, "mixed", 1, kinds=("pm",))} == {"pm"}


def test_generate_ves_events_carry_required_fields():
    events = [r.body["event"] for r, _ in generate(60, "short", 3, kinds=("ves",))]
    domains = {e["commonEventHeader"]["domain"] for e in events}
    assert domains == {"fault", "measurement", "heartbeat"}
    for event in events:
        assert set(REQUIRED_HEADER_FIELDS) <= set(event["commonEventHeader"])
        assert event["commonEventHeader"]["vesEventListenerVersion"].startswith("7.")
        if "faultFields" in event:
            assert set(REQUIRED_FAULT_FIELDS) <= set(event["faultFields"])


def test_generate_pm_records_are_32435_meascollec_files():
    ns = "{http://www.3gpp.org/ftp/specs/archive/32_series/32.435#measCollec}"
    for record, facts in generate(10, "mixed", 4, kinds=("pm",)):
        root = ET.fromstring(record.body)
        assert root.tag == f"{ns}measCollecFile"
        assert root.find(f"{ns}measData/{ns}managedElement").get("userLabel") == facts.entity
        values = root.findall(f".//{ns}measValue")
        assert len(values) >= facts.event_count and values[0].find(f"{ns}r") is not None


def test_generate_syslog_lines_all_rfc5424():
    for record, facts in generate(10, "mixed", 5, kinds=("syslog",)):
        lines = record.body.splitlines()
        assert len(lines) == facts.event_count
        assert all(line.startswith("<") and line.split(" ", 2)[0].endswith(">1") for line in lines)
        assert all(parse_line(line) is not None for line in lines)


def test_produce_file_output_decodes_and_truth_aligns(tmp_path):
    out, truth = tmp_path / "t.jsonl", tmp_path / "truth.jsonl"
    assert produce.run(_args(count=12, seed=9, output=str(out), truth=str(truth))) == 0
    records = [decode_envelope(line) for line in out.read_bytes().splitlines()]
    truths = [msgspec.json.decode(line) for line in truth.read_bytes().splitlines()]
    assert [r.id for r in records] == [t["id"] for t in truths] == [r.id for r, _ in generate(12, "mixed", 9)]
    assert all(t["facts"]["entity"] for t in truths)


def test_produce_stdout_output_writes_json_lines(capfdbinary):
    assert produce.run(_args(count=3, output="-", profile="short")) == 0
    lines = capfdbinary.readouterr().out.splitlines()
    assert len(lines) == 3 and all(decode_envelope(line) for line in lines)


@pytest.mark.parametrize("overrides, message", [
    ({}, "exactly one"),
    ({"output": "x", "topic": "t"}, "exactly one"),
    ({"output": "-", "count": -1}, "--count"),
    ({"output": "-", "kinds": "ves,bogus"}, "bogus"),
])
def test_produce_bad_flags_exit_2_naming_problem(overrides, message, capsys):
    assert produce.run(_args(**overrides)) == 2
    assert message in capsys.readouterr().err


class _Future:
    def __init__(self, error=None):
        self.exception = error

    def failed(self):
        return self.exception is not None


class _FakeProducer:
    def __init__(self, fail_every=0):
        self.sent, self.flushed, self.closed, self.fail_every = [], False, False, fail_every

    def send(self, topic, key, value, headers):
        self.sent.append((topic, key, value, dict(headers)))
        failing = self.fail_every and len(self.sent) % self.fail_every == 0
        return _Future(RuntimeError("broker said no") if failing else None)

    def flush(self):
        self.flushed = True

    def close(self):
        self.closed = True


def test_produce_kafka_keys_are_record_ids_and_flushed(monkeypatch):
    fake = _FakeProducer()
    monkeypatch.setattr(produce, "make_producer", lambda config, compression: fake)
    assert produce.run(_args(count=5, topic="telemetry", bootstrap_servers="b:9092")) == 0
    assert fake.flushed and fake.closed
    for (topic, key, value, headers), (record, _) in zip(fake.sent, generate(5, "mixed", 0), strict=True):
        assert topic == "telemetry" and key == record.id.encode()
        assert decode_envelope(value) == record
        assert headers["content-type"] == b"application/json"


def test_produce_kafka_unacknowledged_records_exit_1(monkeypatch):
    monkeypatch.setattr(produce, "make_producer", lambda config, compression: _FakeProducer(fail_every=2))
    assert produce.run(_args(count=4, topic="t", bootstrap_servers="b:9092")) == 1


def test_paced_sleeps_on_a_fixed_schedule(monkeypatch):
    clock = {"now": 100.0}
    sleeps = []

    def fake_sleep(seconds):
        sleeps.append(seconds)
        clock["now"] += seconds

    monkeypatch.setattr(produce.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(produce.time, "sleep", fake_sleep)
    assert list(produce.paced(range(5), rate=4.0)) == [0, 1, 2, 3, 4]
    assert sum(sleeps) == pytest.approx(1.0)  # 5 items at 4/s: the last one at t = 4/4 s


def test_committed_sample_matches_its_generator_command():
    expected = b"".join(msgspec.json.encode(r) + b"\n" for r, _ in generate(40, "short", 7))
    assert SAMPLE.read_bytes() == expected, "regenerate: telesum produce --profile short --count 40 --seed 7 " \
        "-o bench/samples/telemetry.jsonl --truth bench/samples/telemetry.truth.jsonl"


def test_generate_real_profile_covers_every_shape_with_ugly_extras():
    from worker.samples import logs_real, ves_real

    items = generate(120, "real", 2)
    shapes = {r.attributes["format"] for r, _ in items}
    assert shapes == set(logs_real.SHAPES) | set(ves_real.SHAPES)
    bodies = [r.body_text() for r, _ in items]
    assert any(any(i in b for i in logs_real.INJECTIONS) for b in bodies)  # text aimed at the model
    assert any(not b.isascii() for b in bodies)                                # non-ASCII host names
    assert {r.kind for r, _ in items} == {"syslog", "text", "ves", "pm"}
    assert generate(5, "real", 2) == items[:5]  # seeded, and a longer run extends a shorter one


def test_generate_real_long_profile_is_whole_log_files():
    for record, truth in generate(2, "real-long", 0):
        assert 2000 <= len(record.body.splitlines()) <= 50_100 and truth.entity


def test_produce_real_profile_to_file(tmp_path):
    out, truth = tmp_path / "r.jsonl", tmp_path / "t.jsonl"
    assert produce.run(_args(count=6, profile="real", output=str(out), truth=str(truth))) == 0
    records = [decode_envelope(line) for line in out.read_bytes().splitlines()]
    truths = [msgspec.json.decode(line) for line in truth.read_bytes().splitlines()]
    assert [r.id for r in records] == [t["id"] for t in truths] and len(records) == 6


def test_produce_reaches_the_broker_with_the_workers_kafka_security_settings(monkeypatch):
    env = {"KAFKA_BOOTSTRAP_SERVERS": "broker:9093", "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
           "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_SASL_USERNAME": "ops", "KAFKA_SASL_PASSWORD": "s3cret",
           "KAFKA_SSL_CAFILE": "/etc/ca.pem"}
    config = produce.client_config(_args(topic="t"), env)
    assert config["bootstrap_servers"] == ["broker:9093"] and config["security_protocol"] == "SASL_SSL"
    assert (config["sasl_mechanism"], config["sasl_plain_username"], config["sasl_plain_password"]) == (
        "SCRAM-SHA-512", "ops", "s3cret")
    assert config["ssl_cafile"] == "/etc/ca.pem" and config["client_id"] == "telesum-produce"
    assert produce.client_config(_args(topic="t", bootstrap_servers="a:1,b:2"), env)["bootstrap_servers"] == [
        "a:1", "b:2"]  # the flag over the setting


def test_produce_bad_kafka_setting_exits_2_naming_it(monkeypatch, capsys):
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")  # without a mechanism
    monkeypatch.delenv("KAFKA_SASL_MECHANISM", raising=False)
    monkeypatch.setattr(produce, "make_producer", lambda config, compression: _FakeProducer())
    assert produce.run(_args(count=1, topic="t")) == 2
    assert "KAFKA_SASL_MECHANISM" in capsys.readouterr().err
