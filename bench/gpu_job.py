"""The real job on one GPU, side by side in one run: telemetry records -> Summarizer -> summaries.

    python bench/gpu_job.py --out DIR --tokenizer TOKENIZER_DIR [--shapes smollm2,qwen7b] [--quick]
    python bench/gpu_job.py --out DIR --chart-from DIR/gpu_job.json      # the chart alone, no GPU

Records from `telesum produce`'s generators (`short` and `mixed` profiles). Speed models: SmolLM2-135M's
and Qwen2.5-7B's architectures with random bf16 weights (speed does not depend on weight values) and
the real SmolLM2 tokenizer; 64 new tokens, EOS off; `--dtypes bfloat16,fp8` runs each shape with each
(`engine.dtype: fp8`'s quantisation). `--real-model GGUF`: the workload users run, on the real SmolLM2
weights as `telesum worker` runs them (EOS, stop string, the grounded opening, 128 tokens at most).
Per shape and profile: the Summarizer as `telesum summarize` and `telesum worker` build it on a GPU,
greedy and with the production sampling (stop string + repetition penalty); as `telesum worker` builds it with 2 new tokens (the workload users
run today: the model stops after the grounded opening); the engine alone on the same pre-tokenised prompts; Hugging Face
`generate` on padded batches (best of 16/32/64) of the same prompts; a decode-step microbenchmark
(FlashAttention-2 or the Triton decode kernel, eager or CUDA graph) with a logits check. Writes DIR/gpu_job.json
(keys `<shape>_<profile>_<sampling>`, on `short` production `..._prefix_on` / `..._prefix_off`: prefix
reuse on and off: records_per_s, gpu_busy, p50_s, p99_s, output_tok_per_s, prompt_tokens and
prefill_tokens_computed, the prompt tokens a prefill actually ran).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import io
import json
import logging
import pstats
import statistics
import threading
import time
from pathlib import Path

import numpy as np
import torch

from worker.benchmarks.corpora import QWEN25_7B, SMOLLM2_135M
from worker.benchmarks.gpu_util import GpuBusySampler, sync_time
from worker.model import ModelConfig, load_model, random_model, use_fp8_weights
from worker.model import attention as attention_mod
from worker.model.tokenizer import load_tokenizer

NEW_TOKENS = 64
OPENING_TOKENS = 2  # the `..._opening_worker` run: what the model writes after the grounded opening
SHAPES = {"smollm2": ("SmolLM2-135M shape", SMOLLM2_135M), "qwen7b": ("Qwen2.5-7B shape", QWEN25_7B)}
# Records per run: enough for tens of seconds of steady state at the expected rates.
COUNTS = {("smollm2", "short"): 6000, ("smollm2", "mixed"): 2000,
          ("qwen7b", "short"): 600, ("qwen7b", "mixed"): 300}
HF_PROMPTS = {"smollm2": 96, "qwen7b": 64}
HF_BATCHES = (32, 64)  # 16 measured slower than 32 for both shapes (issue 9's baseline run)


def build_loaded(shape: str, tokenizer, dtype: str = "bfloat16"):
    """Random weights of `shape`; dtype 'fp8': its projections quantised as `engine.dtype: fp8` does."""
    cfg = ModelConfig.from_hf_config(SHAPES[shape][1])
    cfg = dataclasses.replace(cfg, eos_token_ids=())  # EOS off: every summary runs to its limit or a stop
    loaded = random_model(cfg, device="cuda", dtype=torch.bfloat16, name=shape)
    loaded.tokenizer = tokenizer
    return use_fp8_weights(loaded) if dtype == "fp8" else loaded


def records_for(profile: str, n: int, seed: int = 11):
    from worker.samples import generate

    return [r for r, _ in generate(n, profile, seed=seed)]


def summarizer_run(loaded, records, *, sampling: str, worker_config: bool, profile_out: Path | None = None,
                   prefix_cache: bool = True, new_tokens: int = NEW_TOKENS) -> dict:
    from worker.prompts.sampling import default_sampling
    from worker.settings.budgets import Budgets
    from worker.settings.sections import EngineSettings
    from worker.summarizer.summarizer import Summarizer
    from worker.engine.sequence import SamplingParams

    params = (default_sampling(new_tokens) if sampling == "production"
              else SamplingParams(max_new_tokens=new_tokens))
    if worker_config:
        summarizer = worker_summarizer(loaded, params, new_tokens)
    else:
        summarizer = Summarizer(loaded, EngineSettings(max_new_tokens=new_tokens, prefix_cache=prefix_cache,
                                                       max_record_tokens=0), Budgets(65536, 1024, None, {}))
        summarizer.params = params  # greedy or the production sampling, as the run asks
    profs = {}
    if profile_out is not None:  # cProfile the GPU-loop thread (Python 3.12 allows one profiler at a time)
        profs = {"gpu_loop": cProfile.Profile()}
        engine_run = summarizer.engine.run

        def profiled_run():
            profs["gpu_loop"].enable()
            try:
                engine_run()
            finally:
                profs["gpu_loop"].disable()

        summarizer.engine.run = profiled_run
    summarizer.start()
    warm = records[:300]
    list(summarizer.results_in_order(warm))  # compile, capture graphs, start the preprocessing pool
    latencies, out_tokens, prompt_tokens, failed = [], 0, 0, 0
    hits_before = summarizer.prefix.stats()["hit_tokens"] if summarizer.prefix is not None else 0
    with GpuBusySampler() as busy:
        t0 = sync_time()
        for _, result in summarizer.results_in_order(records):
            if isinstance(result, Exception):
                failed += 1
                continue
            latencies.append(result.timings.total_s)
            out_tokens += result.output_tokens
            prompt_tokens += result.prompt_tokens
        dt = sync_time() - t0
    stats = summarizer.dispatcher.stats()
    # warm-up included; None: a package from before the counter, run side by side (count the warnings)
    out_of_memory = getattr(summarizer.stats(), "out_of_memory_events", None)
    reserved_gib = torch.cuda.memory_reserved() / 2**30  # what the allocator holds at the end of the run
    budgets = getattr(summarizer, "worker_budgets", None)
    prefix = summarizer.prefix.stats() if summarizer.prefix is not None else None
    hit_tokens = prefix["hit_tokens"] - hits_before if prefix else 0  # of the measured records only
    kv_rows = summarizer.arena.capacity_rows
    region_rows = summarizer.prefix.cache.num_blocks * summarizer.prefix.cache.block_size if prefix else 0
    summarizer.close(drain=False)
    if profs:
        text = io.StringIO()
        for name, prof in profs.items():
            text.write(f"==== {name} thread ====\n")
            pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(35)
        profile_out.write_text(text.getvalue())
    del summarizer
    gc.collect()
    torch.cuda.empty_cache()
    lat = sorted(latencies)
    return {"records": len(records), "failed": failed, "seconds": dt, "records_per_s": len(records) / dt,
            "gpu_busy": busy.busy_fraction(), "p50_s": lat[len(lat) // 2] if lat else None,
            "p99_s": lat[int(0.99 * (len(lat) - 1))] if lat else None,
            "output_tok_per_s": out_tokens / dt, "mean_output_tokens": out_tokens / max(1, len(lat)),
            "bin_fill": stats.get("fill_ratio"), "bins": stats.get("bins"), "kv_rows": kv_rows,
            "prompt_tokens": prompt_tokens, "prefill_tokens_computed": prompt_tokens - hit_tokens,
            "prefix_hit_token_share": hit_tokens / prompt_tokens if prompt_tokens else 0.0,
            "prefix_region_rows": region_rows, "out_of_memory_events": out_of_memory,
            "memory_reserved_gib": reserved_gib,
            **({"budgets": budgets} if budgets else {})}


def worker_summarizer(loaded, params, new_tokens: int = NEW_TOKENS):
    """The Summarizer exactly as `telesum worker` builds it from its default settings on this GPU
    (budgets from the probe, as the command resolves them)."""
    from worker.commands.runtime import budgets_for, build_summarizer
    from worker.settings.load import from_values

    loaded_settings = from_values({"engine.max_new_tokens": new_tokens})
    budgets = budgets_for(loaded_settings, loaded)
    summarizer = build_summarizer(loaded_settings.settings.engine, budgets, loaded)
    summarizer.params = dataclasses.replace(params, max_new_tokens=summarizer.params.max_new_tokens)
    summarizer.worker_budgets = budgets.describe()
    return summarizer


def prompts_for(loaded, records) -> list[list[int]]:
    from worker.summarizer.preprocess import Preprocessor, default_workers

    pool = Preprocessor(loaded.tokenizer, default_workers("cuda"))
    try:
        return [f.result().prompt.tolist() for f in [pool.submit(r) for r in records]]
    finally:
        pool.close()


def engine_only(loaded, prompts, *, production: bool) -> dict:
    """The engine alone on pre-tokenised prompts: the ceiling the Summarizer's host side should reach."""
    from worker.dispatch import BinDispatcher
    from worker.engine.engine import Engine
    from worker.engine.runner import ModelRunner
    from worker.engine.sequence import SamplingParams
    from worker.engine.kv_arena import KVArena
    from worker.prompts.sampling import default_sampling
    from worker.engine.sizing import default_kv_rows
    from worker.model.kv_cache import kv_row_bytes

    cfg = loaded.config
    rows = default_kv_rows(kv_row_bytes(cfg, torch.bfloat16), torch.device("cuda"), token_budget=65536, max_seqs_per_bin=1024,
                           max_new_tokens=NEW_TOKENS, max_context=cfg.max_position_embeddings)
    arena = KVArena(cfg, rows, dtype=torch.bfloat16, device=torch.device("cuda"))
    disp = BinDispatcher(65536, max_seqs_per_bin=1024, queue_capacity_tokens=sum(map(len, prompts)) + 65536)
    detok = (lambda ids: loaded.tokenizer.decode(ids, skip_special_tokens=True)) if production else None
    engine = Engine(ModelRunner(loaded.model, arena.cache, "cuda"), disp, arena.slabs, eos_ids=(),
                    max_context=cfg.max_position_embeddings, detokenize=detok)
    params = default_sampling(NEW_TOKENS) if production else SamplingParams(max_new_tokens=NEW_TOKENS)
    disp.start()
    thread = threading.Thread(target=engine.run, daemon=True)
    for p in prompts[:200]:  # warm-up
        engine.add(p, params)
    thread.start()
    for _ in range(200):
        engine.finished.get()
    with GpuBusySampler() as busy:
        t0 = sync_time()
        for p in prompts:
            engine.add(p, params)
        engine.close_intake()
        thread.join()
        dt = sync_time() - t0
    seqs = [engine.finished.get() for _ in prompts]
    out = sum(len(s.output) for s in seqs)
    del engine, arena
    gc.collect()
    torch.cuda.empty_cache()
    return {"records": len(prompts), "seconds": dt, "records_per_s": len(prompts) / dt,
            "gpu_busy": busy.busy_fraction(), "output_tok_per_s": out / dt,
            "failed": sum(s.error is not None for s in seqs)}


@torch.inference_mode()
def prefix_logits_check(loaded, prompts) -> dict:
    """First-token logits of prompts whose heads come from the prefix cache vs a full prefill (bf16)."""
    from worker.engine.engine import Engine
    from worker.engine.kv_arena import KVArena
    from worker.engine.prefix_reuse import PrefixReuse
    from worker.engine.runner import ModelRunner
    from worker.engine.sequence import SamplingParams
    from worker.dispatch import BinDispatcher

    cfg = loaded.config
    captured: dict[bool, list[torch.Tensor]] = {True: [], False: []}
    hit_tokens = 0
    for reuse in (False, True):
        rows, region = 262144, 16384
        arena = KVArena(cfg, rows, dtype=torch.bfloat16, device=torch.device("cuda"), reserved_tail_rows=region)
        prefix = PrefixReuse(arena.cache, first_row=rows - region, num_blocks=region // 32) if reuse else None
        disp = BinDispatcher(65536, max_seqs_per_bin=64)
        engine = Engine(ModelRunner(loaded.model, arena.cache, "cuda"), disp, arena.slabs, eos_ids=(),
                        max_context=cfg.max_position_embeddings, prefix_reuse=prefix)
        disp.start()
        params = SamplingParams(max_new_tokens=1)
        for p in prompts[:1]:  # fills the cache with the first prompt's head
            engine.add(p, params)
        while engine.num_unfinished:
            engine.step()
        original = engine.runner.prefill_bin

        def capture(*a, _orig=original, _out=captured[reuse], **kw):
            logits = _orig(*a, **kw)
            _out.append(logits.float().clone())
            return logits

        engine.runner.prefill_bin = capture
        for p in prompts[1:]:  # one at a time: each bin holds one prompt, so rows line up
            engine.add(p, params)
            while engine.num_unfinished:
                engine.step()
        if prefix is not None:
            hit_tokens = prefix.stats()["hit_tokens"]
        disp.close()
        del engine, arena
        torch.cuda.empty_cache()
    a, b = torch.cat(captured[False]), torch.cat(captured[True])
    return {"prompts": len(prompts) - 1, "hit_tokens": hit_tokens,
            "rel_err": float((a - b).norm() / a.norm()),
            "argmax_agree": float((a.argmax(-1) == b.argmax(-1)).float().mean())}


def hf_model(shape: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    fields = {k: v for k, v in SHAPES[shape][1].items() if k != "model_type"}
    config_cls, model_cls = (Qwen2Config, Qwen2ForCausalLM) if shape == "qwen7b" else (LlamaConfig, LlamaForCausalLM)
    with torch.device("cuda"):
        torch.manual_seed(0)
        model = model_cls(config_cls(**fields, attn_implementation="sdpa")).to(torch.bfloat16).eval()
    return model


@torch.inference_mode()
def hf_generate(model, prompts, batch_size: int) -> dict:
    t0 = sync_time()
    for i in range(0, len(prompts), batch_size):
        batch = prompts[i:i + batch_size]
        width = max(map(len, batch))
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), width, dtype=torch.long)
        for r, p in enumerate(batch):  # left padding for generation
            ids[r, width - len(p):] = torch.tensor(p)
            mask[r, width - len(p):] = 1
        model.generate(input_ids=ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=NEW_TOKENS,
                       min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0, eos_token_id=None)
    dt = sync_time() - t0
    return {"records": len(prompts), "batch_size": batch_size, "seconds": dt, "records_per_s": len(prompts) / dt}


def hf_best(shape: str, prompts) -> dict:
    model = hf_model(shape)
    hf_generate(model, prompts[:8], 8)  # warm-up
    best = None
    for bs in HF_BATCHES:
        try:
            r = hf_generate(model, prompts, bs)
        except torch.cuda.OutOfMemoryError:
            r = {"batch_size": bs, "oom": True, "records_per_s": 0.0}
            gc.collect()
            torch.cuda.empty_cache()
        if best is None or r["records_per_s"] > best["records_per_s"]:
            best = r
    del model
    gc.collect()
    torch.cuda.empty_cache()
    return best


@torch.inference_mode()
def decode_micro(loaded) -> dict:
    """ms per decode step at 1,100-row contexts: FA2 or the Triton kernel, eager or CUDA graph; logits vs eager FA2.
    `graph_triton_shared_head`: every slab starts with one of 4 heads of 512 rows (as `short` prompts
    start with their kind's head) and decode reads the head from one shared copy, as prefix reuse does."""
    from worker.engine.kv_arena import KVArena
    from worker.engine.runner import ModelRunner

    cfg = loaded.config
    res = {}
    ctx, head, kinds = 1100, 512, 4
    for batch in (256, 1024):
        slabs_end = batch * (ctx + 8)
        arena = KVArena(cfg, slabs_end + kinds * head, dtype=torch.bfloat16, device=torch.device("cuda"))
        starts = [i * (ctx + 8) for i in range(batch)]
        head_starts = [slabs_end + (i % kinds) * head for i in range(batch)]
        src = torch.tensor([h + r for h in head_starts for r in range(head)], device="cuda")
        dst = torch.tensor([s + r for s in starts for r in range(head)], device="cuda")
        for tape in (*arena.cache.k, *arena.cache.v):
            tape.normal_()
            tape.index_copy_(0, dst, tape.index_select(0, src))  # each slab's head = its kind's copy
        ids = torch.randint(100, cfg.vocab_size - 100, (batch,)).tolist()
        positions = [ctx - 1 - (i % 50) for i in range(batch)]
        runs = {}
        variants = (("eager_fa2", False, "fa2", False), ("graph_fa2", True, "fa2", False),
                    ("eager_triton", False, "triton", False), ("graph_triton", True, "triton", False),
                    ("graph_triton_shared_head", True, "triton", True))
        for name, graphs, kernel, shared in variants:
            attention_mod.DECODE_KERNEL = kernel
            runner = ModelRunner(loaded.model, arena.cache, "cuda", decode_graphs=graphs, max_decode_batch=batch)
            heads = (head_starts, [head] * batch) if shared else ()
            logits = runner.decode(ids, positions, starts, *heads).clone()
            for _ in range(3):
                runner.decode(ids, positions, starts, *heads)
            t0 = sync_time()
            for _ in range(10):
                runner.decode(ids, positions, starts, *heads)
            runs[name] = ((sync_time() - t0) / 10 * 1e3, logits)
        attention_mod.DECODE_KERNEL = "triton"
        ref, graph = runs["eager_fa2"][1], runs["graph_triton"][1]
        res[f"B{batch}"] = {name: {"ms": ms, "rel_err_vs_eager": float((lg - ref).norm() / ref.norm()),
                                   "rel_err_vs_graph_triton": float((lg - graph).norm() / graph.norm())}
                            for name, (ms, lg) in runs.items()}
        del arena
        torch.cuda.empty_cache()
    return res


def chart(res: dict, path: Path) -> None:
    """Records/s per run (with GPU busy share) and decode ms per step per kernel, from a results JSON."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(k, v) for k, v in res.items() if isinstance(v, dict) and "records_per_s" in v]
    decode = [(k, v) for k, v in res.items() if k.endswith("_decode_ms")]
    if decode:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    else:
        fig, ax1 = plt.subplots(figsize=(9, 4.8))
    ax1.barh([k for k, _ in runs], [v["records_per_s"] for _, v in runs], color="tab:orange")
    for i, (_, v) in enumerate(runs):
        busy = v.get("gpu_busy")
        label = f"{v['records_per_s']:.1f}" + (f"  (GPU busy {busy:.0%})" if busy is not None else "")
        if v.get("out_of_memory_events") is not None:
            label += f", {v['out_of_memory_events']} out-of-memory"
        ax1.text(v["records_per_s"], i, " " + label, va="center", fontsize=8)
    ax1.set_xscale("log")
    ax1.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax1.set_xlabel("records/s (log scale)")
    ax1.invert_yaxis()
    labels, width = [], 0.16
    for j, (shape, table) in enumerate(decode if decode else []):
        for b, (batch, kernels) in enumerate(table.items()):
            labels.append(f"{shape.removesuffix('_decode_ms')} {batch}")
            for n, (name, r) in enumerate(kernels.items()):
                ax2.bar(len(labels) - 1 + (n - (len(kernels) - 1) / 2) * width, r["ms"], width, color=f"C{n}",
                        label=name if len(labels) == 1 else None)
    if decode:
        ax2.set_xticks(range(len(labels)), labels, fontsize=8, rotation=20)
        ax2.set_ylabel("ms per decode step (1,100-row contexts)")
        ax2.legend(fontsize=8)
    fig.suptitle(f"telesum, the real job: {res['device']}, {res['date']}, {res['new_tokens']} new tokens")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path, help="the SmolLM2 tokenizer saved as a folder (required to run)")
    ap.add_argument("--chart-from", type=Path, help="only draw DIR/gpu_job.png from this results JSON (no GPU)")
    ap.add_argument("--shapes", default="smollm2,qwen7b")
    ap.add_argument("--profiles", default="short,mixed")
    ap.add_argument("--quick", action="store_true", help="a fifth of the records, no HF baseline")
    ap.add_argument("--records", type=int, default=0, help="records per run instead of the shape's count")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--no-decode-micro", action="store_true", help="skip the decode-step microbenchmark")
    ap.add_argument("--worker-shapes", default="smollm2,qwen7b",
                    help="shapes that also run with telesum worker's configuration (its probe included)")
    ap.add_argument("--shape-profiles", default="", help="e.g. qwen7b:short to limit one shape's profiles")
    ap.add_argument("--profile-host", action="store_true", help="cProfile the consumer thread of one run")
    ap.add_argument("--dtypes", default="bfloat16", help="bfloat16,fp8: each shape's runs with each (fp8 runs' "
                                                         "keys start <shape>_fp8_)")
    ap.add_argument("--real-model", type=Path, help="the real SmolLM2-135M-Instruct (.gguf): adds "
                                                    "smollm2_real_users_worker, the workload users run")
    ap.add_argument("--only", default="", help="comma-separated run keys to run (e.g. "
                                                "smollm2_short_production_prefix_on); default: all")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("worker.probe").setLevel(logging.INFO)  # the budgets each worker run plans with
    args.out.mkdir(parents=True, exist_ok=True)
    if args.chart_from:
        chart(json.loads(args.chart_from.read_text()), args.out / "gpu_job.png")
        return
    tokenizer = load_tokenizer(args.tokenizer)
    res: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "new_tokens": NEW_TOKENS,
                 "command": "python bench/gpu_job.py " + " ".join(
                     f"--{k.replace('_', '-')} {v}" if not isinstance(v, bool) else f"--{k.replace('_', '-')}"
                     for k, v in vars(args).items() if v not in (False, None, ""))}

    def wanted(key: str) -> bool:
        return not args.only or key in args.only.split(",")

    def save():
        (args.out / "gpu_job.json").write_text(json.dumps(res, indent=2))
        print(json.dumps({k: v for k, v in res.items() if not isinstance(v, dict)}), flush=True)

    if args.real_model is not None and wanted("smollm2_real_users_worker"):
        res["smollm2_real_users_worker"] = real_users_run(args.real_model, tokenizer, args.records or 6000)
        print("smollm2_real_users_worker", json.dumps(res["smollm2_real_users_worker"]), flush=True)
        save()
    for shape, dtype in [(s, d) for s in args.shapes.split(",") if s for d in args.dtypes.split(",")]:
        run_shape(args, res, shape, dtype, tokenizer, wanted, save)
    save()


def real_users_run(model: Path, tokenizer, n: int) -> dict:
    """The workload users run: the real SmolLM2 weights, `telesum worker`'s defaults (128 new tokens at
    most, EOS and the stop string on, the prompt ending in the grounded opening), `short` records."""
    from worker.settings.sections import EngineSettings

    loaded = load_model(model, device="cuda", tokenizer=False)
    loaded.tokenizer = tokenizer
    try:
        return summarizer_run(loaded, records_for("short", n), sampling="production", worker_config=True,
                              new_tokens=EngineSettings().max_new_tokens)
    finally:
        del loaded
        gc.collect()
        torch.cuda.empty_cache()


def run_shape(args, res: dict, shape: str, dtype: str, tokenizer, wanted, save) -> None:
    """Every run of one shape in one dtype (keys `<shape>[_fp8]_<profile>_<sampling>`)."""
    label = shape if dtype == "bfloat16" else f"{shape}_{dtype}"
    loaded = build_loaded(shape, tokenizer, dtype)
    if not args.no_decode_micro:
        res[f"{label}_decode_ms"] = decode_micro(loaded)
        print(label, "decode", json.dumps(res[f"{label}_decode_ms"]), flush=True)
        save()
    limits = dict(x.split(":") for x in args.shape_profiles.split(",") if x)
    for profile in (limits[shape].split("+") if shape in limits else args.profiles.split(",")):
        n = args.records or COUNTS[(shape, profile)] // (5 if args.quick else 1)
        records = records_for(profile, n)
        # On `short`, production sampling runs with prefix reuse on and off, side by side.
        runs = [("greedy", True, ""), ("production", True, "_prefix_on" if profile == "short" else "")]
        runs += [("production", False, "_prefix_off")] if profile == "short" else []
        for sampling, reuse, suffix in runs:
            key = f"{label}_{profile}_{sampling}{suffix}"
            if not wanted(key):
                continue
            prof = args.out / f"{key}.prof.txt" if args.profile_host and profile == "short" and reuse else None
            res[key] = summarizer_run(loaded, records, sampling=sampling, worker_config=False, profile_out=prof,
                                      prefix_cache=reuse)
            print(key, json.dumps(res[key]), flush=True)
            save()
        if profile == "short" and shape in args.worker_shapes.split(",") and wanted(
                f"{label}_short_production_worker"):
            try:
                res[f"{label}_short_production_worker"] = summarizer_run(
                    loaded, records, sampling="production", worker_config=True)
            except Exception as exc:  # report, do not hide
                res[f"{label}_short_production_worker"] = {"error": repr(exc)[:300]}
            print(f"{label}_short_production_worker", json.dumps(res[f"{label}_short_production_worker"]), flush=True)
            save()
        if profile == "short" and wanted(f"{label}_short_opening_worker"):
            # The workload users run today: the embedded model stops after the grounded opening,
            # a couple of tokens (random weights never stop by themselves, so 2 new tokens).
            res[f"{label}_short_opening_worker"] = summarizer_run(
                loaded, records, sampling="production", worker_config=True, new_tokens=OPENING_TOKENS)
            print(f"{label}_short_opening_worker", json.dumps(res[f"{label}_short_opening_worker"]), flush=True)
            save()
        if profile == "short" and wanted(f"{label}_short_engine_only_greedy"):
            prompts = prompts_for(loaded, records)
            res[f"{label}_prefix_logits_check"] = prefix_logits_check(loaded, prompts[:64])
            print(f"{label}_prefix_logits_check", json.dumps(res[f"{label}_prefix_logits_check"]), flush=True)
            res[f"{label}_short_engine_only_greedy"] = engine_only(loaded, prompts, production=False)
            print(f"{label}_short_engine_only_greedy", json.dumps(res[f"{label}_short_engine_only_greedy"]), flush=True)
            save()
            if not (args.quick or args.no_hf or dtype != "bfloat16"):  # HF runs bf16 only
                hf_prompts = prompts[:HF_PROMPTS[shape]]
                del loaded
                gc.collect()
                torch.cuda.empty_cache()
                res[f"{label}_short_hf_generate"] = hf_best(shape, hf_prompts)
                print(f"{label}_short_hf_generate", json.dumps(res[f"{label}_short_hf_generate"]), flush=True)
                save()
                loaded = build_loaded(shape, tokenizer, dtype)
    del loaded
    gc.collect()
    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
