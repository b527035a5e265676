"""The prefix cache's block copies on the GPU: the Triton kernel against the torch ops it replaced.

    python bench/block_copy.py --out DIR [--blocks 3000] [--shape smollm2|qwen7b]

Tapes of the model's shape (every layer's K and V, bf16, random), `--blocks` blocks of 32 rows copied
from the cache's region into slabs, as `copy_in` does for a bin of ~100 prompts with ~1,000-token heads.
Checks the kernel's result bit for bit against the torch ops', then times each: the host time of the
call (what the GPU loop spends launching it) and the GPU time (CUDA events), medians of 20. Writes
DIR/block_copy.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from worker.engine.block_copy import BlockCopier

SHAPES = {"smollm2": (30, 3, 64), "qwen7b": (28, 4, 128)}  # layers, KV heads, head dim
BLOCK_ROWS = 32


def timed(copier: BlockCopier, src: list[int], dst: list[int], rounds: int = 20) -> dict:
    host, gpu = [], []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        copier.copy(src, dst)
        host.append(time.perf_counter() - t0)
        end.record()
        torch.cuda.synchronize()
        gpu.append(start.elapsed_time(end) / 1000)
    return {"host_ms": 1000 * statistics.median(host), "gpu_ms": 1000 * statistics.median(gpu)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--blocks", type=int, default=3000)
    ap.add_argument("--shape", default="smollm2", choices=sorted(SHAPES))
    args = ap.parse_args()
    layers, heads, dim = SHAPES[args.shape]
    rows = 4 * args.blocks * BLOCK_ROWS
    gen = torch.Generator(device="cuda").manual_seed(0)
    tapes = [torch.randn(rows, heads, dim, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(2 * layers)]
    reference = [t.clone() for t in tapes]
    perm = torch.randperm(args.blocks, generator=torch.Generator().manual_seed(1)).tolist()
    src = [(2 * args.blocks + b) * BLOCK_ROWS for b in perm]  # cache region: the upper half, scattered
    dst = [b * BLOCK_ROWS for b in range(args.blocks)]        # slabs: the lower half
    kernel = BlockCopier(tapes, BLOCK_ROWS)
    ops = BlockCopier(reference, BLOCK_ROWS)
    ops.use_kernel = False
    kernel.copy(src, dst)
    ops.copy(src, dst)
    torch.cuda.synchronize()
    same = all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(tapes, reference))
    moved = 2 * args.blocks * BLOCK_ROWS * heads * dim * 2 * len(tapes)  # bytes read + written
    res = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "shape": args.shape, "blocks": args.blocks, "tapes": len(tapes), "bytes_moved": moved,
           "kernel_equals_torch_ops": same, "kernel": timed(kernel, src, dst), "torch_ops": timed(ops, src, dst)}
    for k in ("kernel", "torch_ops"):
        res[k]["gb_per_s"] = moved / (res[k]["gpu_ms"] / 1000) / 1e9
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "block_copy.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res))
    if not same:
        raise SystemExit("the kernel's copy differs from the torch ops'")


if __name__ == "__main__":
    main()
