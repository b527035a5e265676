"""Streaming latency on one GPU: records arriving as a Poisson stream at fractions of the capacity.

    python bench/gpu_stream.py --out DIR --tokenizer TOKENIZER_DIR [--shapes smollm2,qwen7b]
        [--loads 0.05,0.2,0.5,0.8,0.95] [--seconds 20] [--unbounded-s 60] [--cold-start]
    python bench/gpu_stream.py --out DIR --chart-from DIR/gpu_stream.json   # the chart alone, no GPU
    python bench/gpu_stream.py --out DIR --cpu [--cold-start --tokenizer TOKENIZER_DIR]  # correctness only

Measured the way vLLM's serving benchmark does (a request-rate sweep): per shape, the batch
capacity first (every record queued at once), then for each load a Poisson stream at that fraction
of it. The Summarizer is built exactly as `telesum worker` builds it (settings -> probed budgets,
prefix reuse on); at most `2 x max_seqs_per_bin` records are inside it at once, as the worker's
`max_in_flight` keeps them, so time spent waiting outside counts. Latency = scheduled arrival ->
Summary. `telesum produce --profile short` records, random bf16 weights of the model's shape, the
real SmolLM2 tokenizer, 64 new tokens, the production sampling with the stop string off (every
summary runs to 64 tokens). Each run also records where the GPU loop's time went (StepTrace).
`--unbounded-s`: a caller that submits at 2x capacity without the in-flight bound, retrying on
Backpressure (a library user of `Summarizer.submit`); it counts failed records.
`--capacity-variants` / `--variant-loads`: the capacity, and loads, again with scheduler variants
(VARIANTS: mixed steps, bins cut to a step's size, decode steps each launched after the one before
is read...), side by side; `--rounds N` alternates the loads and the variants' loads N times.
`--cold-start`: process start -> first summary of `telesum summarize` (SmolLM2 shape saved as a
model folder), with empty caches and again with the caches the first run left; each with the
start-up phases its log reported (`startup_breakdown`) and the time from the last phase to the first
summary line. With --cpu: the same on the CPU with 3 records and 8 new tokens.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from worker.benchmarks.gpu_util import HostCpuShares, host_cpu  # noqa: E402
from worker.engine.bins import split_bin_at  # noqa: E402 - a scheduler variant's value

LOADS = (0.05, 0.2, 0.5, 0.8, 0.95)
CAPACITY_RECORDS = {"smollm2": 4000, "qwen7b": 500, "tiny": 24}


def stream_params(new_tokens: int):
    from worker.prompts.sampling import default_sampling

    return dataclasses.replace(default_sampling(new_tokens), stop=())


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def capacity_run(summarizer, records) -> dict:
    """Every record queued at once (the offline iteration): records/s."""
    trace = getattr(summarizer, "step_trace", None)
    if trace is not None:
        trace.clear()
    t0 = time.perf_counter()
    with HostCpuShares() as host:
        failed = sum(isinstance(r, Exception) for _, r in summarizer.results_in_order(records))
    dt = time.perf_counter() - t0
    out = {"records": len(records), "failed": failed, "seconds": dt, "records_per_s": len(records) / dt,
           "host_cpu": host.shares()}
    if trace is not None:
        out["steps"] = trace.summary(since_s=t0)
    return out


# Scheduler settings compared side by side (attributes of worker.engine.scheduler.Scheduler; a
# dotted name is an attribute of one of its parts).
VARIANTS = {
    "separate": {"mixed_steps": False, "_split_bin": None},  # the default: separate steps, whole bins
    "mixed": {"mixed_steps": True, "_split_bin": split_bin_at},  # prefill and decode rows in one forward
    "mixed_uncut": {"mixed_steps": True, "_split_bin": None},    # ... bins never cut to a step's size
    "cut": {"_split_bin": split_bin_at},                  # separate steps, parts alternating with decode
    "cut_25ms": {"_split_bin": split_bin_at, "pacer.step_target_s": 0.025},  # ... parts of half that step
    "decode_in_turn": {"decodes_ahead": False},  # each decode step launched after the one before is read
}


def _owner(scheduler, name: str):
    *parts, attr = name.split(".")
    for part in parts:
        scheduler = getattr(scheduler, part)
    return scheduler, attr


@contextlib.contextmanager
def _variant(scheduler, name: str):
    # max_mixed_rows too: an out-of-memory mixed step of one variant must not limit the next one's.
    saved = {k: getattr(*_owner(scheduler, k)) for k in [*VARIANTS[name], "max_mixed_rows"]}
    for k, v in VARIANTS[name].items():
        setattr(*_owner(scheduler, k), v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(*_owner(scheduler, k), v)


class _Collector(threading.Thread):
    """Polls the summarizer and stamps each answer with its arrival time on this clock."""

    def __init__(self, summarizer) -> None:
        super().__init__(name="bench-poll", daemon=True)
        self.summarizer = summarizer
        self.answers: dict[int, tuple[float, object]] = {}
        self.cv = threading.Condition()
        self.stop = False

    def run(self) -> None:
        while not self.stop:
            got = self.summarizer.poll(0.02)
            if got:
                now = time.perf_counter()
                with self.cv:
                    for rid, result in got:
                        self.answers[rid] = (now, result)
                    self.cv.notify_all()


def stream_run(summarizer, records, *, rate: float, seconds: float, in_flight_bound: int | None,
               seed: int = 0, drain_timeout_s: float = 300.0) -> dict:
    """A Poisson stream at `rate` records/s for `seconds`; latency from each scheduled arrival."""
    from worker.dispatch import Backpressure

    rng = np.random.default_rng(seed)
    n = max(10, int(rate * seconds))
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    collector = _Collector(summarizer)
    collector.start()
    trace = getattr(summarizer, "step_trace", None)
    if trace is not None:
        trace.clear()
    backpressured = 0
    host = HostCpuShares().start()  # stopped once every answer is in
    t0 = time.perf_counter()
    for i in range(n):
        if in_flight_bound is None and time.perf_counter() - t0 > seconds:
            n = i  # an unbounded caller held back by backpressure: the stream ends on time
            break
        due = t0 + arrivals[i]
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        if in_flight_bound is not None:
            with collector.cv:
                collector.cv.wait_for(lambda: i - len(collector.answers) < in_flight_bound)
        while True:
            try:
                summarizer.submit(i, records[i % len(records)])
                break
            except Backpressure:
                backpressured += 1
                time.sleep(0.002)
    submitted_s = time.perf_counter() - t0
    with collector.cv:
        collector.cv.wait_for(lambda: len(collector.answers) >= n, timeout=drain_timeout_s)
    host.stop()
    collector.stop = True
    collector.join()
    latencies, phases, failed, reasons = [], {"queued_s": [], "prefill_s": [], "decode_s": []}, 0, {}
    for rid, (t, result) in collector.answers.items():
        if isinstance(result, Exception):
            failed += 1
            reasons[type(result).__name__] = reasons.get(type(result).__name__, 0) + 1
            continue
        latencies.append(t - (t0 + arrivals[rid]))
        for name in phases:
            phases[name].append(getattr(result.timings, name))
    out = {"offered_rate": rate, "records": n, "answered": len(collector.answers), "failed": failed,
           "failure_types": reasons, "submit_seconds": submitted_s,
           "achieved_rate": n / submitted_s, "backpressure_retries": backpressured,
           "p50_s": percentile(latencies, 0.5), "p90_s": percentile(latencies, 0.9),
           "p99_s": percentile(latencies, 0.99), "mean_s": statistics.fmean(latencies) if latencies else None,
           **{f"median_{k}": statistics.median(v) if v else None for k, v in phases.items()},
           "host_cpu": host.shares()}
    if trace is not None:
        out["steps"] = trace.summary(since_s=t0)
    return out


def build_cpu_loaded(new_tokens: int):
    from worker.commands.runtime import load_model
    from worker.settings.load import from_values

    return load_model(from_values({"engine.model": "tiny", "engine.device": "cpu",
                                   "engine.max_new_tokens": new_tokens}).settings.engine)


def shape_sweep(shape: str, loaded, records, *, loads, seconds: float, new_tokens: int,
                unbounded_s: float, log, switch_interval_loads=(), unbounded=True, eager_loads=(),
                variant_loads: dict | None = None, capacity_variants=(), rounds: int = 1,
                into: dict | None = None) -> dict:
    from gpu_job import worker_summarizer
    from worker.engine.step_trace import StepTrace

    summarizer = worker_summarizer(loaded, stream_params(new_tokens), new_tokens)
    summarizer.step_trace = StepTrace()
    summarizer.engine.step_observers.append(summarizer.step_trace.observe)
    summarizer.start()
    res = into if into is not None else {}  # filled as it goes: a run cut short keeps what it measured
    res.update({"budgets": getattr(summarizer, "worker_budgets", None),
                "max_seqs_per_bin": summarizer.max_seqs_per_bin})
    warm = records[: min(300, len(records))]
    list(summarizer.results_in_order(warm))  # compile, capture graphs, start the preprocessing pool
    n_cap = CAPACITY_RECORDS.get(shape, 1000)
    cap_records = (records * (1 + n_cap // len(records)))[:n_cap]
    scheduler = summarizer.engine.scheduler
    for name in capacity_variants:  # side by side, before the default's capacity sets the loads
        with _variant(scheduler, name):
            res[f"capacity_{name}"] = capacity_run(summarizer, cap_records)
        log(shape, f"capacity, {name}", res[f"capacity_{name}"])
    res["capacity"] = capacity_run(summarizer, cap_records)
    capacity = res["capacity"]["records_per_s"]
    log(shape, "capacity", res["capacity"])
    bound = 2 * summarizer.max_seqs_per_bin
    for round_ in range(1, rounds + 1):  # the default's loads, then each variant's, alternated
        suffix = "" if round_ == 1 else f"_round{round_}"
        for load in loads:
            r = stream_run(summarizer, records, rate=load * capacity, seconds=seconds, in_flight_bound=bound)
            r["load"] = load
            res[f"load_{load:g}{suffix}"] = r
            log(shape, f"load {load:g}{suffix}", r)
        for name, loads_of_variant in (variant_loads or {}).items():  # side by side, at the default's capacity
            with _variant(scheduler, name):
                for load in loads_of_variant:
                    r = stream_run(summarizer, records, rate=load * capacity, seconds=seconds, in_flight_bound=bound)
                    r["load"] = load
                    res[f"{name}_{load:g}{suffix}"] = r
                    log(shape, f"load {load:g}, {name}{suffix}", r)
    default_switch = sys.getswitchinterval()
    for load in switch_interval_loads:  # the same load with the GIL handed over 10x more often
        sys.setswitchinterval(default_switch / 10)
        try:
            r = stream_run(summarizer, records, rate=load * capacity, seconds=seconds, in_flight_bound=bound)
        finally:
            sys.setswitchinterval(default_switch)
        r["load"] = load
        res[f"switch_interval_tenth_{load:g}"] = r
        log(shape, f"load {load:g}, switch interval / 10", r)
    for load in eager_loads:  # the same load with the elementwise ops eager (no Triton kernels)
        from worker.model.fused import set_compile_enabled

        set_compile_enabled(False)
        try:
            r = stream_run(summarizer, records, rate=load * capacity, seconds=seconds, in_flight_bound=bound)
        finally:
            set_compile_enabled(True)
        r["load"] = load
        res[f"eager_elementwise_{load:g}"] = r
        log(shape, f"load {load:g}, eager elementwise ops", r)
    if unbounded_s > 0 and unbounded:
        r = stream_run(summarizer, records, rate=2 * capacity, seconds=unbounded_s, in_flight_bound=None)
        res["unbounded_2x"] = r
        log(shape, "unbounded 2x", r)
    summarizer.close(drain=False)
    del summarizer
    gc.collect()
    return res


_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ [\w.]+: (.*)$")
_PHASE = re.compile(r"^start-up: (.+) in ([\d.]+) s$")
_LOADED = re.compile(r"^loaded .* in ([\d.]+) s$")


def startup_breakdown(lines: list[str], t0_wall: float, first_summary_s: float | None) -> dict:
    """Where the seconds from process start to the first summary went, from the start-up log lines:
    each phase with its length and when it ended (seconds since the process started), the time
    before the first phase (interpreter, imports, settings), between phases, and from the last
    phase's end to the first summary line in the output file."""
    phases, loader_s = [], None
    for line in lines:
        m = _LOG_LINE.match(line.strip())
        if not m:
            continue
        stamp = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if p := _PHASE.match(m.group(2)):
            phases.append({"phase": p.group(1), "seconds": float(p.group(2)), "ends_at_s": round(stamp - t0_wall, 2)})
        elif (p := _LOADED.match(m.group(2))) and loader_s is None:
            loader_s = float(p.group(1))
    out = {"phases": phases, "loader_s": loader_s, "first_summary_s": first_summary_s}
    if phases:
        out["before_first_phase_s"] = round(phases[0]["ends_at_s"] - phases[0]["seconds"], 2)
        out["between_phases_s"] = round(phases[-1]["ends_at_s"] - out["before_first_phase_s"]
                                        - sum(p["seconds"] for p in phases), 2)
        if first_summary_s is not None:
            out["after_start_up_s"] = round(first_summary_s - phases[-1]["ends_at_s"], 2)
    return out


def shape_model_dir(work: Path, *, cpu: bool = False, shape: str = "smollm2") -> Path:
    """work/<shape>-shape: a Hugging Face model folder of `gpu_job.SHAPES[shape]` (SmolLM2-135M's by
    default) with random bf16 weights (saved once; later calls reuse it)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from gpu_job import SHAPES

    model_dir = work / f"{shape}-shape"
    if not (model_dir / "config.json").exists():
        fields = {k: v for k, v in SHAPES[shape][1].items() if k != "model_type"}
        config_cls, model_cls = ((Qwen2Config, Qwen2ForCausalLM) if SHAPES[shape][1].get("model_type") == "qwen2"
                                 else (LlamaConfig, LlamaForCausalLM))
        with torch.device("cpu" if cpu else "cuda"):
            model = model_cls(config_cls(**fields)).to(torch.bfloat16)
        model.save_pretrained(model_dir)
        del model
        if not cpu:
            torch.cuda.empty_cache()
    return model_dir


def cold_start(out: Path, tokenizer_dir: Path, log, *, cpu: bool = False, into: dict | None = None) -> dict:
    """`telesum summarize` as a process on a SmolLM2-shaped model folder: start -> first summary,
    with empty caches (cold) and then with what the cold run left (warm), each with its start-up
    breakdown. cpu: on the CPU, 3 records and 8 new tokens (the method, not the figure)."""
    from gpu_job import records_for
    import msgspec

    device = "cpu" if cpu else "cuda"
    work = Path("/tmp/telesum-cold-cpu" if cpu else "/tmp/telesum-cold")
    model_dir = shape_model_dir(work, cpu=cpu)
    data = work / "records.jsonl"
    data.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in records_for("short", 3 if cpu else 600)))
    cache = work / "cache"
    subprocess.run(["rm", "-rf", str(cache)], check=True)
    res = into if into is not None else {}  # filled as it goes: a run cut short keeps the cold figures
    for name in ("cold", "warm"):
        output = work / f"out_{name}.jsonl"
        output.unlink(missing_ok=True)
        # Python's bytecode too: the GPU host's torch and transformers ship no .pyc files (compiling
        # them took 11 s of a start), where an installed image has them.
        env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPYCACHEPREFIX": str(cache / "pycache"),
               "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, "-m", "worker.cli", "summarize", str(data), "-o", str(output), "--model",
               str(model_dir), "--tokenizer", str(Path(tokenizer_dir).resolve()), "--max-new-tokens",
               "8" if cpu else "64", "--device", device, "--no-progress"]
        t0, t0_wall = time.perf_counter(), time.time()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                cwd=work)  # the installed package, not a source tree without its native module
        first = None
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        reader.start()
        while proc.poll() is None:
            if time.perf_counter() - t0 > 200:  # a start that hangs is a result too; the sweep still runs
                proc.kill()
            if first is None and output.exists() and output.stat().st_size > 0:
                first = time.perf_counter() - t0
            time.sleep(0.05)
        total = time.perf_counter() - t0
        reader.join(5)
        if first is None and output.exists() and output.stat().st_size > 0:
            first = total
        (out / f"cold_start_{'cpu_' if cpu else ''}{name}.log").write_text("".join(lines))
        res[name] = {"first_summary_s": first, "process_s": total, "returncode": proc.returncode,
                     "summaries": sum(1 for _ in output.open()) if output.exists() else 0,
                     "breakdown": startup_breakdown(lines, t0_wall, first),
                     "startup_log": [ln.strip() for ln in lines if "start-up" in ln or "probe" in ln][:20]}
        log("cold start", name, res[name])
    return res


def chart(res: dict, path: Path, baseline: dict | None = None) -> None:
    """p50 and p99 latency against offered load, one panel per shape; a baseline run's p50/p99 dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = [k for k, v in res.items() if isinstance(v, dict) and "capacity" in v]
    if not shapes:  # a cold start alone
        if "cold_start" in res:
            startup_chart(res, path, baseline)
        return
    fig, axes = plt.subplots(1, len(shapes), figsize=(6 * len(shapes), 4.5), squeeze=False)
    for ax, shape in zip(axes[0], shapes):
        runs = sorted((v for k, v in res[shape].items() if k.startswith("load_")), key=lambda v: v["load"])
        loads = [100 * v["load"] for v in runs]
        for q, style in (("p50_s", "o-"), ("p90_s", "s--"), ("p99_s", "^-")):
            ax.plot(loads, [v[q] for v in runs], style, label=q.removesuffix("_s"))
        if baseline is not None and isinstance(baseline.get(shape), dict):
            base = sorted((v for k, v in baseline[shape].items() if k.startswith("load_")), key=lambda v: v["load"])
            for q, color in (("p50_s", "C0"), ("p99_s", "C2")):
                ax.plot([100 * v["load"] for v in base], [v[q] for v in base], ":", color=color, alpha=0.6,
                        label=f"{q.removesuffix('_s')} before ({baseline.get('date', '')})")
        ax.set_xlabel("offered load (% of the measured batch capacity)")
        ax.set_ylabel("latency, arrival -> summary (s)")
        cap = res[shape]["capacity"]["records_per_s"]
        ax.set_title(f"{shape}: capacity {cap:.0f} records/s")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"telesum streaming latency: {res.get('device')}, {res.get('date')}, {res.get('new_tokens')} new tokens")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def variants_chart(res: dict, path: Path) -> bool:
    """p50 and p99 of every stream run of a shape, in the order they ran (the default's loads and
    the variants', round after round), one panel per shape; False (nothing drawn) without variants."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = {k: [(name, r) for name, r in v.items() if isinstance(r, dict) and "p99_s" in r]
              for k, v in res.items() if isinstance(v, dict) and "capacity" in v}
    shapes = {k: runs for k, runs in shapes.items() if any(not name.startswith("load_") for name, _ in runs)}
    if not shapes:
        return False
    fig, axes = plt.subplots(1, len(shapes), figsize=(7 * len(shapes), 4.5), squeeze=False)
    for ax, (shape, runs) in zip(axes[0], shapes.items()):
        x = np.arange(len(runs))
        colors = [("C0" if name.startswith("load_") else "C1") for name, _ in runs]
        ax.bar(x, [r["p99_s"] for _, r in runs], color=colors, alpha=0.45, label="p99 (blue: default)")
        ax.bar(x, [r["p50_s"] for _, r in runs], color=colors, label="p50")
        ax.set_xticks(x, [f"{name}\n{r['offered_rate']:.0f}/s" for name, r in runs], fontsize=7, rotation=30)
        ax.set_ylabel("latency, arrival -> summary (s)")
        ax.set_title(f"{shape}: runs in the order they ran")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    fig.suptitle(f"telesum streaming, default against variants: {res.get('device')}, {res.get('date')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def startup_chart(res: dict, path: Path, baseline: dict | None = None) -> None:
    """Process start -> first summary, cold and warm, as stacked phases (a baseline run's first)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = []
    for run, tag in ((baseline, "before"), (res, "after" if baseline else "")):
        for name in ("cold", "warm"):
            r = (run or {}).get("cold_start", {}).get(name)
            if r and "breakdown" in r:
                rows.append((f"{name} {tag} ({run.get('date', '')})".replace("  ", " "), r))
    fig, ax = plt.subplots(figsize=(11, 1.0 + 0.7 * len(rows)))
    labels: list[str] = []
    for i, (label, r) in enumerate(rows):
        b = r["breakdown"]
        parts = [("before the first phase", b["before_first_phase_s"])]
        parts += [(p["phase"].split(" (")[0], p["seconds"]) for p in b["phases"]]
        parts.append(("to the first summary", b["after_start_up_s"]))
        left = 0.0
        for j, (phase, seconds) in enumerate(parts):
            ax.barh(i, seconds, left=left, color=f"C{j}", label=phase if phase not in labels else None)
            labels.append(phase)
            left += seconds
        ax.text(r["first_summary_s"], i, f" {r['first_summary_s']:.1f} s", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from process start (telesum summarize, SmolLM2 shape)")
    fig.legend(fontsize=7, ncol=7, loc="lower center")
    fig.suptitle(f"telesum start-up: {res.get('device')}")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)


def _parse_variant_loads(text: str) -> dict[str, list[float]]:
    out = {}
    for item in filter(None, text.split(";")):
        name, _, loads = item.partition(":")
        if name not in VARIANTS:
            raise SystemExit(f"--variant-loads: unknown variant {name!r} (one of {', '.join(VARIANTS)})")
        out[name] = [float(x) for x in loads.split(",") if x]
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path, help="the SmolLM2 tokenizer saved as a folder (GPU runs, --cold-start)")
    ap.add_argument("--chart-from", type=Path)
    ap.add_argument("--baseline", type=Path, help="with --chart-from: an earlier run drawn dotted")
    ap.add_argument("--shapes", default="smollm2,qwen7b")
    ap.add_argument("--loads", default=",".join(map(str, LOADS)))
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each load's stream")
    ap.add_argument("--unbounded-s", type=float, default=0.0, help="2x capacity without the bound, for this long")
    ap.add_argument("--unbounded-shapes", default="smollm2", help="shapes that run the unbounded caller")
    ap.add_argument("--cold-start", action="store_true")
    ap.add_argument("--eager-check-loads", default="", help="loads run again with the elementwise ops eager")
    ap.add_argument("--gil-check-loads", default="", help="loads run again with sys.setswitchinterval / 10")
    ap.add_argument("--variant-loads", default="",
                    help="NAME:LOADS[;NAME:LOADS]: those loads again with a scheduler variant, e.g. separate:0.5,0.8")
    ap.add_argument("--capacity-variants", default="",
                    help=f"capacity runs of these scheduler variants first ({', '.join(VARIANTS)})")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the loads and the variants' loads this many times, alternated (keys _round2, ...)")
    ap.add_argument("--cpu", action="store_true", help="tiny random model on CPU: correctness only")
    ap.add_argument("--new-tokens", type=int, default=None)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.chart_from:
        base = json.loads(args.baseline.read_text()) if args.baseline else None
        res = json.loads(args.chart_from.read_text())
        chart(res, args.out / "gpu_stream.png", base)
        variants_chart(res, args.out / "gpu_stream_variants.png")
        return {}
    from gpu_job import build_loaded, records_for

    import torch

    new_tokens = args.new_tokens or (8 if args.cpu else 64)
    res: dict = {"device": "cpu" if args.cpu else torch.cuda.get_device_name(), "host": host_cpu(),
                 "torch": torch.__version__,
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "new_tokens": new_tokens,
                 "command": "python bench/gpu_stream.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    out_json = args.out / ("cpu_stream.json" if args.cpu else "gpu_stream.json")

    def log(*parts) -> None:
        print(*(json.dumps(p) if isinstance(p, dict) else p for p in parts), flush=True)
        out_json.write_text(json.dumps(res, indent=2))

    loads = [float(x) for x in args.loads.split(",") if x]
    if args.cpu:
        loaded = build_cpu_loaded(new_tokens)
        records = records_for("short", 16)
        res["tiny"] = shape_sweep("tiny", loaded, records, loads=loads, seconds=args.seconds,
                                  new_tokens=new_tokens, unbounded_s=args.unbounded_s, log=log,
                                  variant_loads=_parse_variant_loads(args.variant_loads), rounds=args.rounds,
                                  capacity_variants=[x for x in args.capacity_variants.split(",") if x])
        if args.cold_start:
            cold_start(args.out, args.tokenizer, log, cpu=True, into=res.setdefault("cold_start", {}))
    else:
        from worker.model.tokenizer import load_tokenizer

        if args.cold_start:  # first, while nothing of this process holds the GPU
            cold_start(args.out, args.tokenizer, log, into=res.setdefault("cold_start", {}))
        tokenizer = load_tokenizer(args.tokenizer)
        records = records_for("short", 2000)
        for shape in filter(None, args.shapes.split(",")):
            loaded = build_loaded(shape, tokenizer)
            try:
                res[shape] = {}
                shape_sweep(shape, loaded, records, into=res[shape], loads=loads, seconds=args.seconds,
                                         new_tokens=new_tokens, unbounded_s=args.unbounded_s, log=log,
                                         switch_interval_loads=[float(x) for x in args.gil_check_loads.split(",") if x],
                                         unbounded=shape in args.unbounded_shapes.split(","),
                                         eager_loads=[float(x) for x in args.eager_check_loads.split(",") if x],
                                         variant_loads=_parse_variant_loads(args.variant_loads), rounds=args.rounds,
                                         capacity_variants=[x for x in args.capacity_variants.split(",") if x])
            except Exception as exc:  # report, do not hide: the other shape still runs
                res[shape] = {"error": repr(exc)[:500]}
                log(shape, "error", res[shape])
            del loaded
            gc.collect()
            torch.cuda.empty_cache()
        chart(res, args.out / "gpu_stream.png")
        variants_chart(res, args.out / "gpu_stream_variants.png")
    log("done")
    return res


if __name__ == "__main__":
    main()
