"""GPU check of the model's fast path: the elementwise ops as Triton kernels vs eager, prefill and decode.

    python bench/gpu_check_perf.py --out bench/results/gpu_check_perf.json
    python bench/gpu_check_perf.py --device cpu --small --out /tmp/perf.json   # dry run of the script

Model: Qwen2.5-7B's shape with random bf16 weights. Prefill: one 65,536-token packed bin of corpus A
(alignment 16), eager vs kernels. Decode: B sequences with 1-2k cached rows each, eager vs kernels,
one host sync per step (argmax to the host, as the engine does). (CUDA-graph decode was measured
here on 2026-11-29 and gave no gain once a forward had no host syncs: bench/results/gpu/.) Each fast path's logits
are compared with eager's; a forward is also run under torch.cuda.set_sync_debug_mode("error").
Standalone: torch + transformers + this repo (no native dispatcher needed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from worker.benchmarks.corpora import QWEN25_7B, corpus_token_ids  # noqa: E402
from worker.engine.runner import ModelRunner  # noqa: E402
from worker.model import KVCache, ModelConfig, build_pass, fused, random_model  # noqa: E402

ALIGN = 16


def sync_time(device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def top1(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.argmax(-1) == b.argmax(-1)).float().mean().item()


def matmul_peak() -> float:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ a
    t0 = sync_time(a.device)
    for _ in range(20):
        a @ a
    return 20 * 2 * 8192**3 / (sync_time(a.device) - t0) / 1e12


def flops_per_token(cfg: ModelConfig) -> float:
    """Dense matmul FLOPs per token, lm_head excluded (as bench/gpu_bench.py counts them)."""
    h, i = cfg.hidden_size, cfg.intermediate_size
    return 2.0 * cfg.num_layers * (h * cfg.q_size + 2 * h * cfg.kv_size + cfg.q_size * h + 3 * h * i)


def sync_check(fn) -> str:
    """'ok' when fn() runs without a host sync (CUDA sync debug mode 'error'), else the error."""
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
        return "ok"
    except RuntimeError as exc:
        return repr(exc)[:300]
    finally:
        torch.cuda.set_sync_debug_mode("default")


def kernels_per_call(fn) -> int | str:
    """GPU operations (kernels, copies, memsets) one call of fn launches, from the profiler."""
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type.name == "CUDA")
    except Exception as exc:  # a profiler problem must not lose the timings
        return repr(exc)[:200]


# -- prefill ---------------------------------------------------------------------------------
def packed_bin(cfg: ModelConfig, budget: int, device):
    """Corpus A docs first-fit in order into one bin: (ids, positions, metadata, last-token rows, real tokens)."""
    lens, pads = [], []
    used = 0
    for doc in corpus_token_ids("A", 400, cfg.vocab_size, seed=1):
        span = len(doc) + (-len(doc)) % ALIGN
        if used + span <= budget:
            lens.append(len(doc))
            pads.append(span - len(doc))
            used += span
    starts = [0]
    for n, p in zip(lens[:-1], pads[:-1]):
        starts.append(starts[-1] + n + p)
    meta, pos = build_pass(lens, [0] * len(lens), starts, pad_lens=pads, device=device)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(100, cfg.vocab_size - 100, (used,), generator=gen).to(device)
    last = torch.tensor([s + n - 1 for s, n in zip(starts, lens)], device=device)
    return ids, pos, meta, last, sum(lens)


def prefill_rows(model, cfg, budget, device, reps, peak) -> dict:
    ids, pos, meta, last, real = packed_bin(cfg, budget, device)
    kv = KVCache.allocate(cfg, budget, next(model.parameters()).dtype, device)
    out, ref = {}, None
    for mode in ("eager", "kernels"):
        fused.set_compile_enabled(mode == "kernels")
        run = lambda: model(ids, pos, meta, kv, last)  # noqa: E731
        t0 = time.perf_counter()
        logits = run()  # warm-up; compiles the kernels on their first call
        warm_s = sync_time(device) - t0
        run()
        t0 = sync_time(device)
        for _ in range(reps):
            run()
        dt = (sync_time(device) - t0) / reps
        row = {"ms": dt * 1e3, "tok_per_s": real / dt, "first_call_s": warm_s, "tokens": int(ids.shape[0]),
               "real_tokens": real, "seqs": int(last.shape[0])}
        if peak:
            row["mfu"] = row["tok_per_s"] * flops_per_token(cfg) / (peak * 1e12)
        if device.type == "cuda":
            row["host_syncs"] = sync_check(run)
        if ref is None:
            ref = logits
        else:
            row["rel_err_vs_eager"], row["top1_vs_eager"] = rel_err(logits, ref), top1(logits, ref)
        out[f"prefill_{mode}"] = row
    del kv
    return out


# -- decode ----------------------------------------------------------------------------------
def decode_rows(model, cfg, batches, device, steps, slab) -> dict:
    dtype = next(model.parameters()).dtype
    kv = KVCache.allocate(cfg, slab * max(batches), dtype, device)
    gen = torch.Generator(device=device).manual_seed(0)
    for t in kv.k_full + kv.v_full:  # cached rows hold plausible values; the scratch row too
        t.normal_(0.0, 0.5, generator=gen)
    runner = ModelRunner(model, kv, device)
    out: dict = {}
    rng = torch.Generator().manual_seed(1)
    for b in batches:
        ctx = torch.randint(slab // 2, slab - 8, (b,), generator=rng).tolist()  # rows cached per sequence
        ids = torch.randint(100, cfg.vocab_size - 100, (b,), generator=rng).tolist()
        starts = [i * slab for i in range(b)]
        modes = {"eager": lambda: runner.decode(ids, ctx, starts),
                 "kernels": lambda: runner.decode(ids, ctx, starts)}
        ref = None
        for mode, step in modes.items():
            fused.set_compile_enabled(mode != "eager")
            logits = step().clone()  # warm-up; same inputs rewrite the same rows each step
            step()
            t0 = sync_time(device)
            for _ in range(steps):
                step().argmax(-1).tolist()  # the engine's one host sync per step
            dt = (sync_time(device) - t0) / steps
            row = {"ms_per_step": dt * 1e3, "tok_per_s": b / dt}
            if ref is None:
                ref = logits
            else:
                row["rel_err_vs_eager"], row["top1_vs_eager"] = rel_err(logits, ref), top1(logits, ref)
            if device.type == "cuda":
                meta, pos = build_pass([1] * b, ctx, starts, device=device)
                tok, rows = torch.tensor(ids, device=device), torch.arange(b, device=device)
                forward = lambda: model(tok, pos, meta, kv, rows)  # noqa: E731
                row["host_syncs"] = sync_check(forward)
                row["kernels_per_step"] = kernels_per_call(forward)
            out[f"decode_B{b}_{mode}"] = row
    return out


def print_table(res: dict) -> None:
    print(f"{res['device']}  torch {res['torch']}  {res['model']}  backend {res['backend']}")
    for key, r in res.items():
        if isinstance(r, dict):
            vals = "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items())
            print(f"{key:24s} {vals}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON results path")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true", help="tiny model and bin (dry run on CPU)")
    ap.add_argument("--decode-batches", default="16,64,128")
    ap.add_argument("--steps", type=int, default=20, help="timed decode steps per mode")
    ap.add_argument("--reps", type=int, default=3, help="timed prefill passes per mode")
    args = ap.parse_args()
    device = torch.device(args.device)
    cfg = ModelConfig.tiny("qwen2") if args.small else ModelConfig.from_hf_config(QWEN25_7B)
    budget, slab = (2048, 256) if args.small else (65536, 2304)
    batches = [2, 4] if args.small else [int(b) for b in args.decode_batches.split(",")]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    loaded = random_model(cfg, device=device, dtype=dtype)
    res: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                 "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
                 "model": "tiny qwen2" if args.small else "Qwen2.5-7B shape, random bf16",
                 "backend": loaded.model.backend.name}
    peak = matmul_peak() if device.type == "cuda" else None
    res["matmul_peak_tflops"] = peak
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save():
        args.out.write_text(json.dumps(res, indent=2))

    res.update(prefill_rows(loaded.model, cfg, budget, device, args.reps, peak))
    save()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    res.update(decode_rows(loaded.model, cfg, batches, device, args.steps, slab))
    save()
    print_table(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
