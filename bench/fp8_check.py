"""FP8 weights (or, with --kv, the FP8 KV cache) against the model dtype on real weights: logits, then the summaries users read.

    python bench/fp8_check.py --out DIR [--model GGUF_OR_FOLDER] [--device cuda] [--prompts 48] [--n 120]
    python bench/fp8_check.py --out DIR --kv [...]   # engine.kv_cache fp8 against the model dtype's tape
    python bench/fp8_check.py --out DIR --chart-from DIR/fp8_check.json   # the chart alone

1. Logits: the quality corpus's prompts (as the Summarizer renders them) through fp32, bf16 and fp8
   models, teacher-forced; at every prompt position: the relative error of the logits (Frobenius
   norm over a prompt), whether the top token agrees, the KL divergence of the next-token
   distributions; fp8 against bf16, and each against fp32 (bf16's own distance, for scale).
2. Summaries: `telesum bench quality` (the same corpus: generated, real-shaped, formats, network)
   through the real Summarizer with each dtype; how many summaries are identical, and every score.

With --kv the logits come through the KV tape (each prompt's first 32 tokens prefilled, the rest as one
pass that reads every key from the tape), FP8 tape against the model dtype's, in one model; the
summaries with `engine.kv_cache` fp8 against auto.

Writes DIR/fp8_check.json (with --kv: kv_fp8_check.json), its .png and DIR/quality_{auto,fp8}.jsonl.
Default model: the embedded SmolLM2-135M.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import time
from pathlib import Path

import torch

from worker.benchmarks import quality
from worker.model import KVCache, build_pass, embedded_model_path, load_model, use_fp8_weights
from worker.model.tokenizer import load_tokenizer
from worker.summarizer.preprocess import prepare


@torch.inference_mode()
def prompt_logits(loaded, ids: list[int]) -> torch.Tensor:
    """Logits [T, vocab] fp32 at every position of one prompt, from a fresh KV tape."""
    device = loaded.device
    kv = KVCache.allocate(loaded.config, len(ids), loaded.dtype, device)
    meta, pos = build_pass([len(ids)], [0], [0], device=device)
    return loaded.model(torch.tensor(ids, device=device), pos, meta, kv,
                        torch.arange(len(ids), device=device)).float()


@torch.inference_mode()
def tape_logits(loaded, ids: list[int], *, fp8_kv: bool, head: int = 32) -> torch.Tensor:
    """Logits [T - head, vocab] fp32 at the prompt's positions after its first `head` tokens, every
    key read from the KV tape (FP8 or the model dtype): the head prefilled from zero, the rest after it."""
    device = loaded.device
    kv = KVCache.allocate(loaded.config, len(ids), loaded.dtype, device, fp8=fp8_kv)
    tokens = torch.tensor(ids, device=device)
    meta, pos = build_pass([head], [0], [0], device=device)
    loaded.model(tokens[:head], pos, meta, kv, torch.tensor([head - 1], device=device))
    meta, pos = build_pass([len(ids) - head], [head], [0], device=device)
    return loaded.model(tokens[head:], pos, meta, kv, torch.arange(len(ids) - head, device=device)).float()


def kv_logits_check(model: str, device: str, prompts: list[list[int]]) -> dict:
    """The FP8 tape against the model dtype's in the model dtype's model; bf16 against fp32 for scale."""
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    loaded = load_model(model, device=device, dtype=dtype, tokenizer=False)
    rows: dict[str, list[dict]] = {"kv_fp8_vs_model_dtype": []}
    positions = 0
    for ids in prompts:
        exact = tape_logits(loaded, ids, fp8_kv=False)
        rows["kv_fp8_vs_model_dtype"].append(compare(exact, tape_logits(loaded, ids, fp8_kv=True)))
        positions += exact.shape[0]
    return {"prompts": len(prompts), "positions": positions, "model_dtype": str(dtype).removeprefix("torch."),
            **summarised(rows, positions)}


def summarised(per_pair: dict[str, list[dict]], positions: int) -> dict:
    return {name: {"rel_err_mean": statistics.fmean(r["rel_err"] for r in rows),
                   "rel_err_max": max(r["rel_err"] for r in rows),
                   "kl_mean": statistics.fmean(r["kl"] for r in rows), "kl_max": max(r["kl"] for r in rows),
                   "top1_agree": sum(r["top1_agree"] for r in rows) / positions,
                   "reference_top1_in_top5": sum(r["top1_in_top5"] for r in rows) / positions}
            for name, rows in per_pair.items()}


def compare(want: torch.Tensor, got: torch.Tensor) -> dict:
    """How close `got` [T, vocab] is to `want` at every position."""
    best = want.argmax(-1)
    return {"rel_err": float((got - want).norm() / want.norm()),
            "kl": float(torch.nn.functional.kl_div(got.log_softmax(-1), want.log_softmax(-1), log_target=True,
                                                   reduction="batchmean")),
            "top1_agree": int((got.argmax(-1) == best).sum()),
            "top1_in_top5": int((got.topk(5, dim=-1).indices == best[:, None]).any(-1).sum())}


def logits_check(model: str, device: str, prompts: list[list[int]]) -> dict:
    """fp8 against bf16 (the question), each against fp32 (how far bf16 itself already is)."""
    models = {"float32": load_model(model, device=device, dtype=torch.float32, backend="sdpa", tokenizer=False),
              "bfloat16": load_model(model, device=device, dtype=torch.bfloat16, tokenizer=False),
              "fp8": use_fp8_weights(load_model(model, device=device, dtype=torch.bfloat16, tokenizer=False))}
    pairs = (("fp8", "bfloat16"), ("bfloat16", "float32"), ("fp8", "float32"))
    per_pair: dict[str, list[dict]] = {f"{a}_vs_{b}": [] for a, b in pairs}
    positions = 0
    for ids in prompts:
        logits = {name: prompt_logits(loaded, ids) for name, loaded in models.items()}
        for a, b in pairs:
            per_pair[f"{a}_vs_{b}"].append(compare(logits[b], logits[a]))
        positions += len(ids)
    return {"prompts": len(prompts), "positions": positions, **summarised(per_pair, positions)}


def quality_args(args, variant: str) -> argparse.Namespace:
    """`telesum bench quality`'s arguments for one variant ('auto' or 'fp8': the weights', or with --kv
    the KV cache's), through its own parser (its defaults)."""
    parser = argparse.ArgumentParser()
    quality.add_arguments(parser)
    return parser.parse_args(["--n", str(args.n), "--formats", str(args.formats), "--network", str(args.network),
                              "--max-new-tokens", str(args.max_new_tokens), "--model", args.model, "--device",
                              args.device, "--kv-cache" if args.kv else "--dtype", variant,
                              "--output", str(args.out / f"quality_{variant}.jsonl"), "--json"])


def quality_run(ns: argparse.Namespace) -> tuple[dict, list[dict]]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        quality.run(ns)
    return (json.loads(printed.getvalue().strip().splitlines()[-1]),
            [json.loads(x) for x in ns.output.read_text().splitlines()])


def chart(res: dict, path: Path) -> None:
    """Per pair of precisions: top-1 agreement, relative error, KL (logits); identical summaries."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = [k for k, v in res["logits"].items() if isinstance(v, dict)]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    for ax, (field, label) in zip(axes, (("top1_agree", "top-1 agreement"), ("rel_err_mean", "logits relative error"),
                                         ("kl_mean", "KL divergence (mean)"))):
        values = [res["logits"][p][field] for p in pairs]
        ax.bar(range(len(pairs)), values, color=["tab:red", "tab:blue", "tab:purple"][:len(pairs)])
        ax.set_xticks(range(len(pairs)), [p.replace("_vs_", " vs\n") for p in pairs], fontsize=8)
        ax.set_title(label, fontsize=10)
        for i, v in enumerate(values):
            ax.text(i, v, f"{v:.4g}", ha="center", va="bottom", fontsize=8)
    s = res["summaries"]
    fig.suptitle(f"{res.get('question', 'FP8 weights')} on {res['model']} ({res['logits']['positions']} positions): {res['device']}, "
                 f"{res['date']}; summaries identical {s['identical']}/{s['records']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--chart-from", type=Path, help="only draw DIR/fp8_check.png from this results JSON")
    ap.add_argument("--model", default=None, help="a .gguf or HF folder (default: the embedded SmolLM2-135M)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--prompts", type=int, default=48, help="prompts for the logits check")
    ap.add_argument("--n", type=int, default=120, help="records for the summaries (telesum bench quality --n)")
    ap.add_argument("--formats", type=int, default=20)
    ap.add_argument("--network", type=int, default=24)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--kv", action="store_true", help="check the FP8 KV cache (engine.kv_cache) instead of FP8 weights")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.chart_from:
        chart(json.loads(args.chart_from.read_text()), args.out / f"{args.chart_from.stem}.png")
        return
    args.model = args.model or str(embedded_model_path())
    started = time.perf_counter()
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    res = {"device": device_name, "torch": torch.__version__, "model": Path(args.model).name,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "command": "python bench/fp8_check.py " + " ".join(
               f"--{k.replace('_', '-')}" + ("" if isinstance(v, bool) else f" {v}") for k, v in vars(args).items()
               if k not in ("out", "chart_from") and v is not False)
           + " --out DIR"}
    tok = load_tokenizer(args.model)
    runs = {dtype: quality_args(args, dtype) for dtype in ("auto", "fp8")}
    items = quality.corpus(args.n, seed=runs["auto"].seed, **quality.corpus_sizes(runs["auto"]))  # theirs
    prompts = [prepare(record, tok).prompt.tolist() for record, _, _ in items[:: max(1, len(items) // args.prompts)]]
    res["question"] = "FP8 KV cache" if args.kv else "FP8 weights"
    check = kv_logits_check if args.kv else logits_check
    res["logits"] = check(args.model, args.device, prompts[:args.prompts])
    print("logits", json.dumps(res["logits"]), flush=True)
    (auto, auto_rows), (fp8, fp8_rows) = quality_run(runs["auto"]), quality_run(runs["fp8"])
    same = [a["summary"] == b["summary"] for a, b in zip(auto_rows, fp8_rows)]
    res["summaries"] = {"records": len(same), "identical": sum(same), "identical_share": sum(same) / len(same),
                        "by_set": {s: {"records": sum(1 for r in auto_rows if r["set"] == s),
                                       "identical": sum(1 for r, m in zip(auto_rows, same) if r["set"] == s and m)}
                                   for s in sorted({r["set"] for r in auto_rows})},
                        "groups": {"auto": auto["groups"], "fp8": fp8["groups"]},
                        "differing_examples": [{"id": a["id"], "auto": a["summary"], "fp8": b["summary"]}
                                               for a, b, m in zip(auto_rows, fp8_rows, same) if not m][:8]}
    res["seconds"] = round(time.perf_counter() - started, 1)
    print("summaries", json.dumps({k: v for k, v in res["summaries"].items() if k != "differing_examples"}))
    name = "kv_fp8_check" if args.kv else "fp8_check"
    (args.out / f"{name}.json").write_text(json.dumps(res, indent=2))
    chart(res, args.out / f"{name}.png")


if __name__ == "__main__":
    main()
