"""FP8 activation quantisation fused into the norm and SiLU·up kernels, on against off, in one process.

    python bench/fp8_fused_quant.py --out DIR [--shape qwen7b|smollm2] [--tokens 1024,8192,16384]
    python bench/fp8_fused_quant.py --out DIR --chart-from DIR/fp8_fused_quant.json   # the chart alone, no GPU

On CUDA: a model of the shape with a few decoder layers (`--layers`) and random bf16 weights, its
projections converted to FP8 (`use_fp8_weights`, as `engine.dtype: fp8` does), and a prefill forward
of T tokens in sequences of `--seq-len`. The forward is timed with `fp8.set_fused_quantisation` on
(the norms and SiLU·up write the projections' FP8 codes) and off (they write bf16, each projection
quantises it on the call), the two alternated rep by rep, CUDA events around each forward, the median
kept. Beside it the ops alone: add_rms_norm then quantize_tokens against add_rms_norm_fp8, silu_mul
then quantize_tokens against silu_mul_fp8. Writes DIR/fp8_fused_quant.json (device, torch, date, the
command, per T: ms fused, ms unfused, their ratio, whether the logits are bitwise equal, their
largest difference, and whether two unfused forwards are equal: a baseline for the comparison) and
DIR/fp8_fused_quant.png.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from worker.benchmarks.corpora import QWEN25_7B, SMOLLM2_135M  # noqa: E402
from worker.model import KVCache, ModelConfig, build_pass, random_model, use_fp8_weights  # noqa: E402
from worker.model import fp8, fused, fused_kernels  # noqa: E402

SHAPES = {"qwen7b": QWEN25_7B, "smollm2": SMOLLM2_135M}


def event_ms(fn: Callable[[], object], inner: int = 1) -> float:
    """GPU time of `inner` back-to-back calls of fn, per call (CUDA events; the stream idle before)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(inner):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / inner


def alternated(variants: dict[str, Callable[[], object]], reps: int, warmup: int, inner: int = 1) -> dict:
    """Median ms per call of each variant, the variants taking turns rep by rep (order flipped each rep)."""
    names = list(variants)
    for _ in range(warmup):
        for name in names:
            variants[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            times[name].append(event_ms(variants[name], inner))
    return {name: {"ms": statistics.median(t), "min_ms": min(t), "max_ms": max(t)} for name, t in times.items()}


def with_fused(enabled: bool, fn: Callable[[], object]) -> Callable[[], object]:
    def call():
        fp8.set_fused_quantisation(enabled)
        return fn()
    return call


@torch.inference_mode()
def forward_rows(cfg: ModelConfig, token_counts: list[int], seq_len: int, reps: int) -> dict:
    """The whole forward of T tokens, fused quantisation on and off, per T."""
    loaded = use_fp8_weights(random_model(cfg, device="cuda", dtype=torch.bfloat16))
    out = {}
    for tokens in token_counts:
        lens = [seq_len] * (tokens // seq_len) + ([tokens % seq_len] if tokens % seq_len else [])
        starts = [sum(lens[:i]) for i in range(len(lens))]
        kv = KVCache.allocate(cfg, tokens, torch.bfloat16, "cuda")
        meta, pos = build_pass(lens, [0] * len(lens), starts, device="cuda")
        ids = torch.randint(100, cfg.vocab_size - 100, (tokens,), device="cuda")
        last = torch.tensor([s + n - 1 for s, n in zip(starts, lens)], device="cuda")  # one logits row a sequence

        def run():
            return loaded.model(ids, pos, meta, kv, last)
        variants = {"fused": with_fused(True, run), "unfused": with_fused(False, run)}
        logits = {name: fn() for name, fn in variants.items()}
        # Run-to-run baselines: is each path deterministic at this T, and does the first call differ?
        again = {name: fn() for name, fn in variants.items()}
        row = alternated(variants, reps, warmup=3)
        out[str(tokens)] = {"sequences": len(lens), "ms_fused": row["fused"]["ms"], "ms_unfused": row["unfused"]["ms"],
                            "ratio": row["fused"]["ms"] / row["unfused"]["ms"],
                            "saved_ms_per_layer": (row["unfused"]["ms"] - row["fused"]["ms"]) / cfg.num_layers,
                            "spread": row, "logits_equal": bool(torch.equal(logits["fused"], logits["unfused"])),
                            "logits_max_rel_diff": float((logits["fused"].float() - logits["unfused"].float()).abs().max()
                                                         / logits["unfused"].float().abs().max()),
                            "unfused_twice_equal": bool(torch.equal(again["unfused"], logits["unfused"])),
                            "fused_twice_equal": bool(torch.equal(again["fused"], logits["fused"])),
                            "second_calls_equal": bool(torch.equal(again["fused"], again["unfused"]))}
        del kv
    fp8.set_fused_quantisation(True)
    return out


@torch.inference_mode()
def op_rows(cfg: ModelConfig, token_counts: list[int], reps: int) -> dict:
    """The two fused ops alone against the op then `quantize_tokens`, per T."""
    c, inner = cfg.hidden_size, cfg.intermediate_size
    out = {}
    for tokens in token_counts:
        g = torch.Generator(device="cuda").manual_seed(tokens)
        x, res = (torch.randn(tokens, c, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
        w = torch.randn(c, device="cuda", generator=g).to(torch.bfloat16)
        gate_up = torch.randn(tokens, 2 * inner, device="cuda", generator=g).to(torch.bfloat16)
        norm = alternated({"fused": lambda: fused_kernels.add_rms_norm_fp8(x, res, w, 1e-6),
                           "unfused": lambda: fp8.quantize_tokens(fused_kernels.add_rms_norm(x, res, w, 1e-6)[0])},
                          reps, warmup=3, inner=10)
        silu = alternated({"fused": lambda: fused_kernels.silu_mul_fp8(gate_up),
                           "unfused": lambda: fp8.quantize_tokens(fused_kernels.silu_mul(gate_up))},
                          reps, warmup=3, inner=10)
        ops = {"add_rms_norm": norm, "silu_mul": silu}
        out[str(tokens)] = {f"{op}_{name}_ms": row[name]["ms"] for op, row in ops.items() for name in row}
        fused_norm, unfused_norm = fused_kernels.add_rms_norm_fp8(x, res, w, 1e-6)[0], fp8.quantize_tokens(
            fused_kernels.add_rms_norm(x, res, w, 1e-6)[0])
        fused_silu, unfused_silu = fused_kernels.silu_mul_fp8(gate_up), fp8.quantize_tokens(fused_kernels.silu_mul(gate_up))
        for op, (a, b) in {"add_rms_norm": (fused_norm, unfused_norm), "silu_mul": (fused_silu, unfused_silu)}.items():
            out[str(tokens)][f"{op}_codes_differing"] = int((a[0].view(torch.uint8) != b[0].view(torch.uint8)).sum())
            out[str(tokens)][f"{op}_scales_differing"] = int((a[1] != b[1]).sum())
    return out


def chart(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    counts = list(res["forward"])
    x = range(len(counts))
    ax1.bar([i - 0.2 for i in x], [res["forward"][t]["ms_unfused"] for t in counts], 0.4, label="unfused")
    ax1.bar([i + 0.2 for i in x], [res["forward"][t]["ms_fused"] for t in counts], 0.4, label="fused")
    for i, t in enumerate(counts):
        ax1.annotate(f"{res['forward'][t]['ratio']:.3f}×", (i + 0.2, res["forward"][t]["ms_fused"]), ha="center",
                     va="bottom", fontsize=8)
    ax1.set_xticks(list(x), [f"T={t}" for t in counts])
    ax1.set_ylabel("ms per forward (median)")
    ax1.set_title(f"{res['shape']}, {res['layers']} layers, FP8 projections: forward")
    ax1.legend()
    for op, style in (("add_rms_norm", "o"), ("silu_mul", "s")):
        for name, line in (("unfused", "--"), ("fused", "-")):
            ax2.plot(list(x), [res["ops"][t][f"{op}_{name}_ms"] for t in counts], style + line, label=f"{op} {name}")
    ax2.set_xticks(list(x), [f"T={t}" for t in counts])
    ax2.set_yscale("log")
    ax2.set_ylabel("ms per call (median)")
    ax2.set_title("the op then quantize_tokens (unfused) / the _fp8 kernel (fused)")
    ax2.legend(fontsize=8)
    fig.suptitle(f"{res['device']}, {res['date']}: FP8 activation quantisation fused into the norm and SiLU kernels")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen7b")
    ap.add_argument("--tokens", default="1024,8192,16384", help="token counts of the forward, comma-separated")
    ap.add_argument("--layers", type=int, default=2, help="decoder layers of the model (the shape's own: 28, 30)")
    ap.add_argument("--seq-len", type=int, default=1024, help="tokens per sequence of the packed forward")
    ap.add_argument("--reps", type=int, default=20, help="timed forwards per variant and token count")
    ap.add_argument("--chart-from", type=Path, help="only draw the chart of a results JSON")
    args = ap.parse_args()
    token_counts = [int(t) for t in args.tokens.split(",")]
    if args.chart_from:
        args.out.mkdir(parents=True, exist_ok=True)
        chart(json.loads(args.chart_from.read_text()), args.out / "fp8_fused_quant.png")
        return 0
    if not torch.cuda.is_available():
        print("fp8_fused_quant: needs a CUDA GPU (FP8 matmuls and the Triton kernels); none is visible here",
              file=sys.stderr)
        return 2
    reason = fp8.fp8_unsupported(torch.device("cuda"))
    if reason is not None:
        print(f"fp8_fused_quant: {reason}", file=sys.stderr)
        return 2
    fused.set_compile_enabled(True)  # the fused quantisation lives in the Triton kernels
    args.out.mkdir(parents=True, exist_ok=True)
    cfg = ModelConfig.from_hf_config(SHAPES[args.shape]).replace(num_layers=args.layers)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": " ".join(sys.argv),
           "shape": args.shape, "layers": args.layers, "seq_len": args.seq_len, "reps": args.reps}
    res["forward"] = forward_rows(cfg, token_counts, args.seq_len, args.reps)
    res["ops"] = op_rows(cfg, token_counts, args.reps)
    (args.out / "fp8_fused_quant.json").write_text(json.dumps(res, indent=2))
    chart(res, args.out / "fp8_fused_quant.png")
    for t, row in res["forward"].items():
        print(f"T={t}: fused {row['ms_fused']:.3f} ms, unfused {row['ms_unfused']:.3f} ms, ratio {row['ratio']:.3f}, "
              f"logits equal {row['logits_equal']} (max rel. diff {row['logits_max_rel_diff']:.2g}; twice equal: unfused "
              f"{row['unfused_twice_equal']}, fused {row['fused_twice_equal']}; second calls equal {row['second_calls_equal']}); ops {json.dumps(res['ops'][t])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
