"""The fault harness in its bounded CI form: real broker, tiny model, SIGKILLs and a rebalance."""

from __future__ import annotations

import signal

import pytest

from worker.benchmarks.faults_plan import Plan
from worker.benchmarks.faults_scenario import run_plan

pytestmark = pytest.mark.kafka


# The harness bounds itself (timeout_s); pytest's default 300 s would cut it first on a loaded machine.
@pytest.mark.timeout(600)
@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_faults_sigkills_and_rebalance_every_input_answered(kafka_bootstrap, tokenizer_dir, tmp_path, guarantee):
    # Inputs trickle in, so faults land while answers are still coming.
    plan = Plan(records=40, huge_bytes=256 * 1024, kills=2, rebalance=True, guarantee=guarantee, seed=3,
                produce_rate=3.0, timeout_s=400)
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


@pytest.mark.timeout(600)
def test_faults_log_line_windows_exactly_once_through_sigkills_and_rebalance(kafka_bootstrap, tokenizer_dir, tmp_path):
    # Lines of a dozen hosts trickle in; windows of 1 s / 16 lines are open when the faults land.
    # Without the huge record: its long summary is the other test's subject.
    plan = Plan(records=120, kills=2, rebalance=True, guarantee="exactly-once", seed=5, produce_rate=8.0,
                timeout_s=500, stream="log-lines")
    report = run_plan(plan, kafka_bootstrap, tokenizer_dir, tmp_path, with_huge=False)
    assert report["reader_error"] is None
    assert report["missing"] == [], report
    assert report["answered"] == report["inputs"] == 120 + 10
    assert report["duplicates"] == 0, report
    assert len(report["faults"]) == 4 and report["native_aborts"] == 0
    drained = [c for c in report["exit_codes"] if c != -signal.SIGKILL]
    assert drained and all(c == 0 for c in drained), report["exit_codes"]


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
