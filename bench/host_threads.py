"""Where the serving process's CPU goes per record, thread by thread, beside the model's loop.

    python bench/host_threads.py --out DIR --tokenizer TOKENIZER_DIR [--workers 2] [--records 1000]
                                 [--new-tokens 64]

The Summarizer as the commands build it (`worker.commands.runtime`), with a tiny random model on the
CPU (`engine.model tiny`, torch on one thread: the loop's own work is not the subject here) and a
preprocessing pool of `--workers` processes as on a GPU host, fed `telesum produce`'s `short` records
all at once through `results_in_order`. Each thread's CPU time (from /proc) per record: the main
thread (submitting, polling, results), the feeder, the pool's two threads (results in, tasks out),
the model's loop and the rest (the packing thread, native). Every thread but the loop holds the GIL
the loop launches with on a GPU, so their sum is the Python a record costs the loop's process. Run
in one process, alternated `--rounds` times: each summary's prose written by the pool (the default),
then on the polling thread. The stop string is off and the random model's EOS rare, so records decode about
`--new-tokens` (the JSON says how many). The CPU's bins hold a record or two, so records finish
alone; `--bin-tokens 65536 --bin-seqs 1024` (a GPU's) packs dozens to a bin, which finish together as
on a GPU. Writes DIR/host_threads.json and .png (`_<N>` for N new tokens other than 64,
`_bins<T>` for `--bin-tokens`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import threading
import time
from pathlib import Path

def thread_cpu_s() -> dict[int, float]:
    """CPU seconds of each of this process's threads, by native id (schedstat: nanoseconds, where
    stat's ticks are 10 ms)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            out[int(tid)] = int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0]) / 1e9
        except FileNotFoundError:  # ended meanwhile
            continue
    return out


def role_of(name: str) -> str:
    if name == "MainThread":
        return "main (submit, poll, results)"
    if name == "telesum-feeder":
        return "feeder"
    if name == "telesum-gpu-loop":
        return "model loop (CPU here)"
    if name == "QueueFeederThread":
        return "pool: tasks out"
    if name.startswith("Thread-") or name.startswith("ExecutorManager"):
        return "pool: results in"
    return "native (the packing thread, ...)"


def measure(summarizer, records) -> dict:
    before = thread_cpu_s()
    t0 = time.perf_counter()
    results = list(summarizer.results_in_order(records))
    wall = time.perf_counter() - t0
    after = thread_cpu_s()
    names = {t.native_id: t.name for t in threading.enumerate()}
    per_role: dict[str, float] = {}
    for tid, cpu in after.items():
        role = role_of(names.get(tid, ""))
        per_role[role] = per_role.get(role, 0.0) + cpu - before.get(tid, 0.0)
    n = len(records)
    failed = sum(isinstance(r, Exception) for _, r in results)
    tokens = sum(r.output_tokens for _, r in results if not isinstance(r, Exception)) / max(n - failed, 1)
    beside = sum(v for k, v in per_role.items() if not k.startswith("model loop"))
    return {"records": n, "failed": failed, "output_tokens_per_record": tokens, "wall_s": wall,
            "cpu_ms_per_record": {k: 1e3 * v / n for k, v in sorted(per_role.items())},
            "beside_the_loop_ms_per_record": 1e3 * beside / n}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--bin-tokens", type=int, help="engine.token_budget (the CPU's default unless given)")
    ap.add_argument("--bin-seqs", type=int, help="engine.max_seqs_per_bin (the CPU's default unless given)")
    args = ap.parse_args()

    from worker.commands.runtime import budgets_for, build_summarizer, load_model, load_tokenizer
    from worker.samples import generate
    from worker.settings.load import from_values
    from worker.summarizer.preprocess import Preprocessor

    import torch

    torch.set_num_threads(1)  # the forward on the loop's thread, not on torch's workers
    bins = {key: value for key, value in (("engine.token_budget", args.bin_tokens),
                                          ("engine.max_seqs_per_bin", args.bin_seqs)) if value}
    settings = from_values({"engine.model": "tiny", "engine.tokenizer": str(args.tokenizer), "engine.device": "cpu",
                            "engine.max_new_tokens": args.new_tokens, **bins})
    engine = settings.settings.engine
    tokenizer = load_tokenizer(engine)
    pool = Preprocessor(tokenizer, args.workers)
    loaded = load_model(engine, tokenizer)
    summarizer = build_summarizer(engine, budgets_for(settings, loaded), loaded, preprocessor=pool)
    summarizer.params = dataclasses.replace(summarizer.params, stop=())
    summarizer.start()
    records = [r for r, _ in generate(args.records, "short", seed=11)]
    res = {"workers": args.workers, "new_tokens": args.new_tokens, "bins": bins, "command": "python bench/host_threads.py "
           + " ".join(sys.argv[1:]), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": {}}
    try:
        for f in pool.started:
            f.result()
        list(summarizer.results_in_order(records[:50]))  # the pool answering, its processes warm
        pool_prose = summarizer.results._prose
        for _ in range(args.rounds):  # alternated: the threads' shares move between runs of one kind
            for name, prose in (("prose by the pool", pool_prose), ("prose on the polling thread", None)):
                summarizer.results._prose = prose
                res["runs"].setdefault(name, []).append(measure(summarizer, records))
                print(name, json.dumps(res["runs"][name][-1]), flush=True)
    finally:
        summarizer.close(drain=False)
    args.out.mkdir(parents=True, exist_ok=True)
    name = "host_threads" + ("" if args.new_tokens == 64 else f"_{args.new_tokens}") + (
        f"_bins{args.bin_tokens}" if args.bin_tokens else "")
    (args.out / f"{name}.json").write_text(json.dumps(res, indent=1))
    chart(res, args.out / f"{name}.png")


def chart(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(f"{name}, round {k + 1}", run) for name, rounds in res["runs"].items() for k, run in enumerate(rounds)]
    runs.sort(key=lambda r: r[0].split(", round ")[::-1])  # in the order they ran
    names = [name for name, _ in runs]
    roles = sorted({r for _, run in runs for r in run["cpu_ms_per_record"] if not r.startswith("model")})
    fig, ax = plt.subplots(figsize=(8, 4.6))
    for i, (name, run) in enumerate(runs):
        left = 0.0
        for j, role in enumerate(roles):
            value = run["cpu_ms_per_record"].get(role, 0.0)
            ax.barh(i, value, left=left, color=f"C{j}", label=role if i == 0 else None)
            left += value
        ax.text(left, i, f" {left:.3f} ms", va="center")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("serving process CPU per record beside the model loop, ms")
    bins = res.get("bins") or {}
    where = (f"bins of {bins.get('engine.token_budget', 'the CPU default')} tokens" if bins else "the CPU's bins")
    ax.set_title(f"{res['new_tokens']} new tokens, {res['workers']} pool processes, {where}, {res['date']}",
                 fontsize=9)
    ax.set_xlim(0, max(sum(run["cpu_ms_per_record"].get(r, 0.0) for r in roles) for _, run in runs) * 1.25)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
