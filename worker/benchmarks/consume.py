"""`telesum bench consume`: how fast one process consumes large records through the worker's own
consumer path (`worker.kafka.clients.Consumer.poll` -> `records.decode_message`), side by side:
uncompressed with kafka-python's pure-Python CRC-32C (an install without `crc32c`) and with the
`crc32c` extension, then each codec (gzip, snappy, lz4, zstd) with the extension.

Every variant runs in a fresh child process, so kafka-python picks its CRC implementation at import
as an install with or without the package would. The child joins a group with the worker's consumer
settings, seeks to the beginning, and the clock runs from there until every record is decoded:
MB/s = record value bytes (10^6 B) / that time; fetching, CRC checks, decompression and the
envelope's decoding are all inside it. MB per CPU-second divides by the child's own CPU time
instead: on a machine shared with the broker and other jobs, what the process itself costs. Rounds interleave the variants so machine noise spreads over
all of them; the median of the rounds is reported. Broker: `--bootstrap-servers` or
$KAFKA_BOOTSTRAP_SERVERS, else the local broker of `scripts/kafka.sh`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid

import msgspec

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
# (codec, CRC implementation) in the order they are shown: the pure-Python CRC first, as "before".
VARIANTS = (("none", "python"), ("none", "crc32c"), ("gzip", "crc32c"), ("snappy", "crc32c"),
            ("lz4", "crc32c"), ("zstd", "crc32c"))
GOAL_MB_PER_S = 40.0
# A child that has not decoded every record by then has failed (e.g. a topic that lost records).
_CHILD_TIMEOUT_S = 600
# Long polls while joining, as the worker does: a few-ms poll can cut a SyncGroup short, over and over.
_JOIN_POLL_MS = 1000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", "-n", type=int, default=80, help="records per topic (default 80)")
    parser.add_argument("--record-bytes", type=int, default=512 * 1024,
                        help="size of each record's JSON value (default 524,288: 0.5 MiB)")
    parser.add_argument("--rounds", type=int, default=3, help="times each variant is measured (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
                        help="broker (default $KAFKA_BOOTSTRAP_SERVERS; else scripts/kafka.sh's local one)")
    parser.add_argument("--broker-port", type=int, default=9092, help="port of the local broker (default 9092)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--chart", metavar="PNG", help="also draw the rates as a bar chart")


def large_values(n: int, size: int, seed: int) -> list[bytes]:
    """`n` envelope records of about `size` bytes each: whole log files (the `real-long` profile)
    cut or repeated to size at a line boundary."""
    from worker.samples import iter_generate

    values = []
    for i, (record, _facts) in enumerate(iter_generate(n, "real-long", seed)):
        lines, body, total = record.body.splitlines(), [], 0
        while total < size - 400:  # room for the envelope's other fields
            line = lines[len(body) % len(lines)]
            body.append(line)
            total += len(line.encode()) + 2
        record = msgspec.structs.replace(record, id=f"large-{i}", body="\n".join(body))
        values.append(msgspec.json.encode(record))
    return values


def _fill_topics(bootstrap: str, values: list[bytes]) -> dict[str, str]:
    """One fresh topic per codec holding `values`, each record in its own batch; codec -> topic."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    run_id = uuid.uuid4().hex[:10]
    topics = {codec: f"bench-consume-{codec}-{run_id}" for codec in CODECS}
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(t, 1, 1, topic_configs={"max.message.bytes": str(16 * 1024 * 1024)})
                             for t in topics.values()])
    finally:
        admin.close()
    for codec, topic in topics.items():
        producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all",
                                 compression_type=None if codec == "none" else codec,
                                 max_request_size=16 * 1024 * 1024, linger_ms=5)
        try:
            for value in values:
                producer.send(topic, value=value, headers=[("content-type", b"application/json")])
            producer.flush(120)
        finally:
            producer.close()
    return topics


def _delete_topics(bootstrap: str, names) -> None:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_topics(list(names))
    finally:
        admin.close()


def consume_once(bootstrap: str, topic: str, records: int) -> dict:
    """In a child: read `topic` from the beginning through the worker's consumer and decoder."""
    from worker.kafka.clients import Consumer
    from worker.kafka.codecs import native_crc32c
    from worker.kafka.records import decode_message
    from worker.settings.kafka import KafkaSettings

    settings = KafkaSettings(bootstrap_servers=bootstrap, input_topic=topic, output_topic=f"{topic}.out",
                              dlq_topic=f"{topic}.dlq", group_id=f"bench-consume-{uuid.uuid4().hex}")
    consumer = Consumer(settings)
    consumer.open(lambda _revoked: None, lambda _assigned: None)
    deadline = time.monotonic() + _CHILD_TIMEOUT_S / 2
    try:
        while not (consumer.is_stable() and consumer.assignment()):
            consumer.poll(_JOIN_POLL_MS)
            if time.monotonic() > deadline:
                raise TimeoutError(f"never joined the group of {topic}")
        consumer.client.seek_to_beginning()
        got = nbytes = 0
        t0, cpu0 = time.perf_counter(), time.process_time()
        while got < records:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{got} of {records} records of {topic} consumed before the deadline")
            for msg in consumer.poll(settings.poll_timeout_ms):
                decode_message(msg.value, msg.headers)
                got += 1
                nbytes += len(msg.value)
        seconds, cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        consumer.close()
    return {"records": got, "bytes": nbytes, "seconds": round(seconds, 4), "cpu_s": round(cpu_s, 4),
            "mb_per_s": round(nbytes / 1e6 / seconds, 2), "mb_per_cpu_s": round(nbytes / 1e6 / max(cpu_s, 1e-6), 2),
            "native_crc32c": native_crc32c()}


def _child(bootstrap: str, topic: str, records: int, crc: str) -> dict:
    code = ("import json, sys\n"
            + ("sys.modules['crc32c'] = None  # as an install without the crc32c package\n" if crc == "python" else "")
            + "from worker.benchmarks.consume import consume_once\n"
            + f"print(json.dumps(consume_once({bootstrap!r}, {topic!r}, {records})))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=_CHILD_TIMEOUT_S,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"))
    if done.returncode != 0:
        raise RuntimeError(f"consumer child failed ({crc} CRC, {topic}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["native_crc32c"] != (crc == "crc32c"):
        raise RuntimeError(f"the child used the wrong CRC implementation: {result}")
    return result


def measure(args: argparse.Namespace, bootstrap: str) -> dict:
    values = large_values(args.records, args.record_bytes, args.seed)
    topics = _fill_topics(bootstrap, values)
    runs: dict[tuple[str, str], list[dict]] = {v: [] for v in VARIANTS}
    try:
        for _round in range(args.rounds):
            for codec, crc in VARIANTS:
                runs[(codec, crc)].append(_child(bootstrap, topics[codec], args.records, crc))
    finally:
        _delete_topics(bootstrap, topics.values())
    variants = []
    for (codec, crc), results in runs.items():
        rates = [r["mb_per_s"] for r in results]
        variants.append({"codec": codec, "crc": crc, "median_mb_per_s": statistics.median(rates),
                         "runs_mb_per_s": rates,
                         "median_mb_per_cpu_s": statistics.median(r["mb_per_cpu_s"] for r in results),
                         "median_cpu_share": round(statistics.median(r["cpu_s"] / r["seconds"] for r in results), 3)})
    by = {(v["codec"], v["crc"]): v["median_mb_per_s"] for v in variants}
    return {"benchmark": "consume", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": "telesum bench consume " + " ".join(sys.argv[3:]) if sys.argv[1:3] == ["bench", "consume"]
            else " ".join(sys.argv),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
            "record_bytes": round(statistics.mean(len(v) for v in values)), "records": args.records,
            "rounds": args.rounds, "goal_mb_per_s": GOAL_MB_PER_S, "variants": variants,
            "crc32c_speedup": round(by[("none", "crc32c")] / by[("none", "python")], 1),
            "goal_met": by[("none", "crc32c")] >= GOAL_MB_PER_S}


def run(args: argparse.Namespace) -> int:
    """Measure and print; 0 when the uncompressed records with `crc32c` reach the goal, 1 when not."""
    from worker.benchmarks.e2e import resolve_broker
    from worker.benchmarks.local_broker import kafka_sh

    if args.records <= 0 or args.rounds <= 0 or args.record_bytes < 1024:
        print("telesum bench consume: error: --records and --rounds must be > 0, --record-bytes >= 1024")
        return 2
    bootstrap, started = resolve_broker(args)
    try:
        result = measure(args, bootstrap)
    finally:
        if started:
            kafka_sh("stop", args.broker_port)
    if args.chart:
        draw_chart(result, args.chart)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['records']} records of {result['record_bytes']:,} bytes, {result['rounds']} rounds "
              f"({result['machine']})")
        for v in result["variants"]:
            runs = " / ".join(f"{r:.1f}" for r in v["runs_mb_per_s"])
            print(f"  {v['codec']:>6}  CRC {v['crc']:>6}: {v['median_mb_per_s']:7.1f} MB/s   ({runs}); "
                  f"{v['median_mb_per_cpu_s']:.0f} MB per CPU-second, {v['median_cpu_share']:.0%} of a core")
        print(f"crc32c vs pure-Python CRC: {result['crc32c_speedup']}x; goal {GOAL_MB_PER_S:.0f} MB/s "
              f"{'met' if result['goal_met'] else 'NOT met'}")
    return 0 if result["goal_met"] else 1


def draw_chart(r: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [("uncompressed" if v["codec"] == "none" else v["codec"]) + f"\nCRC: {v['crc']}" for v in r["variants"]]
    rates = [v["median_mb_per_s"] for v in r["variants"]]
    fig, ax = plt.subplots(figsize=(8, 3.8))
    bars = ax.bar(names, rates, color=["tab:gray" if v["crc"] == "python" else "tab:blue" for v in r["variants"]])
    ax.bar_label(bars, labels=[f"{x:.1f}" for x in rates])
    ax.axhline(r["goal_mb_per_s"], color="tab:red", linestyle="--", linewidth=1)
    ax.text(len(names) - 0.5, r["goal_mb_per_s"], f"goal {r['goal_mb_per_s']:.0f} MB/s", color="tab:red",
            ha="right", va="bottom", fontsize=8)
    ax.set_ylabel("MB/s of record values (median)")
    ax.set_title(f"one process consuming {r['records']} records of {r['record_bytes'] / 1e6:.2f} MB: "
                 f"poll -> decode ({r['machine']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
