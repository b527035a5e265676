"""A small pure-Python first-fit-decreasing packer: the reference the native dispatcher must equal.

Written the straightforward way on purpose (scan the open bins in order); tests compare the native
bins with it, and `telesum bench pack` times it as the pure-Python baseline.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from worker.settings.budgets import ALIGNMENT, GPU_MAX_SEQS_PER_BIN, QUEUE_CAPACITY_TOKENS


def align_up(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def reference_ffd(spans: Sequence[int], token_budget: int, max_seqs_per_bin: int,
                  num_first: int = 0) -> list[list[int]]:
    """Item indices per bin: items 0..num_first-1 first, in order, then the rest by decreasing span
    (ties: lower index first), each into the first bin with room for its tokens and under the
    sequence cap."""
    order = list(range(min(num_first, len(spans)))) + sorted(range(num_first, len(spans)),
                                                             key=lambda i: (-spans[i], i))
    used: list[int] = []
    bins: list[list[int]] = []
    for i in order:
        span = spans[i]
        if not 0 < span <= token_budget:
            raise ValueError(f"span {span} of item {i} is outside [1, {token_budget}]")
        for b, items in enumerate(bins):
            if used[b] + span <= token_budget and len(items) < max_seqs_per_bin:
                used[b] += span
                items.append(i)
                break
        else:
            used.append(span)
            bins.append([i])
    return bins


def write_bin(seqs: Sequence[np.ndarray], items: Sequence[int], alignment: int, pad_id: int,
              max_new_tokens: Sequence[int]) -> dict[str, np.ndarray]:
    """The arrays of one bin, as the native dispatcher writes them into a slot."""
    spans = [align_up(len(seqs[i]), alignment) for i in items]
    num_tokens = sum(spans)
    input_ids = np.full(num_tokens, pad_id, dtype=np.int32)   # [num_tokens]
    position_ids = np.empty(num_tokens, dtype=np.int32)       # [num_tokens]
    cu_seqlens = np.zeros(len(items) + 1, dtype=np.int32)     # [num_seqs + 1]
    pos = 0
    for k, (i, span) in enumerate(zip(items, spans)):
        n = len(seqs[i])
        input_ids[pos:pos + n] = seqs[i]
        position_ids[pos:pos + span] = np.arange(span, dtype=np.int32)
        pos += span
        cu_seqlens[k + 1] = pos
    seq_lens = np.array([len(seqs[i]) for i in items], dtype=np.int32)
    return {
        "input_ids": input_ids,
        "position_ids": position_ids,
        "cu_seqlens": cu_seqlens,
        "seq_ids": np.array(items, dtype=np.int64),
        "seq_lens": seq_lens,
        "last_token_index": (cu_seqlens[:-1] + seq_lens - 1).astype(np.int32),
        "max_new_tokens": np.array([max_new_tokens[i] for i in items], dtype=np.int32),
    }


def reference_stream_pack(seqs: Sequence[np.ndarray], token_budget: int, alignment: int = ALIGNMENT,
                          window_tokens: int = QUEUE_CAPACITY_TOKENS, max_seqs_per_bin: int = GPU_MAX_SEQS_PER_BIN,
                          pad_id: int = 0) -> Iterator[dict[str, np.ndarray]]:
    """Packs a stream the way the dispatcher does under load: gather up to `window_tokens`, run
    FFD, emit every bin but the last (its items wait for more arrivals), and at the end emit all."""
    pending: list[int] = []
    pending_tokens = 0
    max_new = [0] * len(seqs)

    def pack(final: bool) -> Iterator[dict[str, np.ndarray]]:
        nonlocal pending, pending_tokens
        spans = [align_up(len(seqs[i]), alignment) for i in pending]
        bins = reference_ffd(spans, token_budget, max_seqs_per_bin)
        emit = bins if final else bins[:-1]
        for local in emit:
            yield write_bin(seqs, [pending[j] for j in local], alignment, pad_id, max_new)
        carried = [] if final else sorted(pending[j] for j in bins[-1])
        pending = carried
        pending_tokens = sum(len(seqs[i]) for i in carried)

    for i, s in enumerate(seqs):
        if pending_tokens + len(s) > window_tokens:
            yield from pack(final=False)
        pending.append(i)
        pending_tokens += len(s)
    if pending:
        yield from pack(final=True)
