"""The host side of one engine step, phase by phase: driven on this thread, so the profiler sees every op.

    python bench/gpu_prefill_host.py --out DIR --tokenizer TOK [--shape smollm2] [--bins 1,8,100]

The engine exactly as `telesum worker` builds it (probed budgets, prefix reuse, production sampling,
64 new tokens, EOS off, random bf16 weights), stepped by this thread: for each k, k real `short`
prompts are added and the engine stepped until they finish (the dispatcher packs them into one bin
or more). Each
phase of a step is wrapped in a profiler range (take work, schedule, prefix copy-in, the forward,
sampling, post-processing, prefix remember); the step trace gives each step's wall time, the profiler
the CPU time of every phase and op. Then the first prefill of k prompts again, alone and repeated
(`prefill_alone`): its host time against its time with the GPU's work, and a profiler table by self
CPU time. Writes DIR/prefill_host.json, DIR/prefill_host_<k>.txt and DIR/prefill_alone_<k>.txt.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).parent))
from gpu_job import NEW_TOKENS, build_loaded, prompts_for, records_for, worker_summarizer  # noqa: E402
from gpu_step_profile import kernel_time_s  # noqa: E402

from worker.engine.step_trace import StepTrace  # noqa: E402
from worker.model.tokenizer import load_tokenizer  # noqa: E402
from worker.prompts.sampling import default_sampling  # noqa: E402

PHASES = {"engine": ("_take_work", "_execute", "_sample", "_emit"),
          "scheduler": ("schedule", "postprocess", "add_bin"),
          "runner": ("prefill_bin", "decode"),
          "prefix": ("copy_in", "remember", "match")}


def label_phases(engine) -> None:
    owners = {"engine": engine, "scheduler": engine.scheduler, "runner": engine.runner, "prefix": engine.prefix}
    for owner_name, names in PHASES.items():
        owner = owners[owner_name]
        if owner is None:
            continue
        for name in names:
            fn = getattr(owner, name)

            @functools.wraps(fn)
            def wrapped(*a, _fn=fn, _label=f"phase:{owner_name}.{name}", **kw):
                with record_function(_label):
                    return _fn(*a, **kw)

            setattr(owner, name, wrapped)


def prefill_alone(engine, args: tuple, kwargs: dict, out: Path, calls: int = 20) -> dict:
    """One captured prefill_bin call repeated: its host time (until the call returns, nothing waited
    for) against its time with the GPU's work (synchronised), and a profiler table of 5 calls by self
    CPU time."""
    run = engine.runner.prefill_bin
    host, total = [], []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        run(*args, **kwargs)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        host.append(t1 - t0)
        total.append(time.perf_counter() - t0)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            run(*args, **kwargs)
        torch.cuda.synchronize()
    out.write_text(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=80))
    return {"host_median_ms": 1e3 * statistics.median(host), "with_gpu_median_ms": 1e3 * statistics.median(total),
            "kernel_ms_per_call": 1e3 * kernel_time_s(prof) / 5}


def drive(engine, prompts, params) -> list:
    for p in prompts:
        engine.add(p, params)
    done = []
    while len(done) < len(prompts):
        engine.step()
        while not engine.finished.empty():
            done.append(engine.finished.get())
    return done


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--shape", default="smollm2")
    ap.add_argument("--bins", default="1,8,100")
    ap.add_argument("--tag", default="", help="suffix of the output files (a variant's name)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    loaded = build_loaded(args.shape, load_tokenizer(args.tokenizer))
    records = records_for("short", 1200)
    prompts = prompts_for(loaded, records)
    params = default_sampling(NEW_TOKENS)
    summarizer = worker_summarizer(loaded, params)
    engine = summarizer.engine
    summarizer.dispatcher.start()
    trace = StepTrace()
    engine.step_observers.append(trace.observe)
    drive(engine, prompts[:300], params)  # compile, capture decode graphs, fill the prefix cache
    label_phases(engine)
    res = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "command": "python bench/gpu_prefill_host.py " + " ".join(sys.argv[1:]), "bins": {}}
    cursor = 300
    for k in (int(x) for x in args.bins.split(",")):
        batch = prompts[cursor:cursor + k]
        cursor += k
        trace.clear()
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            drive(engine, batch, params)
        wall = time.perf_counter() - t0
        avg = prof.key_averages()
        phases = {e.key.removeprefix("phase:"): {"cpu_total_ms": e.cpu_time_total / 1e3, "calls": e.count}
                  for e in avg if e.key.startswith("phase:")}
        kernel_ms = 1e3 * kernel_time_s(prof)
        summary = trace.summary(since_s=t0)
        res["bins"][str(len(batch))] = {"wall_s": wall, "kernel_ms": kernel_ms, "phases": phases,
                                        "steps": summary}
        (args.out / f"prefill_host_{len(batch)}{args.tag}.txt").write_text(
            avg.table(sort_by="cpu_time_total", row_limit=60))
        captured = {}
        original = engine.runner.prefill_bin

        def capture(*a, **kw):
            captured.setdefault("call", (a, kw))
            return original(*a, **kw)

        engine.runner.prefill_bin = capture
        drive(engine, prompts[cursor:cursor + k], params)  # the same shape again, unprofiled
        cursor += k
        engine.runner.prefill_bin = original
        if "call" in captured:
            res["bins"][str(len(batch))]["prefill_alone"] = prefill_alone(
                engine, *captured["call"], args.out / f"prefill_alone_{len(batch)}{args.tag}.txt")
        print(len(batch), json.dumps(res["bins"][str(len(batch))]), flush=True)
    (args.out / f"prefill_host{args.tag}.json").write_text(json.dumps(res, indent=2))
    summarizer.dispatcher.close()


if __name__ == "__main__":
    main()
