"""A record of one enormous line is planned within bounds: its lines are wrapped before they are
tokenised, and a body surely over the work cap is selected from without counting every line."""

from __future__ import annotations

from worker.messages import TelemetryRecord
from worker.summarizer.pieces import (MAX_PIECE_LINE_CHARS, SURELY_OVER_CHARS_PER_TOKEN, body_for_pieces,
                                      select_within_cap, wrap_long_lines)


def test_wrap_long_lines_cuts_only_long_lines_and_keeps_every_character():
    body = "short\n" + "x" * 25 + "\n\nend"
    wrapped = wrap_long_lines(body, 10)
    assert wrapped.splitlines() == ["short", "x" * 10, "x" * 10, "x" * 5, "", "end"]
    assert wrap_long_lines("a\nb", 10) == "a\nb"


def test_one_line_of_megabytes_is_selected_from_without_tokenising_more_than_a_line_at_once():
    cap = 4096
    line = "<13>1 2026-12-01T14:39:12Z gnb-1 du_app - - - " + "link down on port 3 " * 200_000  # 4 MB
    body = body_for_pieces(TelemetryRecord(id="r", kind="syslog", body=line))
    assert max(map(len, body.splitlines())) <= MAX_PIECE_LINE_CHARS
    assert len(body) > SURELY_OVER_CHARS_PER_TOKEN * cap  # the planner counts only what it selects
    seen: list[int] = []

    def count(text: str) -> int:
        seen.append(len(text))
        return len(text) // 4

    selection = select_within_cap(body, cap, count)
    assert max(seen) <= MAX_PIECE_LINE_CHARS + 16 and len(seen) < 50  # a line, or a template row ("3 x …")
    assert "lines not shown" in selection.text and selection.description.startswith("over the work cap")


def test_a_cap_smaller_than_one_wrapped_line_keeps_the_head_and_tail_of_the_line_and_its_template():
    # A slow CPU's cap (1,024 tokens) is below what one wrapped line of a 50 MB line holds (8,192
    # characters): the selection keeps the first and last characters that fit, and says so.
    line = "<13>1 2026-12-01T14:39:12Z gnb-du-0413 du_app - - - " + "x" * (4 * MAX_PIECE_LINE_CHARS + 5000)
    body = wrap_long_lines(line + " the end", MAX_PIECE_LINE_CHARS)

    def count(text: str) -> int:
        return len(text) // 4

    selection = select_within_cap(body, 1024, count)
    lines = selection.text.splitlines()
    assert lines[0].startswith("<13>1 2026-12-01T14:39:12Z gnb-du-0413") and lines[-1].endswith("the end")
    assert sum(map(count, lines)) <= 1024 + len(lines)
    assert "summarised the first 1,634 characters of the first and last 1,634 characters of the last of 5 " \
           "lines" in selection.description
    assert "counts of the 1 most frequent" in selection.description  # a row of 512 characters fits
