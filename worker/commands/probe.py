"""`telesum probe`: measure (or read from the cache) the bin, KV arena and sequence budgets on a GPU.

The model, device, backend, summary length and a fixed bin size are the `[engine]` settings
(flags, environment, file), the same ones `telesum worker` reads, so the probe measures what the
worker will run; `--token-budget` fixes the bin and probes only the arena and sequences beside it.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from worker.commands.exit_codes import EXIT_FAILED, EXIT_OK
from worker.commands.startup import StartupError, exit_code_of, read_settings
from worker.probe.search import TYPICAL_PROMPT_TOKENS
from worker.settings.fields import SettingsError
from worker.settings.load import add_arguments as add_setting_arguments

log = logging.getLogger(__name__)


SECTIONS = ("engine", "log")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--typical-prompt-tokens", type=int, default=TYPICAL_PROMPT_TOKENS,
                        help=f"prompt length the sequence count assumes (default {TYPICAL_PROMPT_TOKENS})")
    parser.add_argument("--refresh", action="store_true", help="probe again even when cached")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="default $TELESUM_CACHE_DIR/probe, else ~/.cache/telesum/probe")
    parser.add_argument("--json", action="store_true", help="print the budgets as JSON")
    add_setting_arguments(parser, SECTIONS)


def run(args: argparse.Namespace) -> int:
    return exit_code_of(_probe, args)


def _probe(args: argparse.Namespace) -> int:
    import torch

    from worker.probe import ProbeError, probe_budgets
    from worker.commands.runtime import load_model, probed_bin

    loaded_settings = read_settings(args, SECTIONS)
    engine = loaded_settings.settings.engine
    if engine.device == "cpu":
        raise StartupError("telesum probe measures GPU memory: engine.device (--device, TELESUM_DEVICE) must be "
                           f"auto, cuda or cuda:N, not {engine.device}")
    if not torch.cuda.is_available():
        raise StartupError("telesum probe needs a CUDA GPU; torch sees none")
    try:
        loaded = load_model(engine)
    except SettingsError as exc:  # a setting the device cannot honour (engine.dtype)
        raise StartupError(str(exc)) from None
    except (FileNotFoundError, ValueError) as exc:
        raise StartupError(f"engine.model (--model, TELESUM_MODEL) {engine.model!r}: {exc}") from None
    device = next(loaded.model.parameters()).device
    # The bin the commands probe beside (runtime.probe_budgets), so this fills the entry they read.
    bin_tokens, bin_seqs = probed_bin(engine, loaded_settings)
    try:
        b = probe_budgets(loaded, device, max_new_tokens=engine.max_new_tokens,
                          typical_prompt_tokens=args.typical_prompt_tokens, bin_tokens=bin_tokens, bin_seqs=bin_seqs,
                          refresh=args.refresh, cache_dir=args.cache_dir)
    except ProbeError as exc:
        log.error("%s", exc)
        return EXIT_FAILED
    if args.json:
        print(json.dumps({"model": loaded.name, "dtype": loaded.precision, **b.to_dict()},
                         indent=2))
    else:
        print(format_table(b, loaded.name, loaded.precision, engine.max_new_tokens))
    return EXIT_OK


def format_table(b, model: str, dtype: str, max_new_tokens: int) -> str:
    gib = 2**30
    limit = (f"{100 * b.token_budget / b.bin_limit:.0f} % of the largest bin that ran, {b.bin_limit:,}"
             if b.bin_limit else "given")
    rows = [
        ("token_budget", f"{b.token_budget:,}", "tokens per prefill bin; " + limit),
        ("kv_rows", f"{b.kv_rows:,}", f"{b.kv_rows // max(1, b.max_decode_seqs):,} rows per sequence"),
        ("max_decode_seqs", f"{b.max_decode_seqs:,}",
         f"sequences in flight: {b.seq_tokens:,}-token prompts + {max_new_tokens} new tokens"),
        ("peak memory", f"{b.peak_bytes / gib:.1f} GiB", f"of {b.total_bytes / gib:.1f} GiB; "
                                                        f"{b.headroom_bytes / gib:.1f} GiB kept free, "
                                                        f"{b.decode_graph_bytes / gib:.2f} GiB decode graphs"
                                                        + (f", {b.prefill_graph_bytes / gib:.2f} GiB prefill graphs"
                                                           if b.prefill_graph_bytes else "")),
        ("seconds", f"{b.seconds:.1f}", f"probe time, {b.warmup_seconds:.1f} s of it the first passes"
                                        + (" (when it was probed)" if b.source == "cache" else "")),
        ("source", b.source, b.cache_path or ""),
    ]
    head = f"{b.device_name}, {model} ({dtype})"
    return "\n".join([head] + [f"  {name:<15} {value:>14}   {note}" for name, value, note in rows])
