"""The decoding sequences with their per-row step inputs as numpy arrays kept beside them.

At a thousand or more sequences per step, building the step's inputs and applying its tokens one
sequence at a time in Python costs as much as the step on the GPU (SmolLM2-135M shape on an H200:
~6 ms of host work beside an 8 ms step at 2,000 sequences). Here a step's inputs are the arrays
themselves, its tokens advance every row at once, and only rows that may finish (EOS, their length
limit, a token that could complete a stop string) go through per-sequence code. Engine thread only.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from worker.engine.sequence import Sequence

_INT_FIELDS = ("last_token", "position", "slab_start", "head_start", "head_len", "output_start", "out_len",
               "max_new", "stop_group")
_FLOAT_FIELDS = ("temperature", "top_p", "penalty")


def not_done(seqs: list[Sequence]) -> np.ndarray:
    """bool [len(seqs)]: True where the sequence is neither finished nor failed."""
    return np.fromiter((not s.is_done for s in seqs), dtype=bool, count=len(seqs))


class DecodeBatch:
    """Rows in step order: seqs[i] and row i of every array describe the same sequence."""

    def __init__(self) -> None:
        self.seqs: list[Sequence] = []
        self.last_token = np.empty(0, np.int64)    # the token this step feeds (the last one sampled)
        self.position = np.empty(0, np.int64)      # its position = KV rows already cached
        self.slab_start = np.empty(0, np.int64)
        self.head_start = np.empty(0, np.int64)     # a shared copy of the slab's first head_len rows
        self.head_len = np.empty(0, np.int64)       # (the prefix cache's), read instead; 0 = none
        self.output_start = np.empty(0, np.int64)  # tape row of output token 0 (slab start + prompt length)
        self.out_len = np.empty(0, np.int64)       # tokens generated so far
        self.max_new = np.empty(0, np.int64)
        self.stop_group = np.empty(0, np.int64)    # index into stop_sets; -1 = no stop strings
        self.temperature = np.empty(0, np.float32)
        self.top_p = np.empty(0, np.float32)
        self.penalty = np.empty(0, np.float32)
        self.stop_sets: list[tuple[str, ...]] = []

    def __len__(self) -> int:
        return len(self.seqs)

    def __bool__(self) -> bool:
        return bool(self.seqs)

    def __iter__(self) -> Iterator[Sequence]:
        return iter(self.seqs)

    def __contains__(self, seq: object) -> bool:
        return any(s is seq for s in self.seqs)

    def add(self, seqs: list[Sequence]) -> None:
        """Append sequences that have their first output token (just prefilled)."""
        if not seqs:
            return
        rows = {name: [] for name in _INT_FIELDS + _FLOAT_FIELDS}
        for seq in seqs:
            p = seq.params
            rows["last_token"].append(seq.output[-1])
            rows["position"].append(seq.num_cached)
            rows["slab_start"].append(seq.slab_start)
            rows["head_start"].append(seq.shared_head[0])
            rows["head_len"].append(seq.shared_head[1])
            rows["output_start"].append(seq.slab_start + seq.prompt_len)
            rows["out_len"].append(len(seq.output))
            rows["max_new"].append(p.max_new_tokens)
            rows["stop_group"].append(self._stop_group(p.stop))
            rows["temperature"].append(p.temperature)
            rows["top_p"].append(p.top_p)
            rows["penalty"].append(p.repetition_penalty)
        for name, values in rows.items():
            old = getattr(self, name)
            setattr(self, name, np.concatenate([old, np.asarray(values, dtype=old.dtype)]))
        self.seqs.extend(seqs)

    def keep(self, mask: np.ndarray) -> None:
        """Keep only the rows where mask [B] is True (finished or failed sequences leave)."""
        for name in _INT_FIELDS + _FLOAT_FIELDS:
            setattr(self, name, getattr(self, name)[mask])
        self.seqs = [s for s, k in zip(self.seqs, mask.tolist()) if k]

    def remove_done(self) -> None:
        if self.seqs:
            self.keep(not_done(self.seqs))

    def successor(self, keep: np.ndarray) -> DecodeBatch:
        """Rows `keep` [K] (indices) one token on: the inputs of the step after this one, planned before
        this one's tokens are read. Its last_token is not known here (the engine feeds the device's)."""
        nxt = DecodeBatch()
        for name in _INT_FIELDS + _FLOAT_FIELDS:
            setattr(nxt, name, getattr(self, name)[keep])  # indexing by an array copies
        nxt.position += 1
        nxt.out_len += 1
        nxt.seqs = [self.seqs[i] for i in keep.tolist()]
        nxt.stop_sets = self.stop_sets
        return nxt

    def advance(self, tokens: np.ndarray) -> None:
        """Every row took one more token: tokens [B] (int64) feed the next step."""
        self.last_token = tokens
        self.position = self.position + 1
        self.out_len = self.out_len + 1

    def _stop_group(self, stops: tuple[str, ...]) -> int:
        if not stops:
            return -1
        try:
            return self.stop_sets.index(stops)
        except ValueError:
            self.stop_sets.append(stops)
            return len(self.stop_sets) - 1
