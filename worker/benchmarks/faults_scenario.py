"""One `telesum bench faults` scenario end to end: produce the inputs, start the workers, inject the
faults at their marks, wait for the answers, report."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from pathlib import Path

from worker.benchmarks.faults_answers import AnswerReader
from worker.benchmarks.faults_inputs import inputs
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

    def start(worker_id: str) -> WorkerProcess:
        logs.append(work_dir / f"{group}-{worker_id}-{len(logs)}.log")
        extra = dict(plan.worker_args)
        if plan.stream == "log-lines":
            extra = {"window-s": str(plan.window_s), "window-max-lines": str(plan.window_max_lines), **extra}
        return WorkerProcess(bootstrap, topics, group, worker_id, tokenizer, logs[-1], plan.guarantee, extra)

    values = inputs(plan, with_huge)
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
    second, codes, done_faults = None, [], []
    deadline = time.monotonic() + plan.timeout_s
    last = -1
    for event, mark in fault_schedule(plan, total, restart_broker is not None):
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
    return scenario_report(plan, answers, sent, total=total, topics=topics, with_huge=with_huge, logs=logs,
                           done_faults=done_faults, codes=codes, finished_s=finished_s)
