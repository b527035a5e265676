"""KV arena: one preallocated tape per layer, carved into contiguous per-sequence slabs.

A slab holds `prompt + max_new_tokens` rows from admission to finish, so decode never allocates.
`SlabAllocator` is the pure bookkeeping (first-fit over free ranges, coalescing on free);
`KVArena` owns the tensors (a `KVCache`) and one allocator.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence as Seq


class SlabAllocator:
    """First-fit allocator of contiguous row ranges in [0, capacity). Not thread-safe: engine thread only."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1 row, got {capacity}")
        self.capacity = capacity
        # Free ranges as parallel sorted lists of starts and ends (end exclusive); never adjacent.
        self._starts: list[int] = [0]
        self._ends: list[int] = [capacity]
        self._used: dict[int, int] = {}  # start -> size of each allocated slab
        self.num_used_rows = 0

    @property
    def num_free_rows(self) -> int:
        return self.capacity - self.num_used_rows

    def free_ranges(self) -> list[tuple[int, int]]:
        """The free (start, end) ranges, sorted, coalesced."""
        return list(zip(self._starts, self._ends))

    def allocated(self) -> dict[int, int]:
        """start -> size of every live slab."""
        return dict(self._used)

    def allocate(self, size: int) -> int | None:
        """First row of a new slab of `size` rows, or None when no free range is large enough."""
        if size < 1:
            raise ValueError(f"slab size must be >= 1, got {size}")
        for i, (start, end) in enumerate(zip(self._starts, self._ends)):
            if end - start >= size:
                if end - start == size:
                    del self._starts[i], self._ends[i]
                else:
                    self._starts[i] = start + size
                self._used[start] = size
                self.num_used_rows += size
                return start
        return None

    def allocate_all(self, sizes: Seq[int]) -> list[int] | None:
        """Slabs for every size, or None (and nothing allocated) when they do not all fit."""
        if sum(sizes) > self.num_free_rows:
            return None
        starts: list[int] = []
        for size in sizes:
            start = self.allocate(size)
            if start is None:
                for s in starts:
                    self.free(s)
                return None
            starts.append(start)
        return starts

    def free(self, start: int) -> None:
        """Return the slab beginning at `start`; merges it with adjacent free ranges."""
        size = self._used.pop(start, None)
        if size is None:
            raise KeyError(f"no slab starts at row {start}")
        end = start + size
        self.num_used_rows -= size
        i = bisect.bisect_left(self._starts, start)
        merge_left = i > 0 and self._ends[i - 1] == start
        merge_right = i < len(self._starts) and self._starts[i] == end
        if merge_left and merge_right:
            self._ends[i - 1] = self._ends[i]
            del self._starts[i], self._ends[i]
        elif merge_left:
            self._ends[i - 1] = end
        elif merge_right:
            self._starts[i] = start
        else:
            self._starts.insert(i, start)
            self._ends.insert(i, end)


class KVArena:
    """Owns the per-layer K/V tapes and the slab allocator over their rows. Engine thread only."""

    def __init__(self, cfg, capacity_rows: int, *, dtype, device, reserved_tail_rows: int = 0,
                 fp8: bool = False) -> None:
        """reserved_tail_rows: the tape's last rows are kept out of the slabs (the prefix cache's region);
        fp8: the tapes hold FP8 codes and scales (`engine.kv_cache: fp8`)."""
        from worker.model.kv_cache import KVCache

        if not 0 <= reserved_tail_rows < capacity_rows:
            raise ValueError(f"reserved_tail_rows must be in [0, {capacity_rows}), got {reserved_tail_rows}")
        self.cache = KVCache.allocate(cfg, capacity_rows, dtype, device, fp8=fp8)
        self.slabs = SlabAllocator(capacity_rows - reserved_tail_rows)

    @property
    def capacity_rows(self) -> int:
        """Rows the slabs may use (the tape less any reserved tail)."""
        return self.slabs.capacity
