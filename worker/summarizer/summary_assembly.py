"""One record's progress through the engine and the `Summary` assembled from it.

The Summarizer owns the threads and the engine; this unit owns what a record accumulates while its
sequences run (tokens, timings, a long record's pieces) and how a finished sequence becomes a
Summary: the model's text with any missed stop cut, the grounded opening the prompt ended with put
back in front, and the narrative checked against the record's facts. That prose is the costly part
(~0.25 ms of Python a record): `summary_prose` runs where the preprocessing pool runs it, in a
process of its own off the GPU loop's GIL; `assemble_summary` then only fills the fields.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from worker.engine.sequence import Sequence
from worker.engine.stops import first_stop
from worker.facts.agreement import check_narrative
from worker.messages import Facts, NarrativeCheck, Summary, TelemetryRecord, Timings
from worker.prompts.opening import answer_opening, with_opening


@dataclass(eq=False)
class RecordRequest:
    request_id: Hashable
    record: TelemetryRecord
    facts: Facts | None  # set once the record is prepared
    submitted_at: float
    hierarchical: bool = False
    pieces: list[str | None] = field(default_factory=list)   # this level's summaries, in order
    todo: collections.deque[tuple[list[int], int]] = field(default_factory=collections.deque)  # (prompt, piece)
    in_flight: int = 0                                        # pieces in the engine now
    selection: str | None = None                              # set when over the work cap
    prompt_tokens: int = 0
    output_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    queued_s: float | None = None
    num_chunks: int = 1
    failed: bool = False

    def count_sequence(self, seq: Sequence) -> None:
        """Add a finished sequence's timings and output tokens (queued: the first sequence's)."""
        queued, prefill, decode = seq.timings()
        self.queued_s = queued if self.queued_s is None else self.queued_s
        self.prefill_s += prefill
        self.decode_s += decode
        self.output_tokens += len(seq.output)


@dataclass(frozen=True)
class Generated:
    """What a finished sequence generated, as much as its summary's text needs (small: it goes to a
    preprocessing process). `text`: already decoded and cut at a stop string (the stop check decoded
    it), else None and `output` is decoded."""
    text: str | None
    output: list[int]
    stop: tuple[str, ...]

    @classmethod
    def of(cls, seq: Sequence) -> Generated:
        return cls(seq.text, list(seq.output), tuple(seq.params.stop))

    def text_by(self, decode: Callable[[list[int]], str]) -> str:
        """The generated text, cut at the first of the stop strings."""
        if self.text is not None:
            return self.text
        text = decode(self.output)  # the stop check only decodes on trigger tokens: cut any stop it missed
        cut = first_stop(text, self.stop)
        return text if cut < 0 else text[:cut]


def finished_text(seq: Sequence, decode: Callable[[list[int]], str]) -> str:
    """The text a finished sequence generated, cut at the first of its stop strings."""
    return Generated.of(seq).text_by(decode)


def summary_prose(record: TelemetryRecord, facts: Facts, generated: Generated,
                  decode: Callable[[list[int]], str]) -> tuple[str, NarrativeCheck]:
    """A summary's text (the answer's opening the prompt ended with, `worker.prompts.opening`, then
    the model's words) and how far it agrees with the record's facts."""
    text = with_opening(answer_opening(record, facts), generated.text_by(decode))
    return text, check_narrative(text, facts, record)


def assemble_summary(req: RecordRequest, text: str, narrative: NarrativeCheck, model: str) -> Summary:
    """The Summary of a finished request, its total time counted to now."""
    return Summary(
        id=req.record.id, summary=text, model=model, prompt_tokens=req.prompt_tokens,
        output_tokens=req.output_tokens, hierarchical=req.hierarchical, chunks=req.num_chunks,
        selection=req.selection,
        facts=req.facts, timings=Timings(queued_s=req.queued_s or 0.0, prefill_s=req.prefill_s,
                                         decode_s=req.decode_s,
                                         total_s=time.perf_counter() - req.submitted_at),
        narrative=narrative)
