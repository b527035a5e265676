"""`telesum bench e2e`: records/s through a real broker, end to end, and where the time goes.

Fresh topics per run. The worker (the real `KafkaWorker` and `Summarizer`) runs in this process
on its own thread with the stage timers of `e2e_stages` around its functions; the model is loaded
and warmed up on one record, and the worker has joined its group, before the clock starts. Then
N seeded records are produced and the output and dead-letter topics are read until every id is
answered: records/s = N / (first produce -> last answer seen). Broker: `--bootstrap-servers` or
$KAFKA_BOOTSTRAP_SERVERS, else the local broker of `scripts/kafka.sh` (started when not running).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
import time
import uuid

import msgspec

from worker.benchmarks.e2e_report import build_result, draw_chart, format_table
from worker.benchmarks.e2e_stages import StageTimer, instrument
from worker.benchmarks.local_broker import KAFKA_SH, kafka_sh
from worker.samples import PROFILES, iter_generate

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", "-n", type=int, default=200, help="records to push through (default 200)")
    parser.add_argument("--profile", choices=PROFILES, default="short", help="length profile (default short)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
                        help="broker (default $KAFKA_BOOTSTRAP_SERVERS; else scripts/kafka.sh's local one)")
    parser.add_argument("--broker-port", type=int, default=9092, help="port of the local broker (default 9092)")
    parser.add_argument("--keep-broker", action="store_true", help="leave a local broker we started running")
    parser.add_argument("--partitions", type=int, default=1, help="input topic partitions (default 1)")
    parser.add_argument("--model", default="tiny", help="'tiny' (random weights, default), 'embedded' or a path")
    parser.add_argument("--tokenizer", help="tokenizer folder/.gguf (default: the model's / the embedded one)")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--token-budget", type=int, default=8192, help="tokens per prefill bin (default 8192)")
    parser.add_argument("--max-seqs-per-bin", type=int, default=64, help="sequences per bin (default 64)")
    parser.add_argument("--max-context", type=int, default=8192,
                        help="context of the model (default 8192, SmolLM2's; the tiny model gets it too)")
    parser.add_argument("--torch-threads", type=int, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up waiting for answers after this (s)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--chart", metavar="PNG", help="also draw where the time goes as a bar chart")


def run(args: argparse.Namespace) -> int:
    """Run once and print the result; 0 when every id was answered, 1 when some were not, 2 on bad arguments."""
    if args.records <= 0 or args.partitions <= 0 or args.max_new_tokens <= 0:
        print("telesum bench e2e: error: --records, --partitions and --max-new-tokens must be > 0")
        return 2
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    bootstrap, started = resolve_broker(args)
    try:
        result = measure(args, bootstrap)
    finally:
        if started and not args.keep_broker:
            kafka_sh("stop", args.broker_port)
    if args.chart:
        draw_chart(result, args.chart)
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0 if not result["missing"] else 1


# -- broker and topics -----------------------------------------------------------------------
def resolve_broker(args: argparse.Namespace) -> tuple[str, bool]:
    """(bootstrap servers, whether we started a local broker). Raises RuntimeError when none can be had."""
    if args.bootstrap_servers:
        return args.bootstrap_servers, False
    if not KAFKA_SH.is_file():
        raise RuntimeError(f"no --bootstrap-servers or $KAFKA_BOOTSTRAP_SERVERS, and {KAFKA_SH} is missing "
                           "(the local broker needs a source checkout)")
    if kafka_sh("status", args.broker_port).returncode == 0:
        return f"127.0.0.1:{args.broker_port}", False
    log.info("starting the local broker on port %d (scripts/kafka.sh)", args.broker_port)
    kafka_sh("start", args.broker_port)
    return f"127.0.0.1:{args.broker_port}", True


def _create_topics(bootstrap: str, partitions: int) -> tuple[str, str, str]:
    from kafka.admin import KafkaAdminClient, NewTopic

    run_id = uuid.uuid4().hex[:10]
    names = (f"bench-e2e-in-{run_id}", f"bench-e2e-out-{run_id}", f"bench-e2e-dlq-{run_id}")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(names[0], partitions, 1), NewTopic(names[1], 1, 1), NewTopic(names[2], 1, 1)])
    finally:
        admin.close()
    return names


def _delete_topics(bootstrap: str, names) -> None:
    from kafka.admin import KafkaAdminClient

    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.delete_topics(list(names))
        admin.close()
    except Exception as exc:  # noqa: BLE001 - cleanup only
        log.warning("could not delete the benchmark topics %s: %s", names, exc)


# -- the measured run ------------------------------------------------------------------------
def measure(args: argparse.Namespace, bootstrap: str) -> dict:
    """One end-to-end run; returns the result object that --json prints."""
    from kafka import KafkaConsumer, TopicPartition

    from worker.kafka.loop import KafkaWorker, in_flight_records
    from worker.commands.produce import make_producer
    from worker.commands.runtime import budgets_for, build_summarizer, load_model
    from worker.settings.load import from_values

    records = [r for r, _ in iter_generate(args.records, args.profile, args.seed)]
    inp, out, dlq = _create_topics(bootstrap, args.partitions)
    values = {"kafka.bootstrap_servers": bootstrap, "kafka.input_topic": inp, "kafka.output_topic": out,
              "kafka.dlq_topic": dlq, "kafka.group_id": f"bench-e2e-{uuid.uuid4().hex[:10]}",
              "engine.model": args.model, "engine.tokenizer": args.tokenizer, "engine.device": "cpu",
              "engine.max_new_tokens": args.max_new_tokens, "engine.token_budget": args.token_budget,
              "engine.max_seqs_per_bin": args.max_seqs_per_bin,
              "engine.max_context": args.max_context}
    loaded_settings = from_values({k: v for k, v in values.items() if v is not None})
    settings = loaded_settings.settings
    t = time.perf_counter()
    loaded = load_model(settings.engine)
    summarizer = build_summarizer(settings.engine, budgets_for(loaded_settings, loaded), loaded)
    summarizer.start()
    model_load_s = time.perf_counter() - t
    t = time.perf_counter()
    list(summarizer.summarize_all(records[:1]))  # first-call costs stay out of the window
    warmup_s = time.perf_counter() - t

    timer = StageTimer()
    worker = KafkaWorker(settings.kafka, summarizer, model_name=loaded.name,
                         max_in_flight=in_flight_records(settings.kafka, summarizer.max_seqs_per_bin))
    instrument(timer, summarizer, worker)
    joined = threading.Event()
    on_assigned = worker._on_assigned
    worker._on_assigned = lambda parts: (on_assigned(parts), joined.set())
    stop = threading.Event()
    stats_box: list = []
    loop = threading.Thread(target=lambda: stats_box.append(worker.run(stop)), name="telesum-worker-loop")
    reader = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    reader.assign([TopicPartition(out, 0), TopicPartition(dlq, 0)])
    reader.seek_to_beginning()
    producer = make_producer({"bootstrap_servers": bootstrap.split(","), "client_id": "telesum-bench"}, "none")
    try:
        t = time.perf_counter()
        loop.start()
        if not joined.wait(120):
            raise RuntimeError("the worker did not join its consumer group within 120 s")
        join_s = time.perf_counter() - t
        encoded = [msgspec.json.encode(r) for r in records]
        load_before = os.getloadavg()
        t0 = time.perf_counter()
        timer.open_window(t0)
        futures = [producer.send(inp, key=r.id.encode(), value=v, headers=[("content-type", b"application/json")])
                   for r, v in zip(records, encoded)]
        producer.flush()
        produce_s = time.perf_counter() - t0
        by_offset = {(m.partition, m.offset): (r.id, m.timestamp)
                     for r, m in zip(records, (f.get(timeout=30) for f in futures))}
        answers, latencies, summaries, t_last = _collect(reader, out, by_offset, len(records), args.timeout)
        t_end = t_last or time.perf_counter()
        timer.close_window(t_end)
        window_s = t_end - t0
        load_after = os.getloadavg()
    finally:
        stop.set()
        loop.join(120)
        summarizer.close(drain=False, timeout=5.0)
        timer.restore()
        reader.close()
        producer.close()
        _delete_topics(bootstrap, (inp, out, dlq))
    ids = [r.id for r in records]
    stats = stats_box[0] if stats_box else None
    return build_result(args, loaded.name, ids, answers, latencies, summaries, timer, window_s, produce_s,
                        model_load_s, warmup_s, join_s, load_before, load_after, stats)


def _collect(reader, out_topic: str, by_offset: dict, n: int, timeout: float):
    """Read answers until every produced id has one (or `timeout`); returns
    ({id: count}, [latency ms by broker timestamps], [Summary], time the last new id was seen)."""
    from worker.messages import Summary

    decoder = msgspec.json.Decoder(Summary)
    answers: dict[str, int] = {}
    latencies: list[int] = []
    summaries: list = []
    t_last = None
    produced_ts = {rid: ts for rid, ts in by_offset.values()}
    deadline = time.monotonic() + timeout
    while len(answers) < n and time.monotonic() < deadline:
        for batch in reader.poll(timeout_ms=100).values():
            now = time.perf_counter()
            for msg in batch:
                if msg.topic == out_topic:
                    summary = decoder.decode(msg.value)
                    summaries.append(summary)
                    rid = summary.id
                else:
                    h = dict(msg.headers)
                    rid = by_offset[(int(h["telesum-source-partition"]), int(h["telesum-source-offset"]))][0]
                if rid not in answers and rid in produced_ts:
                    latencies.append(msg.timestamp - produced_ts[rid])
                    t_last = now
                answers[rid] = answers.get(rid, 0) + 1
    return answers, latencies, summaries, t_last
