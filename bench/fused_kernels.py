"""The decoder layer's elementwise ops three ways, side by side in one process: eager PyTorch,
torch.compile of the same functions (what the engine ran until 2026-12-03), and the Triton kernels.

    python bench/fused_kernels.py --out DIR [--tokens 1,64,1024,16384,65536] [--chart-from DIR/fused_kernels.json]

Per model shape (SmolLM2-135M, Qwen2.5-7B) and token count: each op's host time per call (calls
queued without a sync: what the launching thread pays) and GPU time per call (CUDA events), and
each implementation's first call (compilation; Triton's cache under $TRITON_CACHE_DIR). Then a
SmolLM2-shaped model's prefill of one 900-token prompt, as a step runs it: how long the forward
takes to return (host) and to finish (GPU). Writes DIR/fused_kernels.json and .png.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from worker.benchmarks.corpora import QWEN25_7B, SMOLLM2_135M  # noqa: E402
from worker.model import KVCache, ModelConfig, build_pass, fused, random_model  # noqa: E402
from worker.model import fused_kernels  # noqa: E402

SHAPES = {"smollm2": ModelConfig.from_hf_config(SMOLLM2_135M), "qwen7b": ModelConfig.from_hf_config(QWEN25_7B)}


def compiled_ops() -> fused.FusedOps:
    """The four eager functions through torch.compile(fullgraph=True), the token dimension dynamic."""
    def dynamic(fn):
        compiled = torch.compile(fn, fullgraph=True)

        def call(*args):
            for a in args:
                if isinstance(a, torch.Tensor) and a.dim() >= 2:
                    torch._dynamo.maybe_mark_dynamic(a, 0)
            return compiled(*args)
        return call
    return fused.FusedOps(dynamic(fused.rms_norm_eager), dynamic(fused.add_rms_norm_eager),
                          dynamic(fused.apply_rope_qk_eager), dynamic(fused.silu_mul_eager))


IMPLS = {"eager": lambda: fused.EAGER, "compiled": compiled_ops, "kernels": lambda: fused.KERNELS}


def op_calls(ops: fused.FusedOps, cfg: ModelConfig, tokens: int) -> dict:
    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(*size):
        return torch.randn(*size, device="cuda", generator=g).to(torch.bfloat16)
    c, h, hk, d, i = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size
    x, res, w = randn(tokens, c), randn(tokens, c), randn(c)
    qkv = randn(tokens, (h + 2 * hk) * d)
    q, k = qkv[:, :h * d].view(tokens, h, d), qkv[:, h * d:(h + hk) * d].view(tokens, hk, d)
    cos, sin = randn(tokens, 1, d), randn(tokens, 1, d)
    gate_up = randn(tokens, 2 * i)
    return {"rms_norm": lambda: ops.rms_norm(x, w, 1e-6), "add_rms_norm": lambda: ops.add_rms_norm(x, res, w, 1e-6),
            "rope_qk": lambda: ops.apply_rope_qk(q, k, cos, sin), "silu_mul": lambda: ops.silu_mul(gate_up)}


def time_call(fn, reps: int) -> dict:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    host = (time.perf_counter() - t0) / reps
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return {"host_us": host * 1e6, "gpu_us": start.elapsed_time(end) * 1e3 / reps}


def ops_rows(token_counts: list[int], reps: int) -> dict:
    out: dict = {}
    for name, make in IMPLS.items():
        t0 = time.perf_counter()
        ops = make()
        for shape_name, cfg in SHAPES.items():
            for n, call in op_calls(ops, cfg, 7).items():  # first calls: compilation
                t1 = time.perf_counter()
                call()
                torch.cuda.synchronize()
                out.setdefault(f"{name}_first_call_s", {})[f"{shape_name}_{n}"] = time.perf_counter() - t1
            for tokens in token_counts:
                for n, call in op_calls(ops, cfg, tokens).items():
                    call()
                    out[f"{shape_name}_{n}_T{tokens}_{name}"] = time_call(call, reps)
        out[f"{name}_setup_s"] = time.perf_counter() - t0
    return out


def prefill_rows(reps: int) -> dict:
    """One 900-token prompt through a SmolLM2-shaped model, as a prefill step runs it."""
    cfg = SHAPES["smollm2"]
    loaded = random_model(cfg, device="cuda", dtype=torch.bfloat16)
    kv = KVCache.allocate(cfg, 1024, torch.bfloat16, "cuda")
    meta, pos = build_pass([900], [0], [0], pad_lens=[4], device="cuda")
    ids = torch.randint(100, cfg.vocab_size - 100, (904,), device="cuda")
    last = torch.tensor([899], device="cuda")
    out, ref = {}, None
    for name, make in IMPLS.items():
        ops = make()
        fused._switch.cuda_ops = lambda ops=ops: ops  # noqa: SLF001: every CUDA call of the model takes `ops`
        run = lambda: loaded.model(ids, pos, meta, kv, last)  # noqa: E731
        for _ in range(3):
            logits = run()
        torch.cuda.synchronize()
        host, total = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            run()
            host.append(time.perf_counter() - t0)
            torch.cuda.synchronize()
            total.append(time.perf_counter() - t0)
        row = {"host_ms": 1e3 * sorted(host)[reps // 2], "with_gpu_ms": 1e3 * sorted(total)[reps // 2]}
        if ref is None:
            ref = logits
        else:
            row["logits_rel_err_vs_eager"] = float((logits - ref).norm() / ref.norm())
        out[f"prefill_900_{name}"] = row
    return out


def chart(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    impls = list(IMPLS)
    prefill = [res.get(f"prefill_900_{n}", {}) for n in impls]
    x = range(len(impls))
    ax1.bar([i - 0.2 for i in x], [r.get("host_ms", 0) for r in prefill], 0.4, label="forward returns (host)")
    ax1.bar([i + 0.2 for i in x], [r.get("with_gpu_ms", 0) for r in prefill], 0.4, label="forward done (GPU)")
    ax1.set_xticks(list(x), impls)
    ax1.set_ylabel("ms")
    ax1.set_title("SmolLM2 shape, prefill of one 900-token prompt")
    ax1.legend()
    keys = sorted({k.rsplit("_", 1)[0] for k in res if k.startswith(("smollm2_", "qwen7b_")) and "_T" in k})
    for n in impls:
        ax2.plot(range(len(keys)), [res.get(f"{k}_{n}", {}).get("gpu_us", float("nan")) for k in keys], "o-", label=n)
    ax2.set_xticks(range(len(keys)), keys, rotation=90, fontsize=6)
    ax2.set_yscale("log")
    ax2.set_ylabel("GPU µs per call")
    ax2.set_title("each op, GPU time")
    ax2.legend()
    fig.suptitle(f"{res.get('device')} {res.get('date')}: elementwise ops, eager / torch.compile / Triton kernels")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokens", default="1,64,1024,16384,65536")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--chart-from", type=Path, help="only draw the chart of a results JSON")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.chart_from:
        chart(json.loads(args.chart_from.read_text()), args.out / "fused_kernels.png")
        return 0
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": " ".join(sys.argv)}
    res.update(ops_rows([int(t) for t in args.tokens.split(",")], args.reps))
    res.update(prefill_rows(args.reps))
    (args.out / "fused_kernels.json").write_text(json.dumps(res, indent=2))
    chart(res, args.out / "fused_kernels.png")
    for k, v in res.items():
        print(k, json.dumps(v)[:300])
    return 0


if __name__ == "__main__":
    sys.exit(main())
