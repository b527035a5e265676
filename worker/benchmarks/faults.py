"""`telesum bench faults`: every input answered, how often, and how fast, through real faults.

N inputs go to a 3-partition topic: realistic records (`telesum produce`'s generators), ten hostile
ones (bad JSON, wrong types, empty body, binary, bad UTF-8, deep nesting, an unknown kind, an empty
message, control characters) and one valid record with a huge body. `telesum worker` processes
(tiny random-weight model on CPU) serve them while the harness SIGKILLs and restarts a worker at
seeded random points of progress, starts a second worker in the same group (a rebalance) and
stops it again, and restarts the broker when it owns one. Then a read-committed consumer checks
that every input has an answer (a summary or a dead letter, matched by the source partition and
offset headers), counts duplicates, and measures each input's time to its first answer (its answer's
timestamp minus its own; p50/p99/max per kind of input and of answer) and, per partition, the longest
stretch without an answer while two or more of its inputs waited: one that reaches `--stall-s` (60 s)
fails the run (`faults_latency`). `--defaults` runs the workers as users start them (the embedded
model on the CPU, default settings). `--stream log-lines` sends raw syslog lines of a dozen hosts
instead of the realistic records, answered per host window (`telesum-window-offsets` names every input a window answers), so
the faults land while windows are open. `--stream hostile` mixes records, log lines and every hostile
input of `faults_hostile` (decompression bombs, deep nesting, a 50 MB line …) and reports the
workers' resident memory (idle, peak) and any worker that stopped by itself. `--compare-huge` also runs without faults: records/s per guarantee (all inputs at once),
and the short records' p99 latency with and without the huge record.

This module is the command; a scenario runs in `faults_scenario` (its plan and fault schedule in
`faults_plan`, what it produces in `faults_inputs`, the worker processes and topics in
`faults_processes`, the reader in `faults_answers`, the report in `faults_report`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
from pathlib import Path

from worker.benchmarks.faults_plan import Plan
from worker.benchmarks.faults_processes import save_tokenizer
from worker.benchmarks.faults_scenario import run_plan
from worker.settings.environment import FAULTS_KAFKA_PORT


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
    parser.add_argument("--work-cap", type=int, default=None,
                        help="the worker's --max-record-tokens in the fault scenarios (default: the worker's own)")
    parser.add_argument("--stream", choices=("records", "log-lines", "hostile"), default="records",
                        help="realistic records, raw syslog lines answered per host window, or records and "
                             "log lines mixed with every hostile input (faults_hostile)")
    parser.add_argument("--hostile-scale", choices=("ci", "full"), default="full",
                        help="hostile stream: full-size inputs (1.1 GiB bombs, a 50 MB line, a 100,000-event "
                             "eventList …) or the test suite's smaller ones")
    parser.add_argument("--defaults", action="store_true",
                        help="workers as users start them: the embedded model on the CPU with every setting at its "
                             "default (default: a tiny random-weight model and short group timeouts)")
    parser.add_argument("--stall-s", type=float, default=60.0,
                        help="fail when a partition holding an unanswered input gives no answer for this long "
                             "(default 60 s)")
    parser.add_argument("--no-rebalance", action="store_true", help="no second worker joining and leaving")
    parser.add_argument("--no-broker-restart", action="store_true", help="never restart the broker")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800.0, help="per scenario (s)")
    parser.add_argument("--out", type=Path, help="write the JSON report here too")


@contextlib.contextmanager
def sigterm_exits():
    """SIGTERM raises SystemExit while inside, so `finally` blocks run (the harness's broker and
    workers are stopped); Python's default would end the process without them."""
    def exit_now(signum, _frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, exit_now)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(args: argparse.Namespace) -> int:
    """Start a broker of the harness's own, run the scenarios, print the report; 0 when nothing is
    missing (and, exactly-once, nothing duplicated) and no partition stalled."""
    from worker.benchmarks.local_broker import kafka_sh

    with sigterm_exits():
        return _run(args, kafka_sh)


def _run(args: argparse.Namespace, kafka_sh) -> int:
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
                        rebalance=not args.no_rebalance, broker_restart=not args.no_broker_restart, guarantee=g,
                        seed=args.seed, produce_rate=args.rate, timeout_s=args.timeout, stream=args.stream,
                        hostile_scale=args.hostile_scale, stall_s=args.stall_s, defaults=args.defaults,
                        worker_args={} if args.work_cap is None else {"max-record-tokens": str(args.work_cap)})
            # the hostile stream brings its own huge line (faults_hostile): no huge record beside it
            report["scenarios"][f"faults/{g}"] = run_plan(plan, bootstrap, tokenizer, work,
                                                          with_huge=args.stream != "hostile",
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
        from worker.benchmarks.faults_report import first_answer_chart, hostile_chart

        if args.stream == "hostile":
            hostile_chart(report, args.out.with_suffix(".png"))
        first_answer_chart(report["scenarios"], args.out.with_name(args.out.stem + "_first_answer.png"),
                           report["command"])
    # A stall fails the fault scenarios; the --compare-huge runs send everything at once, so an idle
    # stretch there is queueing behind the whole load, reported only.
    bad = [name for name, s in report["scenarios"].items()
           if s["missing"] or (s["guarantee"] == "exactly-once" and s["duplicates"]) or s["native_aborts"]
           or s["worker_exits"] or (name.startswith("faults/") and s["stalled_partitions"])]
    return 1 if bad else 0
