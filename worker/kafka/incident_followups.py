"""The model's text of an incident, sent after its `open` as an `update` carrying `model_summary`.

An incident never waits for the model: its events carry the grounded summary written from the alarms.
Beside the per-alarm summaries (the combined worker, where a Summarizer runs), each new incident's
`open` also sends the incident as a record (`incident_record`) to the Summarizer, on a results channel
of its own (`caller=FOLLOW_UPS`: the summaries loop never receives these results, nor this loop theirs).
When the result comes back and the model wrote beyond the grounded opening, the incident loop publishes
`room.follow_up(...)`: an `update` with the incident's next sequence number, `model_summary` (the model's
words after the opening) and no inputs, in its next transaction. Nothing is sent when the model stopped at the opening, when the request
failed, or when the incident was resolved or merged meanwhile (its `resolve` stays its last event).

Bounds: at most `max_in_flight` requests at once, so follow-ups never crowd out the per-alarm work; an
`open` beyond it (or one the Summarizer refuses with Backpressure) gets no follow-up, counted and logged.
Only under exactly-once with a state topic: the sequence the follow-up takes is in the room's snapshot
committed with it, so a new owner goes on with the same numbers. Recomputing a room from its inputs
could not know of follow-ups and would send their sequence numbers again. A request in flight when the
worker stops or crashes is lost (no follow-up for that incident); the inputs and sequences are unaffected.

Only from the incident loop's thread.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from kafka import TopicPartition

from worker.dispatch import Backpressure
from worker.incidents.text import incident_record
from worker.messages import Facts, IncidentEvent, Summary, TelemetryRecord

log = logging.getLogger(__name__)

# The Summarizer's results channel for incident follow-ups (`submit(..., caller=)`, `poll(..., caller=)`).
FOLLOW_UPS = "incident-follow-ups"
# A full bound is said in the log at most this often (with the count since start).
_DROP_LOG_S = 30.0


# The grounded opening the Summarizer's prompt ended with, for a record and its facts
# (`worker.prompts.answer_opening`, given by the caller: the prompts sit beside this layer, not below it).
Opening = Callable[[TelemetryRecord, Facts], str]


def model_text(record: TelemetryRecord, summary: Summary, opening_of: Opening) -> str | None:
    """The model's own words in the summary of `incident_record`'s record: what follows the grounded
    opening (which only quotes the event's summary back); None when the model stopped at the opening,
    with nothing to add to the event's own summary."""
    text = summary.summary.strip()
    opening = opening_of(record, summary.facts).strip()
    beyond = (text[len(opening):] if text.startswith(opening) else text).strip()
    return beyond if beyond.strip(" \t.;,") else None


@dataclass
class FollowUpStats:
    requested: int = 0   # submitted to the Summarizer
    dropped: int = 0     # an `open` that got no request: the bound was full or the Summarizer refused
    written: int = 0     # came back with text beyond the grounded opening
    empty: int = 0       # came back with the grounded opening only: nothing sent
    failed: int = 0      # came back as an exception
    stale: int = 0       # came back for a partition no longer owned, or an incident no longer open


class FollowUps:
    """The follow-up requests in flight, one per incident, and their results."""

    def __init__(self, summarizer, max_in_flight: int, opening: Opening) -> None:
        """summarizer: anything with `submit(request_id, record, *, caller=)` and `poll(timeout, *, caller=)`;
        opening: the grounded opening its summaries begin with (`worker.prompts.answer_opening`)."""
        self.summarizer = summarizer
        self.opening = opening
        self.max_in_flight = max_in_flight
        self.stats = FollowUpStats()
        self._ids = itertools.count()
        # request id -> (partition, incident id, the record asked about)
        self._in_flight: dict[Hashable, tuple[TopicPartition, str, TelemetryRecord]] = {}
        self._last_drop_log = float("-inf")

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def request(self, tp: TopicPartition, event: IncidentEvent) -> bool:
        """Ask the model for `event`'s incident; False (counted) when the bound is full or the Summarizer
        refuses."""
        if len(self._in_flight) >= self.max_in_flight:
            self._drop(event, f"{self.max_in_flight} in flight")
            return False
        request_id = (FOLLOW_UPS, next(self._ids))
        record = incident_record(event)
        try:
            self.summarizer.submit(request_id, record, caller=FOLLOW_UPS)
        except (Backpressure, RuntimeError) as exc:  # full, or closing: the incident goes without
            self._drop(event, f"{type(exc).__name__}: {exc}")
            return False
        self._in_flight[request_id] = (tp, event.incident_id, record)
        self.stats.requested += 1
        return True

    def take(self) -> list[tuple[TopicPartition, str, str]]:
        """Results back since the last call (not waiting): (partition, incident id, model text) for each
        whose model wrote beyond the grounded opening."""
        out = []
        for request_id, result in self.summarizer.poll(0.0, caller=FOLLOW_UPS):
            asked = self._in_flight.pop(request_id, None)
            if asked is None:  # forgotten: its partition was revoked
                self.stats.stale += 1
                continue
            tp, incident_id, record = asked
            if isinstance(result, BaseException):
                self.stats.failed += 1
                log.info("incidents: the model's text of %s failed: %s: %s", incident_id, type(result).__name__, result)
                continue
            text = model_text(record, result, self.opening)
            if text is None:
                self.stats.empty += 1
                continue
            self.stats.written += 1
            out.append((tp, incident_id, text))
        return out

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Partitions no longer owned: their results are dropped when they come back."""
        gone = set(partitions)
        for request_id in [r for r, (tp, _, _) in self._in_flight.items() if tp in gone]:
            del self._in_flight[request_id]

    def _drop(self, event: IncidentEvent, why: str) -> None:
        self.stats.dropped += 1
        now = time.monotonic()
        if now - self._last_drop_log >= _DROP_LOG_S:
            self._last_drop_log = now
            log.warning("incidents: no model text for %s (%s); %d incidents went without one since start "
                        "(TELESUM_INCIDENT_FOLLOW_UPS bounds the requests in flight)", event.incident_id, why,
                        self.stats.dropped)
