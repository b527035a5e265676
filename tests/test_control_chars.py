"""Text from the outside made safe to keep, print and encode."""

from __future__ import annotations

import logging

from hypothesis import given
from hypothesis import strategies as st

from worker.control_chars import clean_text, escape_controls
from worker.ops.logs import JsonFormatter, TextFormatter


def test_clean_text_drops_escape_sequences_and_controls_keeps_lines_and_tabs():
    text = "\x1b[2J\x1b[1;31mBGP down\x1b[0m\x00\x07 on\tport 3\n\x1b]0;title\x07next \x9bline\x1bc"
    assert clean_text(text) == "BGP down on\tport 3\nnext line"


def test_clean_text_replaces_lone_surrogates():
    assert clean_text("a\ud800b\udfff") == "a\ufffdb\ufffd"
    assert clean_text("plain é text ✓") == "plain é text ✓"


@given(st.text())
def test_clean_text_output_encodes_and_carries_no_escape(text):
    cleaned = clean_text(text)
    cleaned.encode("utf-8")
    assert "\x1b" not in cleaned and "\x00" not in cleaned


def test_escape_controls_keeps_one_log_line_one_line():
    assert escape_controls("a\nb\x1b[31mc\ud800") == "a\\nb\\x1b[31mc\\ud800"


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("worker.kafka.publish", logging.WARNING, __file__, 1, "dead letter: %s", (message,), None)


def test_log_formatters_escape_what_an_input_quotes():
    hostile = "bad\x1b[2J\nFAKE 2026-12-02 INFO forged line\ud800"
    text = TextFormatter().format(_record(hostile))
    assert "\x1b" not in text and "\n" not in text and "\\x1b[2J\\nFAKE" in text
    line = JsonFormatter().format(_record(hostile))
    assert "\\\\x1b[2J\\\\nFAKE" in line and "\n" not in line
