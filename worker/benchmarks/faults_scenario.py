"""One `telesum bench faults` scenario end to end: produce the inputs, start the workers, inject the
faults at their marks, wait for the answers, report."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from pathlib import Path

from worker.benchmarks.faults_answers import AnswerReader
from worker.benchmarks.faults_hostile import Bomb
from worker.benchmarks.faults_inputs import inputs
from worker.benchmarks.faults_latency import input_kind
from worker.benchmarks.faults_plan import Plan, fault_schedule
from worker.benchmarks.faults_processes import WorkerProcess, make_topics
from worker.benchmarks.faults_report import scenario_report


def run_plan(plan: Plan, bootstrap: str, tokenizer: Path, work_dir: Path, *, with_huge: bool = True,
             restart_broker=None) -> dict:
    """Run one scenario; returns the report (missing, duplicates, latencies, faults, exit codes)."""
    from kafka import KafkaProducer

    topics = make_topics(bootstrap)
    group = f"faults-{uuid.uuid4().hex[:10]}"
    answers = AnswerReader(bootstrap, [topics[1], topics[2]])
    answers.start()
    logs = []
    worker_args: dict[str, str] = {}  # what the workers were started with, for the report

    def start(worker_id: str) -> WorkerProcess:
        logs.append(work_dir / f"{group}-{worker_id}-{len(logs)}.log")
        extra = dict(plan.worker_args)
        if plan.stream in ("log-lines", "hostile") and not plan.defaults:
            extra = {"window-s": str(plan.window_s), "window-max-lines": str(plan.window_max_lines), **extra}
        if plan.stream == "hostile":
            scale = hostile_scale(plan)
            extra = {"max-batch-bytes": str(scale.max_batch_bytes), "max-items-per-message": str(scale.max_items),
                     **extra}
        worker = WorkerProcess(bootstrap, topics, group, worker_id, tokenizer, logs[-1], plan.guarantee, extra,
                               defaults=plan.defaults)
        worker_args.update(worker.args)
        memory.watch(worker)
        return worker

    values = inputs(plan, with_huge)
    memory = MemoryWatch()
    main = start("a")
    if plan.stream == "hostile":  # the idle worker's memory, before any input
        main.wait_started(plan.timeout_s, marker=b"assigned [(")
        memory.idle_kb = memory.rss_kb(main)
    memory.start()
    sent: dict[tuple[int, int], tuple[float, int]] = {}  # (partition, offset) -> (produced at, bytes)
    kinds: dict[tuple[int, int], str] = {}               # (partition, offset) -> faults_latency.input_kind
    t0 = time.time()

    def produce() -> None:  # beside the faults, at plan.produce_rate
        producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=MAX_INPUT_BYTES, linger_ms=5,
                                 retries=2**31 - 1)  # through a broker restart too
        futures = []
        for i, (value, headers, key) in enumerate(values):
            if plan.produce_rate > 0:
                time.sleep(max(0.0, t0 + i / plan.produce_rate - time.time()))
            if isinstance(value, Bomb):
                futures += [(*sent_bomb, key) for sent_bomb in send_bomb(bootstrap, topics[0], value, key,
                                                                         plan.timeout_s)]
                continue
            futures.append((producer.send(topics[0], value=value, key=key, headers=headers), len(value), key))
        for future, size, key in futures:
            meta = future.get(timeout=plan.timeout_s)
            sent[(meta.partition, meta.offset)] = (meta.timestamp / 1000.0, size)
            kinds[(meta.partition, meta.offset)] = input_kind(key)
        producer.close()

    producing = threading.Thread(target=produce, name="faults-produce", daemon=True)
    producing.start()

    # Faults at seeded points of progress: each after a random share of the inputs got answers.
    total = sum(value.records if isinstance(value, Bomb) else 1 for value, _, _ in values)  # offsets
    # Each fault waits for its mark and for at least one new answer since the previous fault.
    second, codes, done_faults, exits = None, [], [], 0
    deadline = time.monotonic() + plan.timeout_s
    last = -1
    for event, mark in fault_schedule(plan, total, restart_broker is not None):
        while (answers.answered() < mark or last >= answers.answered() < total) and time.monotonic() < deadline:
            time.sleep(0.1)
        last = answers.answered()
        if event == "kill":  # a worker that holds partitions, so work is in flight when it dies
            main.wait_started(max(1.0, deadline - time.monotonic()), marker=b"assigned [(")
            exits += main.proc.poll() is not None  # it stopped by itself: a crash
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
            exits += w.proc.poll() is not None
            codes.append(w.stop())
    memory.stop_event.set()
    time.sleep(1.0)  # answers committed by the final drains
    answers.stop_event.set()
    answers.join(30)
    report = scenario_report(plan, answers, sent, total=total, topics=topics, with_huge=with_huge, logs=logs,
                             done_faults=done_faults, codes=codes, finished_s=finished_s, kinds=kinds,
                             ended_at=t0 + finished_s)
    report["worker_exits"] = exits  # processes that stopped before the harness killed or stopped them
    report["worker_args"] = {k: v for k, v in worker_args.items()
                             if k not in ("bootstrap-servers", "input-topic", "output-topic", "dlq-topic", "group-id",
                                          "worker-id", "tokenizer")}
    if plan.stream == "hostile":
        report["memory_mb"] = memory.report()
    return report


# The largest input the harness sends (the FULL scale's 50 MB line; topics allow it too).
MAX_INPUT_BYTES = 64 << 20


def hostile_scale(plan: Plan):
    from worker.benchmarks.faults_hostile import CI, FULL

    return FULL if plan.hostile_scale == "full" else CI


def send_bomb(bootstrap: str, topic: str, bomb: Bomb, key: bytes, timeout_s: float) -> list:
    """Records of zeros compressed by `bomb.codec` into one batch (one batch: batch_size holds them
    all and they go out on flush); returns (future, size) of each, already acknowledged."""
    from kafka import KafkaProducer

    from worker.benchmarks.faults_hostile import BOMB_RECORD_BYTES

    total = bomb.records * (BOMB_RECORD_BYTES + 1024)
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=bomb.codec, batch_size=total,
                             max_request_size=MAX_INPUT_BYTES, linger_ms=60_000, delivery_timeout_ms=int(timeout_s * 1000),
                             retries=2**31 - 1)
    zeros = bytes(BOMB_RECORD_BYTES)
    try:
        futures = [(producer.send(topic, value=zeros, key=key, partition=0), len(zeros)) for _ in range(bomb.records)]
        producer.flush(timeout_s)
        for future, _ in futures:
            future.get(timeout=timeout_s)
    finally:
        producer.close()
    return futures


class MemoryWatch(threading.Thread):
    """Samples the resident memory of every worker process it watches (Linux /proc), every 0.2 s."""

    def __init__(self) -> None:
        super().__init__(name="faults-memory", daemon=True)
        self.workers: list[WorkerProcess] = []
        self.idle_kb: int | None = None
        self.peak_kb = 0
        self.stop_event = threading.Event()

    def watch(self, worker: WorkerProcess) -> None:
        self.workers.append(worker)

    @staticmethod
    def rss_kb(worker: WorkerProcess) -> int:
        try:
            status = Path(f"/proc/{worker.proc.pid}/status").read_text()
        except OSError:  # gone
            return 0
        return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)

    def run(self) -> None:
        while not self.stop_event.wait(0.2):
            for worker in list(self.workers):
                if worker.proc.poll() is None:
                    self.peak_kb = max(self.peak_kb, self.rss_kb(worker))

    def report(self) -> dict:
        idle = (self.idle_kb or 0) / 1024
        return {"idle": round(idle), "peak": round(self.peak_kb / 1024),
                "peak_above_idle": round(self.peak_kb / 1024 - idle)}
