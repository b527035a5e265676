"""Sizing the KV arena and its prefix-cache region when the operator or the probe left them open."""

from __future__ import annotations

import torch

from worker.engine.prefix_reuse import BLOCK_SIZE as PREFIX_BLOCK_SIZE
from worker.settings.budgets import FULL_BINS_IN_FLIGHT, PREFIX_CACHE_MAX_ROWS

# Share of the GPU memory still free after the model loaded that the KV arena takes by default: the
# rest is for prefill activations of a full bin and the decode graphs' buffers.
GPU_KV_MEMORY_SHARE = 0.5


def default_kv_rows(row_bytes: int, device: torch.device, *, token_budget: int,
                    max_seqs_per_bin: int, max_new_tokens: int, max_context: int) -> int:
    """KV-tape rows when none are configured: `FULL_BINS_IN_FLIGHT` full bins and at least one full
    context; on a GPU at least `GPU_KV_MEMORY_SHARE` of the free memory, since
    the more sequences decode together the cheaper each step is per token. row_bytes: one row over
    all layers, K and V (`kv_cache.kv_row_bytes`)."""
    rows = max(FULL_BINS_IN_FLIGHT * (token_budget + max_seqs_per_bin * max_new_tokens), max_context)
    if device.type == "cuda":
        free_bytes, _ = torch.cuda.mem_get_info(device)
        rows = max(rows, int(GPU_KV_MEMORY_SHARE * free_bytes / row_bytes))
    return rows


def prefix_region_rows(kv_rows: int) -> int:
    """Rows of the KV arena kept for the prefix cache: a sixteenth, up to `PREFIX_CACHE_MAX_ROWS`, in
    whole blocks; 0 below 4 blocks."""
    return whole_blocks(min(kv_rows // 16, PREFIX_CACHE_MAX_ROWS))


def whole_blocks(rows: int) -> int:
    rows = rows // PREFIX_BLOCK_SIZE * PREFIX_BLOCK_SIZE
    return rows if rows >= 4 * PREFIX_BLOCK_SIZE else 0


def arena_rows(row_bytes: int, device: torch.device, *, kv_rows: int | None, token_budget: int,
               max_seqs_per_bin: int, max_new_tokens: int, max_context: int, prefix_cache: bool,
               prefix_cache_tokens: int | None) -> tuple[int, int]:
    """(arena rows, of which the prefix region at its end). The region never takes rows from the
    slabs: a defaulted arena (kv_rows None) grows by it, a given one keeps at least one full context
    for slabs."""
    sized_here = kv_rows is None
    if sized_here:
        kv_rows = default_kv_rows(row_bytes, device, token_budget=token_budget, max_seqs_per_bin=max_seqs_per_bin,
                                  max_new_tokens=max_new_tokens, max_context=max_context)
    region = 0
    if prefix_cache:
        region = prefix_region_rows(kv_rows) if prefix_cache_tokens is None else whole_blocks(prefix_cache_tokens)
    if sized_here:
        return kv_rows + region, region
    return kv_rows, whole_blocks(min(region, kv_rows - max_context))
