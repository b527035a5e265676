"""Every prompt the worker sends to the model, in one place.

The model is handed the extracted facts first and the record second (repeated lines collapsed,
trimmed to a token budget with a visible marker), and asked for what an operator acts on: one or
two sentences naming the element, the problem, the severity and the time. Small models copy log
lines when left alone; facts up front and an explicit answer shape keep them on task.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from worker.messages import Facts, TelemetryRecord

TokenCounter = Callable[[str], int]

SYSTEM_PROMPT = (
    "You are a network operations assistant. For an on-call operator you summarise telecom "
    "telemetry (alarms, logs, performance counters, traces) in one plain sentence that names the "
    "affected network element, the problem, its severity and when it happened. "
    "Use the facts you are given; do not copy log lines, do not invent values, no lists."
)
MAX_PROMPT_DETAILS = 4  # more detail lines than this drown the core facts for a small model
# The answer is one sentence on one line; what a small model writes on the next line is commentary
# ("The above message is a summary ...") or a stray log line. Generation stops there; the text
# before is kept.
STOP_STRINGS = ("\n",)
# Greedy decoding of the 4-bit 135M model sometimes loops ("2000000...", "-DU-0114-DU-0114...");
# a penalty on tokens the summary already holds breaks the loop (the prompt's tokens are not penalised).
REPETITION_PENALTY = 1.1
CHUNK_SYSTEM_PROMPT = (
    "You are a network operations assistant. You read one part of a long telecom log and note, "
    "in one or two plain sentences, which network elements had which problems, how severe, and "
    "when. Do not copy log lines."
)
ANSWER_SHAPE = "Answer like: \"<element> reported <problem> (<severity>) at <time>; <impact or count>.\""

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


def _repeat_key(line: str) -> str:
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
        key = _repeat_key(line)
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
    head_budget = (token_limit * 2) // 3
    head: list[str] = []
    used = 0
    for line in lines:
        cost = count(line) + 1
        if used + cost > head_budget:
            break
        head.append(line)
        used += cost
    tail: list[str] = []
    for line in reversed(lines[len(head):]):
        cost = count(line) + 1
        if used + cost > token_limit - 8:  # room for the marker line
            break
        tail.append(line)
        used += cost
    tail.reverse()
    omitted = len(lines) - len(head) - len(tail)
    if not head and not tail:  # every line alone is over budget: cut the first one by characters
        return _trim_one_line(lines[0], token_limit, count) + f"\n[... {len(lines) - 1} lines omitted ...]"
    return "\n".join([*head, f"[... {omitted} lines omitted ...]", *tail])


def _trim_one_line(line: str, token_limit: int, count: TokenCounter) -> str:
    chars = max(1, len(line) * token_limit // max(1, count(line)) - 40)
    return f"{line[:chars]} [... {len(line) - chars} characters omitted ...]"


def render_facts(facts: Facts) -> str:
    """The facts as `- name: value` lines, with the same names for every kind of record."""
    rows = [
        ("element", facts.entity),
        ("problem", facts.problem),
        ("severity", facts.severity),
        ("first seen", facts.first_seen),
        ("last seen", facts.last_seen if facts.last_seen != facts.first_seen else None),
        ("events", str(facts.event_count) if facts.event_count is not None else None),
    ]
    lines = [f"- {name}: {value}" for name, value in rows if value]
    lines += [f"- {key}: {value}" for key, value in facts.details.items()]
    if facts.facts_error:
        lines.append(f"- note: the record is partly malformed ({facts.facts_error})")
    return "\n".join(lines) if lines else "- none could be extracted"


def _describe(record: TelemetryRecord) -> str:
    kinds = {"ves": "VES event", "syslog": "syslog messages", "pm": "3GPP PM report",
             "trace": "signalling trace", "text": "log text"}
    return kinds.get(record.kind, record.kind)


def _collapsed(record: TelemetryRecord) -> str:
    return " (repeated lines collapsed)" if record.kind in COMPRESSED_KINDS else ""


def _time_span(facts: Facts) -> str | None:
    if facts.first_seen and facts.last_seen and facts.last_seen != facts.first_seen:
        return f"{facts.first_seen} to {facts.last_seen}"
    return facts.first_seen or facts.last_seen


def render_key_facts(facts: Facts, max_details: int = MAX_PROMPT_DETAILS) -> str:
    """The facts for a one-pass prompt: up to `max_details` details first, then element, problem,
    severity, time and count last, where a small model reads them just before it answers."""
    details = [f"- {k}: {v}" for k, v in list(facts.details.items())[:max_details]]
    core = [
        ("element", facts.entity),
        ("problem", facts.problem),
        ("severity", facts.severity),
        ("time", _time_span(facts)),
        ("events", str(facts.event_count) if facts.event_count is not None else None),
    ]
    lines = details + [f"- {name}: {value}" for name, value in core if value]
    if facts.facts_error:
        lines.append(f"- note: the record is partly malformed ({facts.facts_error})")
    return "\n".join(lines) if lines else "- none could be extracted"


def _instruction(facts: Facts) -> str:
    span = _time_span(facts)
    parts = [f"the element {facts.entity}" if facts.entity else "the affected element",
             f"what went wrong ({facts.problem})" if facts.problem else "what went wrong",
             f'the severity as "severity {facts.severity}"' if facts.severity else "how severe it is",
             f"the time ({span})" if span else "when it happened"]
    start = f" Start with {facts.entity}." if facts.entity else ""
    return ("Summarise it in one sentence of your own words that names " + ", ".join(parts[:-1])
            + f" and {parts[-1]}.{start}")


def _user_message(record: TelemetryRecord, facts: Facts, body: str) -> str:
    return (f"Record ({_describe(record)}{_collapsed(record)}):\n{body}\n\n"
            f"Facts:\n{render_key_facts(facts)}\n\n{_instruction(facts)}")


# Worked examples per kind: a small model copies the shape of an answer (element and severity
# first, then the problem and the time) far better than it follows a description of it. Per kind so a PM report
# is not answered in a syslog example's words; PM gets a fault and a quiet report, else the model
# copies the fault into quiet reports. Invented elements and problems that the generated telemetry
# never has, so a copied phrase cannot pass for the right answer.
def _example(kind: str, body: str, facts: Facts, answer: str) -> tuple[TelemetryRecord, Facts, str]:
    return TelemetryRecord(id=f"example-{kind}", kind=kind, body=body), facts, answer


_EXAMPLES = {
    "syslog": (_example(
        "syslog",
        "<132>1 2026-03-02T08:14:05.120Z gNB-0007 sfpd 311 SFP - SFP module in port 2 removed  [repeated 3 times]\n"
        "<134>1 2026-03-02T08:14:30.004Z gNB-0007 oamd 120 HEARTBEAT - heartbeat sent to OSS, sequence 52",
        Facts(entity="gNB-0007", severity="minor", problem="SFP module in port 2 removed",
              first_seen="2026-03-02T08:14:05Z", last_seen="2026-03-02T08:14:30Z", event_count=4,
              details={"app": "sfpd"}),
        "gNB-0007, severity minor: SFP module in port 2 removed, 3 times between 08:14 and 08:15 UTC "
        "on 2026-03-02."),),
    "trace": (_example(
        "trace",
        "2026-03-02T08:14:05.120Z gNB-0007 -> AMF-09 NGAP PagingRequest ue=5521\n"
        "2026-03-02T08:14:06.400Z AMF-09 -> gNB-0007 NGAP PagingReject ue=5521 cause=misc:om-intervention  "
        "[repeated 2 times]",
        Facts(entity="gNB-0007", severity="minor", problem="paging rejected: O&M intervention (2 rejects)",
              first_seen="2026-03-02T08:14:05Z", last_seen="2026-03-02T08:14:06Z", event_count=3,
              details={"elements": "gNB-0007, AMF-09"}),
        "gNB-0007, severity minor: paging rejected by AMF-09 for an O&M intervention, 2 rejects at "
        "08:14 UTC on 2026-03-02."),),
    "pm": (_example(
        "pm",
        '<managedElement localDn="ManagedElement=eNB-0007" userLabel="eNB-0007"/>\n'
        '<measType p="1">PAG.DiscardedNbr</measType>\n[... 40 lines omitted ...]',
        Facts(entity="eNB-0007", severity="minor", problem="high paging discard count 812 on EUtranCell=2",
              first_seen="2026-03-02T08:00:00Z", last_seen="2026-03-02T08:15:00Z", event_count=3,
              details={"granularityPeriod": "900 s", "measuredObjects": "3"}),
        "eNB-0007, severity minor: a high paging discard count of 812 on EUtranCell=2 from 08:00 to "
        "08:15 UTC on 2026-03-02."),
    _example(
        "pm",
        '<managedElement localDn="ManagedElement=eNB-0009" userLabel="eNB-0009"/>\n'
        '<measType p="1">PAG.DiscardedNbr</measType>\n[... 40 lines omitted ...]',
        Facts(entity="eNB-0009", severity="info", problem="paging counters as expected",
              first_seen="2026-03-02T09:00:00Z", last_seen="2026-03-02T09:15:00Z", event_count=3,
              details={"granularityPeriod": "900 s", "measuredObjects": "3"}),
        "eNB-0009, severity info: paging counters as expected on all 3 cells from 09:00 to 09:15 UTC "
        "on 2026-03-02.")),
    "ves": (_example(
        "ves",
        "event.commonEventHeader.domain: fault\nevent.commonEventHeader.sourceName: gNB-0007-CU\n"
        "event.faultFields.specificProblem: Battery backup discharging\nevent.faultFields.eventSeverity: MINOR",
        Facts(entity="gNB-0007-CU", severity="minor", problem="Battery backup discharging",
              first_seen="2026-03-02T08:14:05Z", details={"domain": "fault"}),
        "gNB-0007-CU, severity minor: battery backup discharging at 08:14 UTC on 2026-03-02."),),
}
_EXAMPLES["text"] = _EXAMPLES["syslog"]

# PM XML and VES objects are long and their numbers are already in the facts (counters, rates,
# fields): the model gets only their head and tail, so it does not lose the element among counters.
STRUCTURED_BODY_TOKENS = 160
STRUCTURED_KINDS = frozenset({"pm", "ves"})


def build_messages(
    record: TelemetryRecord,
    facts: Facts,
    body_token_limit: int | None = None,
    count_tokens: TokenCounter | None = None,
) -> list[dict[str, str]]:
    """Chat messages for a one-pass summary: system, the worked examples of the record's kind
    (user + assistant each), then the record (de-duplicated; trimmed to `body_token_limit` tokens by
    `count_tokens` or chars/4 when a limit is given, PM and VES bodies always to at most
    `STRUCTURED_BODY_TOKENS`), its facts and an instruction that repeats the facts to carry."""
    body = render_body(record)
    if record.kind in COMPRESSED_KINDS:
        body = compress_repeats(body)
    if record.kind in STRUCTURED_KINDS:
        body_token_limit = min(body_token_limit or STRUCTURED_BODY_TOKENS, STRUCTURED_BODY_TOKENS)
    if body_token_limit is not None:
        body = trim_to_tokens(body, body_token_limit, count_tokens)
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    for example, example_facts, answer in _EXAMPLES.get(record.kind, _EXAMPLES["text"]):
        messages.append({"role": "user", "content": _user_message(example, example_facts, render_body(example))})
        messages.append({"role": "assistant", "content": answer})
    messages.append({"role": "user", "content": _user_message(record, facts, body)})
    return messages


def build_chunk_messages(
    record: TelemetryRecord, chunk_text: str, index: int, total: int
) -> list[dict[str, str]]:
    """Chat messages summarising part `index` (1-based) of `total` of a record too long for one
    pass. Raises ValueError when index is outside 1..total."""
    if not 1 <= index <= total:
        raise ValueError(f"chunk index must be in 1..{total} (1-based), got {index}")
    user = (
        f"Record type: {_describe(record)}.\n"
        f"Part {index} of {total} of the record{_collapsed(record)}:\n"
        f"{compress_repeats(chunk_text) if record.kind in COMPRESSED_KINDS else chunk_text}\n\n"
        "In one or two sentences, say which elements had which problems in this part, "
        "how severe, and when."
    )
    return [{"role": "system", "content": CHUNK_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def build_merge_messages(
    record: TelemetryRecord, facts: Facts, chunk_summaries: list[str]
) -> list[dict[str, str]]:
    """Chat messages merging the summaries of a long record's parts (in order) and its facts into
    one summary. Raises ValueError on an empty list."""
    if not chunk_summaries:
        raise ValueError("build_merge_messages needs at least one chunk summary")
    parts = "\n".join(f"{i}. {s.strip()}" for i, s in enumerate(chunk_summaries, start=1))
    user = (
        f"Record type: {_describe(record)}.\nFacts extracted from it:\n{render_facts(facts)}\n\n"
        f"Summaries of its {len(chunk_summaries)} parts, in order:\n{parts}\n\n"
        f"Combine them into one summary for the on-call operator in one or two sentences. "
        f"{ANSWER_SHAPE}"
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


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
