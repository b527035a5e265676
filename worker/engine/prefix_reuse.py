"""Shared-prefix KV reuse: a prompt whose head was prefilled recently gets that head's K/V copied
into its slab and prefills only the rest.

Every prompt starts with a system prompt and a worked example of its record kind (about half of a
`short` record's ~1,100 tokens). `PrefixCache` keeps the K/V of whole blocks of prompt tokens in a
region at the end of the KV tape; this module is its one user:

- `match` (any thread, at `Engine.add`): the longest cached head of a prompt, pinned, so only the
  rest goes to the dispatcher and into a bin; or, when the next block of that head is being
  prefilled by another prompt right now, "wait": the sequence is parked until that prompt's blocks
  are cached, then matched again (`remember`/`release` return it), so a burst of records of one
  kind prefills the kind's head once, not once per record in the first bins;
- `copy_in` (engine thread, at admission): the pinned rows copied into the sequence's new slab;
- `remember` (engine thread, after the prompt's prefill): the prompt's new full blocks copied from
  the slab into the cache; the handle keeps only the head that decode reads (`Sequence.shared_head`)
  pinned, until `release` when the sequence leaves.

Copies run on the compute stream, so a copy, the prefill that reads it and any later reuse of the
rows stay in order without waiting on the host. Thread-safe: one lock around the cache.
"""

from __future__ import annotations

import threading

from worker.engine.block_copy import BlockCopier
from worker.engine.prefix_cache import Claim, PrefixCache
from worker.engine.sequence import Sequence
from worker.model.kv_cache import KVCache

# Tokens per cached block. Smaller blocks match more of a head (a head loses < one block), larger
# ones cost fewer hash-chain steps per lookup; 32 keeps a lookup of a 1,000-token head to ~30 steps.
BLOCK_SIZE = 32


class PrefixReuse:
    """The prefix cache over rows [first_row, first_row + num_blocks * block_size) of one KV tape."""

    def __init__(self, kv: KVCache, *, first_row: int, num_blocks: int, block_size: int = BLOCK_SIZE,
                 max_claim_tokens: int | None = None) -> None:
        """max_claim_tokens: prompts longer than this (the engine's long lane, prefilled in chunks over
        many steps) never make others wait for their blocks; None = any prompt may."""
        if first_row + num_blocks * block_size > kv.capacity_rows:
            raise ValueError(f"a prefix region of {num_blocks} x {block_size} rows from row {first_row} "
                             f"does not fit a tape of {kv.capacity_rows} rows")
        self.kv = kv
        self.cache = PrefixCache(block_size=block_size, num_blocks=num_blocks, first_row=first_row)
        self.max_claim_tokens = max_claim_tokens
        self._copier = BlockCopier(kv.row_tapes(), block_size)
        self._lock = threading.Lock()  # protects cache

    # -- any thread -------------------------------------------------------------------------
    def match(self, seq: Sequence) -> bool:
        """Give `seq` the cached head of its prompt (never all of it), pinned until `release`: True.
        False: it waits for another prompt's prefill of its next block (`seq.prefix_wait`) and comes
        back from that prompt's `remember` or `release`."""
        with self._lock:
            return self._match_locked(seq)

    def release(self, seq: Sequence) -> list[Sequence]:
        """Unpin a sequence's head, or stop its wait (it finished, failed or left). Idempotent.
        Returns the sequences that waited for its blocks and now have their heads (to be queued)."""
        with self._lock:  # a concurrent `_rematch` may give this sequence a head meanwhile
            hit, seq.prefix_hit = seq.prefix_hit, None
            seq.shared_head = (0, 0)
            waiting, seq.prefix_wait = seq.prefix_wait, None
            if waiting is not None:
                self.cache.forget_waiter(waiting, seq)
            return self._rematch([self.cache.release(hit)]) if hit is not None else []

    def _match_locked(self, seq: Sequence, *, may_claim: bool = True) -> bool:
        claim = may_claim and (self.max_claim_tokens is None or seq.prompt_len <= self.max_claim_tokens)
        hit = self.cache.match(seq.prompt, waiter=seq, claim=claim)
        if isinstance(hit, Claim):
            seq.prefix_wait = hit
            return False
        seq.prefix_hit, seq.prefix_len = hit, hit.num_tokens
        seq.shared_head = hit.leading_run()
        return True

    def _rematch(self, claims: list) -> list[Sequence]:
        """Match the waiters of ended claims again: those with their heads now, to be queued. When a
        claimed block did not get cached (the cache was full of pinned blocks, or its prompt failed),
        its waiters go ahead without claiming it again: else they would prefill it one at a time."""
        ready = []
        for claim in claims:
            if claim is None:
                continue
            cached = self.cache.holds(claim.key)
            for seq in claim.waiters:
                seq.prefix_wait = None
                if self._match_locked(seq, may_claim=cached):
                    ready.append(seq)
        return ready

    def stats(self) -> dict[str, float]:
        """Counters: lookups, lookup/hit tokens, share of prompt tokens served, occupancy, evictions."""
        with self._lock:
            c = self.cache
            return {"lookups": c.num_lookups, "lookup_tokens": c.num_lookup_tokens, "hits": c.num_hits,
                    "hit_tokens": c.num_hit_tokens, "inserted_blocks": c.num_inserted_blocks,
                    "evictions": c.num_evictions, "occupancy": c.occupancy,
                    "hit_token_share": c.num_hit_tokens / c.num_lookup_tokens if c.num_lookup_tokens else 0.0}

    def uncount_lookup(self, num_tokens: int) -> None:
        """Take one lookup of `num_tokens` (a start-up check, not a record's prompt) out of the counters."""
        with self._lock:
            self.cache.num_lookups -= 1
            self.cache.num_lookup_tokens -= num_tokens

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

    def remember(self, seqs: list[Sequence]) -> list[Sequence]:
        """After their prompts were prefilled: cache each prompt's new full blocks, keep only the heads
        decode reads pinned. Returns the sequences that waited for these blocks and now have them."""
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
        claims = []
        with self._lock:
            for seq in seqs:
                hit = seq.prefix_hit
                if hit is not None:
                    keep = seq.shared_head[1] // self.cache.block_size
                    claims.append(self.cache.release(hit, keep=keep))
                    if not keep:
                        seq.prefix_hit = None
            return self._rematch(claims)  # before any insert can evict what the waiters need

    def _copy_blocks(self, src: list[int], dst: list[int]) -> None:
        """Copy whole blocks: rows [src[i], src[i] + block_size) to [dst[i], ...), every layer's K and V."""
        self._copier.copy(src, dst)
