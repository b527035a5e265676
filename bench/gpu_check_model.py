"""GPU check of the model runtime: bf16 logits vs transformers, packed vs alone, chunked and decode vs
one-shot, and attention backends against each other. Standalone: needs torch + transformers (+ gguf
for the real SmolLM2); imports nothing of the worker beyond `worker.model`.

    python bench/gpu_check_model.py --out bench/results/gpu_check_model.json [--smollm2 PATH.gguf]
    python bench/gpu_check_model.py --device cpu --small --out /tmp/check.json   # dry run of the script
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from worker.model import KVCache, ModelConfig, build_pass, embedded_model_path, load_model, select_backend  # noqa: E402
from worker.model.attention import BACKEND_NAMES  # noqa: E402

LENGTHS = [300, 17, 1000, 64, 5, 129]  # new tokens per sequence in the packed prefill
ALIGN = 16  # the dispatcher's default span alignment: pads exercise the from-zero path
DECODE_STEPS = 8


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def top1(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.argmax(-1) == b.argmax(-1)).float().mean().item()


def packed(model, seqs, *, ctx_lens=None, kv=None, slab_rows, device, pads=True):
    """All real-token logits [L_b, vocab] per sequence from one packed pass; slab b at b * slab_rows."""
    ctx_lens = ctx_lens or [0] * len(seqs)
    from_zero = all(c == 0 for c in ctx_lens)
    pad_lens = [(-len(s)) % ALIGN if pads and from_zero else 0 for s in seqs]
    kv = kv or KVCache.allocate(model.cfg, slab_rows * len(seqs), next(model.parameters()).dtype, device)
    meta, pos = build_pass([len(s) for s in seqs], ctx_lens, [b * slab_rows for b in range(len(seqs))],
                           pad_lens=pad_lens, device=device)
    ids = torch.cat([torch.cat([s, s.new_zeros(p)]) for s, p in zip(seqs, pad_lens)]).to(device)
    cu = meta.cu_seqlens_q.tolist()
    rows = torch.tensor([r for b, s in enumerate(seqs) for r in range(cu[b], cu[b] + len(s))], device=device)
    logits = model(ids, pos, meta, kv, rows)
    return list(logits.split([len(s) for s in seqs])), kv


def hf_logits(hf, seqs, device):
    with torch.no_grad():
        return [hf(s[None].to(device)).logits[0].float() for s in seqs]


def check_model(name, loaded, hf32, hf16, seqs, device, backends):
    """One row per backend: error vs transformers fp32 (and transformers' own bf16 error as the yardstick)."""
    ref = hf_logits(hf32, seqs, device)
    hf16_err = max(rel_err(a, b) for a, b in zip(hf_logits(hf16, seqs, device), ref)) if hf16 is not None else None
    model, slab = loaded.model, max(len(s) for s in seqs) + DECODE_STEPS + 32
    rows, per_backend = [], {}
    for backend in backends:
        model.set_backend(select_backend(device, backend))
        t0 = time.perf_counter()
        got, _ = packed(model, seqs, slab_rows=slab, device=device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        row = {"model": name, "backend": backend, "prefill_ms": 1000 * (time.perf_counter() - t0),
               "rel_err_vs_hf_fp32": max(rel_err(a, b) for a, b in zip(got, ref)),
               "hf_bf16_rel_err_vs_hf_fp32": hf16_err,
               "top1_agree_vs_hf_fp32": min(top1(a, b) for a, b in zip(got, ref))}
        alone = [packed(model, [s], slab_rows=slab, device=device)[0][0] for s in seqs]
        row["packed_vs_alone_rel_err"] = max(rel_err(a, b) for a, b in zip(got, alone))
        row["chunked_vs_oneshot_rel_err"] = chunked_check(model, seqs, got, slab, device)
        row["decode_vs_recompute_rel_err"], row["decode_vs_hf_fp32_rel_err"] = decode_check(model, hf32, seqs, slab, device)
        per_backend[backend] = got
        rows.append(row)
    if len(per_backend) > 1:
        first = backends[0]
        for row in rows[1:]:
            row[f"rel_err_vs_{first}"] = max(rel_err(a, b) for a, b in zip(per_backend[row["backend"]], per_backend[first]))
    return rows


def chunked_check(model, seqs, oneshot, slab, device):
    """Longest sequence in two chunks (the second packed with a fresh sequence, through the tape)."""
    i = max(range(len(seqs)), key=lambda j: len(seqs[j]))
    long, other, split = seqs[i], seqs[(i + 1) % len(seqs)], len(seqs[i]) * 3 // 5
    kv = KVCache.allocate(model.cfg, 2 * slab, next(model.parameters()).dtype, device)
    first, kv = packed(model, [long[:split]], slab_rows=slab, device=device, kv=kv)
    second, _ = packed(model, [long[split:], other], ctx_lens=[split, 0], slab_rows=slab, device=device, kv=kv)
    return rel_err(torch.cat([first[0], second[0]]), oneshot[i])


def decode_check(model, hf32, seqs, slab, device):
    """Greedy decode steps for all sequences at once vs a one-shot recompute and vs transformers fp32."""
    kv = KVCache.allocate(model.cfg, slab * len(seqs), next(model.parameters()).dtype, device)
    logits, kv = packed(model, seqs, slab_rows=slab, device=device, kv=kv)
    last = [lg[-1] for lg in logits]
    tokens = [s.tolist() for s in seqs]
    for _ in range(DECODE_STEPS):
        nxt = [int(lg.argmax()) for lg in last]
        ctx = [len(t) for t in tokens]
        for t, n in zip(tokens, nxt):
            t.append(n)
        meta, pos = build_pass([1] * len(seqs), ctx, [b * slab for b in range(len(seqs))], device=device)
        step = model(torch.tensor(nxt, device=device), pos, meta, kv, torch.arange(len(seqs), device=device))
        last = list(step)
    final = [torch.tensor(t) for t in tokens]
    recompute, _ = packed(model, final, slab_rows=slab, device=device)
    worst = max(rel_err(a, b[-1]) for a, b in zip(last, recompute))
    hf = max(rel_err(a, b[-1]) for a, b in zip(last, hf_logits(hf32, final, device)))
    return worst, hf


def random_pair(cfg: ModelConfig, folder: Path, device, seed=0):
    """A random transformers model saved in bf16; transformers fp32/bf16 references and ours loaded from it."""
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = cfg.to_hf_config()
    torch.manual_seed(seed)
    hf = AutoModelForCausalLM.from_config(AutoConfig.for_model(raw.pop("model_type"), **raw), dtype=torch.bfloat16)
    hf.save_pretrained(folder, safe_serialization=True)
    hf32 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device).eval()
    hf16 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).to(device).eval()
    return hf32, hf16


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="JSON results path")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--smollm2", type=Path, default=None, help="SmolLM2 GGUF (default: the embedded one)")
    parser.add_argument("--small", action="store_true", help="tiny shapes (dry run on CPU)")
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    backends = [b for b in BACKEND_NAMES if _usable(b, device)]
    gen = torch.Generator().manual_seed(0)
    lengths = [n // 10 + 1 for n in LENGTHS] if args.small else LENGTHS
    shapes = {
        # Qwen2.5-0.5B's layer shape (qkv bias, GQA 14:2) with fewer layers; SmolLM2's exact shape.
        "qwen2_shape_random": ModelConfig.tiny("qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
                                               num_layers=4, num_heads=14, num_kv_heads=2, head_dim=64,
                                               rope_theta=1e6, max_position_embeddings=32768),
        "smollm2_shape_random": ModelConfig.tiny("llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                                                 num_layers=30, num_heads=9, num_kv_heads=3, head_dim=64,
                                                 rope_theta=1e5, tie_word_embeddings=True, rms_norm_eps=1e-5,
                                                 max_position_embeddings=8192),
    }
    if args.small:
        shapes = {k: v.replace(vocab_size=512, num_layers=2) for k, v in shapes.items()}
    results = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
               "torch": torch.__version__, "transformers": __import__("transformers").__version__,
               "dtype": str(dtype), "lengths": lengths, "align": ALIGN, "decode_steps": DECODE_STEPS,
               "rows": [], "skipped": []}
    for name, cfg in shapes.items():
        with tempfile.TemporaryDirectory() as tmp:
            hf32, hf16 = random_pair(cfg, Path(tmp), device)
            loaded = load_model(tmp, device=device, dtype=dtype, tokenizer=False)
            seqs = [torch.randint(0, cfg.vocab_size, (n,), generator=gen) for n in lengths]
            results["rows"] += check_model(name, loaded, hf32, hf16 if device.type == "cuda" else None,
                                           seqs, device, backends)
            del hf32, hf16, loaded
    results["rows"] += smollm2_rows(args, device, dtype, backends, lengths, results["skipped"])
    print_table(results["rows"])
    for reason in results["skipped"]:
        print("skipped:", reason)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def smollm2_rows(args, device, dtype, backends, lengths, skipped):
    try:
        path = args.smollm2 or embedded_model_path()
        import gguf  # noqa: F401
        from transformers import AutoModelForCausalLM
    except (FileNotFoundError, ImportError) as exc:
        skipped.append(f"real SmolLM2: {exc}")
        return []
    loaded = load_model(path, device=device, dtype=dtype)

    def hf(dt):
        return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dt).to(device).eval()

    hf32, hf16 = hf(torch.float32), hf(torch.bfloat16) if device.type == "cuda" else None
    text = ("2026-11-29T10:0{i}:00Z enb-{i} cell {i}: S1 link down, 12 UEs dropped, alarm MAJOR. "
            "Operator action requested. ")
    seqs = []
    for n in lengths:
        msg = [{"role": "user", "content": "".join(text.format(i=i % 10) for i in range(max(1, n // 30)))}]
        ids = loaded.tokenizer.apply_chat_template(msg, add_generation_prompt=True, tokenize=False)
        seqs.append(torch.tensor(loaded.tokenizer(ids, add_special_tokens=False)["input_ids"]))
    return check_model("smollm2_135m_gguf", loaded, hf32, hf16, seqs, device, backends)


def _usable(backend: str, device: torch.device) -> bool:
    try:
        select_backend(device, backend)
        return True
    except ValueError:
        return False


def print_table(rows) -> None:
    cols = ["model", "backend", "rel_err_vs_hf_fp32", "hf_bf16_rel_err_vs_hf_fp32", "top1_agree_vs_hf_fp32",
            "packed_vs_alone_rel_err", "chunked_vs_oneshot_rel_err", "decode_vs_recompute_rel_err",
            "decode_vs_hf_fp32_rel_err", "rel_err_vs_flash_attn", "rel_err_vs_torch_fa2", "prefill_ms"]
    cols = [c for c in cols if any(c in r for r in rows)]
    fmt = lambda v: "-" if v is None else (f"{v:.2e}" if isinstance(v, float) and v < 0.1 else  # noqa: E731
                                           f"{v:.3f}" if isinstance(v, float) else str(v))
    table = [cols] + [[fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(cols))]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)))


if __name__ == "__main__":
    sys.exit(main())
