"""Message types: the one source of truth for what crosses Kafka and files (see schemas/).

What arrives on Kafka is turned into `TelemetryRecord`s by `worker.inputs` (the envelope, VES,
syslog, log-shipper JSON, OTLP), which raises `InvalidRecord` with a machine-readable reason code.
"""

from __future__ import annotations

import typing
from typing import Any, Literal

import msgspec

Kind = Literal["ves", "syslog", "pm", "trace", "text"]
# Why a record got a dead letter (or an offline reject) instead of a summary: one vocabulary for
# the input decoders, the Summarizer's failures, the publish path and `telesum summarize`.
ReasonCode = Literal[
    "empty_record",      # a message with no bytes
    "invalid_json",      # not JSON
    "invalid_msgpack",   # content-type says MessagePack, but it is not
    "invalid_protobuf",  # meant as an OTLP protobuf request, but it is not one
    "invalid_utf8",      # not UTF-8 text
    "invalid_field",     # decodes, but a field is missing, empty or of the wrong type
    "too_deep",          # JSON, MessagePack or protobuf nested deeper than a decoder follows
    "too_many_items",    # a batch's items beyond the per-message limit (each dead letter carries its items)
    "batch_too_large",   # a compressed Kafka batch that expands beyond the limit: never decompressed whole
    "empty_body",        # a record with nothing to summarise
    "too_long",          # over the model's limits, or over the per-record work cap (policy dead_letter)
    "summarize_failed",  # the engine failed on this record
    "out_of_memory",     # the GPU ran out of memory for this record even prefilled alone in the smallest chunks
    "output_too_large",  # the answer could not be published (over the producer's size limit)
    "internal_error",    # an unexpected exception while this message became records: a telesum bug, logged
]


class TelemetryRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """One piece of telemetry to summarise. `body` is text, or a VES event object for kind 'ves'."""

    id: str
    kind: Kind
    body: str | dict[str, Any]
    source: str = ""
    timestamp: str | None = None
    attributes: dict[str, str] = {}

    def body_text(self) -> str:
        """The body as text: VES objects are rendered as compact JSON."""
        if isinstance(self.body, str):
            return self.body
        return msgspec.json.encode(self.body).decode()


class ProblemGroup(msgspec.Struct, frozen=True, omit_defaults=True):
    """One of a record's problems: a log template or an event type, how often, where and when."""

    text: str
    count: int = 1
    severity: str | None = None
    element: str | None = None
    first_seen: str | None = None
    last_seen: str | None = None


class Facts(msgspec.Struct, frozen=True, omit_defaults=True):
    """Structured facts extracted deterministically from a record (same names for every kind).
    `problems` lists the dominant problems of a record holding many events, worst first;
    `year_source` says where the year came from when the record's times carry none
    ("record timestamp" or "receive time")."""

    entity: str | None = None
    severity: str | None = None
    problem: str | None = None
    first_seen: str | None = None
    last_seen: str | None = None
    event_count: int | None = None
    details: dict[str, str] = {}
    facts_error: str | None = None
    problems: list[ProblemGroup] = []
    year_source: str | None = None


class Timings(msgspec.Struct, frozen=True):
    """Seconds spent per phase for one record."""

    queued_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    total_s: float = 0.0


class NarrativeCheck(msgspec.Struct, frozen=True, omit_defaults=True):
    """Whether a summary's prose agrees with its record's facts (the facts come from parsers and
    are what to trust). `agrees` is all four checks together; `issues` says what disagreed."""

    agrees: bool
    names_element: bool
    names_problem: bool
    severity_consistent: bool
    only_known_elements: bool
    issues: list[str] = []


class Summary(msgspec.Struct, frozen=True):
    """The answer for one input record. `narrative` says whether the prose agrees with `facts`."""

    id: str
    summary: str
    model: str
    prompt_tokens: int
    output_tokens: int
    key: str | None = None
    hierarchical: bool = False
    chunks: int = 1
    facts: Facts = Facts()
    timings: Timings = Timings()
    narrative: NarrativeCheck | None = None
    selection: str | None = None  # set when over the work cap: what of the record was summarised


class DeadLetter(msgspec.Struct, frozen=True):
    """A record that could not be summarised, with why. `original` holds the raw bytes."""

    reason: ReasonCode  # machine-readable code
    message: str  # for a human
    original: bytes
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    key: str | None = None


IncidentEventKind = Literal["open", "update", "resolve"]


class RootCause(msgspec.Struct, frozen=True, omit_defaults=True):
    """An incident's root-cause alarm and why it was chosen. `input` is the input it came from
    ({topic, partition, offset} on Kafka); `rootCauseIndicator` as in 3GPP TS 32.111's Alarm IRP."""

    element: str
    alarm_type: str
    time: str
    reason: str
    input: Any = None
    rootCauseIndicator: bool = True


class IncidentEvent(msgspec.Struct, frozen=True, omit_defaults=True):
    """One event of an incident (correlated alarms): `open` at once, `update`s batched, one `resolve`
    (also when merged: `merged_into` names the incident that took its alarms). `inputs` lists the
    inputs this event adds (every input is in exactly one incident's events); `correlatedNotifications`
    (3GPP) those of them that are not the root cause. Times are the alarms' own, ISO UTC. An `update`
    carrying `model_summary` is the model's text of the incident, sent after its `open` when the model
    wrote beyond the grounded opening: it lists no inputs."""

    event: IncidentEventKind
    incident_id: str
    sequence: int                      # 1 for the open, then one more per event: de-duplicates a replay
    time: str                          # the event time at which this event was decided
    root_cause: RootCause
    summary: str                       # the grounded opening, written from the alarms, never by the model
    grouping: str                      # "rules+topology", "learned+topology", "topology", "rules", "learned"
                                       # or "element+time"
    elements: list[str]
    counts: dict[str, int]             # alarms per type, repeats included
    alarms: int
    active: int                        # raised and not cleared
    first_time: str
    last_time: str
    inputs: list[Any] = []
    correlatedNotifications: list[Any] = []
    merged_into: str | None = None
    absorbed: list[str] = []           # incidents merged into this one since its last event
    model_summary: str | None = None   # the model's text of the incident (a follow-up update only)


class InvalidRecord(ValueError):
    """Raised by the input decoders (`worker.inputs`); `reason` is a stable code for the dead letter.
    `original`: the bytes of the part of a batch message it answers (its dead letter carries those,
    not the whole message again); None for the message as a whole."""

    def __init__(self, reason: ReasonCode, message: str, original: bytes | None = None) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
        self.original = original


def failure_reason(error: BaseException) -> tuple[ReasonCode, str]:
    """(reason code, message) for an exception raised while decoding or summarising one record.

    A failure class states its own code as the class attribute `reason` (ContextTooLong,
    OutOfMemory, RecordTooLong, the dispatcher's SequenceTooLong); any other error is
    `summarize_failed`."""
    if isinstance(error, InvalidRecord):
        return error.reason, error.message
    code = getattr(type(error), "reason", None)
    if code not in _REASON_CODES:
        code = "summarize_failed"
    return code, f"{type(error).__name__}: {error}"


_REASON_CODES = frozenset(typing.get_args(ReasonCode))
