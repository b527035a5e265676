"""`telesum summarize INPUT -o OUTPUT`: summarise a JSON Lines file offline, resumably.

One output line (a `Summary`) per input record, in input order. Ids already in OUTPUT are skipped
and new lines appended, so an interrupted run continues where it stopped. A line that is not a
valid record, or a record that could not be summarised, is reported with its line number and
written to the rejects file; nothing is dropped silently.
"""

from __future__ import annotations

import argparse
import collections
import logging
from collections.abc import Iterator
from pathlib import Path

import msgspec

from worker.commands.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_SETTINGS
from worker.commands.startup import exit_code_of, read_settings, start_summarizer
from worker.inputs.envelope import decode_envelope
from worker.messages import InvalidRecord, ReasonCode, TelemetryRecord, failure_reason
from worker.settings.load import add_arguments as add_setting_arguments

log = logging.getLogger(__name__)

# The settings this command reads (flags, environment, file): the engine's, shared with
# `telesum worker`, and logging.
SECTIONS = ("engine", "log")


class Reject(msgspec.Struct, frozen=True):
    """One input line that produced no summary, and why (the offline form of a dead letter)."""

    line: int
    reason: ReasonCode          # the dead letters' codes
    message: str
    original: str               # the line as read (invalid UTF-8 replaced)
    id: str | None = None
    stage: str = "decode"       # "decode": skipped on resume; "summarize": retried on resume


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", type=Path, help="JSON Lines file, one TelemetryRecord per line")
    parser.add_argument("-o", "--output", type=Path, required=True, help="JSON Lines of summaries (appended)")
    parser.add_argument("--rejects", type=Path, default=None,
                        help="bad lines and failed records (default: OUTPUT + '.rejects.jsonl')")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_setting_arguments(parser, SECTIONS)


def read_done(output: Path) -> set[str]:
    """Ids already summarised in OUTPUT. A torn last line (a crash mid-write) is cut off."""
    if not output.exists():
        return set()
    data = output.read_bytes()
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
        log.warning("%s: dropping a torn last line (%d bytes) left by an interrupted run", output, len(data) - keep)
        with output.open("r+b") as fh:
            fh.truncate(keep)
        data = data[:keep]
    done = set()
    for n, line in enumerate(data.splitlines(), start=1):
        if line.strip():
            try:
                done.add(msgspec.json.decode(line, type=dict)["id"])
            except (msgspec.DecodeError, KeyError, TypeError) as exc:
                raise ValueError(f"{output}:{n}: not a summary line ({exc}); refusing to append to it") from exc
    return done


def read_rejected_lines(rejects: Path) -> set[int]:
    """Line numbers rejected at decode time by an earlier run (skipped, not reported again)."""
    if not rejects.exists():
        return set()
    out = set()
    for line in rejects.read_bytes().splitlines():
        try:
            r = msgspec.json.decode(line, type=Reject)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue  # a torn line from an interrupted run: that line is simply checked again
        if r.stage == "decode":
            out.add(r.line)
    return out


def iter_records(path: Path, done: set[str], rejected: set[int], reject) -> Iterator[tuple[int, TelemetryRecord]]:
    """(line number, record) for each valid, not yet summarised line; bad lines go to `reject`."""
    with path.open("rb") as fh:
        for n, raw in enumerate(fh, start=1):
            raw = raw.rstrip(b"\r\n")
            if not raw.strip() or n in rejected:
                continue
            try:
                record = decode_envelope(raw)  # the worker's lenient envelope
            except InvalidRecord as exc:
                reject(Reject(n, exc.reason, exc.message, raw.decode("utf-8", "replace")))
                continue
            if record.id not in done:
                yield n, record


def count_lines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for line in fh if line.strip())


def run(args: argparse.Namespace) -> int:
    return exit_code_of(_summarize, args)


def _summarize(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    loaded_settings = read_settings(args, SECTIONS)
    if not args.input.is_file():
        log.error("input %s does not exist", args.input)
        return EXIT_SETTINGS
    rejects_path = args.rejects or args.output.with_name(args.output.name + ".rejects.jsonl")
    done = read_done(args.output)
    rejected_before = read_rejected_lines(rejects_path)
    summarizer = start_summarizer(loaded_settings, "summarize", input=str(args.input),
                                  output=str(args.output)).summarizer
    total = count_lines(args.input)
    counts = {"summarised": 0, "rejected": 0}
    line_numbers: collections.deque[int] = collections.deque()  # of records in flight, input order
    with args.output.open("ab") as out, rejects_path.open("ab") as rej, \
            tqdm(total=total, initial=len(done) + len(rejected_before), unit="rec",
                 disable=args.no_progress, desc="summarise") as bar:

        def reject(r: Reject) -> None:
            log.warning("%s:%d: %s: %s", args.input, r.line, r.reason, r.message)
            rej.write(msgspec.json.encode(r) + b"\n")
            rej.flush()
            counts["rejected"] += 1
            bar.update(1)

        def records() -> Iterator[TelemetryRecord]:
            for n, record in iter_records(args.input, done, rejected_before, reject):
                line_numbers.append(n)
                yield record

        summarizer.start()
        try:
            for record, result in summarizer.results_in_order(records()):
                n = line_numbers.popleft()  # results come back in input order
                if isinstance(result, Exception):
                    reject(Reject(n, *failure_reason(result),
                                  msgspec.json.encode(record).decode(), id=record.id, stage="summarize"))
                    continue
                out.write(msgspec.json.encode(result) + b"\n")
                out.flush()
                counts["summarised"] += 1
                bar.update(1)
        finally:
            summarizer.close(drain=False)
    log.info("%d summarised, %d skipped (already done), %d rejected (see %s)", counts["summarised"],
             len(done), counts["rejected"], rejects_path)
    stats = summarizer.stats()
    if stats.prefix_lookup_tokens:
        log.info("prefix cache: %.1f %% of prompt tokens served from it (%d of %d), %d evictions",
                 100 * stats.prefix_hit_tokens / stats.prefix_lookup_tokens, stats.prefix_hit_tokens,
                 stats.prefix_lookup_tokens, stats.prefix_evictions)
    return EXIT_FAILED if counts["rejected"] else EXIT_OK
