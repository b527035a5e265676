"""What the preprocessing pool costs the serving process per record: its CPU time (the executor's
threads, pickling, futures), which holds the GIL the GPU loop launches kernels with.

    python bench/preprocess_overhead.py --out DIR --tokenizer TOKENIZER_DIR [--workers 2] [--records 4000]

The pool prepares `telesum produce`'s `short` records with the real tokenizer, one record a task
(MAX_BATCH = 1) and in batches (the default), side by side in one process: all at once (a burst, as
`results_in_order` submits after a decode step finishes hundreds of sequences) and in bursts of 50
every 50 ms. The process's own CPU time (getrusage, the pool's processes excluded) per record.
Writes DIR/preprocess_overhead.json and .png.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(pre, records, pattern: str) -> dict:
    sent, c0, t0 = pre.batches_sent, cpu_s(), time.perf_counter()
    futures = []
    if pattern == "burst":
        futures = [pre.submit(r) for r in records]
    else:
        for i in range(0, len(records), 50):
            futures += [pre.submit(r) for r in records[i:i + 50]]
            time.sleep(0.05)
    for f in futures:
        f.result()
    c1, t1 = cpu_s(), time.perf_counter()
    return {"parent_cpu_ms_per_record": 1e3 * (c1 - c0) / len(records),
            "wall_ms_per_record": 1e3 * (t1 - t0) / len(records), "tasks": pre.batches_sent - sent}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--records", type=int, default=4000)
    args = ap.parse_args()

    from worker.model.tokenizer import load_tokenizer
    from worker.samples import generate
    from worker.summarizer import preprocess

    tokenizer = load_tokenizer(str(args.tokenizer))
    records = [r for r, _ in generate(args.records, "short", seed=11)]
    default_batch = preprocess.MAX_BATCH
    res = {"workers": args.workers, "records": args.records, "max_batch": default_batch,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": {}}
    for name, batch in (("one record a task", 1), (f"batches of up to {default_batch}", default_batch)):
        preprocess.MAX_BATCH = batch
        pre = preprocess.Preprocessor(tokenizer, workers=args.workers)
        try:
            for f in pre.started:
                f.result()
            measure(pre, records[:200], "burst")  # the processes' heads tokenised, their imports done
            res["runs"][name] = {p: measure(pre, records, p) for p in ("burst", "bursts of 50 every 50 ms")}
        finally:
            pre.close()
        print(name, json.dumps(res["runs"][name]), flush=True)
    preprocess.MAX_BATCH = default_batch
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "preprocess_overhead.json").write_text(json.dumps(res, indent=1))
    chart(res, args.out / "preprocess_overhead.png")


def chart(res: dict, path: Path) -> None:
    names = list(res["runs"])
    patterns = list(next(iter(res["runs"].values())))
    paired_bars(patterns, {name: [res["runs"][name][p]["parent_cpu_ms_per_record"] for p in patterns] for name in names},
                f"Preprocessing pool's cost to the serving process ({res['workers']} processes, {res['date']})",
                path, figsize=(7, 3.6))


def paired_bars(groups: list[str], series: dict[str, list[float]], title: str, path: Path,
                figsize: tuple[float, float]) -> None:
    """Two series of the serving process's CPU per record, side by side for each group, to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    width = 0.38
    for i, (name, values) in enumerate(series.items()):
        bars = ax.bar([x + i * width for x in range(len(groups))], values, width, label=name)
        ax.bar_label(bars, fmt="%.3f")
    ax.set_xticks([x + width / 2 for x in range(len(groups))], groups)
    ax.set_ylabel("serving process CPU, ms per record")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
