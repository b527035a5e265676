"""`telesum tail`: print summaries and dead letters from the output topics as they arrive.

Reads without joining a consumer group (nothing is committed), from the beginning of the topics,
with isolation level read_committed: an exactly-once worker's aborted transactions (answers whose
offsets were not committed, re-answered after a restart) are never shown. The broker, its security
and the topics are the worker's `[kafka]` settings (environment, config file, defaults); the three
flags below override them.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any

import msgspec

from worker.commands.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_SETTINGS
from worker.settings.fields import SettingsError
from worker.settings.load import load_settings
from worker.messages import DeadLetter, Summary

_summary = msgspec.json.Decoder(Summary)
_dead_letter = msgspec.json.Decoder(DeadLetter)


log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-servers", default=None,
                        help="Kafka bootstrap servers (default: the kafka.bootstrap_servers setting)")
    parser.add_argument("--topic", default=None, help="summary topic (default: the kafka.output_topic setting)")
    parser.add_argument("--dlq-topic", default=None, help="dead-letter topic (default: the kafka.dlq_topic setting)")
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


def consumer_config(args: argparse.Namespace, env=None) -> tuple[str, str, dict[str, Any]]:
    """(summary topic, dead-letter topic, kafka-python client settings): the flags over the
    `[kafka]` settings. Raises SettingsError naming a bad setting."""
    kafka = load_settings(None, env, sections=()).settings.kafka
    return (args.topic or kafka.output_topic, args.dlq_topic or kafka.dlq_topic,
            kafka.client_config(args.bootstrap_servers))


def run(args: argparse.Namespace) -> int:
    from kafka import KafkaConsumer

    if args.count < 0 or args.timeout < 0:
        print("telesum tail: error: --count and --timeout must be >= 0", file=sys.stderr)
        return EXIT_SETTINGS
    try:
        topic, dlq_topic, config = consumer_config(args)
    except SettingsError as exc:
        log.error("%s", exc)
        return EXIT_SETTINGS
    args.dlq_topic = dlq_topic
    consumer = KafkaConsumer(topic, dlq_topic, group_id=None, auto_offset_reset="earliest", enable_auto_commit=False,
                             isolation_level="read_committed", **config)
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
