"""Offline iteration over a Summarizer: every record in, its result out, in input order.

`telesum summarize` and the benchmarks run records this way; the Kafka worker does not (it
submits and polls, and tracks offsets itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from worker.dispatch import Backpressure
from worker.messages import Summary, TelemetryRecord
from worker.settings.budgets import FULL_BINS_IN_FLIGHT


def results_in_order(summarizer, records: Iterable[TelemetryRecord], *, max_in_flight: int | None = None,
                     ) -> Iterator[tuple[TelemetryRecord, Summary | Exception]]:
    """(record, Summary or the exception that stopped it) in input order. Request ids are input
    indices, so do not mix with `submit` calls from elsewhere. max_in_flight: default
    `FULL_BINS_IN_FLIGHT` bins of sequences, at least 256."""
    if max_in_flight is None:
        max_in_flight = max(256, FULL_BINS_IN_FLIGHT * summarizer.max_seqs_per_bin)
    held: dict[int, TelemetryRecord] = {}
    done: dict[int, Summary | Exception] = {}
    next_out = 0
    for index, record in enumerate(records):
        held[index] = record
        while True:
            try:
                if len(held) - len(done) > max_in_flight:
                    raise Backpressure("too many records in flight")
                summarizer.submit(index, record)
                break
            except Backpressure:
                done.update(summarizer.poll(0.05))
            except Exception as exc:  # bad prompt or record: reported in its place
                done[index] = exc
                break
            while next_out in done:
                yield held.pop(next_out), done.pop(next_out)
                next_out += 1
        done.update(summarizer.poll(0.0))
        while next_out in done:
            yield held.pop(next_out), done.pop(next_out)
            next_out += 1
    while held:
        done.update(summarizer.poll(0.1))
        while next_out in done:
            yield held.pop(next_out), done.pop(next_out)
            next_out += 1


def summarize_all(summarizer, records: Iterable[TelemetryRecord]) -> Iterator[Summary]:
    """Summaries in input order; raises the exception of the first record that failed."""
    for _, result in results_in_order(summarizer, records):
        if isinstance(result, Exception):
            raise result
        yield result
