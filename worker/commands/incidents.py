"""`telesum incidents learn`: the cause→effect graph between alarm types, learned from an alarm history.

    telesum incidents learn [FILE ...] [--topic T] [--topology F] -o rules.csv [--report report.json]

The history is files of message values (JSON Lines: one message as its producer sent it per line, any
input format the worker reads) or the retained messages of a Kafka topic (read without a consumer
group, read_committed, from `--since` or the beginning to the end offsets at start or `--until`).
Alarms are read exactly as the incident room reads them (`worker.kafka.incident_outputs.read_message`),
clears skipped, and given in event-time order to the same learner the worker runs live
(`worker/incidents/learn.py`). The rules file is what `TELESUM_INCIDENT_RULES` and
`TELESUM_INCIDENT_LEARNED_RULES` read; the report holds each edge's evidence, the counts and the time
taken. The broker, its security and the input format are the worker's settings.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

from worker.commands.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_SETTINGS
from worker.settings.fields import SettingsError

log = logging.getLogger(__name__)


class LearnInputError(ValueError):
    """An input the command cannot read; the message names it."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="incidents_command", required=True)
    learn = sub.add_parser("learn", help="learn the cause->effect graph between alarm types from an alarm history",
                           description=__doc__.splitlines()[0])
    learn.add_argument("files", nargs="*", type=Path, metavar="FILE",
                       help="JSON Lines files of message values, one message per line")
    learn.add_argument("--topic", default=None, help="read the retained messages of this Kafka topic")
    learn.add_argument("--bootstrap-servers", default=None,
                       help="Kafka bootstrap servers (default: the kafka.bootstrap_servers setting)")
    learn.add_argument("--since", default=None, help="only alarms from this time (ISO 8601 or epoch seconds)")
    learn.add_argument("--until", default=None, help="only alarms before this time (ISO 8601 or epoch seconds)")
    learn.add_argument("--topology", default=None,
                       help="element links (CSV element_a,element_b, JSON or GraphML; unset: same element only)")
    learn.add_argument("-o", "--output", type=Path, required=True, help="the learned rules (CSV cause_type,effect_type)")
    learn.add_argument("--report", type=Path, default=None, help="each edge's evidence, counts, time taken (JSON)")
    learn.add_argument("--input-format", default=None,
                       help="the input format (default: the kafka.input_format setting, auto)")


def parse_time(text: str | None, flag: str) -> float | None:
    """ISO 8601 (a naive time is UTC) or epoch seconds -> epoch seconds."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SettingsError(f"{flag} {text!r}: expected ISO 8601 (2026-12-01T00:00:00Z) or epoch seconds") from None
    return (when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)).timestamp()


def file_messages(paths: list[Path]) -> Iterator[SimpleNamespace]:
    """Each line of each file as a message (topic: the file's name; offset: the line number from 0)."""
    from tqdm import tqdm

    total = sum(p.stat().st_size for p in paths)
    with tqdm(total=total, unit="B", unit_scale=True, desc="reading", disable=None, file=sys.stderr) as bar:
        for path in paths:
            with path.open("rb") as handle:
                for number, line in enumerate(handle):
                    bar.update(len(line))
                    value = line.rstrip(b"\r\n")
                    if value.strip():
                        yield SimpleNamespace(value=value, headers=(), topic=path.name, partition=0,
                                              offset=number, timestamp=None)


def topic_messages(topic: str, config: dict, since: float | None, until: float | None) -> Iterator:
    """The topic's messages from `since` (or the beginning) to the end offsets at start (or `until`),
    every partition, read_committed, without a consumer group."""
    from kafka import KafkaConsumer, TopicPartition
    from tqdm import tqdm

    consumer = KafkaConsumer(group_id=None, enable_auto_commit=False, isolation_level="read_committed",
                             auto_offset_reset="earliest", **config)
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            raise LearnInputError(f"topic {topic!r} does not exist or has no partitions")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        starts = consumer.beginning_offsets(tps)
        if since is not None:
            found = consumer.offsets_for_times({tp: int(since * 1000) for tp in tps})
            starts = {tp: (found[tp].offset if found.get(tp) is not None else ends[tp]) for tp in tps}
        for tp in tps:
            consumer.seek(tp, starts[tp])
        left = {tp for tp in tps if starts[tp] < ends[tp]}
        with tqdm(total=sum(ends[tp] - starts[tp] for tp in tps), unit="msg", desc="reading", disable=None,
                  file=sys.stderr) as bar:
            while left:
                for tp, records in consumer.poll(timeout_ms=1000).items():
                    for msg in records:
                        if tp not in left:
                            break
                        bar.update(1)
                        if until is not None and msg.timestamp is not None and msg.timestamp >= until * 1000:
                            left.discard(tp)
                            break
                        yield msg
                        if msg.offset + 1 >= ends[tp]:
                            left.discard(tp)
                for tp in list(left):  # transaction markers and aborted records end a partition too
                    if consumer.position(tp) >= ends[tp]:
                        left.discard(tp)
    finally:
        consumer.close()


def learn(messages, decode, learner, since: float | None, until: float | None) -> dict:
    """Alarms of `messages` (read as the incident room reads them) in event-time order into `learner`;
    the counts for the report."""
    from worker.kafka.incident_outputs import read_message

    alarms, counts = [], {"messages": 0, "alarms": 0, "clears_skipped": 0, "outside_time_range": 0}
    for msg in messages:
        counts["messages"] += 1
        found, _ = read_message(decode, msg, answer_invalid=False)
        for alarm in found:
            if alarm.cleared:
                counts["clears_skipped"] += 1
            elif (since is not None and alarm.time < since) or (until is not None and alarm.time >= until):
                counts["outside_time_range"] += 1
            else:
                alarms.append((alarm.time, alarm.element, alarm.alarm_type))
    alarms.sort()
    counts["alarms"] = len(alarms)
    for when, element, alarm_type in alarms:
        learner.observe(element, alarm_type, when)
    learner.flush()
    counts["elements"] = len({e for _, e, _ in alarms})
    return counts


def run(args: argparse.Namespace) -> int:
    return run_learn(args)


def run_learn(args: argparse.Namespace, env=None) -> int:
    from worker.incidents.graph import GraphFileError, load_topology
    from worker.incidents.learn import CauseLearner, write_rules
    from worker.inputs import decoder_for
    from worker.inputs.json_log import parse_field_map
    from worker.settings.load import load_settings

    started = time.perf_counter()
    try:
        if bool(args.files) == bool(args.topic):
            raise SettingsError("give either FILE ... or --topic (one history at a time)")
        for path in args.files:
            if not path.is_file():
                raise SettingsError(f"input file {path} does not exist")
        since, until = parse_time(args.since, "--since"), parse_time(args.until, "--until")
        loaded = load_settings(None, env, sections=()).settings
        kafka, repeat_s = loaded.kafka, loaded.incidents.window_s
        topology = load_topology(args.topology) if args.topology else None
        input_format = args.input_format or kafka.input_format
        decode = decoder_for(input_format, parse_field_map(kafka.json_log_fields), kafka.max_items_per_message)
    except (SettingsError, GraphFileError, ValueError) as exc:
        log.error("telesum incidents learn: %s", exc)
        return EXIT_SETTINGS
    learner = CauseLearner(topology, repeat_s=repeat_s)  # a repeat within the room's window_s is one alarm
    messages = file_messages(args.files) if args.files else \
        topic_messages(args.topic, kafka.client_config(args.bootstrap_servers), since, until)
    try:
        counts = learn(messages, decode, learner, since, until)
    except (LearnInputError, OSError) as exc:
        log.error("telesum incidents learn: %s", exc)
        return EXIT_FAILED
    edges = learner.edges()
    write_rules(args.output, edges)
    seconds = time.perf_counter() - started
    report = {
        "command": "telesum incidents learn " + " ".join(sys.argv[3:]) if sys.argv[1:3] == ["incidents", "learn"]
                   else "telesum incidents learn",
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "source": {"topic": args.topic} if args.topic else {"files": [str(p) for p in args.files]},
        "input_format": input_format,
        **counts,
        "alarm_types": len(learner.types),
        "first_alarm": _iso(learner.first_time), "last_alarm": _iso(learner.last_time),
        "neighbourhood": "the element and its topology neighbours (1 hop)" if topology is not None
                         else "the same element (no topology)",
        "topology": {"elements": len(topology), "links": topology.num_links} if topology is not None else None,
        "repeats_not_counted": learner.repeats,
        "parameters": {"lag_s": learner.lag_s, "chance_shift_s": learner.shift_s, "repeat_s": learner.repeat_s,
                       "orientation": "P(cause near | effect) > P(effect near | cause)",
                       "min_cooccurrences": learner.min_cooccurrences, "min_lift": learner.min_lift,
                       "min_z": learner.min_z},
        "edges": [e.as_dict() for e in edges],
        "type_counts": dict(learner.types.most_common()),
        "seconds": round(seconds, 2),
    }
    if args.report:
        args.report.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{len(edges)} cause -> effect edges among {len(learner.types)} alarm types from {counts['alarms']} alarms "
          f"({counts['messages']} messages) in {seconds:.1f} s -> {args.output}", file=sys.stderr)
    if not counts["alarms"]:
        log.error("telesum incidents learn: no alarm in %d messages (input format %s): nothing learned",
                  counts["messages"], input_format)
        return EXIT_FAILED
    return EXIT_OK


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
