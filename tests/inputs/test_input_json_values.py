"""Top-level JSON that is not one object: an array holding objects is a batch of events, each
answered on its own; any other JSON value is a dead letter naming what it is, never a "log line";
text that only begins like JSON stays a line."""

from __future__ import annotations

import time

import msgspec
import pytest

from tests.inputs.helpers import fixture, syslog_lines
from worker.inputs import Message, decoder_for
from worker.messages import InvalidRecord, TelemetryRecord

VES_FAULT = msgspec.json.decode(fixture("ves_fault.json"))
ISSUE_39_BRACKETS = b"[" * 100_000 + b"]" * 100_000  # the 200 KB message that held partition 0


def _items(fmt: str, value: bytes, **kw) -> list:
    items = decoder_for(fmt, **kw)(Message(value, (), "t", 0, 5, 1796135999000))
    assert items, "every message gets at least one answer"
    return items


def _letter(fmt: str, value: bytes) -> InvalidRecord:
    items = _items(fmt, value)
    assert len(items) == 1 and isinstance(items[0], InvalidRecord), items
    return items[0]


@pytest.mark.parametrize("mode", ["auto", "json-log"])
@pytest.mark.parametrize(("name", "hosts"), [("fluentbit_http_batch.json", ["upf-3", "upf-3", "smf-1"]),
                                             ("vector_http_batch.json", ["core-sw-1", "core-sw-2"])])
def test_shipper_array_is_a_batch_each_event_its_own_record_with_a_stable_id(mode, name, hosts):
    items = _items(mode, fixture(name))
    assert all(isinstance(i, TelemetryRecord) for i in items)
    assert [i.attributes["host"] for i in items] == hosts
    assert [i.id for i in items] == [f"t:0:5:{n}" for n in range(len(hosts))]
    assert {i.attributes["input_format"] for i in items} == {"json-log"}


def test_array_mixing_shapes_answers_each_element_in_its_own_format():
    log_event = msgspec.json.decode(fixture("vector_syslog.json"))
    envelope = {"id": "alarm-9", "kind": "text", "body": "S1 link down on enb-44"}
    heartbeat = {"commonEventHeader": {"domain": "heartbeat", "sourceName": "ru-2"}}
    ves_batch = {"eventList": [VES_FAULT["event"], heartbeat]}
    value = msgspec.json.encode([VES_FAULT, log_event, 17, envelope, ves_batch, {"hello": "world"}])
    items = _items("auto", value)
    kinds = [i.reason if isinstance(i, InvalidRecord) else i.attributes["input_format"] for i in items]
    assert kinds == ["ves", "json-log", "invalid_field", "envelope", "ves", "ves", "invalid_field"]
    assert items[1].id == "t:0:5:1" and items[3].id == "alarm-9" and items[5].id == "t:0:5:4:1"
    assert "element 2" in items[2].message and items[2].original == b"17"
    assert msgspec.json.decode(items[6].original) == {"hello": "world"}  # each letter carries its own element


@pytest.mark.parametrize(("value", "named"), [
    (b"[[1, 2], [3]]", "an array of arrays"),
    (b"[1, 2.5, 3]", "an array of numbers"),
    (b'["link down", 7]', "an array of numbers, strings"),
    (b"[]", "an empty array"),
    (b"42", "a number"),
    (b'"eth0 link down"', "a string"),
    (b"true", "true"),
    (b"null", "null"),
    (b'"{\\"message\\": \\"link down\\"}"', "encoded twice"),
    (b"[" * 500 + b"]" * 500, "an array of arrays"),
])
@pytest.mark.parametrize("fmt", ["auto", "json-log"])
def test_json_that_is_no_object_nor_batch_is_invalid_field_naming_what_it_is(fmt, value, named):
    letter = _letter(fmt, value)
    assert letter.reason == "invalid_field" and named in letter.message


@pytest.mark.parametrize("fmt", ["auto", "envelope", "ves", "json-log"])
def test_the_issues_200_kb_of_brackets_is_too_deep_at_once(fmt):
    started = time.perf_counter()
    assert _letter(fmt, ISSUE_39_BRACKETS).reason == "too_deep"
    wide = b"[" + b",".join([b"[" * 400 + b"]" * 400] * 250) + b"]"  # 200 KB, never too deep
    assert _letter(fmt, wide).reason == "invalid_field"
    assert time.perf_counter() - started < 2.0  # milliseconds in fact; generous for a shared CPU


@pytest.mark.parametrize("line", [
    b"[2026-12-01 14:39:12,254] ERROR gnb-du-0412 du_app: F1 setup failed",
    b"[{shard 3}] reconnect loop on upf-3",
    b"2026-12-01T14:39:12.254811+00:00 gnb-du-0412 du_app[3301]: F1 Setup Failure",
    b"-- MARK --",
    b"true story: link flapped on core-sw-1",
    b"null pointer in smf[902] at pfcp_handler",
    b'"quoted" start of a line from cell-gw-7',
    b"404 from upstream sbi-proxy-2",
])
def test_text_that_only_begins_like_json_stays_a_line(line):
    items = _items("auto", line)
    assert len(items) == 1 and isinstance(items[0], TelemetryRecord) and items[0].kind == "syslog"
    assert items[0].attributes["input_format"] == "syslog"


def test_syslog_fixture_lines_stay_lines():
    for line in syslog_lines():
        assert _items("auto", line)[0].attributes["input_format"] == "syslog"


def test_truncated_batch_is_invalid_json_not_a_line():
    value = fixture("vector_http_batch.json")
    assert _letter("auto", value[: len(value) // 2]).reason == "invalid_json"


def test_batch_beyond_the_limit_brings_at_most_the_limit_and_letters_carry_the_rest():
    event = msgspec.json.decode(fixture("vector_syslog.json"))
    events = [{**event, "message": f"line {i}"} for i in range(25)]
    nested = {"eventList": [VES_FAULT["event"]] * 8}
    value = msgspec.json.encode(events[:5] + [nested] + events[5:])
    items = _items("auto", value, max_items=10)
    records = [i for i in items if isinstance(i, TelemetryRecord)]
    letters = [i for i in items if isinstance(i, InvalidRecord)]
    assert len(records) == 10  # 5 lines, 5 of the 8 nested events: the budget is shared
    assert [letter.reason for letter in letters] == ["too_many_items"] * 3
    carried = [e["message"] for letter in letters[1:] for e in msgspec.json.decode(letter.original)]
    assert carried == [f"line {i}" for i in range(5, 25)]
    assert "events 6-15 of 26" in letters[1].message
