"""`telesum summarize` as users run it, beside the same Summarizer fed in one process: the steady rate of each.

    python bench/gpu_cli.py --out DIR --tokenizer TOKENIZER_DIR [--sizes 1000,7000] [--new-tokens 64]
        [--spy]      # py-spy (every thread, waiting included) over the CLI's larger run: DIR/cli_spy.txt
        [--switch-intervals 0.005,0.00005]  # the in-process sizes again at these GIL switch intervals
        [--engine-alone]  # then the same records through that Summarizer's engine alone (see engine_alone_runs)
        [--shape qwen7b] [--dtype fp8] [--kv-cache fp8]  # another shape (gpu_job.SHAPES), FP8 weights, FP8 KV
    python bench/gpu_cli.py --out DIR --chart-from A.json B.json ...  # DIR/gpu_cli.png
    python bench/gpu_cli.py --out DIR --tokenizer TOKENIZER_DIR --cpu --sizes 4,8 --new-tokens 4  # the method only

A model folder of the SmolLM2-135M shape (or `--shape`'s) with random weights (as `gpu_stream.py --cold-start` saves
it), `telesum produce`'s `short` records, EOS off (random weights), the stop string and sampling as
the command's defaults. Each size is run as a whole process (process start to exit) and, in this
process, through one Summarizer built by the commands' own start-up (`start_summarizer`), started once
and fed each size in turn. The steady rate of each is the difference of the two sizes:
(N2 - N1) / (t2 - t1), so the start-up, the pipeline's filling and its last, thinning decode steps
cancel out; the single-size rate N / t is reported beside it. Writes DIR/gpu_cli.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_job import records_for  # noqa: E402
from gpu_stream import shape_model_dir  # noqa: E402

from worker.benchmarks.gpu_util import GpuBusySampler, HostCpuShares, host_cpu  # noqa: E402

WORK = Path("/tmp/telesum-cli")


def cli_run(model_dir: Path, tokenizer: Path, data: Path, new_tokens: int, env: dict, device: str,
            spy: Path | None = None, engine: dict | None = None) -> dict:
    """engine: more engine settings, {"dtype": "fp8", ...}, given as the command's flags."""
    output = data.with_suffix(".out.jsonl")
    output.unlink(missing_ok=True)
    output.with_name(output.name + ".rejects.jsonl").unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "worker.cli", "summarize", str(data), "-o", str(output), "--model", str(model_dir),
           "--tokenizer", str(tokenizer), "--max-new-tokens", str(new_tokens), "--device", device, "--no-progress"]
    for name, value in (engine or {}).items():
        cmd += [f"--{name.replace('_', '-')}", str(value)]
    if spy is not None:
        cmd = ["py-spy", "record", "-r", "50", "--idle", "--threads", "--nonblocking", "-f", "raw", "-o", str(spy),
               "--"] + cmd
    t0 = time.perf_counter()
    with busy_sampler(device) as busy, HostCpuShares() as host:
        proc = subprocess.run(cmd, env=env, cwd=WORK, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    summaries = sum(1 for _ in output.open()) if output.exists() else 0
    return {"seconds": seconds, "returncode": proc.returncode, "summaries": summaries, **busy_of(busy),
            "host_cpu": host.shares(),
            "log_tail": proc.stdout[-1500:] + proc.stderr[-1500:] if proc.returncode or spy else ""}


def busy_sampler(device: str):
    """NVML's busy share sampled over a run (none on the CPU)."""
    if device == "cpu":
        return contextlib.nullcontext()
    return GpuBusySampler()


def busy_of(busy) -> dict:
    """The GPU's busy share over the run's second half (the steady state: start-up and filling are in
    the first) and over the whole run."""
    if busy is None:
        return {}
    return {"gpu_busy_second_half": busy.busy_fraction(0.5, 0.95), "gpu_busy_whole_run": busy.busy_fraction(0.0, 1.0)}


def in_process_runs(model_dir: Path, tokenizer: Path, files: dict[int, Path], new_tokens: int, device: str,
                    switch_intervals: list[float] = (), engine: dict | None = None, engine_alone: bool = False) -> dict:
    """One Summarizer as the command builds it; each size fed in turn after a warm-up, timed to its last result.
    Then, for each of `switch_intervals`, both sizes again with the interpreter's GIL switch interval
    set to it (under "switch_<turn>_<seconds>"); with `engine_alone`, `engine_alone_runs` (under
    "engine_alone")."""
    from worker.commands.startup import start_summarizer
    from worker.messages import TelemetryRecord
    from worker.settings.load import from_values

    settings = from_values({"engine.model": str(model_dir), "engine.tokenizer": str(tokenizer),
                            "engine.max_new_tokens": new_tokens, "engine.device": device,
                            **{f"engine.{k}": v for k, v in (engine or {}).items()}})
    summarizer = start_summarizer(settings, "summarize").summarizer
    summarizer.start()
    decoder = msgspec.json.Decoder(TelemetryRecord)
    out = {}
    try:
        warm = [decoder.decode(line) for line in files[min(files)].read_bytes().splitlines()[:300]]
        list(summarizer.results_in_order(warm))
        loaded = {size: [decoder.decode(line) for line in path.read_bytes().splitlines()] for size, path in files.items()}

        def sizes() -> dict:
            runs = {}
            for size, records in sorted(loaded.items()):
                t0 = time.perf_counter()
                with busy_sampler(device) as busy, HostCpuShares() as host:
                    failed = sum(isinstance(r, Exception) for _, r in summarizer.results_in_order(records))
                runs[size] = {"seconds": time.perf_counter() - t0, "failed": failed, **busy_of(busy),
                              "host_cpu": host.shares()}
            return runs

        out.update(sizes())
        out["switch_interval_s"] = sys.getswitchinterval()  # as the Summarizer left it
        serving = sys.getswitchinterval()
        for turn, interval in enumerate(switch_intervals):  # an interval may come back: alternate them
            sys.setswitchinterval(interval)
            try:
                runs = sizes()
            finally:
                sys.setswitchinterval(serving)
            out[f"switch_{turn}_{interval:g}"] = {**runs, "switch_interval_s": interval,
                                                  "steady_records_per_s": steady(runs)}
            print(f"in-process, switch interval {interval:g} s: steady {steady(runs)}", flush=True)
        if engine_alone:
            runs = engine_alone_runs(summarizer, sorted(loaded), device)
            out["engine_alone"] = {**runs, "steady_records_per_s": steady(runs)}
            print(f"in-process, the engine alone: steady {steady(runs)}", flush=True)
    finally:
        summarizer.close(drain=False)
    return out


def engine_alone_runs(summarizer, sizes: list[int], device: str) -> dict:
    """Each size's records (others than the Summarizer's runs had, as many, in the same way: the prefix
    cache has seen none of them) through the Summarizer's own engine (its budgets, prefix cache,
    sampling) and nothing else: prompts prepared beforehand, untimed; added from this thread, finished
    sequences read off the engine's queue. No feeder, no pool answers, no summaries written: the GPU
    loop with the GIL nearly to itself, the ceiling of a GPU loop in a process of its own."""
    from worker.dispatch import Backpressure

    fresh = records_for("short", max(sizes), seed=29)
    runs = {}
    for size in sizes:
        prompts = [f.result().prompt for f in [summarizer.preprocessor.submit(r) for r in fresh[:size]]]
        t0 = time.perf_counter()
        with busy_sampler(device) as busy, HostCpuShares() as host:
            for prompt in prompts:
                while True:
                    try:
                        summarizer.engine.add(prompt, summarizer.params)
                        break
                    except Backpressure:
                        summarizer.dispatcher.wait_for_room(len(prompt), 0.05)
            failed = sum(summarizer.engine.finished.get().error is not None for _ in prompts)
        runs[size] = {"seconds": time.perf_counter() - t0, "failed": failed, **busy_of(busy),
                      "host_cpu": host.shares()}
    return runs


def steady(runs: dict) -> float | None:
    sized = sorted((k, v) for k, v in runs.items() if isinstance(k, int))
    (n1, r1), (n2, r2) = sized[0], sized[-1]
    return (n2 - n1) / (r2["seconds"] - r1["seconds"]) if r2["seconds"] > r1["seconds"] else None


def chart(files: list[Path], out: Path) -> None:
    """Bars of each result's steady rates, the process's beside the in-process Summarizer's (and its
    engine alone's, where run), by label."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [json.loads(f.read_text()) for f in files]
    for r in results:  # --engine-alone's rate, beside the others
        r["engine_alone_steady_records_per_s"] = r.get("in_process", {}).get("engine_alone", {}).get(
            "steady_records_per_s")
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(results)), 4))
    kinds = [(key, name) for key, name in (("cli_steady_records_per_s", "telesum summarize"),
                                           ("in_process_steady_records_per_s", "Summarizer in one process"),
                                           ("engine_alone_steady_records_per_s", "its engine alone"))
             if any(r.get(key) is not None for r in results)]
    width = 0.8 / len(kinds)
    for offset, (key, name) in enumerate(kinds):
        ran = [i for i, r in enumerate(results) if r.get(key) is not None]  # in-process-only runs have no CLI bar
        bars = ax.bar([i + (offset - (len(kinds) - 1) / 2) * width for i in ran], [results[i][key] for i in ran],
                      width=width, label=name)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(range(len(results)), [f"{r['label'].replace('_', ' ')}\n{r.get('shape', 'smollm2')}, "
                                        f"{r['new_tokens']} tokens" for r in results], fontsize=7)
    ax.set_ylabel("records/s, steady")
    ax.set_title(f"short records, {results[0]['date'][:10]}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path)
    ap.add_argument("--chart-from", type=Path, nargs="+", help="draw DIR/gpu_cli.png from these results, run nothing")
    ap.add_argument("--sizes", default="1000,7000")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--spy", action="store_true")
    ap.add_argument("--switch-intervals", default="", help="in-process runs again at these GIL switch intervals (s)")
    ap.add_argument("--cpu", action="store_true", help="on the CPU: the method, not the figures")
    ap.add_argument("--label", default="", help="a name for this code in the results (e.g. a commit)")
    ap.add_argument("--in-process-only", action="store_true", help="skip the `telesum summarize` processes")
    ap.add_argument("--shape", default="smollm2", help="gpu_job.SHAPES: smollm2 or qwen7b")
    ap.add_argument("--dtype", default="auto", help="engine.dtype: auto or fp8")
    ap.add_argument("--kv-cache", default="auto", help="engine.kv_cache: auto or fp8")
    ap.add_argument("--engine-alone", action="store_true", help="then the in-process sizes through the engine alone")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.chart_from:
        chart(args.chart_from, args.out / "gpu_cli.png")
        return
    if args.tokenizer is None:
        ap.error("--tokenizer is required to run")
    tokenizer = args.tokenizer.resolve()
    WORK.mkdir(parents=True, exist_ok=True)
    import torch

    device = "cpu" if args.cpu else "cuda"
    model_dir = shape_model_dir(WORK, cpu=args.cpu, shape=args.shape)
    engine = {name: value for name, value in (("dtype", args.dtype), ("kv_cache", args.kv_cache)) if value != "auto"}
    sizes = sorted(int(s) for s in args.sizes.split(","))
    records = records_for("short", sizes[-1])
    files = {}
    for size in sizes:
        files[size] = WORK / f"records_{size}.jsonl"
        files[size].write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in records[:size]))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XDG_CACHE_HOME": str(WORK / "cache"),
           "PYTHONPYCACHEPREFIX": str(WORK / "cache" / "pycache")}
    res: dict = {"label": args.label, "shape": args.shape, "engine": engine, "sizes": sizes, "new_tokens": args.new_tokens,
                 "device": "cpu" if args.cpu else torch.cuda.get_device_name(), "host": host_cpu(),
                 "command": "python bench/gpu_cli.py " + " ".join(sys.argv[1:]),
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if not args.in_process_only:
        first = cli_run(model_dir, tokenizer, files[sizes[0]], args.new_tokens, env, device, engine=engine)  # warm
        if first["returncode"]:
            sys.exit(f"telesum summarize failed:\n{first['log_tail']}")
        res["cli"] = {size: cli_run(model_dir, tokenizer, files[size], args.new_tokens, env, device, engine=engine)
                      for size in sizes}
        res["cli_steady_records_per_s"] = steady(res["cli"])
        print("cli", json.dumps(res["cli"]), "steady", res["cli_steady_records_per_s"], flush=True)
    os.environ["XDG_CACHE_HOME"] = env["XDG_CACHE_HOME"]  # the processes' probe cache: the same budgets
    intervals = [float(s) for s in args.switch_intervals.split(",") if s]
    res["in_process"] = in_process_runs(model_dir, tokenizer, files, args.new_tokens, device, intervals, engine,
                                        engine_alone=args.engine_alone)
    res["in_process_steady_records_per_s"] = steady(res["in_process"])
    for where in ("cli", "in_process"):
        for size, run in res.get(where, {}).items():
            if isinstance(size, int):
                run["records_per_s"] = size / run["seconds"]
    print("in-process", json.dumps(res["in_process"]), "steady", res["in_process_steady_records_per_s"], flush=True)
    if args.spy:
        res["cli_spied"] = cli_run(model_dir, tokenizer, files[sizes[-1]], args.new_tokens, env, device,
                                   spy=args.out / "cli_spy.txt", engine=engine)
    name = f"gpu_cli{'_' + args.label if args.label else ''}.json"
    (args.out / name).write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k.endswith("per_s")}))


if __name__ == "__main__":
    main()
