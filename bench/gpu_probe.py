"""The Phase 0 probe on a GPU for both speed shapes, and how close its bin is to the largest that runs.

    python bench/gpu_probe.py --out DIR [--shapes smollm2,qwen7b] [--max-new-tokens 128]

Per shape (random bf16 weights: memory does not depend on weight values): the probe itself
(`probe_budgets`, fresh, cached under DIR/cache), its trials, then a second call (the cache hit);
then full prefill passes through `ModelRunner.prefill_bin`:
  - the probed bin beside the probed KV arena (must run), and a bin 15 % larger beside it (should not);
  - the largest bin the search saw run, beside only its own rows (must run), and 5 % above it (should not);
  - the probed bin's prefill speed.
Writes DIR/gpu_probe.json and DIR/gpu_probe.png and prints a table. Needs CUDA, torch (no msgspec,
kafka-python or gguf: nothing here imports them).
"""

from __future__ import annotations

import argparse
import gc
import json
import time
import traceback
from pathlib import Path

import torch

from worker.benchmarks.corpora import QWEN25_7B, SMOLLM2_135M
from worker.model import ModelConfig, random_model
from worker.probe import probe_budgets
from worker.probe.measure import TorchMeasurer
from worker.probe.search import ALIGN

SHAPES = {"smollm2": ("SmolLM2-135M shape", SMOLLM2_135M), "qwen7b": ("Qwen2.5-7B shape", QWEN25_7B)}
GiB = 2**30


class RecordingMeasurer(TorchMeasurer):
    """TorchMeasurer that keeps every trial (the probe's own log, for the results file)."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.log: list[dict] = []

    def prefill(self, tokens, kv_rows, seq_tokens, *, full):
        t = super().prefill(tokens, kv_rows, seq_tokens, full=full)
        self.log.append({"kind": "prefill", "tokens": tokens, "kv_rows": kv_rows, "full": full, "ok": t.ok,
                         "peak_gib": round(t.peak_bytes / GiB, 3), "seconds": round(t.seconds, 3)})
        return t

    def decode(self, num_seqs, context, kv_rows, max_new_tokens):
        t = super().decode(num_seqs, context, kv_rows, max_new_tokens)
        self.log.append({"kind": "decode", "num_seqs": num_seqs, "kv_rows": kv_rows, "ok": t.ok,
                         "peak_gib": round(t.peak_bytes / GiB, 3), "seconds": round(t.seconds, 3)})
        return t


def full_pass(m: TorchMeasurer, tokens: int, kv_rows: int, seq: int) -> dict:
    t = m.prefill(tokens, kv_rows, seq, full=True)
    return {"tokens": tokens, "kv_rows": kv_rows, "ok": t.ok, "seconds": round(t.seconds, 3),
            "peak_gib": round((m.resident_bytes + t.peak_bytes) / GiB, 2) if t.ok else None,
            "tok_per_s": round(tokens / t.seconds) if t.ok else None}


def one_shape(name: str, out: Path, max_new_tokens: int) -> dict:
    label, hf = SHAPES[name]
    cfg = ModelConfig.from_hf_config(hf)
    # Each shape compiles its own fused kernels; a fresh compile cache keeps one shape's graphs from
    # using up the other's recompile limit (past it, dynamo runs eager: other memory, other figures).
    torch._dynamo.reset()
    t0 = time.perf_counter()
    loaded = random_model(cfg, device="cuda", dtype=torch.bfloat16, name=f"random-{name}")
    res: dict = {"shape": label, "load_seconds": round(time.perf_counter() - t0, 1),
                 "model_gib": round(torch.cuda.memory_allocated() / GiB, 2)}
    m = RecordingMeasurer(loaded, "cuda")
    b = probe_budgets(loaded, "cuda", max_new_tokens=max_new_tokens, refresh=True, cache_dir=out / "cache",
                      measurer=m)
    res["probe"] = b.to_dict()
    res["probe_trials"] = m.log
    t0 = time.perf_counter()
    cached = probe_budgets(loaded, "cuda", max_new_tokens=max_new_tokens, cache_dir=out / "cache")
    res["second_call"] = {"source": cached.source, "seconds": round(time.perf_counter() - t0, 3),
                          "same": (cached.token_budget, cached.kv_rows, cached.max_decode_seqs) ==
                          (b.token_budget, b.kv_rows, b.max_decode_seqs)}
    seq = b.seq_tokens
    above = (int(b.token_budget * 1.15) // ALIGN) * ALIGN
    res["beside_arena_probed_bin"] = full_pass(m, b.token_budget, b.kv_rows, seq)
    res["beside_arena_15pct_above"] = full_pass(m, above, b.kv_rows, seq)
    res["alone_bin_limit"] = full_pass(m, b.bin_limit, b.bin_limit, seq)
    over = (int(b.bin_limit * 1.05) // ALIGN) * ALIGN
    res["alone_5pct_above_limit"] = full_pass(m, over, over, seq)
    res["probed_bin_over_limit"] = round(b.token_budget / b.bin_limit, 4)
    res["memory_gib"] = {
        "total": round(b.total_bytes / GiB, 2), "model": res["model_gib"],
        "kv_arena": round((b.kv_rows + 1) * m.kv_bytes_per_row / GiB, 2),
        "peak": round(b.peak_bytes / GiB, 2), "headroom": round(b.headroom_bytes / GiB, 2)}
    del loaded, m
    gc.collect()
    torch.cuda.empty_cache()
    return res


def chart(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = [k for k in SHAPES if k in res["shapes"]]
    if not shapes:
        return
    fig, axes = plt.subplots(1, len(shapes), figsize=(6 * len(shapes), 4.2), squeeze=False)
    for ax, name in zip(axes[0], shapes):
        r = res["shapes"][name]
        runs = [("probed bin\n+ probed arena", r["beside_arena_probed_bin"]),
                ("+15 %\n+ probed arena", r["beside_arena_15pct_above"]),
                ("largest that ran\n(own rows only)", r["alone_bin_limit"]),
                ("+5 %\n(own rows only)", r["alone_5pct_above_limit"])]
        values = [run["tokens"] / 1e3 for _, run in runs]
        colors = ["tab:green" if run["ok"] else "tab:red" for _, run in runs]
        bars = ax.bar([label for label, _ in runs], values, color=colors)
        for bar, (_, run) in zip(bars, runs):
            ax.annotate("ran" if run["ok"] else "OOM", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom")
        p = r["probe"]
        ax.set_title(f"{r['shape']}: probe {p['seconds']:.1f} s, {p['kv_rows'] / 1e3:,.0f}k KV rows, "
                     f"{_in_flight(p):,} seqs", fontsize=9)
        ax.set_ylabel("prefill bin, thousand tokens (full pass)")
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(f"telesum probe on {res['device']}, {res['date']}, torch {res['torch']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# Results written before the probe spoke the settings' names (bench/results/gpu/gpu_probe.json,
# 2026-12-01) hold bin_tokens and max_seqs; --chart-from still reads them.
def _bin(p: dict) -> int:
    return p["token_budget"] if "token_budget" in p else p["bin_tokens"]


def _in_flight(p: dict) -> int:
    return p["max_decode_seqs"] if "max_decode_seqs" in p else p["max_seqs"]


def print_table(res: dict) -> None:
    print(f"{res['device']}  {res['date']}  torch {res['torch']}")
    for name, why in res.get("errors", {}).items():
        print(f"\n{name}: FAILED {why}")
    for name, r in res["shapes"].items():
        p = r["probe"]
        print(f"\n{r['shape']} (model {r['model_gib']} GiB)")
        print(f"  probe: {p['seconds']:.1f} s ({p['warmup_seconds']:.1f} s of it warm-up), "
              f"token_budget {_bin(p):,} (limit {p['bin_limit']:,}), kv_rows {p['kv_rows']:,}, "
              f"max_decode_seqs {_in_flight(p):,}, "
              f"peak {p['peak_bytes'] / GiB:.1f} GiB of {p['total_bytes'] / GiB:.1f}")
        print(f"  second call: {r['second_call']}")
        for key in ("beside_arena_probed_bin", "beside_arena_15pct_above", "alone_bin_limit",
                    "alone_5pct_above_limit"):
            print(f"  {key:28s} {r[key]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shapes", default="smollm2,qwen7b")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--chart-from", type=Path, help="only draw the chart from this results JSON (no GPU)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.chart_from:
        chart(json.loads(args.chart_from.read_text()), args.out / "gpu_probe.png")
        return
    res: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                 "date": time.strftime("%Y-%m-%d"), "max_new_tokens": args.max_new_tokens, "shapes": {}}
    for name in args.shapes.split(","):
        try:
            res["shapes"][name] = one_shape(name, args.out, args.max_new_tokens)
        except Exception as exc:  # report it and go on to the next shape: device time is scarce
            traceback.print_exc()
            res.setdefault("errors", {})[name] = repr(exc)[:1000]
            gc.collect()
            torch.cuda.empty_cache()
        (args.out / "gpu_probe.json").write_text(json.dumps(res, indent=2))
    try:
        chart(res, args.out / "gpu_probe.png")
    except ImportError as exc:  # no matplotlib on the GPU machine: draw it later with --chart-from
        print(f"chart not drawn ({exc}); run again with --chart-from on a machine with matplotlib")
    print_table(res)


if __name__ == "__main__":
    main()
