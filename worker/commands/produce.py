"""`telesum produce`: seeded sample telemetry as JSON Lines to a file or stdout, or to a Kafka topic."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Iterable
from typing import Any

import msgspec

from worker.commands.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_SETTINGS
from worker.messages import Facts, TelemetryRecord
from worker.samples import KINDS, PROFILES, REAL_PROFILES, STORM_PROFILES, iter_generate
from worker.settings.fields import SettingsError
from worker.settings.load import load_settings

log = logging.getLogger(__name__)

_encoder = msgspec.json.Encoder()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--count", type=int, default=100, help="records to produce (default 100)")
    parser.add_argument("--profile", choices=PROFILES + REAL_PROFILES + STORM_PROFILES, default="mixed",
                        help="length profile: mixed (45-130 / 1820-2000 words interleaved), "
                             "uniform (50-1900 words), oam (long tail to ~50k tokens), short (45-130 words); "
                             "or real-shaped: real (host logs in every syslog shape, field-style VES and PM, "
                             "ugly ones included), real-long (whole log files of 2,000-50,000 lines), "
                             "real-formats (network gear, application logs, TS 28.532 PM, VES alarm names); "
                             "storm: VES faults of one element's fault and the elements behind it, keyed by site "
                             "(topology and rules: docs/examples/storm-*.csv)")
    parser.add_argument("--seed", type=int, default=0, help="same seed, same records (default 0)")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help=f"comma-separated record kinds to draw from (default {','.join(KINDS)})")
    parser.add_argument("--rate", type=float, default=0.0, help="records per second (default: as fast as possible)")
    parser.add_argument("-o", "--output", help="JSON Lines file to write, '-' for stdout")
    parser.add_argument("--truth", help="also write each record's ground-truth facts (JSON Lines: id, facts)")
    parser.add_argument("--topic", help="Kafka topic to produce to (instead of --output)")
    parser.add_argument("--bootstrap-servers", default=None,
                        help="Kafka bootstrap servers (default: the kafka.bootstrap_servers setting; the broker's "
                             "security comes from the worker's [kafka] settings too)")
    parser.add_argument("--compression", choices=("none", "gzip"), default="none",
                        help="Kafka producer compression (only gzip needs no extra package)")


def _validate(args: argparse.Namespace) -> tuple[str, ...]:
    """The kinds asked for; raises ValueError naming a bad flag combination."""
    if args.count < 0:
        raise ValueError(f"--count must be >= 0, got {args.count}")
    if args.rate < 0:
        raise ValueError(f"--rate must be >= 0, got {args.rate}")
    if (args.output is None) == (args.topic is None):
        raise ValueError("give exactly one of --output/-o (a file or '-') and --topic")
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"--kinds: unknown {unknown or 'empty list'}; choose from {','.join(KINDS)}")
    return kinds


def paced(items: Iterable, rate: float) -> Iterable:
    """Yields items no faster than `rate` per second (0: no pacing), on a fixed schedule so that
    slow consumers of the iterator do not accumulate drift."""
    if rate <= 0:
        yield from items
        return
    start = time.monotonic()
    for i, item in enumerate(items):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield item


def client_config(args: argparse.Namespace, env=None) -> dict[str, Any]:
    """kafka-python client settings: the worker's `[kafka]` broker and security settings (environment,
    config file, defaults), --bootstrap-servers over them. Raises SettingsError naming a bad setting."""
    config = load_settings(None, env, sections=()).settings.kafka.client_config(args.bootstrap_servers)
    config["client_id"] = "telesum-produce"
    return config


def make_producer(config: dict[str, Any], compression: str):
    """A kafka-python producer with `config` (client_config's): acks from all in-sync replicas,
    idempotent, records up to ~4 MB."""
    from kafka import KafkaProducer

    return KafkaProducer(
        **config,
        acks="all",
        enable_idempotence=True,
        compression_type=None if compression == "none" else compression,
        max_request_size=4 * 1024 * 1024,  # the oam profile's longest records are ~300 KB
        linger_ms=5,
    )


def _to_kafka(pairs: Iterable[tuple[TelemetryRecord, Facts]], args: argparse.Namespace) -> int:
    try:
        config = client_config(args)
    except SettingsError as exc:
        print(f"telesum produce: error: {exc}", file=sys.stderr)
        return EXIT_SETTINGS
    producer = make_producer(config, args.compression)
    futures = []
    try:
        for record, _facts in pairs:
            key = record.source if args.profile in STORM_PROFILES else record.id  # a storm meets in one partition
            futures.append(producer.send(args.topic, key=key.encode(), value=_encoder.encode(record),
                                         headers=[("content-type", b"application/json")]))
        producer.flush()
    finally:
        producer.close()
    failed = [f.exception for f in futures if f.failed()]
    if failed:
        log.error("%d of %d records were not acknowledged; first error: %s", len(failed), len(futures), failed[0])
        return EXIT_FAILED
    log.info("produced %d records to topic %s", len(futures), args.topic)
    return EXIT_OK


def _to_file(pairs: Iterable[tuple[TelemetryRecord, Facts]], args: argparse.Namespace) -> int:
    out = sys.stdout.buffer if args.output == "-" else open(args.output, "wb")  # noqa: SIM115
    count = 0
    try:
        for record, _facts in pairs:
            out.write(_encoder.encode(record) + b"\n")
            count += 1
            if args.rate > 0:
                out.flush()  # a paced stream is read as it is written
    finally:
        if out is not sys.stdout.buffer:
            out.close()
        else:
            out.flush()
    if args.output != "-":
        log.info("wrote %d records to %s", count, args.output)
    return EXIT_OK


def _with_truth(pairs: Iterable[tuple[TelemetryRecord, Facts]], path: str | None):
    if path is None:
        yield from pairs
        return
    with open(path, "wb") as truth:
        for record, facts in pairs:
            truth.write(_encoder.encode({"id": record.id, "facts": facts}) + b"\n")
            yield record, facts


def run(args: argparse.Namespace) -> int:
    """Produce `--count` records; returns 0, 1 when Kafka did not acknowledge every record, 2 on bad flags."""
    try:
        kinds = _validate(args)
    except ValueError as exc:
        print(f"telesum produce: error: {exc}", file=sys.stderr)
        return EXIT_SETTINGS
    pairs = paced(_with_truth(iter_generate(args.count, args.profile, args.seed, kinds), args.truth), args.rate)
    return _to_kafka(pairs, args) if args.topic else _to_file(pairs, args)
