"""Helpers for dispatcher tests: draining, copying and checking bins."""

from __future__ import annotations

import numpy as np

from worker.dispatch import BinDispatcher, DispatcherClosed

# Upper bound for any single wait in these tests: far above the latency cap, so reaching it means a
# lost wake-up or a deadlock, not a slow machine.
WAIT_S = 10.0


def drain(d: BinDispatcher, timeout: float = WAIT_S) -> list[dict[str, np.ndarray]]:
    """Closes `d` and collects every remaining bin as numpy copies (releasing each slot)."""
    d.close()
    bins = []
    while True:
        try:
            b = d.next_bin(timeout)
        except DispatcherClosed:
            return bins
        assert b is not None, "next_bin timed out while draining"
        bins.append(copy_bin(b))
        d.release(b.slot)


def copy_bin(b) -> dict[str, np.ndarray]:
    return {
        "slot": b.slot,
        "input_ids": b.input_ids.numpy().copy(),
        "position_ids": b.position_ids.numpy().copy(),
        "cu_seqlens": b.cu_seqlens.numpy().copy(),
        "seq_ids": b.seq_ids.numpy().copy(),
        "seq_lens": b.seq_lens.numpy().copy(),
        "last_token_index": b.last_token_index.numpy().copy(),
        "num_real_tokens": b.num_real_tokens,
    }


def check_bin(b: dict, seqs: dict[int, np.ndarray], *, token_budget: int,
              alignment: int, pad_id: int = 0) -> None:
    """Asserts one bin's layout: spans tile the bin without overlap, tokens/positions/indices right."""
    cu = b["cu_seqlens"]
    assert cu[0] == 0 and np.all(np.diff(cu) > 0), "spans must be non-empty and ordered"
    assert cu[-1] == len(b["input_ids"]) <= token_budget
    assert b["num_real_tokens"] == int(b["seq_lens"].sum())
    for k, sid in enumerate(b["seq_ids"].tolist()):
        start, end, n = int(cu[k]), int(cu[k + 1]), int(b["seq_lens"][k])
        assert n == len(seqs[sid])
        assert end - start == -(-n // alignment) * alignment, "span must be the aligned length"
        np.testing.assert_array_equal(b["input_ids"][start:start + n], seqs[sid])
        assert np.all(b["input_ids"][start + n:end] == pad_id)
        np.testing.assert_array_equal(b["position_ids"][start:end], np.arange(end - start))
        assert b["last_token_index"][k] == start + n - 1
