"""Corpus C to 50,000 tokens through the engine with the probed budgets; HF padded batches beside it.

    python bench/gpu_probe_corpus_c.py --out DIR [--docs 512] [--tail-docs 2] [--new-tokens 128] [--no-hf]

Qwen2.5-7B shape, random bf16 weights. Corpus C (`worker.benchmarks.corpora`, log-normal lengths)
plus `--tail-docs` documents of exactly 50,000 tokens (the tail's end, so the run always has inputs
beyond the shape's 32,768-token context). The budgets come from `probe_budgets` (cached under
DIR/cache, so running `bench/gpu_probe.py --out DIR` first makes this a cache hit).

A document longer than the context takes the long-input path at token level, the way the
Summarizer plans it for records: pieces that fit the context (each with a 64-token stand-in for
the chunk prompt's template) are summarised, then one merge prompt over the piece outputs. Every
document must end in exactly one final output; lost documents (a failed sequence) are counted.
Peak VRAM: the allocator's peaks and the device's used memory sampled every 50 ms.
Writes DIR/gpu_probe_corpus_c.json and .png. Needs CUDA, torch, transformers, the native module.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import queue
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_bench import hf_model, hf_padded_prefill  # noqa: E402  (the same HF baseline as gpu_bench)

from worker.benchmarks.corpora import QWEN25_7B, corpus_token_ids  # noqa: E402
from worker.dispatch import BinDispatcher  # noqa: E402
from worker.engine.engine import Engine  # noqa: E402
from worker.engine.kv_arena import KVArena  # noqa: E402
from worker.engine.runner import ModelRunner  # noqa: E402
from worker.engine.sequence import SamplingParams  # noqa: E402
from worker.model import ModelConfig, random_model  # noqa: E402
from worker.probe import probe_budgets  # noqa: E402

TEMPLATE_TOKENS = 64  # stand-in for the chunk / merge prompt's instructions
GiB = 2**30


class UsedMemorySampler:
    """Peak of the device's used memory (all processes, the CUDA context included), every 50 ms."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            free, total = torch.cuda.mem_get_info()
            self.peak = max(self.peak, total - free)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def split_pieces(doc: np.ndarray, max_prompt: int) -> list[np.ndarray]:
    """Consecutive, nearly equal pieces whose prompts (template + piece) fit `max_prompt`."""
    n = math.ceil(len(doc) / (max_prompt - TEMPLATE_TOKENS))
    return np.array_split(doc, n)


def summarize_corpus(loaded, budgets, docs: list[np.ndarray], new_tokens: int) -> dict:
    cfg = loaded.config
    max_prompt = cfg.max_position_embeddings - new_tokens
    rng = np.random.default_rng(7)
    template = rng.integers(100, cfg.vocab_size - 100, size=TEMPLATE_TOKENS).tolist()
    arena = KVArena(cfg, budgets.kv_rows, dtype=loaded.dtype, device=torch.device("cuda"))
    disp = BinDispatcher(budgets.token_budget, alignment=16,
                         max_seqs_per_bin=max(1, min(budgets.max_decode_seqs, 1024)),
                         queue_capacity_tokens=sum(len(d) for d in docs) + 2 * budgets.token_budget)
    engine = Engine(ModelRunner(loaded.model, arena.cache, "cuda"), disp, arena.slabs, eos_ids=(),
                    max_context=cfg.max_position_embeddings)
    params = SamplingParams(max_new_tokens=new_tokens)
    owners: dict[int, tuple[int, int]] = {}  # seq_id -> (doc, piece index; -1 whole doc, -2 merge)
    pieces_out: dict[int, list[list[int] | None]] = {}
    done: dict[int, str] = {}                 # doc -> "ok" | error text
    counts = {"sequences": 0, "pieces": 0, "merges": 0, "long_docs": 0, "prompt_tokens": 0}

    def add(prompt: list[int], doc: int, piece: int) -> None:
        seq = engine.add(prompt, params)
        owners[seq.seq_id] = (doc, piece)
        counts["sequences"] += 1
        counts["prompt_tokens"] += len(prompt)

    disp.start()
    thread = threading.Thread(target=engine.run, name="gpu-loop", daemon=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    with UsedMemorySampler() as used:
        thread.start()
        for i, d in enumerate(docs):
            if len(d) <= max_prompt:
                add(d.tolist(), i, -1)
                continue
            parts = split_pieces(d, max_prompt)
            counts["long_docs"] += 1
            counts["pieces"] += len(parts)
            pieces_out[i] = [None] * len(parts)
            for j, p in enumerate(parts):
                add(template + p.tolist(), i, j)
        while len(done) < len(docs):
            try:
                seq = engine.finished.get(timeout=600)
            except queue.Empty:
                raise RuntimeError(f"no sequence finished in 600 s ({len(done)}/{len(docs)} docs done)") from None
            doc, piece = owners.pop(seq.seq_id)
            if seq.error is not None:
                done.setdefault(doc, f"{type(seq.error).__name__}: {seq.error}")
                continue
            if piece < 0:
                done[doc] = "ok"
                continue
            outs = pieces_out[doc]
            outs[piece] = seq.output
            if all(o is not None for o in outs) and doc not in done:
                counts["merges"] += 1
                add(template + [t for o in outs for t in o], doc, -2)
        engine.close_intake()
        thread.join()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    failed = {d: why for d, why in done.items() if why != "ok"}
    res = {"docs": len(docs), "docs_completed": len(docs) - len(failed), "docs_lost": len(failed),
           "first_errors": list(failed.values())[:3], "seconds": round(seconds, 2),
           "docs_per_s": round(len(docs) / seconds, 2), **counts,
           "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / GiB, 2),
           "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / GiB, 2),
           "peak_device_used_gib": round(used.peak / GiB, 2),
           "dispatcher": disp.stats()}
    del engine, arena, disp
    return res


def chart(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    lengths = res["corpus"]["lengths"]
    ax1.hist(lengths, bins=60, log=True)
    ax1.axvline(res["context"], color="tab:red", linestyle="--", label=f"context {res['context']:,}")
    ax1.set_xlabel("document tokens")
    ax1.set_ylabel("documents")
    ax1.legend()
    ours = res["ours"]
    total = res["budgets"]["total_bytes"] / GiB
    labels = ["allocated", "reserved", "device used"]
    values = [ours["peak_allocated_gib"], ours["peak_reserved_gib"], ours["peak_device_used_gib"]]
    ax2.bar(labels, values, color="tab:orange")
    ax2.axhline(total, color="black", linestyle=":", label=f"device {total:.0f} GiB")
    ax2.set_ylabel("peak GiB while summarising")
    hf = ", ".join(f"bs {k.split('bs')[-1]}: {'OOM' if v.get('oom') else 'ran'}"
                   for k, v in res.items() if k.startswith("hf_padded_prefill_bs"))
    ax2.set_title(f"{ours['docs_completed']}/{ours['docs']} docs, {ours['docs_lost']} lost; HF padded {hf or 'not run'}",
                  fontsize=9)
    ax2.legend(loc="lower right")
    fig.suptitle(f"corpus C to 50k tokens, probed budgets, {res['device']}, {res['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--docs", type=int, default=512)
    ap.add_argument("--tail-docs", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--no-hf", action="store_true", help="skip the Hugging Face padded baseline")
    ap.add_argument("--chart-from", type=Path, help="only draw the chart from this results JSON (no GPU)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.chart_from:
        chart(json.loads(args.chart_from.read_text()), args.out / "gpu_probe_corpus_c.png")
        return
    cfg = ModelConfig.from_hf_config(QWEN25_7B)
    tail = [np.random.default_rng(11 + k).integers(100, cfg.vocab_size - 100, size=50_000, dtype=np.int32)
            for k in range(args.tail_docs)]
    docs = tail + corpus_token_ids("C", args.docs, cfg.vocab_size, seed=3)  # the tail first: HF meets it at once
    lengths = [len(d) for d in docs]
    res: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
                 "model": "Qwen2.5-7B shape, random bf16 weights", "context": cfg.max_position_embeddings,
                 "new_tokens": args.new_tokens,
                 "corpus": {"docs": len(docs), "tokens": sum(lengths), "max_tokens": max(lengths),
                            "mean_tokens": round(float(np.mean(lengths)), 1),
                            "beyond_context": sum(n + args.new_tokens > cfg.max_position_embeddings for n in lengths),
                            "lengths": lengths}}
    loaded = random_model(cfg, device="cuda", dtype=torch.bfloat16, name="random-qwen7b")
    t0 = time.perf_counter()
    budgets = probe_budgets(loaded, "cuda", max_new_tokens=args.new_tokens, cache_dir=args.out / "cache")
    res["budgets"] = {**budgets.to_dict(), "call_seconds": round(time.perf_counter() - t0, 2)}
    warm = [d[:2048] for d in docs[2:6]]  # compile the decode shapes before the timed run
    summarize_corpus(loaded, budgets, warm, 8)
    res["ours"] = summarize_corpus(loaded, budgets, docs, args.new_tokens)
    out_json = args.out / "gpu_probe_corpus_c.json"
    out_json.write_text(json.dumps(res, indent=2))
    print(json.dumps({k: v for k, v in res["ours"].items() if k != "dispatcher"}, indent=2))
    if not args.no_hf:
        del loaded
        gc.collect()
        torch.cuda.empty_cache()
        model = hf_model()
        for bs in (8,):
            try:
                res[f"hf_padded_prefill_bs{bs}"] = hf_padded_prefill(model, docs, bs)
            except torch.cuda.OutOfMemoryError as exc:
                res[f"hf_padded_prefill_bs{bs}"] = {"oom": True, "error": str(exc).splitlines()[0][:200]}
            gc.collect()
            torch.cuda.empty_cache()
            print(f"hf_padded_prefill_bs{bs}", res[f"hf_padded_prefill_bs{bs}"])
        out_json.write_text(json.dumps(res, indent=2))
    try:
        chart(res, args.out / "gpu_probe_corpus_c.png")
    except ImportError as exc:  # no matplotlib on the GPU machine: draw it later with --chart-from
        print(f"chart not drawn ({exc}); run again with --chart-from on a machine with matplotlib")


if __name__ == "__main__":
    main()
