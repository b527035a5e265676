"""`telesum tail`: print summaries and dead letters from the output topics as they arrive.

Reads without joining a consumer group (nothing is committed), from the beginning of the topics,
with isolation level read_committed: an exactly-once worker's aborted transactions (answers whose
offsets were not committed, re-answered after a restart) are never shown.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import msgspec

from worker.commands.exit_codes import EXIT_FAILED, EXIT_OK
from worker.messages import DeadLetter, Summary

_summary = msgspec.json.Decoder(Summary)
_dead_letter = msgspec.json.Decoder(DeadLetter)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092"),
                        help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS or localhost:9092)")
    parser.add_argument("--topic", default=os.environ.get("TELESUM_OUTPUT_TOPIC", "summaries"),
                        help="summary topic (default: $TELESUM_OUTPUT_TOPIC or 'summaries')")
    parser.add_argument("--dlq-topic", default=os.environ.get("TELESUM_DLQ_TOPIC", "telemetry.dlq"),
                        help="dead-letter topic (default: $TELESUM_DLQ_TOPIC or 'telemetry.dlq')")
    parser.add_argument("--count", type=int, default=0, help="stop after this many answers (0: never)")
    parser.add_argument("--timeout", type=float, default=0.0,
                        help="stop after this many seconds in all (0: never)")


def format_answer(topic: str, value: bytes, dlq_topic: str) -> str:
    """One human-readable block for a summary or a dead letter (raw text if it is neither)."""
    try:
        if topic == dlq_topic:
            d = _dead_letter.decode(value)
            return f"[dead letter] {d.reason}: {d.message} (from {d.topic}/{d.partition}@{d.offset})"
        s = _summary.decode(value)
    except msgspec.DecodeError:
        return f"[{topic}] undecodable message of {len(value)} bytes"
    f = s.facts
    facts = ", ".join(f"{k}={v}" for k, v in (("entity", f.entity), ("severity", f.severity),
                                               ("problem", f.problem)) if v)
    flags = f" hierarchical over {s.chunks} chunks" if s.hierarchical else ""
    return (f"[{s.id}] {s.summary.strip()}\n    facts: {facts or '-'}\n"
            f"    {s.prompt_tokens} prompt + {s.output_tokens} output tokens, {s.timings.total_s:.1f} s{flags}")


def run(args: argparse.Namespace) -> int:
    from kafka import KafkaConsumer

    if args.count < 0 or args.timeout < 0:
        raise SystemExit("--count and --timeout must be >= 0")
    consumer = KafkaConsumer(args.topic, args.dlq_topic, bootstrap_servers=args.bootstrap_servers,
                             group_id=None, auto_offset_reset="earliest", enable_auto_commit=False,
                             isolation_level="read_committed")
    deadline = time.monotonic() + args.timeout if args.timeout else None
    seen = 0
    try:
        while (not args.count or seen < args.count) and (deadline is None or time.monotonic() < deadline):
            for records in consumer.poll(timeout_ms=500).values():
                for msg in records:
                    print(format_answer(msg.topic, msg.value, args.dlq_topic), flush=True)
                    seen += 1
    finally:
        consumer.close()
    if args.count and seen < args.count:
        print(f"telesum tail: {seen} of {args.count} answers before the timeout", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
