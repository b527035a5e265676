"""Decode steps over static, bucketed input buffers; on CUDA each bucket's forward is a captured graph.

A decode step of a small model is a few hundred tiny kernels: launched one by one from Python it
costs several times its GPU time (SmolLM2-135M shape, batch 64: 16.7 ms eager, 2.35 ms replayed).
So the step's inputs are written into fixed device buffers, padded up to the next batch bucket, and
the forward captured once per bucket is replayed. Padding rows write their K/V to the tape's scratch
row (slot -1) and read one row of slab 0; their logits are never used. The same buffers run eagerly
on CPU (and with graphs off), so the padding logic is the same everywhere.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np
import torch

from worker.engine.cuda_graphs import capture_graph
from worker.model.attention import AttentionMetadata
from worker.model.kv_cache import KVCache

log = logging.getLogger(__name__)

# Powers of two, with midpoints above 64 so a batch pads by at most a third.
_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)

_IDS, _POS, _STARTS, _SLOTS, _USED, _HEAD_STARTS, _HEAD_LENS = range(7)  # rows of the staging buffer
_ROWS = 7


def decode_buckets(max_batch: int) -> tuple[int, ...]:
    """Bucket sizes up to and including max_batch (max_batch itself is the last bucket)."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    return tuple(b for b in _BUCKETS if b < max_batch) + (max_batch,)


class DecodeGraphs:
    """One decode forward per bucket over static buffers; CUDA graphs when `use_graphs`. Engine thread only."""

    def __init__(self, model: torch.nn.Module, kv: KVCache, device: torch.device, *, max_batch: int,
                 max_seqlen_k: int, use_graphs: bool) -> None:
        self.model, self.kv, self.device = model, kv, torch.device(device)
        self.buckets = decode_buckets(max_batch)
        self.max_batch = max_batch
        # FA2 takes max_seqlen_k as a host int, baked into a captured graph: use the bound on any slab.
        self.max_seqlen_k = max_seqlen_k
        self.use_graphs = use_graphs and self.device.type == "cuda"
        self._pin = self.device.type == "cuda"
        with torch.inference_mode():
            self._staging = torch.zeros(_ROWS, max_batch, dtype=torch.int64, device=self.device)  # [7, Bmax]
            self._arange = torch.arange(max_batch + 1, dtype=torch.int64, device=self.device)  # [Bmax+1]
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._pool = None
        self._logits: torch.Tensor | None = None  # float32 [Bmax, V], written by every graph

    def bucket_for(self, batch: int) -> int:
        for b in self.buckets:
            if b >= batch:
                return b
        raise ValueError(f"decode batch {batch} exceeds the largest bucket {self.max_batch}")

    @torch.inference_mode()
    def run(self, input_ids: Sequence[int] | torch.Tensor, positions: Sequence[int], slab_starts: Sequence[int],
            head_starts: Sequence[int] | None = None, head_lens: Sequence[int] | None = None) -> torch.Tensor:
        """Logits float32 [B, V] for one token per sequence at `positions` (= rows already cached).
        input_ids: host values, or an int64 tensor on the device (copied there, no host sync).
        head_starts/head_lens: shared copies of the sequences' first rows (see decode_attention)."""
        batch = len(input_ids)
        bucket = self.bucket_for(batch)
        host = np.zeros((_ROWS, bucket), dtype=np.int64)
        ids_on_device = isinstance(input_ids, torch.Tensor)
        if not ids_on_device:
            host[_IDS, :batch] = input_ids
        host[_POS, :batch] = positions
        host[_STARTS, :batch] = slab_starts
        host[_SLOTS, :batch] = host[_STARTS, :batch] + host[_POS, :batch]
        host[_SLOTS, batch:] = -1  # padding rows write to the scratch row
        host[_USED, :batch] = host[_POS, :batch] + 1
        host[_USED, batch:] = 1
        if head_lens is not None:
            host[_HEAD_STARTS, :batch] = head_starts
            host[_HEAD_LENS, :batch] = head_lens
        staged = torch.from_numpy(host)
        if self._pin:
            staged = staged.pin_memory()  # the caching host allocator keeps it until the copy is done
        self._staging[:, :bucket].copy_(staged, non_blocking=True)
        if ids_on_device:
            self._staging[_IDS, :batch].copy_(input_ids)
        if not self.use_graphs:
            return self._forward(bucket, max(positions) + 1)[:batch]
        graph = self._graphs.get(bucket)
        if graph is None:
            graph = self._capture(bucket)
        graph[0].replay()
        return graph[1][:batch]

    @torch.inference_mode()
    def warm(self, max_batch: int | None = None) -> tuple[int, ...]:
        """Capture the graph of every bucket up to the one holding `max_batch` (all when None) now, at
        start-up, instead of on the first step of each size mid-stream; eager (graphs off, CPU) each runs
        once. Largest first, so the smaller graphs reuse the pool's memory. Returns the buckets warmed.
        Engine thread only, or before it starts: no other thread may launch work during a capture."""
        last = self.max_batch if max_batch is None else self.bucket_for(min(max(max_batch, 1), self.max_batch))
        wanted = [b for b in self.buckets if b <= last]
        for bucket in reversed(wanted):
            if not self.use_graphs:
                self._warm_eager(bucket)
            elif bucket not in self._graphs:
                self._capture(bucket)
        return tuple(wanted)

    def _warm_eager(self, bucket: int) -> None:
        rows = self._staging[:, :bucket]
        saved = rows.clone()
        self._park(bucket)
        self._forward(bucket, 1)
        rows.copy_(saved)

    def _park(self, bucket: int) -> None:
        """Staging rows that touch no live KV: every slot -1 (the scratch row), one row of slab 0."""
        self._staging[_SLOTS, :bucket] = -1
        self._staging[_STARTS, :bucket] = 0
        self._staging[_POS, :bucket] = 0
        self._staging[_USED, :bucket] = 1
        self._staging[_HEAD_LENS, :bucket] = 0

    def _forward(self, bucket: int, max_seqlen_k: int) -> torch.Tensor:
        rows = self._staging[:, :bucket]  # [7, b]
        attn = AttentionMetadata(
            cu_seqlens_q=self._arange[:bucket + 1].to(torch.int32), max_seqlen_q=1,
            slab_starts=rows[_STARTS].to(torch.int32), seqused_k=rows[_USED].to(torch.int32),
            max_seqlen_k=max_seqlen_k, slot_mapping=rows[_SLOTS], is_prefill_from_zero=False,
            head_starts=rows[_HEAD_STARTS].to(torch.int32), head_lens=rows[_HEAD_LENS].to(torch.int32))
        return self.model(rows[_IDS], rows[_POS], attn, self.kv, self._arange[:bucket])

    def _capture(self, bucket: int) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        started = time.perf_counter()
        saved = self._staging[:, :bucket].clone()
        self._park(bucket)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        if self._logits is None:  # one output buffer for every bucket: graphs replay one at a time
            self._logits = torch.empty(self.max_batch, self.model.cfg.vocab_size, dtype=torch.float32,
                                       device=self.device)
        graph = capture_graph(
            self.device, self._pool, warm_up=lambda: self._forward(bucket, self.max_seqlen_k),
            body=lambda: self._logits[:bucket].copy_(self._forward(bucket, self.max_seqlen_k)), warm_ups=2)
        self._graphs[bucket] = (graph, self._logits[:bucket])
        self._staging[:, :bucket].copy_(saved)
        log.debug("decode graph for batch bucket %d captured in %.2f s", bucket, time.perf_counter() - started)
        return self._graphs[bucket]
