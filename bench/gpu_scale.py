"""Scale-out over GPUs: corpus A summarised by one worker process per GPU, 1 GPU vs 2, side by side.

    python bench/gpu_scale.py --out DIR [--docs 256]

Each process sees one GPU (CUDA_VISIBLE_DEVICES), loads its own model (Qwen2.5-7B shape, random
bf16 weights) and engine, and takes its own block of a corpus of docs x world — the split a
consumer group makes of the input partitions, without the broker (the GPU machine has no Java) — so
every GPU has as much work as the one GPU alone (a saturated stream). Processes warm up, then start
together; docs/s = all documents / (start -> last process done).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def child(rank: int, world: int, n_docs: int, out: Path) -> None:
    import torch

    from gpu_bench import ours_summarize
    from worker.benchmarks.corpora import QWEN25_7B, corpus_token_ids
    from worker.model import ModelConfig, random_model

    cfg = ModelConfig.from_hf_config(QWEN25_7B)
    loaded = random_model(cfg, device="cuda", dtype=torch.bfloat16)
    # Contiguous blocks: corpus A interleaves short and long docs, so a round-robin split over two
    # GPUs would hand one all the short docs and the other all the long ones.
    docs = corpus_token_ids("A", n_docs * world, cfg.vocab_size, seed=1)[rank * n_docs:(rank + 1) * n_docs]
    ours_summarize(loaded, docs[:4], 8)  # warm-up: compiles
    (out / f"ready-{world}-{rank}").touch()
    while not (out / f"start-{world}").exists():
        time.sleep(0.005)
    r = ours_summarize(loaded, docs, 128)
    r.update(rank=rank, docs=len(docs), end=time.time(), gpu=torch.cuda.get_device_name())
    (out / f"result-{world}-{rank}.json").write_text(json.dumps(r))


def parent(n_docs: int, out: Path, worlds: list[int]) -> None:
    res: dict = {"date": time.strftime("%Y-%m-%d"), "docs_per_gpu": n_docs, "new_tokens": 128}
    for world in worlds:
        procs = [subprocess.Popen([sys.executable, __file__, "--child", str(rank), str(world), "--docs", str(n_docs),
                                   "--out", str(out)],
                                  # each process gets its share of the cores: intra-op threads of
                                  # several processes spinning on the same cores slow every one of them
                                  env={**os.environ, "CUDA_VISIBLE_DEVICES": str(rank),
                                       "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // max(worlds)))})
                 for rank in range(world)]
        while not all((out / f"ready-{world}-{r}").exists() for r in range(world)):
            if any(p.poll() not in (None, 0) for p in procs):
                raise RuntimeError(f"a worker process of the {world}-GPU run failed")
            time.sleep(0.05)
        t0 = time.time()
        (out / f"start-{world}").touch()
        for p in procs:
            if p.wait() != 0:
                raise RuntimeError(f"a worker process of the {world}-GPU run exited with {p.returncode}")
        parts = [json.loads((out / f"result-{world}-{r}.json").read_text()) for r in range(world)]
        wall = max(p["end"] for p in parts) - t0
        total = n_docs * world
        res[f"gpus_{world}"] = {"docs": total, "docs_per_s": total / wall, "seconds": wall, "per_process": parts}
        print(f"{world} GPU(s): {total} docs, {total / wall:.2f} docs/s ({wall:.2f} s)", flush=True)
    if len(worlds) == 2:
        res["speedup"] = res[f"gpus_{worlds[1]}"]["docs_per_s"] / res[f"gpus_{worlds[0]}"]["docs_per_s"]
        print(f"speedup {res['speedup']:.2f}x", flush=True)
    (out / "gpu_scale.json").write_text(json.dumps(res, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--docs", type=int, default=256, help="documents per GPU (each GPU kept as busy as one alone)")
    ap.add_argument("--gpus", default="1,2", help="process counts to compare")
    ap.add_argument("--child", nargs=2, type=int, metavar=("RANK", "WORLD"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        child(args.child[0], args.child[1], args.docs, args.out)
    else:
        parent(args.docs, args.out, [int(g) for g in args.gpus.split(",")])


if __name__ == "__main__":
    main()
