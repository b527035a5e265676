"""A packed bin's prefill over static buffers padded to a bucket; on CUDA each bucket's forward is a
captured graph.

A small model's prefill forward is ~300 kernels launched one by one from Python, each op releasing
and retaking the GIL the other threads hold a third of the time: at 2 new tokens the GPU loop spends
more time issuing the forward than the GPU spends running it (bench/NOTES.md, 2026-12-06 evening).
Replaying a captured graph issues the whole forward at once. A graph fixes every shape and every
host-side integer, so a bin is padded up to a bucket of (tokens, sequences, longest span, from zero):

- tokens past the bin's last span belong to no span: attention leaves them alone, they write their
  K/V to the tape's scratch row (slot -1), their logits are never read;
- sequences past the bin's own are empty spans at the bin's end (length 0, slot -1), and there is
  always at least one, so that the padding tokens have a sequence to belong to;
- the longest span, which FlashAttention-2 takes as a host integer to size its grid, is rounded up
  to a power of two (its extra query blocks exit at once); through the tape its key bound is the
  tape's bound, as in the decode graphs.

The same buffers run eagerly when `use_graphs` is off (CPU tests check the padding against the
unpadded prefill). Engine thread only.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch

from worker.engine.cuda_graphs import capture_graph
from worker.model.attention import AttentionMetadata

log = logging.getLogger(__name__)

MIN_SPAN_BUCKET = 128  # FA2's query block for these head sizes: below it the grid does not shrink
MAX_GRAPHS = 64  # captured buckets kept; a bin of any other bucket then runs eagerly
_STEPS_PER_OCTAVE = 8  # token buckets: a bin pads by at most an eighth of its tokens

_CU, _LENS, _LAST, _STARTS, _OFFSETS = range(5)  # rows of the per-sequence buffer (int64)
_ROWS = 5


def token_buckets(max_tokens: int) -> tuple[int, ...]:
    """Bin sizes in tokens up to and including max_tokens: eight steps per octave from 128."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    sizes, octave = [], 128
    while octave < max_tokens:
        step = octave // _STEPS_PER_OCTAVE
        sizes += [octave + i * step for i in range(_STEPS_PER_OCTAVE) if octave + i * step < max_tokens]
        octave *= 2
    return tuple(sizes) + (max_tokens,)


def seq_buckets(max_seqs: int) -> tuple[int, ...]:
    """Sequence counts of a padded bin: powers of two from 2, and max_seqs + 1 (one padding sequence)."""
    sizes, size = [], 2
    while size < max_seqs + 1:
        sizes.append(size)
        size *= 2
    return tuple(sizes) + (max_seqs + 1,)


@dataclass(frozen=True)
class Bucket:
    tokens: int
    seqs: int        # the bin's sequences and at least one empty one after them
    max_span: int    # FA2's max_seqlen_q: a power of two >= the bin's longest span (pads included)
    from_zero: bool  # no sequence has a cached head: attention over the pass's own K/V


def _first_at_least(sizes: tuple[int, ...], value: int) -> int | None:
    return next((s for s in sizes if s >= value), None)


class PrefillGraphs:
    """One prefill forward per bucket over static buffers; CUDA graphs when `use_graphs`."""

    def __init__(self, model: torch.nn.Module, kv, device: torch.device, *, max_tokens: int, max_seqs: int,
                 max_seqlen_k: int, use_graphs: bool) -> None:
        """max_tokens/max_seqs: the largest bin (the dispatcher's budgets). max_seqlen_k: the bound on
        any slab, baked in for attention through the tape."""
        self.model, self.kv, self.device = model, kv, torch.device(device)
        self.token_sizes, self.seq_sizes = token_buckets(max_tokens), seq_buckets(max_seqs)
        self.max_seqlen_k = max_seqlen_k
        self.use_graphs = use_graphs and self.device.type == "cuda"
        self._pin = self.device.type == "cuda"
        with torch.inference_mode():
            self._ids = torch.zeros(max_tokens, dtype=torch.int64, device=self.device)        # [Tmax]
            self._pos = torch.zeros(max_tokens, dtype=torch.int64, device=self.device)        # [Tmax]
            self._seqs = torch.zeros(_ROWS, max_seqs + 2, dtype=torch.int64, device=self.device)  # [5, Bmax+1 (+1 cu)]
            self._rows = torch.arange(max_tokens, dtype=torch.int32, device=self.device)      # [Tmax]
        self._graphs: dict[Bucket, torch.cuda.CUDAGraph] = {}
        self._eager: set[Bucket] = set()  # buckets whose capture failed, or past MAX_GRAPHS
        self._pool = None
        self._logits: torch.Tensor | None = None  # float32 [Bmax+1, V], written by every graph

    def bucket_for(self, num_tokens: int, num_seqs: int, max_span: int, from_zero: bool) -> Bucket | None:
        """The bucket a bin of these sizes pads to; None when it exceeds the largest."""
        tokens = _first_at_least(self.token_sizes, num_tokens)
        seqs = _first_at_least(self.seq_sizes, num_seqs + 1)
        if tokens is None or seqs is None:
            return None
        span = MIN_SPAN_BUCKET
        while span < max_span:
            span *= 2
        return Bucket(tokens, seqs, min(span, tokens), from_zero)

    @torch.inference_mode()
    def capture_largest(self) -> int:
        """Capture the largest bucket, from zero and through the tape, now; returns how many were.
        Captured first, the largest sizes the shared memory pool and later, smaller captures reuse its
        blocks; captured smallest first, the pool could grow past what the largest alone takes, beside
        an arena the probe sized with the largest held (`TorchMeasurer.hold_prefill_graphs`)."""
        if not self.use_graphs:
            return 0
        tokens, seqs = self.token_sizes[-1], self.seq_sizes[-1] - 1
        largest = [self.bucket_for(tokens, seqs, tokens, from_zero) for from_zero in (True, False)]
        return sum(b in self._graphs or self._capture(b) is not None for b in largest)

    def serves(self, bucket: Bucket) -> bool:
        """Whether this bucket replays a graph (False: the caller runs its own eager prefill)."""
        return self.use_graphs and bucket not in self._eager

    @torch.inference_mode()
    def run(self, bin, bucket: Bucket, slab_starts: list[int], prefix_lens: list[int] | None) -> torch.Tensor | None:
        """Float32 [B, V] last-token logits of the packed device `bin` (see ModelRunner.prefill_bin);
        None when its graph could not be captured (the caller then runs eagerly). The rows are a view
        of a buffer the next run overwrites: consume them (queue the sampling) first."""
        num_tokens, num_seqs = bin.input_ids.shape[0], bin.seq_lens.shape[0]
        self._ids[:num_tokens].copy_(bin.input_ids)  # the tail keeps earlier ids: any valid token will do
        self._pos[:num_tokens].copy_(bin.position_ids)
        seqs = self._seqs[:, :bucket.seqs + 1]
        seqs[_CU, :num_seqs + 1].copy_(bin.cu_seqlens)
        seqs[_CU, num_seqs + 1:].fill_(num_tokens)  # empty spans at the end
        seqs[_LENS, :num_seqs].copy_(bin.seq_lens)
        seqs[_LAST, :num_seqs].copy_(bin.last_token_index)
        host = torch.zeros(2, bucket.seqs + 1, dtype=torch.int64)
        host[0, :num_seqs] = torch.tensor(slab_starts, dtype=torch.int64)
        if prefix_lens:
            host[1, :num_seqs] = torch.tensor(prefix_lens, dtype=torch.int64)
        if self._pin:
            host = host.pin_memory()
        seqs[_STARTS:_OFFSETS + 1].copy_(host, non_blocking=True)
        seqs[_LENS:_LAST + 1, num_seqs:].zero_()
        if not self.use_graphs:
            return self._forward(bucket)[:num_seqs]
        graph = self._graphs.get(bucket)
        if graph is None:
            graph = self._capture(bucket)
            if graph is None:
                return None
        graph.replay()
        return self._logits[:num_seqs]

    def _forward(self, bucket: Bucket) -> torch.Tensor:
        seqs = self._seqs[:, :bucket.seqs + 1]
        cu = seqs[_CU].to(torch.int32)                                  # [B+1]
        starts, offsets = seqs[_STARTS, :-1], seqs[_OFFSETS, :-1]       # [B] int64
        lens = seqs[_LENS, :-1].to(torch.int32)                         # [B]
        positions, slots, seqused_k = bin_token_rows(
            self._pos[:bucket.tokens], self._rows[:bucket.tokens], cu, lens, starts, offsets, bucket.from_zero)
        attn = AttentionMetadata(
            cu_seqlens_q=cu, max_seqlen_q=bucket.max_span, slab_starts=starts.to(torch.int32),
            seqused_k=seqused_k, max_seqlen_k=bucket.max_span if bucket.from_zero else self.max_seqlen_k,
            slot_mapping=slots, is_prefill_from_zero=bucket.from_zero)
        return self.model(self._ids[:bucket.tokens], positions, attn, self.kv, seqs[_LAST, :-1])

    def _capture(self, bucket: Bucket) -> torch.cuda.CUDAGraph | None:
        if len(self._graphs) >= MAX_GRAPHS:
            log.info("prefill graphs: %d captured, bucket %s runs eagerly", MAX_GRAPHS, bucket)
            self._eager.add(bucket)
            return None
        started = time.perf_counter()
        seqs = self._seqs[:, :bucket.seqs + 1]
        saved = seqs.clone()
        seqs.zero_()  # parked: every span empty, so every token writes to the scratch row
        try:
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            if self._logits is None:
                self._logits = torch.empty(self.seq_sizes[-1], self.model.cfg.vocab_size, dtype=torch.float32,
                                           device=self.device)
            graph = capture_graph(self.device, self._pool, warm_up=lambda: self._forward(bucket),
                                  body=lambda: self._logits[:bucket.seqs].copy_(self._forward(bucket)))
        except Exception as exc:  # noqa: BLE001 - out of memory, an op that cannot be captured: run eagerly
            log.warning("prefill graph for %s not captured, that bucket runs eagerly: %s", bucket,
                        str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
            self._eager.add(bucket)
            return None
        finally:
            seqs.copy_(saved)
        self._graphs[bucket] = graph
        log.debug("prefill graph for %s captured in %.2f s", bucket, time.perf_counter() - started)
        return graph


def bin_token_rows(position_ids: torch.Tensor, rows: torch.Tensor, cu_seqlens: torch.Tensor, seq_lens: torch.Tensor,
                   slab_starts: torch.Tensor, prefix_lens: torch.Tensor | None,
                   from_zero: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A packed bin's per-token rows, on the device without a host sync: (positions int64 [T], tape
    slots int64 [T] (-1: a pad, not stored), seqused_k int32 [B]).

    position_ids [T] restart at 0 per span; rows = arange(T) in cu_seqlens' dtype; cu_seqlens [B+1];
    seq_lens [B] real lengths; slab_starts, prefix_lens [B] (rows already on each slab; None: none).
    Tokens past cu_seqlens[-1] count as the last sequence's: a padded bin ends in an empty sequence
    (seq_lens 0), so they are pads. Through the tape seqused_k counts a span's pads (see attention.py)."""
    seg = torch.searchsorted(cu_seqlens[1:], rows, right=True).clamp_(max=seq_lens.shape[0] - 1)  # [T]
    is_real = position_ids < seq_lens[seg]
    positions = position_ids if from_zero or prefix_lens is None else position_ids + prefix_lens[seg]
    slots = torch.where(is_real, slab_starts[seg] + positions, -1)
    if from_zero or prefix_lens is None:
        return positions, slots, seq_lens
    spans = cu_seqlens[1:] - cu_seqlens[:-1]
    return positions, slots, (prefix_lens + spans).to(torch.int32)
