"""The FP8 KV tape's kernels against the model dtype's, on one GPU: a decode step, a prefill over the tape, a write.

    python bench/kv_fp8.py --out DIR [--batch 1024] [--context 1100]
    python bench/kv_fp8.py --out DIR --sweep  # the decode kernel's launch choices (DecodeConfig): DIR/kv_fp8_sweep.json, .png
    python bench/kv_fp8.py --out DIR --chart-from FILE.json  # DIR/FILE.png, from either kind of result

Per shape (SmolLM2-135M's and Qwen2.5-7B's KV heads): one layer's decode attention of `batch`
sequences of `context` rows each (bf16 tape: the Triton decode kernel; FP8: the same kernel reading
codes and scales), a prefill over the tape (64 prompts of 256 new tokens after 512 cached rows: FA2
on bf16, `tape_prefill` on FP8) and the K/V write of 16,384 tokens (index_copy_ against the quantising
write). CUDA events, median of 20 after 5 warm-ups; the bytes each decode step reads and the rate
that makes. Writes DIR/kv_fp8.json and DIR/kv_fp8.png.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from worker.model.attention import AttentionMetadata, build_pass, tape_attention
from worker.model.decode_attention import DEFAULT_CONFIG, DecodeConfig, decode_attention
from worker.model.fp8 import FP8
from worker.model.kv_fp8 import Fp8Layout, Fp8Tape, pack, quantize_heads, write

SHAPES = {"smollm2": (9, 3, 64), "qwen7b": (28, 4, 128)}  # query heads, KV heads, head size


def timed(fn, reps: int = 20, warm: int = 5) -> float:
    """Median milliseconds of fn() on the GPU."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def tapes(rows: int, kv_heads: int, dim: int):
    """(bf16 K, V tapes, the FP8 tapes of the same values)."""
    k = torch.randn(rows, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(rows, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
    layout = Fp8Layout(kv_heads, dim)
    k8, v8 = (Fp8Tape(pack(*quantize_heads(t), layout), layout) for t in (k, v))
    return (k, v), (k8, v8)


def decode_step(heads: int, dim: int, batch: int, context: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q [batch, heads, dim], slab starts, rows used): one query per sequence over `context` rows each."""
    starts = torch.arange(batch, device="cuda", dtype=torch.int32) * context
    used = torch.full((batch,), context, device="cuda", dtype=torch.int32)
    return torch.randn(batch, heads, dim, device="cuda", dtype=torch.bfloat16), starts, used


def bytes_per_row(tape: str, kv_heads: int, dim: int, layout: Fp8Layout) -> int:
    """What a decode step reads of one row and layer, K and V."""
    return 2 * kv_heads * dim * 2 if tape == "bf16" else 2 * layout.row_bytes


def decode_case(heads: int, kv_heads: int, dim: int, batch: int, context: int) -> dict:
    rows = batch * context
    (k, v), (k8, v8) = tapes(rows, kv_heads, dim)
    q, starts, used = decode_step(heads, dim, batch, context)
    meta = AttentionMetadata(cu_seqlens_q=torch.arange(batch + 1, device="cuda", dtype=torch.int32), max_seqlen_q=1,
                             slab_starts=starts, seqused_k=used, max_seqlen_k=context,
                             slot_mapping=torch.zeros(batch, device="cuda", dtype=torch.long),
                             is_prefill_from_zero=False)
    out = {}
    for name, (kt, vt) in (("bf16", (k, v)), ("fp8", (k8, v8))):
        ms = timed(lambda: tape_attention(q, kt, vt, meta, dim ** -0.5))
        row_bytes = bytes_per_row(name, kv_heads, dim, k8.layout)
        out[name] = {"ms": ms, "bytes_read": rows * row_bytes, "tb_per_s": rows * row_bytes / ms / 1e9}
    ref = tape_attention(q, k8.dequantized(slice(None), torch.bfloat16), v8.dequantized(slice(None), torch.bfloat16),
                         meta, dim ** -0.5)
    got = tape_attention(q, k8, v8, meta, dim ** -0.5)
    out["fp8_vs_dequantised_rel_err"] = float((got.float() - ref.float()).norm() / ref.float().norm())
    out["speedup"] = out["bf16"]["ms"] / out["fp8"]["ms"]
    del k, v, k8, v8
    torch.cuda.empty_cache()
    return out


def prefill_case(heads: int, kv_heads: int, dim: int, prompts: int = 64, new: int = 256, cached: int = 512) -> dict:
    slab = cached + new
    (k, v), (k8, v8) = tapes(prompts * slab, kv_heads, dim)
    meta, _ = build_pass([new] * prompts, [cached] * prompts, [i * slab for i in range(prompts)], device="cuda")
    q = torch.randn(prompts * new, heads, dim, device="cuda", dtype=torch.bfloat16)
    out = {name: {"ms": timed(lambda: tape_attention(q, kt, vt, meta, dim ** -0.5))}
           for name, (kt, vt) in (("bf16_fa2", (k, v)), ("fp8", (k8, v8)))}
    ref = tape_attention(q, k8.dequantized(slice(None), torch.bfloat16), v8.dequantized(slice(None), torch.bfloat16),
                         meta, dim ** -0.5)
    out["fp8_vs_dequantised_rel_err"] = float((tape_attention(q, k8, v8, meta, dim ** -0.5).float() - ref.float()).norm()
                                              / ref.float().norm())
    out["fp8_over_bf16"] = out["fp8"]["ms"] / out["bf16_fa2"]["ms"]
    return out


def write_case(kv_heads: int, dim: int, tokens: int = 16384) -> dict:
    layout = Fp8Layout(kv_heads, dim)
    k = torch.randn(tokens, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    rows = torch.randperm(tokens, device="cuda")
    bf16 = torch.zeros(tokens, kv_heads, dim, device="cuda", dtype=torch.bfloat16), torch.zeros_like(k)
    fp8 = (torch.zeros(tokens, layout.row_bytes, device="cuda", dtype=torch.uint8),
           torch.zeros(tokens, layout.row_bytes, device="cuda", dtype=torch.uint8))

    def copy_bf16():
        bf16[0].index_copy_(0, rows, k)
        bf16[1].index_copy_(0, rows, v)

    out = {"bf16_index_copy_ms": timed(copy_bf16), "fp8_write_ms": timed(lambda: write(*fp8, rows, k, v, layout))}
    got, want = fp8[0][rows], pack(*quantize_heads(k), layout)
    out["fp8_bit_equal_to_reference"] = bool(torch.equal(got, want))
    codes = slice(0, layout.scale_offset)
    differ = got[:, codes] != want[:, codes]
    out["fp8_codes_differing"] = int(differ.sum())
    out["fp8_codes_total"] = differ.numel()
    out["fp8_scales_equal"] = bool(torch.equal(got[:, layout.scale_offset:], want[:, layout.scale_offset:]))
    if out["fp8_codes_differing"]:  # how far apart, in the values the codes stand for
        a, b = (t[:, codes].contiguous().view(FP8).float() for t in (got, want))
        out["fp8_codes_max_rel_step"] = float(((a - b).abs() / b.abs().clamp(min=2 ** -9))[differ].max())
    return out


def sweep_case(heads: int, kv_heads: int, dim: int, batch: int, context: int) -> list[dict]:
    """The decode kernel's launch choices over both tapes: ms and the rate of the bytes it reads."""
    rows = batch * context
    (k, v), (k8, v8) = tapes(rows, kv_heads, dim)
    q, starts, used = decode_step(heads, dim, batch, context)
    ref = decode_attention(q, k8.dequantized(slice(None), torch.bfloat16), v8.dequantized(slice(None), torch.bfloat16),
                           starts, used, dim ** -0.5).float()
    results = []
    for tape, (kt, vt) in (("bf16", (k, v)), ("fp8", (k8, v8))):
        row_bytes = bytes_per_row(tape, kv_heads, dim, k8.layout)
        for config in itertools.product((32, 64, 128), (4, 8), (2, 3)):
            cfg = DecodeConfig(*config)
            try:
                ms = timed(lambda: decode_attention(q, kt, vt, starts, used, dim ** -0.5, config=cfg))
            except Exception as e:  # a choice the compiler refuses (shared memory): recorded, not fatal
                results.append({"tape": tape, **vars(cfg), "error": str(e)[:200]})
                continue
            got = decode_attention(q, kt, vt, starts, used, dim ** -0.5, config=cfg).float()
            results.append({"tape": tape, **vars(cfg), "ms": ms, "tb_per_s": rows * row_bytes / ms / 1e9,
                            "rel_err_vs_dequantised": float((got - ref).norm() / ref.norm())})
    del k, v, k8, v8
    torch.cuda.empty_cache()
    return results


def chart(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    shapes = list(res["shapes"])
    for ax, (case, a, b, title) in zip(axes, (("decode", "bf16", "fp8", f"decode step, {res['batch']} x {res['context']} rows"),
                                             ("prefill", "bf16_fa2", "fp8", "prefill over the tape, 64 x (512 + 256)"))):
        xs = range(len(shapes))
        ax.bar([x - 0.2 for x in xs], [res["shapes"][s][case][a]["ms"] for s in shapes], width=0.4, label=a)
        ax.bar([x + 0.2 for x in xs], [res["shapes"][s][case][b]["ms"] for s in shapes], width=0.4, label=b)
        ax.set_xticks(list(xs), shapes)
        ax.set_ylabel("ms (one layer)")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle(f"FP8 KV tape kernels: {res['device']}, {res['date']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def sweep_chart(res: dict, path: Path) -> None:
    """Each launch choice's decode step, per shape: bf16 tapes against FP8 ones (the FP8 kernel's own
    variants, where a result has them, marked)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(res["shapes"]), figsize=(12, 4.5))
    for ax, (shape, rows) in zip(axes, res["shapes"].items()):
        rows = sorted((r for r in rows if "ms" in r), key=lambda r: (r["tape"], r["ms"]))
        variants = [k for k in ("dot_fp16", "qk_fp8") if any(r.get(k) for r in rows)]
        labels = [f"{r['tape']} {r['block_n']}/{r['num_warps']}/{r['num_stages']}"
                  + "".join(f" {v}" for v in variants if r.get(v)) for r in rows]
        colours = ["tab:blue" if r["tape"] == "bf16" else "tab:orange" for r in rows]
        ax.barh(range(len(rows)), [r["ms"] for r in rows], color=colours)
        ax.set_yticks(range(len(rows)), labels, fontsize=5)
        ax.invert_yaxis()
        ax.set_xlabel("ms, one layer's decode step")
        ax.set_title(f"{shape}: {res['batch']} x {res['context']} rows (block_n/warps/stages)", fontsize=9)
    fig.suptitle(f"decode kernel launch choices: {res['device']}, {res['date']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--context", type=int, default=1100)
    ap.add_argument("--sweep", action="store_true", help="the decode kernel's launch choices instead")
    ap.add_argument("--chart-from", type=Path, help="draw the chart of this result file (either kind), run nothing")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.chart_from:
        res = json.loads(args.chart_from.read_text())
        swept = isinstance(next(iter(res["shapes"].values())), list)
        (sweep_chart if swept else chart)(res, args.out / args.chart_from.with_suffix(".png").name)
        return
    if not torch.cuda.is_available():
        sys.exit("bench/kv_fp8.py measures GPU kernels: no CUDA device here")
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "batch": args.batch, "context": args.context,
           "command": "python bench/kv_fp8.py " + " ".join(sys.argv[1:]), "shapes": {}}
    if args.sweep:
        for shape, (heads, kv_heads, dim) in SHAPES.items():
            res["shapes"][shape] = sweep_case(heads, kv_heads, dim, args.batch, args.context)
            for tape in ("bf16", "fp8"):
                timed_ = [r for r in res["shapes"][shape] if r["tape"] == tape and "ms" in r]
                default = [r["ms"] for r in timed_ if all(r[f] == x for f, x in vars(DEFAULT_CONFIG).items())]
                print(shape, tape, "default", default, "best", min(timed_, key=lambda r: r["ms"]), flush=True)
        (args.out / "kv_fp8_sweep.json").write_text(json.dumps(res, indent=1))
        sweep_chart(res, args.out / "kv_fp8_sweep.png")
        return
    for shape, (heads, kv_heads, dim) in SHAPES.items():
        res["shapes"][shape] = {"decode": decode_case(heads, kv_heads, dim, args.batch, args.context),
                                "prefill": prefill_case(heads, kv_heads, dim), "write": write_case(kv_heads, dim)}
        print(shape, json.dumps(res["shapes"][shape]), flush=True)
    (args.out / "kv_fp8.json").write_text(json.dumps(res, indent=1))
    chart(res, args.out / "kv_fp8.png")


if __name__ == "__main__":
    main()
