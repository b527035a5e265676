"""Hostile messages at the input layer: each is answered (records, or dead letters with a specific
reason) and never raises; a batch's work is bounded and each of its dead letters carries its own
items; what a record keeps of a log line cannot drive a terminal or break an encoder."""

from __future__ import annotations

import typing

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from tests.inputs.helpers import SHAPES
from worker.benchmarks.faults_hostile import nested_otlp_request
from worker.inputs import Message, decoder_for
from worker.messages import InvalidRecord, ReasonCode, TelemetryRecord

FORMATS = ["auto", "envelope", "ves", "syslog", "json-log", "otlp"]
JSON_FORMATS = ["auto", "envelope", "ves", "json-log"]
REASONS = set(typing.get_args(ReasonCode))
DEEP = 100_000
MSGPACK = [("content-type", b"application/msgpack")]


def _items(fmt: str, value: bytes, headers=(), **kw) -> list:
    items = decoder_for(fmt, **kw)(Message(value, tuple(headers), "t", 0, 5))
    assert items, "every message gets at least one answer"
    for item in items:
        assert isinstance(item, (TelemetryRecord, InvalidRecord))
        if isinstance(item, TelemetryRecord):  # what the worker does with a record must not raise
            msgspec.json.encode(item)
            item.body_text().encode()
        else:
            assert item.reason in REASONS
    return items


def _reasons(fmt: str, value: bytes, headers=(), **kw) -> list[str]:
    return [i.reason if isinstance(i, InvalidRecord) else "record" for i in _items(fmt, value, headers, **kw)]


@pytest.mark.parametrize("fmt", JSON_FORMATS)
@pytest.mark.parametrize("value", [
    b"[" * DEEP + b"]" * DEEP,
    b'{"a":' * DEEP + b"1" + b"}" * DEEP,
    b'{"id": "x", "kind": "text", "body": ' + b'{"a":' * 5000 + b"1" + b"}" * 5000 + b"}",
    b'{"event": {"commonEventHeader": {"domain": "fault"}, "x": ' + b"[" * DEEP + b"]" * DEEP + b"}}",
], ids=["arrays", "objects", "envelope_body_5000", "ves_field"])
def test_json_nested_beyond_the_decoder_is_too_deep(fmt, value):
    assert _reasons(fmt, value) == ["too_deep"]


def test_otlp_json_nested_beyond_the_decoder_is_too_deep():
    value = b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": ' + b"[" * DEEP + b"]" * DEEP + b"}]}]}]}"
    assert _reasons("otlp", value) == ["too_deep"]
    assert _reasons("auto", value) == ["too_deep"]


def test_msgpack_nested_beyond_the_decoder_is_too_deep():
    head = msgspec.msgpack.encode({"id": "x", "kind": "text"})
    body = b"\x81\xa1a" * DEEP + b"\x01"  # {"a": {"a": … 1}}
    value = bytes([head[0] + 1]) + head[1:] + msgspec.msgpack.encode("body") + body
    assert _reasons("envelope", value, MSGPACK) == ["too_deep"]
    assert _reasons("auto", value, MSGPACK) == ["too_deep"]


def test_otlp_protobuf_nested_anyvalues_are_answered():
    shallow = nested_otlp_request(40)
    assert _reasons("otlp", shallow) == ["record"]
    deep = nested_otlp_request(DEEP)
    assert _reasons("otlp", deep) == ["invalid_protobuf"]
    assert _reasons("auto", deep) == ["invalid_protobuf"]  # began like OTLP: the parser's reason, not invalid_utf8


@pytest.mark.parametrize("fmt", ["auto", "envelope"])
def test_object_with_a_million_keys_is_answered(fmt):
    value = b"{" + b",".join(b'"k%d":1' % i for i in range(10**6)) + b"}"
    assert _reasons(fmt, value) == ["invalid_field"]


@pytest.mark.parametrize("number", [b"1e400", b"-0", str(2**70).encode(), b"-1e400"])
def test_numbers_where_the_schema_wants_a_time_are_refused_by_name(number):
    value = b'{"id": "a", "kind": "text", "body": "x", "timestamp": ' + number + b"}"
    for fmt in ("auto", "envelope"):
        assert _reasons(fmt, value)[0] in {"invalid_field", "invalid_json"}


def test_ves_epoch_numbers_out_of_range_still_give_a_record():
    value = (b'{"event": {"commonEventHeader": {"domain": "fault", "sourceName": "gnb-1", '
             b'"startEpochMicrosec": ' + str(2**70).encode() + b"}}}")
    assert _reasons("ves", value) == ["record"]


@pytest.mark.parametrize("fmt", JSON_FORMATS + ["otlp"])
def test_lone_surrogates_and_nul_in_json_strings_are_answered_and_encodable(fmt):
    values = [
        b'{"id": "a\\ud800", "kind": "text", "body": "x\\u0000y"}',
        b'{"event": {"commonEventHeader": {"domain": "fault", "sourceName": "gnb\\u0000-1", "eventId": "\\udfff"}}}',
        b'{"message": "link down \\ud800 \\u0000 on port 3", "host": "sw\\ud83d"}',
        b'{"resourceLogs": [{"resource": {"attributes": [{"key": "host.name", "value": {"stringValue": "h\\ud800"}}]},'
        b' "scopeLogs": [{"logRecords": [{"body": {"stringValue": "link down \\ud800\\u0000"}}]}]}]}',
    ]
    for value in values:
        _items(fmt, value)  # records encode; dead letters have known reasons


@pytest.mark.parametrize("fmt", JSON_FORMATS + ["otlp"])
def test_lone_surrogates_are_refused_as_invalid_json_nul_is_kept_as_text(fmt):
    # msgspec and protobuf's JSON parser refuse an unpaired surrogate; NUL is a character like any other
    surrogate = b'{"message": "link down \\ud800", "host": "sw1", "id": "a", "kind": "text", "body": "x"}'
    if fmt == "otlp":
        surrogate = b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": {"stringValue": "\\ud800"}}]}]}]}'
    assert _reasons(fmt, surrogate) == ["invalid_json"]
    nul = b'{"message": "link\\u0000down", "host": "sw1", "id": "a", "kind": "text", "body": "x\\u0000y"}'
    assert _reasons(fmt, nul) == [{"otlp": "empty_body", "ves": "invalid_field"}.get(fmt, "record")]


@pytest.mark.parametrize("fmt", ["auto", "syslog"])
def test_syslog_escape_sequences_and_nul_never_reach_the_record(fmt):
    line = (b"<11>1 2026-12-01T14:39:12Z core-rtr-2 bgpd 77 - - \x1b[2J\x1b[31mneighbor 10.0.0.1 Down\x1b[0m\x00 "
            b"\x1b]0;owned\x07hold timer expired\x07\x08")
    (record,) = _items(fmt, line)
    assert record.body == ("<11>1 2026-12-01T14:39:12Z core-rtr-2 bgpd 77 - - neighbor 10.0.0.1 Down "
                           "hold timer expired")
    assert record.attributes["host"] == "core-rtr-2"


def test_json_log_message_with_escape_sequences_is_cleaned():
    (record,) = _items("json-log", b'{"message": "\\u001b[1mOSPF adjacency lost\\u001b[0m", "host": "r1"}')
    assert "\x1b" not in record.body and "OSPF adjacency lost" in record.body


def test_fifty_megabyte_line_without_newline_is_one_record():
    (record,) = _items("auto", b"<13>1 2026-12-01T14:39:12Z host app - - - " + b"x" * 50_000_000)
    assert record.kind == "syslog" and len(record.body) > 50_000_000


@pytest.mark.parametrize("fmt", FORMATS)
def test_ten_thousand_headers_with_binary_values_are_answered(fmt):
    headers = [(f"h{i}", bytes([i % 256]) * 40) for i in range(10_000)] + [("content-type", b"\xff\xfe\x00")]
    assert _reasons(fmt, b'{"id": "a", "kind": "text", "body": "x"}', headers)


@pytest.mark.parametrize("fmt", ["auto", "envelope", "ves"])
def test_megabyte_id_is_refused_as_invalid_field(fmt):
    envelope = b'{"id": "' + b"x" * 1_000_000 + b'", "kind": "text", "body": "x"}'
    ves = b'{"event": {"commonEventHeader": {"domain": "fault", "eventId": "' + b"e" * 1_000_000 + b'"}}}'
    assert _reasons(fmt, ves if fmt == "ves" else envelope) == ["invalid_field"]


def test_long_host_name_is_not_a_host():
    (record,) = _items("syslog", b"2026-12-01T14:39:12Z " + b"h" * 5000 + b" sshd[1]: Accepted publickey")
    assert "host" not in record.attributes


def test_event_list_beyond_the_limit_is_answered_in_letters_carrying_their_own_events():
    event = {"commonEventHeader": {"domain": "fault", "sourceName": "gnb-1", "eventId": "e"}}
    events = [{**event, "commonEventHeader": {**event["commonEventHeader"], "eventId": f"e{i}"}} for i in range(2_500)]
    events[3] = {"commonEventHeader": "broken"}
    items = _items("ves", msgspec.json.encode({"eventList": events}), max_items=1000)
    records = [i for i in items if isinstance(i, TelemetryRecord)]
    letters = [i for i in items if isinstance(i, InvalidRecord)]
    assert len(records) == 999 and records[0].id == "e0"
    assert letters[0].reason == "invalid_field" and msgspec.json.decode(letters[0].original) == events[3]
    overflow = letters[1:]
    assert [letter.reason for letter in overflow] == ["too_many_items"] * 2
    carried = [e["commonEventHeader"]["eventId"] for letter in overflow
               for e in msgspec.json.decode(letter.original)["eventList"]]
    assert carried == [f"e{i}" for i in range(1000, 2500)]
    assert "events 1000-1999 of 2500" in overflow[0].message


def test_otlp_log_records_beyond_the_limit_are_answered_in_letters_carrying_their_lines():
    request = ExportLogsServiceRequest()
    scope = request.resource_logs.add().scope_logs.add()
    for i in range(2_300):
        scope.log_records.add().body.string_value = f"line {i}"
    items = _items("otlp", request.SerializeToString(), max_items=1000)
    (record,) = [i for i in items if isinstance(i, TelemetryRecord)]
    assert record.body.count("\n") == 999 and record.body.endswith("line 999")
    letters = [i for i in items if isinstance(i, InvalidRecord)]
    assert [letter.reason for letter in letters] == ["too_many_items"] * 2
    lines = b"\n".join(letter.original for letter in letters).decode().splitlines()
    assert [line.rsplit(" ", 1)[-1] for line in lines] == [str(i) for i in range(1000, 2300)]


# ---- fuzzing: any bytes and headers; mutations of every real producer's shape ------------------

_HEADER_VALUES = st.one_of(st.none(), st.binary(max_size=40),
                           st.sampled_from([b"application/msgpack", b"application/x-protobuf", b"application/json",
                                            b"application/msgpack; charset=utf-8", b"\xff"]))
_HEADERS = st.lists(st.tuples(st.sampled_from(["content-type", "Content-Type", "x", ""]), _HEADER_VALUES), max_size=4)


@settings(max_examples=300, deadline=None)
@given(fmt=st.sampled_from(FORMATS), value=st.binary(max_size=400), headers=_HEADERS)
def test_fuzz_any_bytes_and_headers_give_answers_never_an_exception(fmt, value, headers):
    _items(fmt, value, headers)


def _nest(value: bytes, depth: int) -> bytes:
    return b'{"event": ' * depth + value + b"}" * depth


def _duplicate_keys(value: bytes) -> bytes:
    text = value.strip()
    if not text.startswith(b"{"):
        return value
    return b'{"id": 1, "event": [], "message": {}, "resourceLogs": 3, ' + text[1:]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_fuzz_mutated_producer_shapes_give_answers_never_an_exception(data):
    name, fmt, make, count, host = data.draw(st.sampled_from(SHAPES))
    value = make()
    mutation = data.draw(st.sampled_from(["truncate", "flip", "nest", "duplicate", "splice"]))
    if mutation == "truncate":
        value = value[:data.draw(st.integers(0, len(value)))]
    elif mutation == "flip":
        mutable = bytearray(value)
        for _ in range(data.draw(st.integers(1, 8))):
            mutable[data.draw(st.integers(0, len(mutable) - 1))] ^= 1 << data.draw(st.integers(0, 7))
        value = bytes(mutable)
    elif mutation == "nest":
        value = _nest(value, data.draw(st.sampled_from([1, 50, 3000])))
    elif mutation == "duplicate":
        value = _duplicate_keys(value)
    else:
        at = data.draw(st.integers(0, len(value)))
        value = value[:at] + data.draw(st.binary(max_size=30)) + value[at:]
    headers = data.draw(_HEADERS)
    for mode in (fmt, "auto"):
        _items(mode, value, headers)
