"""`telesum probe`: measure (or read from the cache) the bin, KV arena and sequence budgets on a GPU."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Defaults as `telesum worker` and `summarize` probe (their bin size and summary length), so an
    # explicit probe fills the cache entry those commands read at start-up.
    from worker.settings.budgets import GPU_TOKEN_BUDGET
    from worker.settings.sections import EngineSettings

    parser.add_argument("--model", default=None, help="HF folder or .gguf (default: embedded SmolLM2-135M)")
    parser.add_argument("--device", default="cuda", help="cuda or cuda:N (default cuda)")
    parser.add_argument("--backend", default=None, choices=["flash_attn", "torch_fa2", "sdpa"])
    parser.add_argument("--max-new-tokens", type=int, default=EngineSettings().max_new_tokens,
                        help="summary length the KV slabs hold (default: the engine setting's)")
    parser.add_argument("--typical-prompt-tokens", type=int, default=1024,
                        help="prompt length the sequence count assumes (default 1024)")
    parser.add_argument("--bin-tokens", type=int, default=GPU_TOKEN_BUDGET,
                        help=f"the bin size the KV arena and sequences are probed beside (default {GPU_TOKEN_BUDGET}, "
                             "as the commands run); 0: search the largest bin too")
    parser.add_argument("--refresh", action="store_true", help="probe again even when cached")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="default $TELESUM_CACHE_DIR/probe, else ~/.cache/telesum/probe")
    parser.add_argument("--json", action="store_true", help="print the budgets as JSON")


def run(args: argparse.Namespace) -> int:
    import torch

    from worker.model import embedded_model_path, load_model
    from worker.probe import ProbeError, probe_budgets

    device = torch.device(args.device)
    if device.type != "cuda":
        log.error("telesum probe measures GPU memory: --device must be cuda or cuda:N, not %s", args.device)
        return 2
    if not torch.cuda.is_available():
        log.error("telesum probe needs a CUDA GPU; torch sees none")
        return 2
    loaded = load_model(args.model or embedded_model_path(), device=device, backend=args.backend, tokenizer=False)
    try:
        b = probe_budgets(loaded, device, max_new_tokens=args.max_new_tokens,
                          typical_prompt_tokens=args.typical_prompt_tokens, bin_tokens=args.bin_tokens or None,
                          refresh=args.refresh, cache_dir=args.cache_dir)
    except ProbeError as exc:
        log.error("%s", exc)
        return 1
    if args.json:
        print(json.dumps({"model": loaded.name, "dtype": str(loaded.dtype).removeprefix("torch."), **b.to_dict()},
                         indent=2))
    else:
        print(format_table(b, loaded.name, str(loaded.dtype).removeprefix("torch."), args.max_new_tokens))
    return 0


def format_table(b, model: str, dtype: str, max_new_tokens: int) -> str:
    gib = 2**30
    limit = (f"{100 * b.bin_tokens / b.bin_limit:.0f} % of the largest bin that ran, {b.bin_limit:,}"
             if b.bin_limit else "given")
    rows = [
        ("bin tokens", f"{b.bin_tokens:,}", limit),
        ("KV rows", f"{b.kv_rows:,}", f"{b.kv_rows // max(1, b.max_seqs):,} rows per sequence"),
        ("max sequences", f"{b.max_seqs:,}", f"{b.seq_tokens:,}-token prompts + {max_new_tokens} new tokens"),
        ("peak memory", f"{b.peak_bytes / gib:.1f} GiB", f"of {b.total_bytes / gib:.1f} GiB; "
                                                        f"{b.headroom_bytes / gib:.1f} GiB kept free"),
        ("seconds", f"{b.seconds:.1f}", f"probe time, {b.warmup_seconds:.1f} s of it the first passes"
                                        + (" (when it was probed)" if b.source == "cache" else "")),
        ("source", b.source, b.cache_path or ""),
    ]
    head = f"{b.device_name}, {model} ({dtype})"
    return "\n".join([head] + [f"  {name:<14} {value:>14}   {note}" for name, value, note in rows])
