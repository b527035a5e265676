"""Records longer than the model's context: the record-level plan beside the Summarizer.

(Inputs longer than one bin but within the context go through the engine's chunked-prefill lane;
the engine only sees sequences.) Beyond the context, the record body is split at line boundaries
into pieces whose chunk prompts fit, each piece is summarised, then the summaries are merged — in
a tree when they outgrow one context: groups that fit are merged into the next level's summaries
until one merge fits. Nothing is dropped: every line of the (repeat-collapsed) body lands in exactly
one piece, unless the record is over the per-record work cap; then a bounded selection is
summarised instead (head, tail and the counts of the line templates of the whole body) and said so.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass

from worker.engine.errors import ContextTooLong
from worker.facts.bounds import MAX_FACT_LINE_CHARS
from worker.messages import Facts, TelemetryRecord
from worker.prompts import (build_chunk_messages, build_merge_messages, compress_repeats, render_body,
                            split_into_chunks)
from worker.prompts.text import lines_within, repeat_key  # repeat_key: a line's template, as repeats collapse

Tokenize = Callable[[list[dict[str, str]]], list[int]]   # chat messages -> prompt token ids
CountTokens = Callable[[str], int]

# Each retry shrinks the piece budget by this factor when a rendered chunk prompt still overflows
# (the splitter's per-line counts are approximate; template tokens differ per piece).
_SHRINK = 0.8
_MAX_ATTEMPTS = 8
# Shares of the work cap in a selection: head and tail lines keep the start and the latest state,
# the template table says what the middle held and how often (unlike `trim_to_tokens`, which gives the
# tail what the head left: a selection keeps its table's share).
_HEAD_SHARE, _TAIL_SHARE = 0.4, 0.4
_MAX_TEMPLATES = 50
# Characters of a line its template is read from in a selection (masking is regex work per character).
_TEMPLATE_CHARS = 512


class RecordTooLong(ValueError):
    """A record's body is over the per-record work cap and the operator chose to dead-letter it."""
    reason = "too_long"  # its dead letter's reason code


@dataclass(frozen=True)
class Selection:
    """What is summarised of a record over the work cap, and a sentence that states it."""

    text: str
    description: str


def body_for_pieces(record: TelemetryRecord) -> str:
    """The body as the pieces see it: rendered, repeats collapsed, and lines longer than
    MAX_PIECE_LINE_CHARS wrapped (a piece would split them by characters anyway; whole, one line of
    50 MB is tokenised in one call that holds gigabytes)."""
    return wrap_long_lines(compress_repeats(render_body(record)), MAX_PIECE_LINE_CHARS)


# Characters of one line the planner tokenises at once (the facts read as many, worker.facts.bounds).
MAX_PIECE_LINE_CHARS = MAX_FACT_LINE_CHARS
# A body this many times longer in characters than the work cap in tokens is over it whatever its
# tokens are (no token of the embedded vocabulary is this long): only the lines a selection takes
# are counted, not every line of a body of hundreds of megabytes.
SURELY_OVER_CHARS_PER_TOKEN = 16


def wrap_long_lines(body: str, max_chars: int) -> str:
    """`body` with each line longer than `max_chars` cut into lines of `max_chars`."""
    if all(len(line) <= max_chars for line in body.splitlines()):
        return body
    return "\n".join(line[i:i + max_chars] if len(line) > max_chars else line
                     for line in body.splitlines() for i in range(0, max(len(line), 1), max_chars))


def _part_of_line(line: str, budget: float, count_tokens: CountTokens, from_end: bool) -> list[str]:
    """The head (or tail) of one line too long for `budget` tokens, cut to fit: what a selection keeps
    of a record that is one huge line. Empty when not even a few characters fit."""
    sample = line[-2048:] if from_end else line[:2048]
    chars = int((budget - 1) * len(sample) / max(count_tokens(sample), 1))  # its characters a token
    while chars >= 16:
        part = line[-chars:] if from_end else line[:chars]
        if count_tokens(part) + 1 <= budget:
            return [part]
        chars = int(chars * _SHRINK)
    return []


def select_within_cap(body: str, cap_tokens: int, count_tokens: CountTokens) -> Selection:
    """A bounded selection of `body` (about `cap_tokens` tokens): its head and tail lines (the head
    and tail of its first and last line when no whole line fits), and the most frequent line
    templates of the whole body with their counts (a template read from a line's first
    _TEMPLATE_CHARS characters: a 50 MB line is not masked whole)."""
    lines = body.splitlines()
    head, _ = lines_within(lines, cap_tokens * _HEAD_SHARE, count_tokens)
    tail, _ = lines_within(reversed(lines[len(head):]), cap_tokens * _TAIL_SHARE, count_tokens)
    tail.reverse()
    middle = lines[len(head):len(lines) - len(tail)]
    shown = [f"first {len(head)}", f"last {len(tail)}"]
    if not head and lines:
        head = _part_of_line(lines[0], cap_tokens * _HEAD_SHARE, count_tokens, from_end=False)
        shown[0] = f"first {len(head[0]) if head else 0:,} characters of the first"
    if not tail and len(lines) > 1:
        tail = _part_of_line(lines[-1], cap_tokens * _TAIL_SHARE, count_tokens, from_end=True)
        shown[1] = f"last {len(tail[0]) if tail else 0:,} characters of the last"
    templates = collections.Counter(repeat_key(line[:_TEMPLATE_CHARS]) for line in lines)
    rows = (f"{n} x {template}" for template, n in templates.most_common(_MAX_TEMPLATES))
    table, _ = lines_within(rows, cap_tokens * (1.0 - _HEAD_SHARE - _TAIL_SHARE), count_tokens)
    text = "\n".join([*head, f"[... {len(middle)} lines not shown; line templates of all {len(lines)} "
                      f"lines, most frequent first:]", *table, "[... end of templates; the last lines:]",
                      *tail])
    description = (f"over the work cap of {cap_tokens} tokens: summarised the {shown[0]} and {shown[1]} of "
                   f"{len(lines)} lines and the counts of the {len(table)} most frequent of {len(templates)} "
                   f"line templates")
    return Selection(text, description)


def plan_chunk_prompts(record: TelemetryRecord, *, tokenize: Tokenize, count_tokens: CountTokens,
                       max_prompt_tokens: int, body: str | None = None) -> list[list[int]]:
    """Token ids of one chunk prompt per piece of the body (or of `body`, e.g. a selection), each
    at most `max_prompt_tokens` long.

    Raises ContextTooLong when no split fits (the prompt template alone is too large)."""
    body = body_for_pieces(record) if body is None else body
    overhead = len(tokenize(build_chunk_messages(record, "", 1, 1)))
    budget = max_prompt_tokens - overhead - 16  # room for the "Part i of N" digits
    for _ in range(_MAX_ATTEMPTS):
        if budget < 1:
            break
        pieces = split_into_chunks(body, budget, count_tokens)
        prompts = [tokenize(build_chunk_messages(record, piece, i, len(pieces)))
                   for i, piece in enumerate(pieces, start=1)]
        if all(len(p) <= max_prompt_tokens for p in prompts):
            return prompts
        budget = int(budget * _SHRINK)
    raise ContextTooLong(f"record {record.id!r}: cannot split its body into chunk prompts of at most "
                         f"{max_prompt_tokens} tokens (template overhead {overhead} tokens)")


def merge_prompt(record: TelemetryRecord, facts: Facts, chunk_summaries: list[str], *,
                 tokenize: Tokenize, max_prompt_tokens: int) -> list[int]:
    """Token ids of the prompt merging the piece summaries. Raises ContextTooLong when it does not fit."""
    ids = tokenize(build_merge_messages(record, facts, chunk_summaries))
    if len(ids) > max_prompt_tokens:
        raise ContextTooLong(f"record {record.id!r}: the merge prompt over {len(chunk_summaries)} piece "
                             f"summaries is {len(ids)} tokens, above the {max_prompt_tokens} that fit")
    return ids


def plan_merge(record: TelemetryRecord, facts: Facts, summaries: list[str], *, tokenize: Tokenize,
               max_prompt_tokens: int) -> list[list[int]]:
    """One merge prompt over `summaries` when it fits; else the merge prompts of consecutive groups
    that each fit (the next level of the tree, fewer summaries than before).

    Raises ContextTooLong when not even two summaries fit one merge prompt."""
    try:
        return [merge_prompt(record, facts, summaries, tokenize=tokenize, max_prompt_tokens=max_prompt_tokens)]
    except ContextTooLong:
        pass
    groups: list[list[int]] = []
    start = 0
    while start < len(summaries):
        # The longest run from `start` whose merge prompt fits; a bisection keeps tokenising cheap.
        lo, hi, best = start + 1, len(summaries), None
        while lo <= hi:
            mid = (lo + hi) // 2
            ids = tokenize(build_merge_messages(record, facts, summaries[start:mid], opening=False))
            if len(ids) <= max_prompt_tokens:
                lo, best = mid + 1, (mid, ids)
            else:
                hi = mid - 1
        if best is None or best[0] - start < 2 and len(summaries) - start > 1:
            raise ContextTooLong(f"record {record.id!r}: two piece summaries do not fit one merge prompt "
                                 f"of {max_prompt_tokens} tokens")
        start, ids = best
        groups.append(ids)
    return groups
