"""Prefix cache bookkeeping: exact hits only, pins hold, LRU evicts leaves, same results as a naive model.

A fake tape (row -> the token prefix whose K/V the row holds) stands in for the K/V: every hit must
point at rows holding exactly the prompt's own prefix.
"""

from unittest import mock

import pytest
from hypothesis import given, settings, strategies as st

from worker.engine import prefix_cache
from worker.engine.prefix_cache import PrefixCache


def _run(cache: PrefixCache, tape: dict, tokens: list[int], *, release: bool = True):
    """Admit one prompt: match, check the hit is exact, insert, write the copies to the tape."""
    hit = cache.match(tokens)
    bs = cache.block_size
    assert hit.num_tokens == len(hit.rows) * bs == len(hit.blocks) * bs < max(len(tokens), 1)
    for j, rows in enumerate(hit.rows):
        assert len(rows) == bs and cache.first_row <= rows.start < rows.stop <= cache.end_row
        assert tape[rows.start] == tuple(tokens[:(j + 1) * bs]), "hit returned another prompt's K/V"
    copies = cache.insert(tokens, hit)
    for offset, row in copies:
        assert offset % bs == 0 and offset >= hit.num_tokens and offset + bs <= len(tokens)
        tape[row] = tuple(tokens[:offset + bs])
    if release:
        cache.release(hit)
    return hit, copies


def _cached(cache: PrefixCache, tokens: list[int]) -> int:
    """Tokens of `tokens` the cache would serve, looked up without inserting anything."""
    hit = cache.match(tokens)
    cache.release(hit)
    return hit.num_tokens


def test_prefix_cache_match_partial_block_rounds_down_and_never_whole_prompt():
    cache, tape = PrefixCache(block_size=4, num_blocks=8, first_row=100), {}
    a = list(range(10))
    _, copies = _run(cache, tape, a)
    assert [off for off, _ in copies] == [0, 4]  # two whole blocks; tokens 8..9 stay uncached
    assert _run(cache, tape, a[:6] + [99] * 4)[0].num_tokens == 4  # diverges mid-block 2
    assert _run(cache, tape, a[:8])[0].num_tokens == 4  # the last token must be prefilled
    assert _run(cache, tape, a[:9])[0].num_tokens == 8
    hit = cache.match(a, max_tokens=7)
    assert hit.num_tokens == 4 and hit.rows == [range(100, 104)]
    cache.release(hit)
    assert cache.match([]).num_tokens == 0


def test_prefix_cache_divergence_at_every_position_hits_whole_blocks_before_it():
    cache, tape = PrefixCache(block_size=4, num_blocks=64, first_row=0), {}  # room for every variant
    base = list(range(13))
    _run(cache, tape, base)
    for pos in range(len(base)):
        other = base[:pos] + [99] + base[pos + 1:]
        assert _run(cache, tape, other)[0].num_tokens == min(pos // 4, 3) * 4, pos
    assert cache.num_evictions == 0


_WEAK_HASHES = {"constant": lambda key, toks: 7, "ignores-parent": lambda key, toks: hash(toks),
                "token-sum": lambda key, toks: hash((key, sum(toks)))}


@pytest.mark.parametrize("weak_hash", list(_WEAK_HASHES.values()), ids=list(_WEAK_HASHES))
def test_prefix_cache_hash_collision_is_a_miss_never_wrong_kv(weak_hash):
    with mock.patch.object(prefix_cache, "block_hash", weak_hash):
        cache, tape = PrefixCache(block_size=2, num_blocks=16, first_row=0), {}
        a = [1, 1, 2, 2, 0]
        _run(cache, tape, a)
        assert _run(cache, tape, a)[0].num_tokens == (2 if weak_hash is _WEAK_HASHES["constant"] else 4)
        assert _run(cache, tape, [3, 3, 0])[0].num_tokens == 0
        assert _run(cache, tape, [2, 2, 2, 2, 0])[0].num_tokens == 0  # a's 2nd block, wrong parent
        for head in ([2, 2], [0, 2]):  # the key of this block is taken by one of a's blocks ...
            _run(cache, tape, head + [4, 4, 0])
        for head in (a[:4], a[:2]):  # ... so [4, 4] after a's blocks is not the K/V computed above
            _run(cache, tape, head + [4, 4, 0])


def test_prefix_cache_evicts_least_recently_released_block():
    cache, tape = PrefixCache(block_size=2, num_blocks=3, first_row=0), {}
    p = {n: [n, n, 0] for n in range(1, 5)}
    for n in (1, 2, 3):
        _run(cache, tape, p[n])
    _run(cache, tape, p[1])  # p1 is now the most recently used
    assert len(_run(cache, tape, p[4])[1]) == 1
    assert cache.num_evictions == 1
    assert [_cached(cache, p[n]) for n in (1, 2, 3, 4)] == [2, 0, 2, 2]


def test_prefix_cache_evicts_leaves_first_so_no_block_is_orphaned():
    cache, tape = PrefixCache(block_size=2, num_blocks=3, first_row=0), {}
    chain = [1, 1, 2, 2, 3, 3, 0]
    _run(cache, tape, chain)
    _run(cache, tape, [1, 1, 0])  # the root block is touched last, yet its children go first
    _run(cache, tape, [5, 5, 0])
    assert cache.num_used_blocks == 3 and cache.num_evictions == 1
    assert _cached(cache, chain) == 4 and _cached(cache, [5, 5, 0]) == 2


def test_prefix_cache_pinned_blocks_are_never_evicted():
    cache, tape = PrefixCache(block_size=2, num_blocks=2, first_row=0), {}
    a = [1, 1, 2, 2, 0]
    held, copies = _run(cache, tape, a, release=False)
    assert len(copies) == 2 and cache.num_pinned_blocks == 2
    assert _run(cache, tape, [3, 3, 0])[1] == []  # no room: nothing cached, nothing evicted
    assert cache.num_evictions == 0 and cache.occupancy == 1.0
    assert _run(cache, tape, a)[0].num_tokens == 4
    cache.release(held)
    assert len(_run(cache, tape, [3, 3, 0])[1]) == 1 and cache.num_evictions == 1
    assert _cached(cache, a) == 2  # the leaf went, the root stayed


def test_prefix_cache_evicted_mid_run_then_reinserted_stays_exact():
    cache, tape = PrefixCache(block_size=2, num_blocks=2, first_row=10), {}
    a, b = [1, 2, 3, 4, 0], [5, 6, 7, 8, 0]
    _run(cache, tape, a)
    assert _run(cache, tape, b)[1] and cache.num_evictions == 2
    assert _run(cache, tape, a)[0].num_tokens == 0  # re-inserted over b's rows here
    assert _run(cache, tape, a)[0].num_tokens == 4
    assert _run(cache, tape, b)[0].num_tokens == 0


def test_prefix_cache_same_prompt_twice_in_one_bin_is_copied_once():
    cache, tape = PrefixCache(block_size=2, num_blocks=4, first_row=0), {}
    a = [1, 2, 3, 4, 0]
    h1, h2 = cache.match(a), cache.match(a)
    assert len(cache.insert(a, h1)) == 2 and cache.insert(a, h2) == []
    assert cache.num_inserted_blocks == 2 and cache.num_pinned_blocks == 2
    cache.release(h1)
    assert cache.num_pinned_blocks == 2
    cache.release(h2)
    assert cache.num_pinned_blocks == 0


def test_prefix_cache_counters():
    cache, tape = PrefixCache(block_size=2, num_blocks=4, first_row=0), {}
    _run(cache, tape, [1, 2, 3, 4, 5])
    _run(cache, tape, [1, 2, 3, 4, 6, 7])
    _run(cache, tape, [9, 9, 9])
    assert (cache.num_lookups, cache.num_lookup_tokens) == (3, 14)
    assert (cache.num_hits, cache.num_hit_tokens) == (1, 4)
    assert cache.num_inserted_blocks == 4 and cache.occupancy == 1.0 and cache.num_evictions == 0


def test_prefix_cache_misuse_raises_clear_errors():
    for kwargs, name in (({"block_size": 0, "num_blocks": 1, "first_row": 0}, "block_size"),
                         ({"block_size": 1, "num_blocks": -1, "first_row": 0}, "num_blocks"),
                         ({"block_size": 1, "num_blocks": 1, "first_row": -1}, "first_row")):
        with pytest.raises(ValueError, match=name):
            PrefixCache(**kwargs)
    cache = PrefixCache(block_size=2, num_blocks=4, first_row=0)
    cache.insert([1, 2, 3], cache.match([1, 2, 3]))
    hit = cache.match([1, 2, 3])
    with pytest.raises(ValueError, match="tokens differ"):
        cache.insert([1, 9, 3], hit)
    cache.release(hit)
    with pytest.raises(ValueError, match="already released"):
        cache.release(hit)


class _Reference:
    """The same policy, naively: a dict of cached token prefixes, scanned for the LRU leaf."""

    def __init__(self, block_size: int, num_blocks: int) -> None:
        self.bs, self.n = block_size, num_blocks
        self.entries: dict[tuple, list[int]] = {}  # prefix -> [ref_count, tick when last unpinned]
        self.tick = 0

    def match(self, tokens):
        path = []
        for i in range(max(len(tokens) - 1, 0) // self.bs):
            prefix = tuple(tokens[:(i + 1) * self.bs])
            if prefix not in self.entries:
                break
            path.append(prefix)
            self.entries[prefix][0] += 1
        return path

    def insert(self, tokens, path):
        offsets = []
        for i in range(len(path), len(tokens) // self.bs):
            prefix = tuple(tokens[:(i + 1) * self.bs])
            if prefix not in self.entries:
                if len(self.entries) == self.n:
                    free = [p for p, (refs, _) in self.entries.items() if refs == 0]
                    if not free:
                        break
                    victim = min(free, key=lambda p: self.entries[p][1])
                    assert not any(len(p) > len(victim) and p[:len(victim)] == victim for p in self.entries)
                    del self.entries[victim]
                self.entries[prefix] = [0, 0]
                offsets.append(i * self.bs)
            self.entries[prefix][0] += 1
            path.append(prefix)
        return offsets

    def release(self, path):
        for prefix in reversed(path):
            self.entries[prefix][0] -= 1
            if self.entries[prefix][0] == 0:
                self.tick += 1
                self.entries[prefix][1] = self.tick


_ops = st.lists(st.one_of(
    st.tuples(st.just("run"), st.lists(st.integers(0, 2), max_size=12), st.booleans()),
    st.tuples(st.just("release"), st.integers(0, 50), st.booleans())), max_size=40)


@settings(max_examples=200, deadline=None)
@given(block_size=st.integers(1, 3), num_blocks=st.integers(0, 6), ops=_ops)
def test_prefix_cache_matches_naive_reference(block_size, num_blocks, ops):
    cache, ref, tape = PrefixCache(block_size=block_size, num_blocks=num_blocks, first_row=5), \
        _Reference(block_size, num_blocks), {}
    live = []
    for op, arg, keep in ops:
        if op == "run":
            path = ref.match(arg)
            hit, copies = _run(cache, tape, arg, release=False)
            assert hit.num_tokens == len(path) * block_size
            assert [off for off, _ in copies] == ref.insert(arg, path)
            if keep:
                live.append((hit, path))
            else:
                cache.release(hit)
                ref.release(path)
        elif live:
            hit, path = live.pop(arg % len(live))
            cache.release(hit)
            ref.release(path)
        assert cache.num_used_blocks == len(ref.entries) <= num_blocks
        assert cache.num_pinned_blocks == sum(refs > 0 for refs, _ in ref.entries.values())


@settings(max_examples=100, deadline=None)
@given(ops=_ops)
def test_prefix_cache_with_colliding_hash_stays_exact_and_keeps_pins(ops):
    with mock.patch.object(prefix_cache, "block_hash", lambda key, toks: (key + sum(toks)) % 3):
        cache, tape = PrefixCache(block_size=2, num_blocks=4, first_row=0), {}
        live = []
        for op, arg, keep in ops:
            if op == "run":
                hit, copies = _run(cache, tape, arg, release=False)
                if keep:
                    live.append((hit, arg, copies))
                else:
                    cache.release(hit)
            elif live:
                hit, tokens, copies = live.pop(arg % len(live))
                for row, expected in [(r.start, (j + 1) * 2) for j, r in enumerate(hit.rows)] + \
                        [(row, off + 2) for off, row in copies]:
                    assert tape[row] == tuple(tokens[:expected]), "a pinned block was overwritten"
                cache.release(hit)


def test_prefix_cache_partial_release_keeps_the_leading_blocks_pinned():
    cache, tape = PrefixCache(block_size=2, num_blocks=3, first_row=100), {}
    chain = [1, 1, 2, 2, 3, 3, 0]
    _run(cache, tape, chain)
    hit = cache.match(chain)
    assert hit.leading_run() == (100, 6)  # blocks 0, 1, 2: consecutive rows from the first
    cache.release(hit, keep=1)
    assert cache.num_pinned_blocks == 1
    _run(cache, tape, [5, 5, 6, 6, 0])  # needs two blocks: only the two unpinned leaves can go
    assert cache.num_evictions == 2 and _cached(cache, chain) == 2
    cache.release(hit)
    assert cache.num_pinned_blocks == 0
    with pytest.raises(ValueError, match="already released"):
        cache.release(hit)


def test_prefix_hit_leading_run_stops_at_the_first_gap():
    cache, tape = PrefixCache(block_size=2, num_blocks=4, first_row=0), {}
    _run(cache, tape, [1, 1, 9])        # block 0 at rows 0-1
    _run(cache, tape, [7, 7, 9])        # block 1 at rows 2-3 (another prompt)
    _run(cache, tape, [1, 1, 2, 2, 9])  # its second block lands at rows 4-5
    hit = cache.match([1, 1, 2, 2, 9])
    assert hit.rows == [range(0, 2), range(4, 6)] and hit.leading_run() == (0, 2)
    cache.release(hit)
    assert PrefixCache(block_size=2, num_blocks=1, first_row=0).match([1, 2]).leading_run() == (0, 0)


def test_prefix_cache_claim_makes_a_second_prompt_wait_until_the_first_is_released():
    from worker.engine.prefix_cache import Claim

    cache = PrefixCache(block_size=2, num_blocks=8, first_row=0)
    first = cache.match([1, 1, 2, 2, 3], waiter="a")
    assert first.num_tokens == 0
    waiting = cache.match([1, 1, 2, 2, 4], waiter="b")  # needs block (1, 1), being prefilled by "a"
    assert isinstance(waiting, Claim) and waiting.waiters == ["b"]
    cache.match([1, 1, 5], waiter="c")
    cache.forget_waiter(waiting, "c")
    other = cache.match([7, 7, 1], waiter="d")  # another head: its own claim, no wait
    assert not isinstance(other, Claim)
    assert cache.num_lookups == 2  # a wait is not a lookup (yet)
    cache.insert([1, 1, 2, 2, 3], first)
    assert cache.release(first).waiters == ["b"]
    hit = cache.match([1, 1, 2, 2, 4], waiter="b")
    assert hit.num_tokens == 4 and cache.num_lookups == 3
    assert cache.release(other).waiters == [] and cache.release(hit) is None
    assert cache.match([1, 1, 9, 9, 9], waiter="e", claim=False).num_tokens == 2  # block 2 unclaimed
    assert not isinstance(cache.match([1, 1, 9, 9, 8], waiter="f"), Claim)
