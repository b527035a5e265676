"""CUDA-graph decode: one captured forward per batch-size bucket, replayed over static input buffers.

A decode step of a 7B model is ~1,000 small kernels whose launch cost exceeds their GPU time; a graph
replays them with one launch. B sequences run in the smallest bucket >= B; the extra columns are dummy
sequences (token 0 at position 0, slab start 0, reading 1 row, writing the KV scratch row), so they
neither touch real tape rows nor cost more than a few rows of attention.

What must stay static after `capture()` (the graphs hold raw addresses and fixed shapes):
- the model's weights and the KV tapes (`kv.k_full`/`kv.v_full`): never reallocate or replace them;
- this object's input buffer `[5, max_batch]` (token ids, positions, slab starts, tape rows, filled
  lengths) and the constant aranges (cu_seqlens_q, logits rows);
- `max_seqlen_k`, the fixed upper bound FA2 is given: every decode position must be below it;
- the attention backend and the fused-op mode (compiled or eager) in force at capture.
Logits returned by `decode` are a view of the graph's output buffer: valid until the next `decode`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from worker.model.attention import AttentionMetadata
from worker.model.kv_cache import KVCache

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
GRAPH_BACKENDS = ("torch_fa2", "flash_attn")
IDS, POSITIONS, STARTS, ROWS, USED = range(5)  # rows of the input buffer


class DecodeGraphs:
    """Captured decode forwards per batch bucket; `decode` pads to the bucket and replays. Not thread-safe."""

    def __init__(self, model: torch.nn.Module, kv: KVCache, *, batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
                 max_seqlen_k: int | None = None, use_graphs: bool | None = None) -> None:
        if use_graphs is None:
            use_graphs = self.supported(model, kv)
        elif use_graphs and not self.supported(model, kv):
            raise ValueError("CUDA-graph decode needs a CUDA KV cache with a scratch row and the "
                             f"{' or '.join(GRAPH_BACKENDS)} attention backend")
        sizes = sorted(set(int(b) for b in batch_sizes))
        if not sizes or sizes[0] < 1:
            raise ValueError(f"batch sizes must be positive integers, got {tuple(batch_sizes)}")
        limit = min(kv.capacity_rows, model.cfg.max_position_embeddings)
        max_seqlen_k = limit if max_seqlen_k is None else int(max_seqlen_k)
        if not 1 <= max_seqlen_k <= kv.capacity_rows:
            raise ValueError(f"max_seqlen_k must be in 1..{kv.capacity_rows} (the tape's rows), got {max_seqlen_k}")
        self.model, self.kv, self.batch_sizes = model, kv, tuple(sizes)
        self.max_seqlen_k, self.use_graphs = max_seqlen_k, use_graphs
        self.device = kv.k[0].device
        self.max_batch = sizes[-1]
        with torch.inference_mode(False):  # plain tensors: in-place updates are allowed in any mode
            self._rows = torch.zeros(5, self.max_batch, dtype=torch.int64, device=self.device)  # [5, Bmax]
            self._host = torch.zeros(5, self.max_batch, dtype=torch.int64,
                                     pin_memory=self.device.type == "cuda")  # [5, Bmax]
            self._cu_seqlens_q = torch.arange(self.max_batch + 1, dtype=torch.int32, device=self.device)
            self._logits_rows = torch.arange(self.max_batch, dtype=torch.int64, device=self.device)
        self._host_np = self._host.numpy()
        self._copied: torch.cuda.Event | None = None  # the last host->device copy of _host
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._outputs: dict[int, Tensor] = {}

    @staticmethod
    def supported(model: torch.nn.Module, kv: KVCache) -> bool:
        """True when decode can be captured: CUDA tapes with a scratch row and an FA2 backend."""
        return (kv.k[0].device.type == "cuda" and kv.k_full is not None
                and getattr(model.backend, "name", None) in GRAPH_BACKENDS)

    def bucket(self, batch: int) -> int:
        """The smallest captured batch size >= batch; ValueError outside 1..max_batch."""
        if not 1 <= batch <= self.max_batch:
            raise ValueError(f"decode batch of {batch} sequences is outside 1..{self.max_batch}")
        return next(b for b in self.batch_sizes if b >= batch)

    def can_run(self, batch: int, max_position: int) -> bool:
        """Whether decode() takes `batch` sequences whose largest position is `max_position`."""
        return 1 <= batch <= self.max_batch and 0 <= max_position < self.max_seqlen_k

    @torch.inference_mode()
    def capture(self) -> None:
        """Warm up (compiles fused ops, sizes cuBLAS workspaces) and capture every bucket, largest first.

        A no-op when graphs are off. Writes only the KV scratch row. Call once, before serving.
        """
        if not self.use_graphs or self._graphs:
            return
        self._fill_dummy(0, self.max_batch, self._rows)
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream(self.device)
        torch.cuda.synchronize(self.device)
        for n in reversed(self.batch_sizes):  # largest first: smaller graphs reuse its pool memory
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self._forward(n)
            torch.cuda.current_stream(self.device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
                self._outputs[n] = self._forward(n)  # float32 [n, V]
            self._graphs[n] = graph
        torch.cuda.synchronize(self.device)
        log.info("decode CUDA graphs captured for batch sizes %s (max_seqlen_k %d)",
                 ", ".join(map(str, self.batch_sizes)), self.max_seqlen_k)

    @torch.inference_mode()
    def decode(self, input_ids, positions, slab_starts) -> Tensor:
        """One token per sequence at `positions` (= rows already cached) -> float32 [B, V] logits.

        Host inputs (lists, numpy, CPU tensors) are validated and copied in one transfer; CUDA tensors
        are copied on the device without checks. The result is a view valid until the next call.
        """
        b = len(input_ids)
        if not len(positions) == len(slab_starts) == b:
            raise ValueError("input_ids, positions and slab_starts must have one entry per sequence")
        n = self.bucket(b)
        if isinstance(input_ids, Tensor) and input_ids.device.type != "cpu":
            self._stage_device(b, n, input_ids, positions, slab_starts)
        else:
            self._stage_host(b, n, input_ids, positions, slab_starts)
        if not self.use_graphs:
            return self._forward(n)[:b]
        if n not in self._graphs:
            raise RuntimeError("DecodeGraphs.capture() must run before decode()")
        self._graphs[n].replay()
        return self._outputs[n][:b]

    def _stage_host(self, b: int, n: int, input_ids, positions, slab_starts) -> None:
        if self._copied is not None:
            self._copied.synchronize()  # the previous copy still reads _host
        h = self._host_np  # [5, Bmax] int64, page-locked on CUDA
        h[IDS, :b] = np.asarray(input_ids)
        h[POSITIONS, :b] = np.asarray(positions)
        h[STARTS, :b] = np.asarray(slab_starts)
        np.add(h[STARTS, :b], h[POSITIONS, :b], out=h[ROWS, :b])
        np.add(h[POSITIONS, :b], 1, out=h[USED, :b])
        if h[POSITIONS, :b].min() < 0 or h[POSITIONS, :b].max() >= self.max_seqlen_k:
            raise ValueError(f"decode positions must be in 0..{self.max_seqlen_k - 1} (max_seqlen_k)")
        if h[STARTS, :b].min() < 0 or h[ROWS, :b].max() >= self.kv.capacity_rows:
            raise ValueError(f"slab_starts + positions must address tape rows 0..{self.kv.capacity_rows - 1}")
        self._fill_dummy(b, n, self._host)
        self._rows.copy_(self._host, non_blocking=True)
        if self.device.type == "cuda":
            self._copied = torch.cuda.Event()
            self._copied.record()

    def _stage_device(self, b: int, n: int, input_ids: Tensor, positions: Tensor, slab_starts: Tensor) -> None:
        r = self._rows
        r[IDS, :b].copy_(input_ids)
        r[POSITIONS, :b].copy_(positions)
        r[STARTS, :b].copy_(slab_starts)
        torch.add(r[STARTS, :b], r[POSITIONS, :b], out=r[ROWS, :b])
        torch.add(r[POSITIONS, :b], 1, out=r[USED, :b])
        self._fill_dummy(b, n, r)

    @staticmethod
    def _fill_dummy(lo: int, hi: int, rows: Tensor) -> None:
        """Columns lo:hi of a [5, Bmax] buffer become dummy sequences: token 0, position 0, slab 0, scratch write, 1 row."""
        rows[IDS:STARTS + 1, lo:hi] = 0  # a slice, not a list index: a list would be a host->device copy
        rows[ROWS, lo:hi] = -1
        rows[USED, lo:hi] = 1

    def _forward(self, n: int) -> Tensor:
        """The decode forward of bucket n over the static buffers -> float32 [n, V]."""
        rows = self._rows[:, :n]  # [5, n]
        attn = AttentionMetadata(
            cu_seqlens_q=self._cu_seqlens_q[:n + 1], max_seqlen_q=1,
            slab_starts=rows[STARTS].to(torch.int32), seqused_k=rows[USED].to(torch.int32),
            max_seqlen_k=self.max_seqlen_k, slot_mapping=rows[ROWS], is_prefill_from_zero=False)
        return self.model(rows[IDS], rows[POSITIONS], attn, self.kv, self._logits_rows[:n])
