"""Text utilities of the prompts: how a record body reads to the model (VES flattened, repeats
collapsed), trimmed to a token budget with a visible marker, or split into pieces."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Callable

from worker.facts.common import AIMED_AT_MODEL, might_address_model
from worker.messages import TelemetryRecord

TokenCounter = Callable[[str], int]

# A line is a repeat of another when they are equal after masking what changes between repeats.
_MASKS = (
    re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"),  # ISO 8601
    re.compile(r"\b[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2}\b"),  # RFC 3164 "Mmm dd hh:mm:ss"
    re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"),
    re.compile(r"\b0x[0-9a-fA-F]+\b"),
    re.compile(r"\d+"),
)


# Log-like kinds only: in PM XML and VES objects the lines that differ only in numbers are the
# per-cell and per-interface values themselves, so collapsing them would drop the data.
COMPRESSED_KINDS = frozenset({"syslog", "trace", "text"})


def repeat_key(line: str) -> str:
    for mask in _MASKS:
        line = mask.sub("#", line)
    return line.strip()


def compress_repeats(text: str) -> str:
    """Collapse lines that repeat (equal once digits, timestamps and ids are masked) into their
    first occurrence followed by `[repeated N times]`, keeping first-appearance order. Blank
    lines are dropped. A line that occurs once is kept as is."""
    first: dict[str, int] = {}
    lines: list[str] = []
    counts: list[int] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        key = repeat_key(line)
        at = first.get(key)
        if at is None:
            first[key] = len(lines)
            lines.append(line.rstrip())
            counts.append(1)
        else:
            counts[at] += 1
    return "\n".join(
        line if n == 1 else f"{line}  [repeated {n} times]" for line, n in zip(lines, counts)
    )


WITHHELD = "[a line addressed to the model was withheld]"


def withhold_instructions(text: str) -> str:
    """`text` with every line that addresses the model ("ignore the above ...") replaced by
    `WITHHELD`: record content is data, and a small model obeys what it reads."""
    if not might_address_model(text) or AIMED_AT_MODEL.search(text) is None:  # the common case
        return text
    return "\n".join(WITHHELD if AIMED_AT_MODEL.search(line) else line for line in text.split("\n"))


def approx_tokens(text: str) -> int:
    """A tokenizer-free estimate: about four characters per token."""
    return (len(text) + 3) // 4


def _flatten(value: Any, prefix: str, out: list[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, list) and value and all(isinstance(v, dict | list) for v in value):
        for i, item in enumerate(value):
            _flatten(item, f"{prefix}[{i}]", out)
    else:
        out.append(f"{prefix}: {value}")


def render_body(record: TelemetryRecord) -> str:
    """The record body as the model reads it: text as is; a VES object as one `path: value`
    line per leaf (fewer tokens than JSON, and readable to a small model)."""
    if isinstance(record.body, str):
        return record.body
    out: list[str] = []
    _flatten(record.body, "", out)
    return "\n".join(out)


def trim_to_tokens(text: str, token_limit: int, count_tokens: TokenCounter | None = None) -> str:
    """Cut `text` to about `token_limit` tokens, keeping its head (2/3) and tail (1/3) and putting
    a `[... N lines omitted ...]` marker where lines were cut. Never cuts silently."""
    if token_limit < 1:
        raise ValueError(f"token_limit must be >= 1, got {token_limit}")
    count = count_tokens or approx_tokens
    if count(text) <= token_limit:
        return text
    lines = text.splitlines()
    if len(lines) == 1:
        return _trim_one_line(text, token_limit, count)
    head, used = lines_within(lines, (token_limit * 2) // 3, count)
    # the tail takes what the head left, less room for the marker line
    tail, _ = lines_within(reversed(lines[len(head):]), token_limit - 8 - used, count)
    tail.reverse()
    omitted = len(lines) - len(head) - len(tail)
    if not head and not tail:  # every line alone is over budget: cut the first one by characters
        return _trim_one_line(lines[0], token_limit, count) + f"\n[... {len(lines) - 1} lines omitted ...]"
    return "\n".join([*head, f"[... {omitted} lines omitted ...]", *tail])


def lines_within(lines: Iterable[str], token_budget: float, count: TokenCounter) -> tuple[list[str], int]:
    """The leading `lines` that fit `token_budget` tokens (a line costs its tokens and one for its
    newline), up to the first that does not, and the tokens they use: the one head-or-tail cut of
    `trim_to_tokens` and of a work-cap selection (pass the lines reversed for a tail)."""
    taken: list[str] = []
    used = 0
    for line in lines:
        cost = count(line) + 1
        if used + cost > token_budget:
            break
        taken.append(line)
        used += cost
    return taken, used


def _trim_one_line(line: str, token_limit: int, count: TokenCounter) -> str:
    chars = max(1, len(line) * token_limit // max(1, count(line)) - 40)
    return f"{line[:chars]} [... {len(line) - chars} characters omitted ...]"




def split_into_chunks(
    text: str, chunk_token_limit: int, count_tokens: TokenCounter | None = None
) -> list[str]:
    """Split `text` at line boundaries into pieces of at most about `chunk_token_limit` tokens
    (a single longer line is split by characters). Every character of `text`'s lines is kept."""
    if chunk_token_limit < 1:
        raise ValueError(f"chunk_token_limit must be >= 1, got {chunk_token_limit}")
    count = count_tokens or approx_tokens
    chunks: list[str] = []
    current: list[str] = []
    used = 0
    for line in text.splitlines():
        pieces = [line]
        if count(line) > chunk_token_limit:
            step = max(1, len(line) * chunk_token_limit // count(line))
            pieces = [line[i:i + step] for i in range(0, len(line), step)]
        for piece in pieces:
            cost = count(piece) + 1
            if current and used + cost > chunk_token_limit:
                chunks.append("\n".join(current))
                current, used = [], 0
            current.append(piece)
            used += cost
    if current:
        chunks.append("\n".join(current))
    return chunks
