"""Prefix cache bookkeeping: which KV-tape rows hold the K/V of which prompt-token blocks. No tensors.

The cache owns a fixed region of the KV tape, `num_blocks` blocks of `block_size` rows starting at
`first_row`; block b lives at rows [first_row + b*block_size, first_row + (b+1)*block_size). A block
holds the K/V of one whole block of prompt tokens *given everything before it*, so blocks form a tree:
each is keyed by a hash chain (key_i = block_hash(key_{i-1}, tokens_i)) and stores its tokens and its
parent block, and a lookup checks both, so a hash collision is only ever a miss, never wrong K/V.

Pins: `match` pins the blocks it returns and `insert` pins the blocks it adds, both in one
`PrefixHit` handle; `release` unpins them. A pinned block is never evicted.

Claims: a prompt whose head is only partly cached can claim its first missing block while it is
prefilled (`match(..., waiter=...)`); a later prompt that needs that same block then waits for it
instead of prefilling the same head again (a burst of records of one kind prefills its head once).
Releasing the claimer's handle ends the claim and hands back its waiters, to be matched again.

Eviction is LRU over unpinned blocks, ordered by when they were last unpinned, and only ever takes a
leaf, so no cached block is left unreachable. This holds without searching for leaves: every handle
pins a whole path from the root, so a pinned block's ancestors are pinned too, and `release` unpins
the deepest block first; hence every unpinned block's descendants are unpinned and sit ahead of it in
the LRU queue, and the queue's head is always a leaf.

Not thread-safe: engine thread only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

ROOT_KEY = 0  # the key the hash chain starts from (the empty prefix)


def block_hash(parent_key: int, tokens: tuple[int, ...]) -> int:
    """Key of a block from its parent's key and its own tokens (not collision-free; lookups verify)."""
    return hash((parent_key, tokens))


class _Block:
    __slots__ = ("index", "key", "parent", "tokens", "ref_count", "num_children")

    def __init__(self, index: int, key: int, parent: _Block | None, tokens: tuple[int, ...]) -> None:
        self.index = index  # cache block number: rows first_row + index*block_size onwards
        self.key = key
        self.parent = parent
        self.tokens = tokens
        self.ref_count = 0
        self.num_children = 0


@dataclass(eq=False)
class Claim:
    """A block being prefilled by one prompt (`key`), and the waiters that need it."""

    key: int
    waiters: list = field(default_factory=list)


@dataclass(eq=False)
class PrefixHit:
    """The cached head of one prompt and the handle pinning it (and whatever `insert` adds).

    `num_tokens` prompt tokens are cached, in `blocks` (cache block numbers, in prompt order) at tape
    rows `rows` (one range of block_size rows per block). Release it with `PrefixCache.release` once
    the sequence no longer reads those rows.
    """

    num_tokens: int
    blocks: tuple[int, ...]
    rows: list[range]
    _pinned: list[_Block] = field(default_factory=list, repr=False)
    _released: bool = field(default=False, repr=False)
    _claim: Claim | None = field(default=None, repr=False)

    def leading_run(self) -> tuple[int, int]:
        """(first tape row, tokens) of the leading blocks that lie in consecutive rows; (0, 0) for none."""
        if not self.rows:
            return 0, 0
        n = 1
        while n < len(self.rows) and self.rows[n].start == self.rows[n - 1].stop:
            n += 1
        return self.rows[0].start, self.rows[n - 1].stop - self.rows[0].start


class PrefixCache:
    """Hash-chained, reference-counted, LRU-evicted prompt blocks in one tape region. Engine thread only."""

    def __init__(self, *, block_size: int, num_blocks: int, first_row: int) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1 token, got {block_size}")
        if num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {num_blocks}")
        if first_row < 0:
            raise ValueError(f"first_row must be >= 0, got {first_row}")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.first_row = first_row
        self._table: dict[int, _Block] = {}  # key -> block, every cached block
        self._free_slots = list(range(num_blocks - 1, -1, -1))  # unused block numbers; pops 0 first
        self._lru: OrderedDict[int, _Block] = OrderedDict()  # unpinned cached blocks, oldest first
        self._claims: dict[int, Claim] = {}  # key of a block being prefilled -> its claim
        self.num_lookups = 0
        self.num_lookup_tokens = 0
        self.num_hits = 0  # lookups that found at least one block
        self.num_hit_tokens = 0
        self.num_inserted_blocks = 0
        self.num_evictions = 0

    @property
    def end_row(self) -> int:
        """One past the last tape row of the cache region."""
        return self.first_row + self.num_blocks * self.block_size

    @property
    def num_used_blocks(self) -> int:
        return len(self._table)

    @property
    def num_pinned_blocks(self) -> int:
        return len(self._table) - len(self._lru)

    @property
    def occupancy(self) -> float:
        """Share of the cache's blocks holding K/V (0 for an empty-sized cache)."""
        return len(self._table) / self.num_blocks if self.num_blocks else 0.0

    def match(self, tokens: Sequence[int], *, max_tokens: int | None = None, waiter: object = None,
              claim: bool = True) -> PrefixHit | Claim:
        """Pin and return the longest cached prefix of `tokens` (token ids as Python ints) in whole
        blocks, of at most `max_tokens` and never all of `tokens` (the last token must be prefilled
        for its logits).

        With a `waiter`: when the first block missing is claimed by another prompt, queue the waiter
        on that claim and return the claim (nothing pinned, nothing counted); else, with `claim`, the
        hit claims that block until it is released."""
        limit = len(tokens) - 1 if max_tokens is None else min(len(tokens) - 1, max_tokens)
        bs = self.block_size
        path: list[_Block] = []
        key, parent, missing = ROOT_KEY, None, None
        for i in range(max(limit, 0) // bs):
            chunk = tuple(tokens[i * bs:(i + 1) * bs])
            key = block_hash(key, chunk)
            block = self._table.get(key)
            if block is None or block.parent is not parent or block.tokens != chunk:
                missing = key if block is None else None
                break
            path.append(block)
            parent = block
        owned = None
        if waiter is not None and missing is not None:
            owned = self._claims.get(missing)
            if owned is not None:
                owned.waiters.append(waiter)
                return owned
            if claim:
                owned = self._claims[missing] = Claim(missing)
        for block in path:
            self._pin(block)
        num_tokens = len(path) * bs
        self.num_lookups += 1
        self.num_lookup_tokens += len(tokens)
        self.num_hits += bool(path)
        self.num_hit_tokens += num_tokens
        return PrefixHit(num_tokens, tuple(b.index for b in path), [self._rows(b) for b in path],
                         list(path), _claim=owned)

    def forget_waiter(self, claim: Claim, waiter: object) -> None:
        """Take a waiter that no longer waits (it failed or left) off its claim."""
        claim.waiters = [w for w in claim.waiters if w is not waiter]

    def insert(self, tokens: Sequence[int], hit: PrefixHit) -> list[tuple[int, int]]:
        """Cache the whole blocks of `tokens` beyond those `hit` already pins, once their K/V is on the
        sequence's slab. Returns (token_offset, cache_row) per block to copy: slab rows
        [offset, offset+block_size) go to tape rows [cache_row, cache_row+block_size). Blocks already
        cached (e.g. by a sequence of the same bin) are pinned without a copy; when every block is
        pinned, or a key collides, the rest are not cached. Everything added stays pinned by `hit`."""
        self._check_live(hit)
        bs = self.block_size
        pinned = hit._pinned
        for i, block in enumerate(pinned):
            if block.tokens != tuple(tokens[i * bs:(i + 1) * bs]):
                raise ValueError(f"tokens differ from the prefix this handle pins, in block {i}")
        parent = pinned[-1] if pinned else None
        key = parent.key if parent else ROOT_KEY
        copies: list[tuple[int, int]] = []
        for i in range(len(pinned), len(tokens) // bs):
            chunk = tuple(tokens[i * bs:(i + 1) * bs])
            key = block_hash(key, chunk)
            block = self._table.get(key)
            if block is not None:
                if block.parent is not parent or block.tokens != chunk:
                    break  # the key belongs to another block: this one and its descendants stay out
                self._pin(block)
            else:
                index = self._take_slot()
                if index is None:
                    break
                block = _Block(index, key, parent, chunk)
                self._table[key] = block
                if parent is not None:
                    parent.num_children += 1
                block.ref_count = 1
                copies.append((i * bs, self._rows(block).start))
                self.num_inserted_blocks += 1
            pinned.append(block)
            parent = block
        return copies

    def release(self, hit: PrefixHit, *, keep: int = 0) -> Claim | None:
        """Unpin what `hit` pins beyond its first `keep` blocks (deepest first: they become evictable
        in that order); with keep=0 the handle is done. The kept blocks are still a path from the root.
        Ends the hit's claim and returns it: its waiters should `match` again."""
        self._check_live(hit)
        hit._released = keep == 0
        claim, hit._claim = hit._claim, None
        if claim is not None:  # only its own hit ever ends a claim
            del self._claims[claim.key]
        for block in reversed(hit._pinned[keep:]):
            block.ref_count -= 1
            if block.ref_count == 0:
                self._lru[block.index] = block
        del hit._pinned[keep:]
        return claim

    def holds(self, key: int) -> bool:
        """Whether the block with this chain key is cached."""
        return key in self._table

    def _rows(self, block: _Block) -> range:
        start = self.first_row + block.index * self.block_size
        return range(start, start + self.block_size)

    def _pin(self, block: _Block) -> None:
        if block.ref_count == 0:
            del self._lru[block.index]
        block.ref_count += 1

    def _take_slot(self) -> int | None:
        """A free block number, evicting the least recently unpinned leaf if needed; None if all pinned."""
        if self._free_slots:
            return self._free_slots.pop()
        if not self._lru:
            return None
        index, victim = self._lru.popitem(last=False)
        if victim.num_children:  # cannot happen while every handle pins a whole root path
            raise RuntimeError(f"prefix cache would evict block {index}, which has cached children")
        del self._table[victim.key]
        if victim.parent is not None:
            victim.parent.num_children -= 1
        self.num_evictions += 1
        return index

    @staticmethod
    def _check_live(hit: PrefixHit) -> None:
        if hit._released:
            raise ValueError("this prefix handle was already released")
