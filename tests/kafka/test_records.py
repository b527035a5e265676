"""Kafka record <-> message types: content types, dead letters, provenance headers."""

from __future__ import annotations

import msgspec
import pytest

from worker.kafka.records import (COMPACT_ORIGINAL_BYTES, Source, dead_letter_output, decode_message,
                                  summary_output)
from worker.messages import DeadLetter, InvalidRecord, Summary, TelemetryRecord

SRC = Source("in", 2, 41, b"cell-7")


def test_decode_message_msgpack_header_decodes_msgpack():
    rec = TelemetryRecord(id="a", kind="text", body="hello")
    assert decode_message(msgspec.msgpack.encode(rec), [("Content-Type", b"application/msgpack")]) == rec


def test_decode_message_msgpack_without_header_is_invalid_json():
    rec = TelemetryRecord(id="a", kind="text", body="hello")
    with pytest.raises(InvalidRecord) as err:
        decode_message(msgspec.msgpack.encode(rec), [])
    assert err.value.reason in ("invalid_json", "invalid_utf8")


def test_summary_output_keeps_key_and_provenance():
    out = summary_output("out", SRC, Summary(id="a", summary="s", model="m", prompt_tokens=3, output_tokens=1))
    assert out.key == b"cell-7" and out.topic == "out"
    headers = dict(out.headers)
    assert headers["telesum-source-partition"] == b"2" and headers["telesum-source-offset"] == b"41"
    assert headers["telesum-model"] == b"m"
    assert msgspec.json.decode(out.value, type=Summary).key == "cell-7"


def test_dead_letter_output_compact_cuts_original():
    original = b"x" * (COMPACT_ORIGINAL_BYTES * 3)
    full = msgspec.json.decode(dead_letter_output("dlq", SRC, original, "invalid_json", "bad", "m").value,
                               type=DeadLetter)
    assert full.original == original and full.offset == 41 and full.reason == "invalid_json"
    compact = msgspec.json.decode(
        dead_letter_output("dlq", SRC, original, "output_too_large", "big", "m", compact=True).value,
        type=DeadLetter)
    assert len(compact.original) == COMPACT_ORIGINAL_BYTES and "cut to" in compact.message


def test_offset_ranges_round_trip_a_window_s_offsets():
    from worker.kafka.records import offset_ranges, parse_offset_ranges

    covers = (12, 3, 4, 5, 9, 5, 10, 11)
    assert offset_ranges(covers) == "3-5,9-12"
    assert parse_offset_ranges(offset_ranges(covers)) == sorted(set(covers))


def test_window_summary_output_names_every_offset_it_covers():
    source = Source("in", 1, 3, None, None, "syslog", covers=(3, 5, 5, 8))
    out = summary_output("out", source, Summary(id="w", summary="s", model="m", prompt_tokens=1, output_tokens=1))
    headers = dict(out.headers)
    assert headers["telesum-source-offset"] == b"3" and headers["telesum-source-last-offset"] == b"8"
    assert headers["telesum-window-records"] == b"4" and headers["telesum-window-offsets"] == b"3,5,8"
    assert headers["telesum-input-format"] == b"syslog"
