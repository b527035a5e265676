"""Inputs longer than the model's context: the hierarchical plan.

(Inputs longer than one bin but within the context go through the engine's chunked-prefill lane;
see `Scheduler`.) Beyond the context, the record body is split at line boundaries into pieces
whose chunk prompts fit, each piece is summarised, then the summaries are merged in one more pass.
Nothing is dropped: every line of the (repeat-collapsed) body lands in exactly one piece.
"""

from __future__ import annotations

from collections.abc import Callable

from worker.engine.errors import ContextTooLong
from worker.messages import Facts, TelemetryRecord
from worker.prompts import (build_chunk_messages, build_merge_messages, compress_repeats, render_body,
                            split_into_chunks)

Tokenize = Callable[[list[dict[str, str]]], list[int]]   # chat messages -> prompt token ids
CountTokens = Callable[[str], int]

# Each retry shrinks the piece budget by this factor when a rendered chunk prompt still overflows
# (the splitter's per-line counts are approximate; template tokens differ per piece).
_SHRINK = 0.8
_MAX_ATTEMPTS = 8


def plan_chunk_prompts(record: TelemetryRecord, *, tokenize: Tokenize, count_tokens: CountTokens,
                       max_prompt_tokens: int) -> list[list[int]]:
    """Token ids of one chunk prompt per piece of the body, each at most `max_prompt_tokens` long.

    Raises ContextTooLong when no split fits (the prompt template alone is too large)."""
    body = compress_repeats(render_body(record))
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
