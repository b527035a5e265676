"""bench/gpu_stream.py in its CPU form (tiny random model): the sweep's bookkeeping, not its speed."""

import importlib.util
import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load_bench():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("gpu_stream", BENCH / "gpu_stream.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_stream_cpu_form_answers_every_record_and_reports_phases(tmp_path):
    bench = _load_bench()
    res = bench.main(["--out", str(tmp_path), "--cpu", "--loads", "0.5", "--seconds", "2",
                      "--unbounded-s", "2", "--variant-loads", "mixed:0.5;cut:0.5", "--capacity-variants", "mixed",
                      "--rounds", "2"])
    tiny = res["tiny"]
    for cap in (tiny["capacity"], tiny["capacity_mixed"]):
        assert cap["failed"] == 0 and cap["records_per_s"] > 0
    for run in (tiny["load_0.5"], tiny["unbounded_2x"], tiny["mixed_0.5"], tiny["cut_0.5"],
                tiny["load_0.5_round2"], tiny["mixed_0.5_round2"]):
        assert run["answered"] == run["records"] >= 10 and run["failed"] == 0
        assert 0 < run["p50_s"] <= run["p90_s"] <= run["p99_s"]
        assert run["median_decode_s"] is not None and run["median_queued_s"] >= 0
        assert abs(sum(run["host_cpu"].values()) - 1.0) < 0.01  # this machine has /proc/stat
        steps = run["steps"]
        assert steps["decode"]["steps"] > 0
        assert steps.get("prefill", {}).get("steps", 0) + steps.get("mixed", {}).get("steps", 0) > 0
    # The default runs prefill and decode apart; the variant's switch reached the engine.
    assert "mixed" not in tiny["capacity"]["steps"] and "mixed" not in tiny["load_0.5"]["steps"]
    assert tiny["capacity_mixed"]["steps"]["mixed"]["steps"] > 0
    assert tiny["mixed_0.5_round2"]["steps"]["mixed"]["steps"] > 0 and "mixed" not in tiny["load_0.5_round2"]["steps"]
    assert (tmp_path / "cpu_stream.json").exists()
    assert bench.variants_chart(res, tmp_path / "variants.png") and (tmp_path / "variants.png").stat().st_size > 0
    assert not bench.variants_chart({"tiny": {"capacity": {}, "load_0.5": tiny["load_0.5"]}}, tmp_path / "none.png")
    assert res["host"].endswith(" cores")


def test_startup_breakdown_places_each_phase_and_the_wait_for_the_first_summary():
    import datetime

    bench = _load_bench()
    t0 = datetime.datetime(2026, 12, 1, 16, 41, 20, 0).timestamp()
    lines = ["2026-12-01 16:41:21,000 INFO worker.commands.runtime: start-up: tokenizer loaded in 0.5 s\n",
             "2026-12-01 16:41:22,000 INFO worker.model.loader: loaded smollm2-shape (llama) on cuda in 0.8 s\n",
             "2026-12-01 16:41:22,100 INFO worker.commands.runtime: start-up: model loaded in 1.0 s\n",
             "noise without a timestamp\n",
             "2026-12-01 16:41:25,100 INFO worker.summarizer.summarizer: start-up: first engine step in 2.0 s\n"]
    b = bench.startup_breakdown(lines, t0, first_summary_s=7.5)
    assert [p["phase"] for p in b["phases"]] == ["tokenizer loaded", "model loaded", "first engine step"]
    assert [p["ends_at_s"] for p in b["phases"]] == [1.0, 2.1, 5.1]
    assert b["loader_s"] == 0.8 and b["before_first_phase_s"] == 0.5
    assert b["between_phases_s"] == 1.1  # 5.1 - 0.5 - (0.5 + 1.0 + 2.0)
    assert b["after_start_up_s"] == 2.4


def test_variant_sets_a_part_of_the_scheduler_and_restores_it():
    from worker.engine.kv_arena import SlabAllocator
    from worker.engine.prefill_pacing import STEP_TARGET_S
    from worker.engine.scheduler import Scheduler

    bench = _load_bench()
    sched = Scheduler(SlabAllocator(100), eos_ids=(), chunk_tokens=64)
    sched.max_mixed_rows = 7
    with bench._variant(sched, "cut_25ms"):
        assert sched.pacer.step_target_s == 0.025 and sched._split_bin is not None
        sched.max_mixed_rows = 3  # as an out-of-memory mixed step would
    assert sched.pacer.step_target_s == STEP_TARGET_S and sched.max_mixed_rows == 7
    assert sched._split_bin is None  # the default: bins stay whole


def test_host_cpu_names_the_processor_model_and_cores(tmp_path):
    from worker.benchmarks.gpu_util import host_cpu

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9454 48-Core Processor\n"
                    "processor\t: 1\nmodel name\t: AMD EPYC 9454 48-Core Processor\n")
    assert host_cpu(str(info)) == f"AMD EPYC 9454 48-Core Processor, {os.cpu_count()} cores"
    assert host_cpu(str(tmp_path / "absent")).startswith("unknown processor, ")


def test_host_cpu_shares_split_the_window_into_busy_iowait_idle_and_steal(tmp_path):
    from worker.benchmarks.gpu_util import HostCpuShares

    stat = tmp_path / "stat"
    #                 user nice system idle iowait irq softirq steal
    stat.write_text("cpu  100 0 50 1000 10 0 0 5 0 0\ncpu0 50 0 25 500 5 0 0 2 0 0\n")
    with HostCpuShares(str(stat)) as host:
        stat.write_text("cpu  400 0 150 1200 10 20 30 205 0 0\n")
    # deltas: user 300, system 100, irq 20, softirq 30 -> busy 450; idle 200; iowait 0; steal 200; of 850
    assert host.shares() == {"busy": round(450 / 850, 4), "iowait": 0.0, "idle": round(200 / 850, 4),
                             "steal": round(200 / 850, 4)}
    assert HostCpuShares(str(tmp_path / "absent")).start().shares() == {}
