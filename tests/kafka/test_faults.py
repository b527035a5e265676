"""The fault harness in its bounded CI form: real broker, tiny model, SIGKILLs and a rebalance; the hostile
stream also through a broker restart. No partition may stop answering: a stretch of STALL_S without an
answer while two or more of its inputs wait fails (worker/benchmarks/faults_latency.py)."""

from __future__ import annotations

import signal

import pytest

from worker.benchmarks.faults_plan import Plan
from worker.benchmarks.faults_scenario import run_plan

pytestmark = pytest.mark.kafka

# A SIGKILLed worker's successor starts (a few seconds of imports and model) and the group waits out the
# dead member's 6 s session: tens of seconds on a loaded 2-core machine; a held partition waits minutes.
STALL_S = 90.0


def _no_stall(report: dict) -> None:
    assert report["stalled_partitions"] == [], report["idle_with_work_s"]
    # Of the ten hostile inputs every stream carries, two are readable as log lines (summarised).
    assert report["first_answer_s"]["by_answer"]["dead_letter"]["count"] >= 8, report["first_answer_s"]


# The harness bounds itself (timeout_s); pytest's default 300 s would cut it first on a loaded machine.
@pytest.mark.timeout(600)
@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_faults_sigkills_and_rebalance_every_input_answered(kafka_bootstrap, tokenizer_dir, tmp_path, guarantee):
    # Inputs trickle in, so faults land while answers are still coming.
    plan = Plan(records=40, huge_bytes=256 * 1024, kills=2, rebalance=True, guarantee=guarantee, seed=3,
                produce_rate=3.0, timeout_s=400, stall_s=STALL_S)
    report = run_plan(plan, kafka_bootstrap, tokenizer_dir, tmp_path)
    assert report["reader_error"] is None
    assert report["missing"] == [], report
    assert report["answered"] == report["inputs"] == 40 + 10 + 1
    if guarantee == "exactly-once":  # a read-committed consumer never sees an input answered twice
        assert report["duplicates"] == 0, report
    assert len(report["faults"]) == 4 and report["native_aborts"] == 0
    drained = [c for c in report["exit_codes"] if c != -signal.SIGKILL]
    assert drained and all(c == 0 for c in drained), report["exit_codes"]
    assert report["huge_latency_s"] is not None
    _no_stall(report)


@pytest.mark.timeout(600)
def test_faults_log_line_windows_exactly_once_through_sigkills_and_rebalance(kafka_bootstrap, tokenizer_dir, tmp_path):
    # Lines of a dozen hosts trickle in; windows of 1 s / 16 lines are open when the faults land.
    # Without the huge record: its long summary is the other test's subject.
    plan = Plan(records=120, kills=2, rebalance=True, guarantee="exactly-once", seed=5, produce_rate=8.0,
                timeout_s=500, stream="log-lines", stall_s=STALL_S)
    report = run_plan(plan, kafka_bootstrap, tokenizer_dir, tmp_path, with_huge=False)
    assert report["reader_error"] is None
    assert report["missing"] == [], report
    assert report["answered"] == report["inputs"] == 120 + 10
    assert report["duplicates"] == 0, report
    assert len(report["faults"]) == 4 and report["native_aborts"] == 0
    drained = [c for c in report["exit_codes"] if c != -signal.SIGKILL]
    assert drained and all(c == 0 for c in drained), report["exit_codes"]
    _no_stall(report)


# Its own broker (the harness restarts it), so not the suite's: 12 minutes at most on a loaded 2-core machine.
@pytest.mark.timeout(720)
def test_faults_hostile_stream_answered_exactly_once_through_kills_rebalance_and_broker_restart(tmp_path):
    # Records and log lines (windows open) mixed with every hostile input at the CI scale: bombs in
    # each codec past a 16 MiB --max-batch-bytes, 10^5-deep nesting, a 96 KiB line, 10,000 headers, a
    # 2,000-event eventList and a 20,000-record OTLP request past a 100-item limit, a 1 MB id …
    import argparse
    import json
    import socket

    from worker.benchmarks import faults

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = argparse.Namespace(records=30, huge_mb=0.25, kills=2, guarantee="exactly-once", broker_port=port,
                              compare_huge=False, rate=4.0, latency_work_cap=0, stream="hostile", hostile_scale="ci",
                              seed=1, timeout=560.0, out=tmp_path / "report.json", stall_s=STALL_S, defaults=False,
                              no_rebalance=False, no_broker_restart=False, work_cap=None)
    code = faults.run(args)
    report = json.loads(args.out.read_text())["scenarios"]["faults/exactly-once"]
    assert report["reader_error"] is None
    assert report["missing"] == [] and report["answered"] == report["inputs"], report["missing"]
    assert report["duplicates"] == 0 and report["worker_exits"] == 0 and report["native_aborts"] == 0
    assert sorted({fault for fault, _ in report["faults"]}) == ["broker", "kill", "rebalance", "unbalance"]
    assert report["memory_mb"]["peak_above_idle"] < 1024, report["memory_mb"]
    _no_stall(report)
    assert code == 0


def test_sigterm_during_the_harness_runs_its_cleanup_and_restores_the_handler():
    import os

    from worker.benchmarks.faults import sigterm_exits

    before = signal.getsignal(signal.SIGTERM)
    cleaned = []
    with pytest.raises(SystemExit) as exited:
        with sigterm_exits():
            try:
                os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before the next line
                cleaned.append(False)
            finally:
                cleaned.append(True)  # where the harness stops its broker
    assert exited.value.code == 128 + signal.SIGTERM and cleaned == [True]  # no False: it exited at once
    assert signal.getsignal(signal.SIGTERM) is before
