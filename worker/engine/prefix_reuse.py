"""Shared-prefix KV reuse: a prompt whose head was prefilled recently gets that head's K/V copied
into its slab and prefills only the rest.

Every prompt starts with a system prompt and a worked example of its record kind (about half of a
`short` record's ~1,100 tokens). `PrefixCache` keeps the K/V of whole blocks of prompt tokens in a
region at the end of the KV tape; this module is its one user:

- `match` (any thread, at `Engine.add`): the longest cached head of a prompt, pinned, so only the
  rest goes to the dispatcher and into a bin;
- `copy_in` (engine thread, at admission): the pinned rows copied into the sequence's new slab;
- `remember` (engine thread, after the prompt's prefill): the prompt's new full blocks copied from
  the slab into the cache; the handle keeps only the head that decode reads (`Sequence.shared_head`)
  pinned, until `release` when the sequence leaves.

Copies run on the compute stream, so a copy, the prefill that reads it and any later reuse of the
rows stay in order without waiting on the host. Thread-safe: one lock around the cache.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from worker.engine.prefix_cache import PrefixCache, PrefixHit
from worker.engine.sequence import Sequence
from worker.model.kv_cache import KVCache

# Tokens per cached block. Smaller blocks match more of a head (a head loses < one block), larger
# ones cost fewer hash-chain steps per lookup; 32 keeps a lookup of a 1,000-token head to ~30 steps.
BLOCK_SIZE = 32


class PrefixReuse:
    """The prefix cache over rows [first_row, first_row + num_blocks * block_size) of one KV tape."""

    def __init__(self, kv: KVCache, *, first_row: int, num_blocks: int, block_size: int = BLOCK_SIZE) -> None:
        if first_row + num_blocks * block_size > kv.capacity_rows:
            raise ValueError(f"a prefix region of {num_blocks} x {block_size} rows from row {first_row} "
                             f"does not fit a tape of {kv.capacity_rows} rows")
        self.kv = kv
        self.cache = PrefixCache(block_size=block_size, num_blocks=num_blocks, first_row=first_row)
        self._lock = threading.Lock()  # protects cache

    # -- any thread -------------------------------------------------------------------------
    def match(self, seq: Sequence) -> None:
        """Give `seq` the cached head of its prompt (never all of it), pinned until `release`."""
        with self._lock:
            hit = self.cache.match(seq.prompt)
        seq.prefix_hit, seq.prefix_len = hit, hit.num_tokens
        seq.shared_head = hit.leading_run()

    def release(self, seq: Sequence) -> None:
        """Unpin a sequence's head (it finished, failed or left). Idempotent."""
        hit, seq.prefix_hit = seq.prefix_hit, None
        seq.shared_head = (0, 0)
        if hit is not None:
            with self._lock:
                self.cache.release(hit)

    def stats(self) -> dict[str, float]:
        """Counters: lookups, lookup/hit tokens, share of prompt tokens served, occupancy, evictions."""
        with self._lock:
            c = self.cache
            return {"lookups": c.num_lookups, "lookup_tokens": c.num_lookup_tokens, "hits": c.num_hits,
                    "hit_tokens": c.num_hit_tokens, "inserted_blocks": c.num_inserted_blocks,
                    "evictions": c.num_evictions, "occupancy": c.occupancy,
                    "hit_token_share": c.num_hit_tokens / c.num_lookup_tokens if c.num_lookup_tokens else 0.0}

    # -- engine thread ----------------------------------------------------------------------
    def copy_in(self, seqs: list[Sequence]) -> None:
        """Copy each sequence's cached head into the first rows of its (just allocated) slab."""
        size = self.cache.block_size
        src, dst = [], []
        for seq in seqs:
            if seq.prefix_hit is not None and seq.prefix_len:
                src.extend(r.start for r in seq.prefix_hit.rows)
                dst.extend(range(seq.slab_start, seq.slab_start + seq.prefix_len, size))
        self._copy_blocks(src, dst)

    def remember(self, seqs: list[Sequence]) -> None:
        """After their prompts were prefilled: cache each prompt's new full blocks, release the heads."""
        src, dst = [], []
        with self._lock:
            for seq in seqs:
                hit = seq.prefix_hit
                if hit is None:
                    continue
                for offset, cache_row in self.cache.insert(seq.prompt, hit):
                    src.append(seq.slab_start + offset)
                    dst.append(cache_row)
        self._copy_blocks(src, dst)  # queued before anything can reuse the rows: the release below is safe
        with self._lock:
            for seq in seqs:
                hit = seq.prefix_hit
                if hit is not None:
                    keep = seq.shared_head[1] // self.cache.block_size
                    self.cache.release(hit, keep=keep)
                    if not keep:
                        seq.prefix_hit = None

    @torch.inference_mode()
    def _copy_blocks(self, src: list[int], dst: list[int]) -> None:
        """Copy whole blocks: rows [src[i], src[i] + block_size) to [dst[i], ...), every layer's K and V.
        Only the block starts cross to the device (a bin's heads are ~10^4 blocks, ~10^5 rows): the
        rows are expanded there."""
        if not src:
            return
        device = self.kv.k[0].device
        starts = torch.from_numpy(np.array([src, dst], dtype=np.int64))
        if device.type == "cuda":  # pinned: the upload does not wait for the queued GPU work
            starts = starts.pin_memory()
        starts = starts.to(device, non_blocking=True)
        src_rows, dst_rows = (starts[:, :, None] + torch.arange(self.cache.block_size, device=device)).flatten(1)
        for tape in (*self.kv.k, *self.kv.v):
            tape.index_copy_(0, dst_rows, tape.index_select(0, src_rows))
