"""`telesum bench faults`: every input answered, how often, and how fast, through real faults.

N inputs go to a 3-partition topic: realistic records (`telesum produce`'s generators), ten hostile
ones (bad JSON, wrong types, empty body, binary, bad UTF-8, deep nesting, an unknown kind, an empty
message, control characters) and one valid record with a huge body. `telesum worker` processes
(tiny random-weight model on CPU) serve them while the harness SIGKILLs and restarts a worker at
seeded random points of progress, starts a second worker in the same group (a rebalance) and
stops it again, and restarts the broker when it owns one. Then a read-committed consumer checks
that every input has an answer (a summary or a dead letter, matched by the source partition and
offset headers), counts duplicates, and measures each input's latency (its answer's timestamp minus
its own). `--stream log-lines` sends raw syslog lines of a dozen hosts instead of the realistic
records, answered per host window (`telesum-window-offsets` names every input a window answers), so
the faults land while windows are open. `--compare-huge` also runs without faults: records/s per guarantee (all inputs at once),
and the short records' p99 latency with and without the huge record.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from worker.kafka.records import parse_offset_ranges
from worker.messages import TelemetryRecord
from worker.settings.environment import FAULTS_KAFKA_PORT


def hostile_values() -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    """(value, headers) of ten inputs a worker must dead-letter, never crash on."""
    deep = b'{"id": "deep", "kind": "ves", "body": ' + b'{"a": ' * 300 + b"1" + b"}" * 300 + b"}"
    return [(b"{not json", []), (b'{"id": 7, "kind": "text", "body": "x"}', []),
            (b'{"id": "e", "kind": "text", "body": ""}', []), (bytes(range(256)) * 4, []),
            (b'{"id": "u", "kind": "text", "body": "\xff\xfe bad"}', []), (deep, []),
            (b'{"id": "k", "kind": "nonsense", "body": "x"}', []), (b"", []),
            (msgspec.json.encode(TelemetryRecord(id="ctl", kind="text", body="\x00\x01\x1b[31m\x07")), []),
            (b"\x93\x01\x02", [("content-type", b"application/msgpack")])]


_WORDS = ("link down port fan tray sync lost ptp grandmaster high temperature rrc setup failure cause s1 "
          "flap mme power supply degraded slot radio unit cpri alarm cleared raised major minor critical "
          "handover x2 xn timeout retry reset board restart license expired backhaul jitter loss").split()


def huge_record(num_bytes: int, seed: int = 0) -> bytes:
    """A valid syslog record whose body is about `num_bytes` long. Its lines differ in words, not
    only in numbers, so collapsing repeats leaves most of them (a worst case for the work)."""
    rng = random.Random(seed)
    lines, size, i = [], 0, 0
    while size < num_bytes:
        words = " ".join(rng.choice(_WORDS) for _ in range(6))
        line = (f"<{rng.choice([11, 12, 13, 14])}>1 2026-12-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:"
                f"{i % 60:02d}Z gnb-{rng.choice(_WORDS)} ran - - - {words}")
        lines.append(line)
        size += len(line) + 1
        i += 1
    return msgspec.json.encode(TelemetryRecord(id="huge", kind="syslog", body="\n".join(lines), source="gnb"))


_HOSTS = tuple(f"gnb-du-{i:04d}" for i in range(12))
_APPS = ("ptp4l", "du_app", "kernel", "sshd", "rrc")


def log_lines(count: int, seed: int = 0) -> list[tuple[bytes, bytes]]:
    """(line, key) of `count` raw syslog lines (rsyslog's ISO-stamped template and RFC 5424) from a
    dozen hosts, keyed by host as a producer keyed by hostname sends them."""
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        host, app = rng.choice(_HOSTS), rng.choice(_APPS)
        words = " ".join(rng.choice(_WORDS) for _ in range(5))
        stamp = f"2026-12-01T14:{i // 60 % 60:02d}:{i % 60:02d}.{rng.randrange(10**6):06d}+00:00"
        if i % 3:
            line = f"{stamp} {host} {app}[{rng.randrange(100, 9999)}]: {words}"
        else:
            line = f"<{rng.choice([11, 12, 13, 14])}>1 {stamp} {host} {app} - - - {words}"
        lines.append((line.encode(), host.encode()))
    return lines


@dataclass
class Plan:
    records: int = 60
    huge_bytes: int = 1 << 20
    kills: int = 2
    rebalance: bool = True
    broker_restart: bool = False   # needs a broker of the harness's own (`own_broker_port`)
    guarantee: str = "exactly-once"
    seed: int = 0
    produce_rate: float = 0.0      # inputs per second; 0 = all at once
    timeout_s: float = 600.0
    worker_args: dict[str, str] = field(default_factory=dict)
    stream: str = "records"        # or "log-lines": raw syslog lines answered per host window
    window_s: float = 1.0          # log-lines: the worker's --window-s
    window_max_lines: int = 16     # log-lines: the worker's --window-max-lines


class _Worker:
    def __init__(self, bootstrap: str, topics: tuple[str, str, str], group: str, worker_id: str,
                 tokenizer: Path, log_path: Path, guarantee: str, extra: dict[str, str]) -> None:
        inp, out, dlq = topics
        args = {"bootstrap-servers": bootstrap, "input-topic": inp, "output-topic": out, "dlq-topic": dlq,
                "group-id": group, "worker-id": worker_id, "model": "tiny", "tokenizer": str(tokenizer),
                "device": "cpu", "max-new-tokens": "4", "token-budget": "4096", "max-context": "2048",
                "session-timeout-ms": "6000", "heartbeat-interval-ms": "500", "commit-interval-s": "0.2",
                "drain-timeout-s": "30", "processing-guarantee": guarantee, **extra}
        cmd = [sys.executable, "-m", "worker.cli", "worker"] + [x for k, v in args.items() for x in (f"--{k}", v)]
        self.log_path = log_path
        self._log = open(log_path, "ab")
        env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._log.close()

    def wait_started(self, timeout_s: float = 120, marker: bytes = b" -> ") -> None:
        """Until the worker logged `marker`: by default that it serves (its signal handlers are
        installed by then); b"assigned [(" once it holds partitions."""
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            if marker in self.log_path.read_bytes():
                return
            time.sleep(0.1)

    def stop(self, timeout_s: float = 120) -> int:
        self.wait_started()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
        finally:
            self._log.close()


class _Answers(threading.Thread):
    """Reads the output and dead-letter topics read-committed; keeps (source key -> answer times)."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        super().__init__(name="faults-answers", daemon=True)
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=None,
                                      auto_offset_reset="earliest", enable_auto_commit=False,
                                      isolation_level="read_committed", fetch_max_bytes=64 << 20,
                                      max_partition_fetch_bytes=32 << 20)
        self.times: dict[tuple[int, int], list[float]] = collections.defaultdict(list)
        self.first: dict[tuple[int, int], tuple[str, bytes]] = {}  # the first answer: (topic, value)
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                for batch in self.consumer.poll(timeout_ms=200).values():
                    for msg in batch:
                        h = {k: v for k, v in msg.headers}
                        partition = int(h["telesum-source-partition"])
                        offsets = parse_offset_ranges(h["telesum-window-offsets"].decode()) \
                            if "telesum-window-offsets" in h else [int(h["telesum-source-offset"])]
                        for offset in offsets:
                            self.times[(partition, offset)].append(msg.timestamp / 1000.0)
                            self.first.setdefault((partition, offset), (msg.topic, msg.value))
        except BaseException as exc:  # noqa: BLE001 - reported by the harness, which asserts on it
            self.error = exc
        finally:
            self.consumer.close()

    def answered(self) -> int:
        return len(self.times)


def _make_topics(bootstrap: str) -> tuple[str, str, str]:
    from kafka.admin import KafkaAdminClient, NewTopic

    run = uuid.uuid4().hex[:10]
    names = (f"faults-in-{run}", f"faults-out-{run}", f"faults-dlq-{run}")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(t, 3 if i == 0 else 1, 1, topic_configs={"max.message.bytes": "16777216"})
                             for i, t in enumerate(names)])
    finally:
        admin.close()
    return names


def _inputs(plan: Plan, with_huge: bool) -> list[tuple[bytes, list, bytes]]:
    """(value, headers, key) of every input, in the order they are produced."""
    from worker.commands.samples import iter_generate

    if plan.stream == "log-lines":
        realistic = [(line, [], key) for line, key in log_lines(plan.records, plan.seed)]
    else:
        realistic = [(msgspec.json.encode(r), [], f"r{i}".encode())
                     for i, (r, _) in enumerate(iter_generate(plan.records, "short", plan.seed))]
    hostile = [(value, headers, f"h{i}".encode()) for i, (value, headers) in enumerate(hostile_values())]
    values = realistic[: len(realistic) // 4] + hostile + realistic[len(realistic) // 4:]
    if with_huge:
        values.insert(len(realistic) // 8, (huge_record(plan.huge_bytes, plan.seed), [], b"huge"))
    return values


def run_plan(plan: Plan, bootstrap: str, tokenizer: Path, work_dir: Path, *, with_huge: bool = True,
             restart_broker=None) -> dict:
    """Run one scenario; returns the report (missing, duplicates, latencies, faults, exit codes)."""
    from kafka import KafkaProducer

    rng = random.Random(plan.seed)
    topics = _make_topics(bootstrap)
    group = f"faults-{uuid.uuid4().hex[:10]}"
    answers = _Answers(bootstrap, [topics[1], topics[2]])
    answers.start()
    logs = []

    def start(worker_id: str) -> _Worker:
        logs.append(work_dir / f"{group}-{worker_id}-{len(logs)}.log")
        extra = dict(plan.worker_args)
        if plan.stream == "log-lines":
            extra = {"window-s": str(plan.window_s), "window-max-lines": str(plan.window_max_lines), **extra}
        return _Worker(bootstrap, topics, group, worker_id, tokenizer, logs[-1], plan.guarantee, extra)

    values = _inputs(plan, with_huge)
    main = start("a")
    sent: dict[tuple[int, int], tuple[float, int]] = {}  # (partition, offset) -> (produced at, bytes)
    t0 = time.time()

    def produce() -> None:  # beside the faults, at plan.produce_rate
        producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=16 << 20, linger_ms=5,
                                 retries=2**31 - 1)  # through a broker restart too
        futures = []
        for i, (value, headers, key) in enumerate(values):
            if plan.produce_rate > 0:
                time.sleep(max(0.0, t0 + i / plan.produce_rate - time.time()))
            futures.append((producer.send(topics[0], value=value, key=key, headers=headers), len(value)))
        for future, size in futures:
            meta = future.get(timeout=plan.timeout_s)
            sent[(meta.partition, meta.offset)] = (meta.timestamp / 1000.0, size)
        producer.close()

    producing = threading.Thread(target=produce, name="faults-produce", daemon=True)
    producing.start()

    # Faults at seeded points of progress: each after a random share of the inputs got answers.
    total = len(values)
    # Each fault waits for its mark and for at least one new answer since the previous fault.
    events = ["kill"] * plan.kills + (["broker"] if plan.broker_restart and restart_broker is not None else [])
    rng.shuffle(events)
    if plan.rebalance:  # the second worker joins somewhere in the first half and leaves later
        at = rng.randrange(len(events) // 2 + 1)
        events.insert(at, "rebalance")
        events.insert(rng.randrange(at + 1, len(events) + 1), "unbalance")
    marks = sorted(rng.uniform(0.05, 0.85) * total for _ in events)
    second, codes, done_faults = None, [], []
    deadline = time.monotonic() + plan.timeout_s
    last = -1
    for event, mark in zip(events, marks):
        while (answers.answered() < mark or last >= answers.answered() < total) and time.monotonic() < deadline:
            time.sleep(0.1)
        last = answers.answered()
        if event == "kill":  # a worker that holds partitions, so work is in flight when it dies
            main.wait_started(max(1.0, deadline - time.monotonic()), marker=b"assigned [(")
            main.kill()
            codes.append(-signal.SIGKILL)
            main = start("a")
        elif event == "rebalance":
            second = start("b")
        elif event == "unbalance" and second is not None:
            codes.append(second.stop())
            second = None
        elif event == "broker":
            restart_broker()
        done_faults.append((event, answers.answered()))
    producing.join(max(0.0, deadline - time.monotonic()))
    while answers.answered() < total and time.monotonic() < deadline:
        time.sleep(0.2)
    finished_s = time.time() - t0
    for w in (main, second):
        if w is not None:
            codes.append(w.stop())
    time.sleep(1.0)  # answers committed by the final drains
    answers.stop_event.set()
    answers.join(30)

    huge_key = next((k for k, (_, size) in sent.items() if size >= plan.huge_bytes), None) if with_huge else None
    latencies = {k: min(ts) - sent[k][0] for k, ts in answers.times.items() if k in sent}
    answered_at = sorted(min(ts) for ts in answers.times.values())
    short = [v for k, v in latencies.items() if k != huge_key]
    aborts = sum(Path(p).read_text(errors="replace").count("terminate called") for p in logs)
    return {
        "guarantee": plan.guarantee, "inputs": total, "answered": len(set(answers.times) & set(sent)),
        "missing": sorted(set(sent) - set(answers.times)),
        "duplicates": sum(len(ts) - 1 for ts in answers.times.values()),
        "faults": done_faults, "exit_codes": codes, "native_aborts": aborts,
        "seconds": round(finished_s, 1),
        # first to last answer: the worker's start-up stays out
        "records_per_s": round((len(answered_at) - 1) / (answered_at[-1] - answered_at[0]), 2)
        if len(answered_at) > 1 and answered_at[-1] > answered_at[0] else None,
        "short_latency_s": {"p50": _pct(short, 50), "p99": _pct(short, 99), "max": max(short, default=None)},
        "huge_latency_s": latencies.get(huge_key) if huge_key else None,
        "huge_answer": _describe(answers.first.get(huge_key), topics) if huge_key else None,
        "reader_error": repr(answers.error) if answers.error else None,
    }


def _describe(answer: tuple[str, bytes] | None, topics: tuple[str, str, str]) -> dict | None:
    if answer is None:
        return None
    body = msgspec.json.decode(answer[1])
    if answer[0] == topics[2]:
        return {"dead_letter": body.get("reason")}
    return {"summary": True, "hierarchical": body.get("hierarchical"), "chunks": body.get("chunks"),
            "selection": body.get("selection")}


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


def save_tokenizer(folder: Path) -> Path:
    from worker.model.loader import embedded_model_path
    from worker.model.tokenizer import load_tokenizer

    load_tokenizer(embedded_model_path()).save_pretrained(folder)
    return folder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", "-n", type=int, default=1000, help="realistic records (default 1000)")
    parser.add_argument("--huge-mb", type=float, default=5.0, help="body size of the huge record (default 5 MB)")
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs of the worker (default 10)")
    parser.add_argument("--guarantee", choices=("exactly-once", "at-least-once", "both"), default="both")
    parser.add_argument("--broker-port", type=int, default=int(os.environ.get(FAULTS_KAFKA_PORT, "19193")),
                        help="port of the broker the harness starts and restarts (default 19193)")
    parser.add_argument("--compare-huge", action="store_true",
                        help="also run without faults: each guarantee's records/s, and the short records' "
                             "latency with and without the huge record")
    parser.add_argument("--rate", type=float, default=20.0, help="inputs produced per second (default 20)")
    parser.add_argument("--latency-work-cap", type=int, default=0,
                        help="the worker's --max-record-tokens in the latency runs (default 0: no cap, so "
                             "the huge record is summarised whole: fairness alone bounds the others)")
    parser.add_argument("--stream", choices=("records", "log-lines"), default="records",
                        help="realistic records, or raw syslog lines answered per host window")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800.0, help="per scenario (s)")
    parser.add_argument("--out", type=Path, help="write the JSON report here too")


def run(args: argparse.Namespace) -> int:
    """Start a broker of the harness's own, run the scenarios, print the report; 0 when nothing is
    missing (and, exactly-once, nothing duplicated)."""
    from worker.benchmarks.local_broker import kafka_sh

    work = Path(tempfile.mkdtemp(prefix="telesum-faults-"))
    state = work / "broker"
    kafka_sh("start", args.broker_port, state)
    bootstrap = f"127.0.0.1:{args.broker_port}"

    def restart_broker() -> None:
        kafka_sh("stop", args.broker_port, state)
        kafka_sh("start", args.broker_port, state)

    report: dict = {"stream": args.stream, "command": " ".join(["telesum bench faults", *sys.argv[sys.argv.index("faults") + 1:]])
                    if "faults" in sys.argv else "telesum bench faults", "scenarios": {}}
    try:
        tokenizer = save_tokenizer(work / "tokenizer")
        guarantees = ("exactly-once", "at-least-once") if args.guarantee == "both" else (args.guarantee,)
        for g in guarantees:
            plan = Plan(records=args.records, huge_bytes=int(args.huge_mb * (1 << 20)), kills=args.kills,
                        broker_restart=True, guarantee=g, seed=args.seed, produce_rate=args.rate,
                        timeout_s=args.timeout, stream=args.stream)
            report["scenarios"][f"faults/{g}"] = run_plan(plan, bootstrap, tokenizer, work,
                                                          restart_broker=restart_broker)
        if args.compare_huge:
            for g in guarantees:  # the records/s cost of exactly-once: no faults, all inputs at once
                plan = Plan(records=args.records, kills=0, rebalance=False, guarantee=g, seed=args.seed,
                            timeout_s=args.timeout)
                report["scenarios"][f"throughput/{g}"] = run_plan(plan, bootstrap, tokenizer, work, with_huge=False)
            for name, huge in (("latency/without_huge", False), ("latency/with_huge", True)):
                plan = Plan(records=args.records, huge_bytes=int(args.huge_mb * (1 << 20)), kills=0,
                            rebalance=False, guarantee="at-least-once", seed=args.seed, produce_rate=args.rate,
                            timeout_s=args.timeout,
                            worker_args={"max-record-tokens": str(args.latency_work_cap)})
                report["scenarios"][name] = run_plan(plan, bootstrap, tokenizer, work, with_huge=huge)
            base = report["scenarios"]["latency/without_huge"]["short_latency_s"]["p99"]
            with_huge = report["scenarios"]["latency/with_huge"]["short_latency_s"]["p99"]
            report["short_p99_ratio_with_huge"] = round(with_huge / base, 2) if base and with_huge else None
    finally:
        kafka_sh("stop", args.broker_port, state)
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    bad = [s for s in report["scenarios"].values()
           if s["missing"] or (s["guarantee"] == "exactly-once" and s["duplicates"]) or s["native_aborts"]]
    return 1 if bad else 0
