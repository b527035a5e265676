"""Phase 0: the prefill bin, KV arena and sequence budgets measured on the GPU for the loaded model.

    result = probe_budgets(loaded, device, max_new_tokens=128)

returns a `ProbeResult`: the cached budgets for this GPU, model shape, dtype and torch version, or probes them (see
`worker.probe.search` for the method and its margins, `worker.probe.measure` for the trials) and
caches the result (`worker.probe.cache`). Call it after loading the model and before allocating
anything else large on the device (the KV arena above all): it measures what is free.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from worker.probe.cache import cache_key, cache_path, default_cache_dir, load_entry, model_fingerprint, store_entry
from worker.probe.search import TYPICAL_PROMPT_TOKENS, ProbeError, SearchResult, run_probe
from worker.settings.allocator import allocator_settings
from worker.settings.budgets import GPU_MAX_SEQS_PER_BIN

log = logging.getLogger(__name__)

__all__ = ["ProbeError", "ProbeResult", "probe_budgets"]


@dataclass(frozen=True)
class ProbeResult:
    """One measurement of the largest safe budgets, named as in `worker.settings.budgets` (whose
    `resolve_budgets` takes it as is) and with the figures behind them."""

    token_budget: int     # tokens per packed prefill bin (the dispatcher's token_budget)
    kv_rows: int          # rows of the KV arena
    max_decode_seqs: int  # sequences in flight at once (prompt + max_new_tokens rows each, typical prompt)
    peak_bytes: int       # device memory allocated at the peak of the checks, model included
    seconds: float        # how long the probe took (the probe's own time when read from the cache)
    warmup_seconds: float  # of which the first passes (compilation, library workspaces)
    source: str           # "probe" (measured now) or "cache" (read from cache_path)
    bin_limit: int        # the largest bin that ran beside only its own KV rows (0 when the bin was given)
    free_bytes: int       # free device memory when probed, the decode graphs held
    decode_graph_bytes: int  # what the decode graphs hold (left out of the bin's and the arena's memory)
    prefill_graph_bytes: int  # what the largest bin's prefill graphs hold (0: TELESUM_PREFILL_GRAPHS off)
    headroom_bytes: int   # memory left free beside the bin's activations and the arena
    seq_tokens: int       # the typical prompt length max_decode_seqs assumes
    device_name: str
    total_bytes: int
    cache_path: str | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


_MEASURED = ("token_budget", "kv_rows", "max_decode_seqs", "peak_bytes", "seconds", "warmup_seconds",
             "bin_limit", "free_bytes", "decode_graph_bytes", "prefill_graph_bytes", "headroom_bytes", "seq_tokens")


def probe_budgets(loaded, device, *, max_new_tokens: int, typical_prompt_tokens: int = TYPICAL_PROMPT_TOKENS,
                  bin_tokens: int | None = None, bin_seqs: int = GPU_MAX_SEQS_PER_BIN, refresh: bool = False,
                  cache_dir: Path | None = None, measurer=None) -> ProbeResult:
    """Budgets for `loaded` (a LoadedModel already on `device`): from the cache, else probed and cached.

    bin_tokens: a bin size fixed by the operator; only the arena and sequences are probed beside it.
    bin_seqs: the most sequences a bin holds (engine.max_seqs_per_bin): the prefill graphs' logits rows.
    refresh: probe even when a valid cache entry exists. measurer: replaces the CUDA trials (tests).
    Raises ProbeError when nothing fits, ValueError on a device the probe cannot measure (CPU).
    """
    import torch

    from worker.engine.runner import graphs_wanted

    device = torch.device(device)
    if measurer is None:
        if device.type != "cuda":
            raise ValueError(f"the probe measures GPU memory; {device} is not a CUDA device")
        from worker.probe.measure import TorchMeasurer

        measurer = TorchMeasurer(loaded, device)
    decode_graphs, prefill_graphs = graphs_wanted()
    key = cache_key(gpu_name=measurer.device_name, total_bytes=measurer.total_bytes, model=loaded.name,
                    model_shape=model_fingerprint(loaded.config), dtype=loaded.precision,
                    torch_version=torch.__version__, max_new_tokens=max_new_tokens,
                    typical_prompt_tokens=typical_prompt_tokens, bin_tokens=bin_tokens,
                    decode_graphs=decode_graphs, prefill_graphs=prefill_graphs,
                    prefill_graph_seqs=bin_seqs if prefill_graphs else None, allocator=allocator_settings())
    path = cache_path(Path(cache_dir) if cache_dir is not None else default_cache_dir(), key)
    common = {"device_name": measurer.device_name, "total_bytes": measurer.total_bytes, "cache_path": str(path)}
    free_at_start = measurer.free_bytes()
    if not refresh:
        started = time.perf_counter()
        entry = load_entry(path, key, free_bytes=free_at_start)
        if entry is not None:
            cached = ProbeResult(**{k: entry[k] for k in _MEASURED}, source="cache", **common)
            log.info("probe budgets from the cache %s (read in %.3f s)", path, time.perf_counter() - started)
            return cached
    log.info("probing %s on %s (%.1f GiB): bin size, KV arena, sequences", loaded.name,
             measurer.device_name, measurer.total_bytes / 2**30)
    result: SearchResult = run_probe(measurer, max_new_tokens=max_new_tokens,
                                    typical_prompt_tokens=typical_prompt_tokens, bin_tokens=bin_tokens,
                                    prefill_graphs=prefill_graphs, bin_seqs=bin_seqs, log=log.debug)
    figures = {k: getattr(result, k) for k in _MEASURED}
    store_entry(path, key, figures, free_at_start_bytes=free_at_start)
    probed = ProbeResult(**figures, source="probe", **common)
    log.info("probed in %.1f s: bin %d tokens, %d KV rows, %d sequences, peak %.1f GiB (decode graphs %.2f GiB, "
             "prefill graphs %.2f GiB)", result.seconds, probed.token_budget, probed.kv_rows, probed.max_decode_seqs,
             probed.peak_bytes / 2**30, probed.decode_graph_bytes / 2**30, probed.prefill_graph_bytes / 2**30)
    return probed
