"""The Qwen2.5-7B shape's projections on one GPU: bf16 against FP8 variants, per token-count, side by side.

    python bench/fp8_matmul.py --out DIR [--tokens 1024,65536]
    python bench/fp8_matmul.py --out DIR --chart-from DIR/fp8_matmul.json   # the chart alone, no GPU

Per projection (qkv, o, gate_up, down) and token count: ms of the bf16 matmul, of the per-token
activation quantisation (`fp8.quantize_tokens`'s Triton kernel, and the same math through
torch.compile with a dynamic token dimension, as the fused elementwise ops are built), and of `torch._scaled_mm` with row-wise scales (what
`engine.dtype: fp8` runs), with row-wise scales and fast accumulation, and with one scale per tensor
(cuBLASLt) with and without fast accumulation; relative error of each against the bf16 product.
Writes DIR/fp8_matmul.json and DIR/fp8_matmul.png.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from worker.benchmarks.corpora import QWEN25_7B
from worker.model.fp8 import FP8, FP8_MAX, quantize_rows, quantize_tokens

HIDDEN, INTER = QWEN25_7B["hidden_size"], QWEN25_7B["intermediate_size"]
KV = QWEN25_7B["num_key_value_heads"] * HIDDEN // QWEN25_7B["num_attention_heads"]
PROJECTIONS = {"qkv": (HIDDEN, HIDDEN + 2 * KV), "o": (HIDDEN, HIDDEN), "gate_up": (HIDDEN, 2 * INTER),
               "down": (INTER, HIDDEN)}


_compiled = torch.compile(quantize_rows, fullgraph=True)


def compiled_quantize(x):
    torch._dynamo.maybe_mark_dynamic(x, 0)  # as worker.model.fused builds its ops
    return _compiled(x)


def timed(fn, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


@torch.inference_mode()
def projection(tokens: int, k: int, n: int) -> dict:
    x = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    want = (x @ w.t()).float()
    w8, w_scale = quantize_rows(w)
    w_scale = w_scale.t().contiguous()
    x8, x_scale = quantize_tokens(x)
    x8_ref = quantize_rows(x)[0]
    w8_t, wt_scale = (w.float() / (w.abs().max() / FP8_MAX)).to(FP8), (w.abs().max() / FP8_MAX).float()
    x8_t, xt_scale = (x.float() / (x.abs().max() / FP8_MAX)).to(FP8), (x.abs().max() / FP8_MAX).float()
    variants = {
        "bf16": lambda: x @ w.t(),
        "quantize_triton": lambda: quantize_tokens(x),
        "quantize_compiled": lambda: compiled_quantize(x),
        "fp8_rowwise": lambda: torch._scaled_mm(x8, w8.t(), scale_a=x_scale, scale_b=w_scale,
                                                out_dtype=torch.bfloat16),
        "fp8_rowwise_fast_accum": lambda: torch._scaled_mm(x8, w8.t(), scale_a=x_scale, scale_b=w_scale,
                                                           out_dtype=torch.bfloat16, use_fast_accum=True),
        "fp8_tensorwise": lambda: torch._scaled_mm(x8_t, w8_t.t(), scale_a=xt_scale, scale_b=wt_scale,
                                                   out_dtype=torch.bfloat16),
        "fp8_tensorwise_fast_accum": lambda: torch._scaled_mm(x8_t, w8_t.t(), scale_a=xt_scale, scale_b=wt_scale,
                                                              out_dtype=torch.bfloat16, use_fast_accum=True),
    }
    out = {}
    for name, fn in variants.items():
        try:
            ms = timed(fn)
            got = fn()
            if isinstance(got, tuple):  # a quantisation: elements that differ from quantize_rows's
                err = float((got[0].float() != x8_ref.float()).float().mean())
            else:
                err = float((got.float() - want).norm() / want.norm())
            out[name] = {"ms": ms, "tflops": 2 * tokens * k * n / ms / 1e9, "rel_err": err}
        except Exception as exc:  # report, do not hide
            out[name] = {"error": repr(exc)[:200]}
    return out


def chart(res: dict, path: Path) -> None:
    """ms per variant and projection at the largest token count, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tokens = max(int(k.rsplit("_T", 1)[1]) for k in res["runs"])
    runs = {k.rsplit("_T", 1)[0]: v for k, v in res["runs"].items() if k.endswith(f"_T{tokens}")}
    variants = [v for v in next(iter(runs.values())) if "ms" in next(iter(runs.values()))[v]]
    fig, ax = plt.subplots(figsize=(10, 4.8))
    width = 0.8 / len(variants)
    for i, variant in enumerate(variants):
        ax.bar([j + (i - (len(variants) - 1) / 2) * width for j in range(len(runs))],
               [r[variant].get("ms", 0) for r in runs.values()], width, label=variant, color=f"C{i}")
    ax.set_xticks(range(len(runs)), list(runs))
    ax.set_yscale("log")
    ax.set_ylabel(f"ms per call, {tokens} tokens (log scale)")
    ax.legend(fontsize=8)
    ax.set_title(f"Qwen2.5-7B projections, bf16 vs FP8: {res['device']}, {res['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokens", default="1024,65536")
    ap.add_argument("--chart-from", type=Path, help="only draw DIR/fp8_matmul.png from this results JSON")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.chart_from:
        chart(json.loads(args.chart_from.read_text()), args.out / "fp8_matmul.png")
        return
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "command": f"python bench/fp8_matmul.py --out DIR --tokens {args.tokens}", "runs": {}}
    for tokens in map(int, args.tokens.split(",")):
        for name, (k, n) in PROJECTIONS.items():
            res["runs"][f"{name}_T{tokens}"] = r = projection(tokens, k, n)
            print(name, tokens, json.dumps({v: round(x.get("ms", -1), 3) for v, x in r.items()}), flush=True)
    (args.out / "fp8_matmul.json").write_text(json.dumps(res, indent=2))
    chart(res, args.out / "fp8_matmul.png")


if __name__ == "__main__":
    main()
