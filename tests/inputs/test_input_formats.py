"""Each producer's message shape through its own format and through `auto`."""

from __future__ import annotations

import msgspec
import pytest

from tests.inputs.helpers import SHAPES, otlp_proto, syslog_lines
from worker.facts import extract_facts
from worker.inputs import Message, decoder_for
from worker.inputs.json_log import JsonLogDecoder, parse_field_map
from worker.messages import InvalidRecord, TelemetryRecord

IDS = [s[0] for s in SHAPES]


def _message(value: bytes, headers=(), offset: int = 7) -> Message:
    return Message(value, tuple(headers), "telemetry", 3, offset, 1796135999000)


@pytest.mark.parametrize(("name", "fmt", "make", "count", "host"), SHAPES, ids=IDS)
@pytest.mark.parametrize("mode", ["own", "auto"])
def test_shape_in_its_format_and_auto_decodes_to_records_naming_the_format(name, fmt, make, count, host, mode):
    items = decoder_for(fmt if mode == "own" else "auto")(_message(make()))
    assert len(items) == count and all(isinstance(i, TelemetryRecord) for i in items), items
    assert {i.attributes["input_format"] for i in items} == {fmt}
    assert items[0].attributes["host"] == host
    assert extract_facts(items[0]).entity == host


@pytest.mark.parametrize(("name", "fmt", "make", "count", "host"), SHAPES, ids=IDS)
def test_shape_without_id_gets_a_stable_id_from_its_position(name, fmt, make, count, host):
    first = decoder_for("auto")(_message(make(), offset=41))
    again = decoder_for("auto")(_message(make(), offset=41))
    later = decoder_for("auto")(_message(make(), offset=42))
    assert [r.id for r in first] == [r.id for r in again]
    assert len({r.id for r in first}) == count
    if fmt != "ves":  # VES events bring their own eventId
        assert first[0].id.startswith("telemetry:3:41") and first[0].id != later[0].id


def test_ves_eventlist_keeps_event_ids_and_a_bad_event_becomes_its_own_dead_letter():
    body = {"eventList": [{"commonEventHeader": {"domain": "fault", "eventId": "e1", "sourceName": "ru-1",
                                                 "startEpochMicrosec": 1796135952254811}},
                          "not an event",
                          {"commonEventHeader": {"domain": "heartbeat", "sourceName": "ru-2"}}]}
    items = decoder_for("ves")(_message(msgspec.json.encode(body)))
    assert items[0].id == "e1" and items[0].timestamp.startswith("2026-12-01T14:39:12")
    assert isinstance(items[1], InvalidRecord) and items[1].reason == "invalid_field"
    assert items[2].id == "telemetry:3:7:2" and items[2].source == "ru-2"


def test_rfc3164_line_keeps_its_severity_for_the_facts():
    record = decoder_for("syslog")(_message(syslog_lines()[3]))[0]
    facts = extract_facts(record)
    assert facts.severity == "warning" and "authentication" in (facts.problem or "")


def test_json_log_severity_and_facility_become_the_pri_of_the_line():
    event = {"message": "link flap on port 7", "hostname": "sw-3", "appname": "lldpd", "severity": "crit",
             "facility": "daemon", "timestamp": "2026-12-01T10:00:00Z"}
    record = decoder_for("json-log")(_message(msgspec.json.encode(event)))[0]
    assert record.body.startswith("<26>1 2026-12-01T10:00:00Z sw-3 lldpd - - - link flap")
    assert extract_facts(record).severity == "critical"


def test_json_log_epoch_timestamp_and_missing_one_use_epoch_then_kafka_time():
    with_epoch = decoder_for("json-log")(_message(b'{"log": "disk full", "host": "h1", "@timestamp": 1796135955.5}'))[0]
    assert with_epoch.timestamp == "2026-12-01T14:39:15Z"
    without = decoder_for("json-log")(_message(b'{"log": "disk full", "host": "h1"}'))[0]
    assert without.timestamp == "2026-12-01T14:39:59Z"


def test_json_log_field_map_setting_reads_other_keys():
    decoder = JsonLogDecoder(parse_field_map("message=text,host=node.name"))
    record = decoder(_message(b'{"text": "fan 2 failed", "node": {"name": "bbu-9"}}'))[0]
    assert record.attributes["host"] == "bbu-9" and "fan 2 failed" in record.body
    missing = decoder(_message(b'{"message": "ignored now"}'))[0]
    assert isinstance(missing, InvalidRecord) and "text" in missing.message


@pytest.mark.parametrize("bad", ["message", "colour=x", "host="])
def test_json_log_field_map_bad_setting_names_the_problem(bad):
    with pytest.raises(ValueError, match="expected role=key|no key"):
        parse_field_map(bad)


def test_otlp_groups_log_records_per_resource_with_severity_lines():
    amf, smf = decoder_for("otlp")(_message(otlp_proto()))
    assert amf.attributes["service"] == "amf" and amf.body.count("\n") == 1
    assert amf.body.startswith("<11>1 2026-12-01T14:39:18Z amf-1 amf - - - NGSetupRequest rejected")
    assert smf.attributes["host"] == "smf-1" and "<14>1" in smf.body
    assert extract_facts(amf).severity == "major"


def test_auto_with_protobuf_content_type_reads_otlp_and_msgpack_reads_the_envelope():
    items = decoder_for("auto")(_message(otlp_proto(), [("content-type", b"application/x-protobuf")]))
    assert [i.attributes["input_format"] for i in items] == ["otlp", "otlp"]
    envelope = msgspec.msgpack.encode({"id": "a", "kind": "text", "body": "hi"})
    got = decoder_for("auto")(_message(envelope, [("Content-Type", b"application/msgpack; charset=utf-8")]))
    assert got[0].id == "a" and got[0].attributes["input_format"] == "envelope"


@pytest.mark.parametrize(("path", "value", "named"), [
    ("kafka.json_log_fields", "colour=x", "--json-log-fields"),
    ("kafka.json_log_fields", "message", "--json-log-fields"),
    ("kafka.input_format", "xml", "--input-format"),
])
def test_bad_input_settings_fail_at_start_naming_the_setting(path, value, named):
    from worker.settings.fields import SettingsError
    from worker.settings.load import from_values

    with pytest.raises(SettingsError, match=named):
        from_values({path: value})
    assert from_values({"kafka.json_log_fields": "message=text|msg,host=node.name"}).settings.kafka.json_log_fields
