"""Hostile variants of every shape: each gets a dead letter with the right reason, never an exception;
and the envelope's leniency (media-type parameters, numbers in attributes, epoch timestamps)."""

from __future__ import annotations

import typing

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.inputs.helpers import SHAPES, otlp_proto
from worker.inputs import Message, decoder_for
from worker.inputs.envelope import decode_envelope
from worker.messages import InvalidRecord, ReasonCode, TelemetryRecord

FORMATS = ["auto", "envelope", "ves", "syslog", "json-log", "otlp"]
REASONS = set(typing.get_args(ReasonCode))
BINARY = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x02\x00\x00\x01"  # a JPEG header: not text, not protobuf


def _reasons(fmt: str, value: bytes, headers=()) -> list[str]:
    items = decoder_for(fmt)(Message(value, tuple(headers), "t", 0, 5))
    assert items, "every message gets at least one answer"
    return [i.reason if isinstance(i, InvalidRecord) else "record" for i in items]


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_message_is_empty_record(fmt):
    assert _reasons(fmt, b"") == ["empty_record"]


@pytest.mark.parametrize("fmt", ["auto", "envelope", "ves", "syslog", "json-log"])
def test_binary_message_is_invalid_utf8(fmt):
    assert _reasons(fmt, BINARY) == ["invalid_utf8"]


def test_binary_message_in_otlp_mode_is_invalid_protobuf():
    assert _reasons("otlp", BINARY) == ["invalid_protobuf"]


@pytest.mark.parametrize(("name", "fmt", "make", "count", "host"),
                         [s for s in SHAPES if s[1] in ("ves", "json-log") or s[0] == "otlp_json"],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_truncated_json_shape_is_invalid_json_in_its_format_and_auto(name, fmt, make, count, host):
    value = make()
    cut = value[: len(value) // 2]
    assert _reasons(fmt, cut) == ["invalid_json"]
    assert _reasons("auto", cut) == ["invalid_json"]


def test_truncated_otlp_proto_is_invalid_protobuf():
    value = otlp_proto()
    assert _reasons("otlp", value[: len(value) - 7]) == ["invalid_protobuf"]


@pytest.mark.parametrize(("fmt", "value"), [
    ("ves", b'{"event": "fault"}'),
    ("ves", b'{"event": {"commonEventHeader": []}}'),
    ("ves", b'{"eventList": {"commonEventHeader": {}}}'),
    ("ves", b'[1, 2]'),
    ("json-log", b'{"message": {"nested": true}}'),
    ("json-log", b'{"level": "error", "host": "h"}'),
    ("json-log", b'["a log line"]'),
    ("envelope", b'{"id": "a", "kind": "alarm", "body": "x"}'),
    ("envelope", b'{"id": 7, "kind": "text", "body": "x"}'),
    ("envelope", b'{"id": "a", "kind": "text", "body": "x", "timestamp": true}'),
    ("otlp", b'{"resourceLogs": "many"}'),
])
def test_wrong_types_are_invalid_field_or_json(fmt, value):
    expected = "invalid_json" if fmt == "otlp" else "invalid_field"
    assert _reasons(fmt, value) == [expected]


@pytest.mark.parametrize(("fmt", "value"), [
    ("syslog", b"  \n\t "), ("json-log", b'{"message": "   "}'), ("ves", b'{"eventList": []}'),
    ("otlp", b'{"resourceLogs": []}'), ("envelope", b'{"id": "a", "kind": "text", "body": " "}'),
])
def test_nothing_to_summarise_is_empty_body(fmt, value):
    assert _reasons(fmt, value) == ["empty_body"]


def test_envelope_mode_text_line_is_invalid_json_not_invalid_field():
    assert _reasons("envelope", b"2026-12-01T14:39:12.254811+00:00 host tag[1]: msg") == ["invalid_json"]
    assert _reasons("envelope", b"12 monkeys") == ["invalid_json"]


def test_envelope_msgpack_with_media_type_parameters_decodes():
    value = msgspec.msgpack.encode({"id": "a", "kind": "text", "body": "hello"})
    assert _reasons("envelope", value, [("content-type", b"application/msgpack; charset=utf-8")]) == ["record"]
    assert _reasons("envelope", b"\xc1", [("content-type", b"application/msgpack")]) == ["invalid_msgpack"]


@pytest.mark.parametrize(("stamp", "iso"), [
    (1796135952, "2026-12-01T14:39:12Z"), (1796135952254, "2026-12-01T14:39:12Z"),
    (1796135952254811, "2026-12-01T14:39:12Z"), (1796135952.5, "2026-12-01T14:39:12Z"),
    ("2026-12-01T14:39:12Z", "2026-12-01T14:39:12Z"),
])
def test_envelope_epoch_timestamps_in_s_ms_us_become_iso(stamp, iso):
    value = msgspec.json.encode({"id": "a", "kind": "text", "body": "x", "timestamp": stamp})
    assert decode_envelope(value).timestamp == iso


def test_envelope_numbers_in_attributes_become_text():
    value = b'{"id": "a", "kind": "text", "body": "x", "attributes": {"cell": 7, "load": 0.5, "up": true, "n": null}}'
    assert decode_envelope(value).attributes == {"cell": "7", "load": "0.5", "up": "true"}


@settings(max_examples=150, deadline=None)
@given(fmt=st.sampled_from(FORMATS), value=st.binary(max_size=300))
def test_any_bytes_give_records_or_dead_letters_with_a_known_reason(fmt, value):
    items = decoder_for(fmt)(Message(value, (), "t", 1, 9))
    assert items
    for item in items:
        assert isinstance(item, (TelemetryRecord, InvalidRecord))
        if isinstance(item, InvalidRecord):
            assert item.reason in REASONS


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_mangled_fixtures_give_records_or_known_reasons(data):
    name, fmt, make, count, host = data.draw(st.sampled_from(SHAPES))
    value = bytearray(make())
    for _ in range(data.draw(st.integers(1, 5))):
        value[data.draw(st.integers(0, len(value) - 1))] = data.draw(st.integers(0, 255))
    for mode in (fmt, "auto"):
        for item in decoder_for(mode)(Message(bytes(value), (), "t", 1, 9)):
            assert isinstance(item, TelemetryRecord) or item.reason in REASONS
