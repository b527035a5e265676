"""`telesum bench pack`: the native dispatcher vs a pure-Python FFD on the stress mix.

One thread submits every sequence (retrying on backpressure), another drains and releases bins,
as the GPU loop would. The pure-Python baseline packs the first sequences with the reference FFD
written the straightforward way (scan the open bins in order) and writes the same bin arrays.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import threading
import time

import numpy as np

from worker.benchmarks.reference_ffd import align_up, reference_ffd, reference_stream_pack, write_bin
from worker.benchmarks.corpora import corpus_token_lengths
from worker.dispatch import Backpressure, BinDispatcher, DispatcherClosed
from worker.settings.budgets import ALIGNMENT, GPU_MAX_SEQS_PER_BIN, GPU_TOKEN_BUDGET

VOCAB = 49152


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sequences", type=int, default=1_000_000, help="through the native dispatcher")
    parser.add_argument("--python-sequences", type=int, default=100_000, help="through the Python FFD")
    parser.add_argument("--token-budget", type=int, default=GPU_TOKEN_BUDGET)
    parser.add_argument("--alignment", type=int, default=ALIGNMENT)
    parser.add_argument("--batch", type=int, default=64, help="sequences per submit_many() call (second run)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--chart", metavar="PNG", help="also draw a bar chart of the rates")


def make_sequences(n: int, seed: int) -> list[np.ndarray]:
    """int32 token views of one shared random pool, lengths from the stress mix (interleaved)."""
    rng = np.random.default_rng(seed)
    lens = corpus_token_lengths("A", n, seed)
    pool = rng.integers(0, VOCAB, int(lens.max()) + 4096, dtype=np.int32)
    offsets = rng.integers(0, 4096, n)
    return [pool[o:o + n_] for o, n_ in zip(offsets.tolist(), lens.tolist())]


def run_native(seqs: list[np.ndarray], token_budget: int, alignment: int, batch: int) -> dict[str, float]:
    """`batch` 1: one submit() per sequence; more: submit_many() of that many at a time."""
    d = BinDispatcher(token_budget, alignment=alignment, pin_memory=False)
    d.start()
    drained = {"bins": 0, "seqs": 0}

    def drain() -> None:
        while True:
            try:
                b = d.next_bin(1.0)
            except DispatcherClosed:
                return
            if b is not None:
                drained["bins"] += 1
                drained["seqs"] += len(b.seq_ids)
                d.release(b.slot)

    consumer = threading.Thread(target=drain)
    consumer.start()
    t0 = time.perf_counter()
    if batch == 1:
        submit = d.submit
        for i, toks in enumerate(seqs):
            while True:
                try:
                    submit(i, toks, 128)
                    break
                except Backpressure:
                    d.wait_for_room(len(toks), 1.0)
    else:
        ids = list(range(len(seqs)))
        start = 0
        while start < len(seqs):
            end = min(start + batch, len(seqs))
            try:
                start += d.submit_many(ids[start:end], seqs[start:end], 128)
            except Backpressure:
                d.wait_for_room(len(seqs[start]), 1.0)
    d.close()
    consumer.join()
    elapsed = time.perf_counter() - t0
    s = d.stats()
    if drained["seqs"] != len(seqs):
        raise RuntimeError(f"lost sequences: {drained['seqs']} of {len(seqs)} came out")
    return {"elapsed_s": elapsed, "seq_per_s": len(seqs) / elapsed,
            "tokens_per_s": s["tokens_packed"] / elapsed, **s}


def run_python(seqs: list[np.ndarray], token_budget: int, alignment: int) -> dict[str, float]:
    max_new = [128] * len(seqs)
    t0 = time.perf_counter()
    spans = [align_up(len(s), alignment) for s in seqs]
    bins = reference_ffd(spans, token_budget, GPU_MAX_SEQS_PER_BIN)
    written = [write_bin(seqs, items, alignment, 0, max_new) for items in bins]
    elapsed = time.perf_counter() - t0
    real = sum(int(b["seq_lens"].sum()) for b in written)
    t1 = time.perf_counter()
    windowed = sum(1 for _ in reference_stream_pack(seqs, token_budget, alignment, 4 * token_budget))
    windowed_elapsed = time.perf_counter() - t1
    return {"elapsed_s": elapsed, "seq_per_s": len(seqs) / elapsed, "bins": len(bins),
            "fill_ratio": real / (len(bins) * token_budget),
            "windowed_seq_per_s": len(seqs) / windowed_elapsed, "windowed_bins": windowed}


def memcpy_gb_per_s(nbytes: int = 256 << 20) -> float:
    """Best of five numpy copies of a warm int32 array (read + write of `nbytes` each)."""
    src = np.ones(nbytes // 4, np.int32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = min(_timed(lambda: np.copyto(dst, src)) for _ in range(5))
    return nbytes / best / 1e9


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run(args: argparse.Namespace) -> int:
    seqs = make_sequences(max(args.sequences, args.python_sequences), args.seed)
    native = run_native(seqs[:args.sequences], args.token_budget, args.alignment, 1)
    batched = run_native(seqs[:args.sequences], args.token_budget, args.alignment, args.batch)
    python = run_python(seqs[:args.python_sequences], args.token_budget, args.alignment)
    bandwidth = memcpy_gb_per_s()
    native_gb = native["tokens_per_s"] * 4 / 1e9
    result = {
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.processor() or platform.machine()}, {_cpu_count()} cores",
        "sequences": args.sequences, "python_sequences": args.python_sequences,
        "token_budget": args.token_budget, "alignment": args.alignment,
        "submit_batch": args.batch,
        "native_seq_per_s": native["seq_per_s"],
        "native_batched_seq_per_s": batched["seq_per_s"],
        "native_tokens_per_s": native["tokens_per_s"],
        "python_seq_per_s": python["seq_per_s"],
        "python_windowed_seq_per_s": python["windowed_seq_per_s"],
        "speedup_vs_python": native["seq_per_s"] / python["seq_per_s"],
        "speedup_vs_python_windowed": native["seq_per_s"] / python["windowed_seq_per_s"],
        "fill_ratio": native["fill_ratio"],
        "python_fill_ratio": python["fill_ratio"],
        "pad_fraction": native["pad_tokens"] / (native["tokens_packed"] + native["pad_tokens"]),
        "bins": int(native["bins"]),
        "wait_mean_ms": native["wait_mean_s"] * 1e3,
        "wait_max_ms": native["wait_max_s"] * 1e3,
        "backpressure_events": int(native["backpressure_events"]),
        "memcpy_gb_per_s": bandwidth,
        "native_token_gb_per_s": native_gb,
        "fraction_of_memcpy": native_gb / bandwidth,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_table(result)
    if args.chart:
        _chart(result, args.chart)
    return 0


def _cpu_count() -> int:
    import os
    return len(os.sched_getaffinity(0))


def _print_table(r: dict) -> None:
    rows = [
        ("native dispatcher, one submit() per sequence", f"{r['native_seq_per_s']:,.0f} seq/s",
         f"{r['native_tokens_per_s'] / 1e6:,.0f} M tok/s"),
        (f"native dispatcher, submit_many({r['submit_batch']})", f"{r['native_batched_seq_per_s']:,.0f} seq/s", ""),
        ("pure-Python FFD (one pass, all bins open)", f"{r['python_seq_per_s']:,.0f} seq/s",
         f"{r['speedup_vs_python']:.1f}x slower"),
        ("pure-Python FFD (windowed like native)", f"{r['python_windowed_seq_per_s']:,.0f} seq/s",
         f"{r['speedup_vs_python_windowed']:.1f}x slower"),
        ("fill ratio / pad fraction", f"{r['fill_ratio']:.4f}", f"{r['pad_fraction']:.4f}"),
        ("wait submit->bin mean / max", f"{r['wait_mean_ms']:.2f} ms", f"{r['wait_max_ms']:.2f} ms"),
        ("memcpy bandwidth / native token bytes", f"{r['memcpy_gb_per_s']:.1f} GB/s",
         f"{r['native_token_gb_per_s']:.2f} GB/s ({100 * r['fraction_of_memcpy']:.0f} %)"),
    ]
    width = max(len(a) for a, _, _ in rows)
    for a, b, c in rows:
        print(f"{a:<{width}}  {b:>18}  {c:>24}")


def _chart(r: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = ["native\nsubmit()", f"native\nsubmit_many({r['submit_batch']})", "Python FFD\n(one pass)",
             "Python FFD\n(windowed)"]
    rates = [r["native_seq_per_s"], r["native_batched_seq_per_s"], r["python_seq_per_s"],
             r["python_windowed_seq_per_s"]]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    bars = ax.bar(names, rates, color=["tab:blue", "tab:blue", "tab:gray", "tab:gray"])
    ax.bar_label(bars, labels=[f"{x:,.0f}" for x in rates])
    ax.set_ylabel("sequences / s")
    ax.set_title(f"packing the stress mix, {r['token_budget']:,}-token bins ({r['machine']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
