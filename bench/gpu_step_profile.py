"""Where one engine step's time goes on the GPU host: host (Python, launches) against device (kernels).

    python bench/gpu_step_profile.py --out DIR --tokenizer TOK [--shape smollm2] [--dtype fp8] [--records 3000]
                                     [--new-tokens 64]

The Summarizer exactly as `telesum worker` builds it (probed budgets, prefix reuse, production
sampling, 64 new tokens unless `--new-tokens` says, EOS off, random bf16 weights, the real SmolLM2
tokenizer). Three phases:

- `single`: records one at a time (a quiet stream): each step's wall time from the step trace, and a
  torch.profiler table of those steps (CPU ops by self time, CUDA kernels by time). A prefill of one
  ~1,000-token prompt costs the GPU about a millisecond; what the step takes beyond that is host cost.
- `capacity`: every record queued at once: records/s, the step trace, the profiler's kernel total
  against the wall time of a window (the GPU's real occupancy, not nvidia-smi's "busy"), and a py-spy
  profile of the process's threads over the same run where py-spy is installed.
- `gil`: the same load again, py-spy sampling only the thread that holds the GIL: the share of the
  wall each thread held it (near 100 % in all: the process's Python is the limit, not the GPU).

Writes DIR/step_profile.json and DIR/*.txt (profiler tables, py-spy summary).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from gpu_job import NEW_TOKENS, build_loaded, records_for, worker_summarizer  # noqa: E402
from pyspy_top import held_shares  # noqa: E402

from worker.engine.step_trace import StepTrace  # noqa: E402
from worker.model.tokenizer import load_tokenizer  # noqa: E402
from worker.prompts.sampling import default_sampling  # noqa: E402


def kernel_time_s(prof) -> float:
    """Sum of device kernel time in a profile (overlapping streams counted twice: an upper bound)."""
    total_us = 0.0
    for evt in prof.key_averages():
        total_us += getattr(evt, "self_device_time_total", 0.0) or getattr(evt, "self_cuda_time_total", 0.0)
    return total_us / 1e6


def tables(prof, path: Path, rows: int = 45) -> None:
    avg = prof.key_averages()
    text = ["# CPU ops by self CPU time", avg.table(sort_by="self_cpu_time_total", row_limit=rows),
            "# by device time", avg.table(sort_by="self_device_time_total", row_limit=25)]
    path.write_text("\n".join(text))


SPY_RATE = 100  # samples a second


@contextlib.contextmanager
def py_spy(path: Path, mode: str = "--idle"):
    """py-spy sampling this process's threads while inside, where installed. mode "--idle": every
    thread's wall time, waits included; "--gil": only the thread holding the GIL, so the samples
    against SPY_RATE × wall say how much of the time the GIL was held, and by whom."""
    if not shutil.which("py-spy"):
        yield
        return
    spy = subprocess.Popen(["py-spy", "record", "-p", str(os.getpid()), "-r", str(SPY_RATE), "--threads", mode,
                            "-f", "raw", "-o", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached
    try:
        yield
    finally:
        spy.send_signal(2)  # SIGINT: py-spy writes what it has
        try:
            spy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            spy.kill()


def single_phase(summarizer, records, out: Path) -> dict:
    trace: StepTrace = summarizer.step_trace
    for r in records[:5]:  # each record alone: no batching with others
        list(summarizer.results_in_order([r]))
    with py_spy(out / "spy_single.txt"):
        for r in records[15:45]:
            list(summarizer.results_in_order([r]))
    trace.clear()
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for r in records[5:15]:
            list(summarizer.results_in_order([r]))
    wall = time.perf_counter() - t0
    tables(prof, out / "step_profile_single.txt")
    return {"records": 10, "wall_s": wall, "kernel_s": kernel_time_s(prof), "steps": trace.summary(since_s=t0)}


def capacity_phase(summarizer, records, out: Path) -> dict:
    trace: StepTrace = summarizer.step_trace
    trace.clear()
    with py_spy(out / "spy_capacity.txt"):
        t0 = time.perf_counter()
        failed = sum(isinstance(r, Exception) for _, r in summarizer.results_in_order(records))
        dt = time.perf_counter() - t0
    res = {"records": len(records), "failed": failed, "seconds": dt, "records_per_s": len(records) / dt,
           "steps": trace.summary(since_s=t0),
           "out_of_memory_events_since_start": summarizer.stats().out_of_memory_events}
    # A window of the same load under the profiler: kernel time against wall time.
    window = records[: len(records) // 2]
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        list(summarizer.results_in_order(window))
    wall = time.perf_counter() - t0
    tables(prof, out / "step_profile_capacity.txt")
    res["profiled_window"] = {"records": len(window), "wall_s": wall, "kernel_s": kernel_time_s(prof),
                              "records_per_s_profiled": len(window) / wall,
                              "out_of_memory_events_since_start": summarizer.stats().out_of_memory_events}
    return res


def gil_phase(summarizer, records, out: Path) -> dict:
    """The capacity load again, py-spy sampling only the GIL's holder: the share of the wall each
    thread held it. Near 100 % in all, the process is bound by its Python, whatever the GPU does."""
    path = out / "spy_capacity_gil.txt"
    with py_spy(path, "--gil"):
        t0 = time.perf_counter()
        list(summarizer.results_in_order(records))
        dt = time.perf_counter() - t0
    if not path.exists():
        return {"records_per_s": len(records) / dt, "gil": "py-spy not installed"}
    shares = held_shares(str(path), SPY_RATE, dt)
    return {"records_per_s": len(records) / dt, "seconds": dt,
            "gil_held_share": sum(shares.values()), "gil_held_share_by_thread": shares}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--shape", default="smollm2")
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--dtype", default="bfloat16", help="bfloat16, or fp8 (the projections as engine.dtype: fp8)")
    ap.add_argument("--new-tokens", type=int, default=NEW_TOKENS,
                    help="tokens each summary decodes (2: the prefill's share of the loop, where the host limits)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    loaded = build_loaded(args.shape, load_tokenizer(args.tokenizer), args.dtype)
    records = records_for("short", args.records)
    summarizer = worker_summarizer(loaded, default_sampling(args.new_tokens), args.new_tokens)
    summarizer.step_trace = StepTrace()
    summarizer.engine.step_observers.append(summarizer.step_trace.observe)
    summarizer.start()
    list(summarizer.results_in_order(records[:300]))  # compile, capture graphs, start the pool
    res = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "shape": args.shape, "dtype": args.dtype, "new_tokens": args.new_tokens, "command": "python bench/gpu_step_profile.py " + " ".join(sys.argv[1:]),
           "budgets": summarizer.worker_budgets}
    res["single"] = single_phase(summarizer, records[300:], args.out)
    print("single", json.dumps(res["single"]), flush=True)
    res["capacity"] = capacity_phase(summarizer, records, args.out)
    print("capacity", json.dumps(res["capacity"]), flush=True)
    res["gil"] = gil_phase(summarizer, records, args.out)
    print("gil", json.dumps(res["gil"]), flush=True)
    summarizer.close(drain=False)
    (args.out / "step_profile.json").write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
