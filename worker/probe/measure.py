"""The probe's trials on a real device: the model's own prefill and decode paths, out-of-memory caught.

Each trial allocates a KV tape (`KVCache`), runs `ModelRunner.prefill_bin` over a synthetic packed
bin (or `ModelRunner.decode` plus sampling), and frees everything again, emptying the allocator's
cache, so one trial never leaves memory behind for the next. `torch.cuda.OutOfMemoryError` means
"does not fit" (as do the allocator's out-of-memory messages that reach Python as a plain
RuntimeError, e.g. from cuBLAS); any other error is a bug and propagates.

Every decoder layer has the same shapes, so a prefill pass reaches its activation peak in its second
layer (the first holds no residual stream from an earlier layer). A search trial therefore stops the
pass before layer `PEAK_LAYERS` (a forward pre-hook that raises); the final checks run full passes.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass

import torch

from worker.engine.engine import is_out_of_memory
from worker.engine.prefill_graphs import PrefillGraphs
from worker.engine.runner import ModelRunner
from worker.engine.sampling import SamplingBatch
from worker.engine.warmup import capture_decode_graphs
from worker.model.kv_cache import KVCache, kv_row_bytes
from worker.probe.search import ProbeError, Trial

PEAK_LAYERS = 2
# The decode check samples as production may: temperature, nucleus and repetition penalty all on,
# which is the costliest sampling path ([B, V] softmax, sort and scatter).
_CHECK_TEMPERATURE, _CHECK_TOP_P, _CHECK_PENALTY = 0.7, 0.9, 1.1


class _StopPass(Exception):
    """Raised by the pre-hook to end a search pass once its peak layer has run."""


@dataclass(frozen=True)
class SyntheticBin:
    """A packed bin with the fields `ModelRunner.prefill_bin` reads (no alignment pads)."""

    input_ids: torch.Tensor         # int32 [T]
    position_ids: torch.Tensor      # int32 [T], restart at 0 per sequence
    cu_seqlens: torch.Tensor        # int32 [B+1]
    seq_lens: torch.Tensor          # int32 [B]
    last_token_index: torch.Tensor  # int32 [B]
    slab_starts: list[int]          # each sequence's first KV row (= its first token)
    max_seqlen: int


def synthetic_bin(tokens: int, seq_tokens: int, vocab_size: int, device) -> SyntheticBin:
    """`tokens` tokens as sequences of `seq_tokens` (the last one shorter), ids away from special ones."""
    lens = [seq_tokens] * (tokens // seq_tokens) + ([tokens % seq_tokens] if tokens % seq_tokens else [])
    lens_t = torch.tensor(lens, dtype=torch.int64)
    cu = torch.zeros(len(lens) + 1, dtype=torch.int64)
    cu[1:] = lens_t.cumsum(0)
    positions = torch.arange(tokens, dtype=torch.int64) - torch.repeat_interleave(cu[:-1], lens_t)
    span = max(1, vocab_size - 200)
    ids = 100 + (torch.arange(tokens, dtype=torch.int64) * 7919) % span if vocab_size > 200 else \
        torch.arange(tokens, dtype=torch.int64) % vocab_size

    def dev(t: torch.Tensor) -> torch.Tensor:
        return t.to(torch.int32).to(device)

    return SyntheticBin(dev(ids), dev(positions), dev(cu), dev(lens_t), dev(cu[1:] - 1),
                        cu[:-1].tolist(), max(lens))


class CudaGauge:
    """The CUDA caching allocator's counters for one device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def name(self) -> str:
        return torch.cuda.get_device_name(self.device)

    def total(self) -> int:
        return torch.cuda.get_device_properties(self.device).total_memory

    def free(self) -> int:
        return torch.cuda.mem_get_info(self.device)[0]

    def allocated(self) -> int:
        return torch.cuda.memory_allocated(self.device)

    def peak(self) -> int:
        return torch.cuda.max_memory_allocated(self.device)

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)

    def release(self) -> None:
        gc.collect()
        torch.cuda.empty_cache()

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)


class TorchMeasurer:
    """Runs the probe's trials with a loaded model on its device (the `Measurer` of `run_probe`).

    `gauge` reads memory counters (CudaGauge unless given: the tests pass a fake one on CPU).
    """

    def __init__(self, loaded, device, *, gauge=None) -> None:
        self.model = loaded.model
        self.cfg = loaded.config
        self.device = torch.device(device)
        self.dtype = next(self.model.parameters()).dtype
        self.gauge = gauge or CudaGauge(self.device)
        self.gauge.release()
        self.device_name = self.gauge.name()
        self.total_bytes = self.gauge.total()
        self.resident_bytes = self.gauge.allocated()
        self.fp8_kv = getattr(loaded, "fp8_kv", False)
        self.kv_bytes_per_row = kv_row_bytes(self.cfg, self.dtype, fp8=self.fp8_kv)
        self.max_context = self.cfg.max_position_embeddings
        self._held_decode: ModelRunner | None = None  # the graphs held through the trials, with their tapes
        self._held_prefill: PrefillGraphs | None = None

    def free_bytes(self) -> int:
        self.gauge.release()
        return self.gauge.free()

    def warm_up(self, seq_tokens: int) -> None:
        n = max(seq_tokens, min(4 * seq_tokens, 8192))
        for tokens in (n, n + 16):  # two sizes: the compiled ops settle on their dynamic-shape graph
            if not self.prefill(tokens, tokens, seq_tokens, full=True).ok:
                raise ProbeError(f"{self.device_name}: a {tokens}-token prefill bin does not fit beside the model")

    def prefill(self, tokens: int, kv_rows: int, seq_tokens: int, *, full: bool) -> Trial:
        return self._trial(lambda: self._prefill(tokens, kv_rows, seq_tokens, full=full))

    def decode(self, num_seqs: int, context: int, kv_rows: int, max_new_tokens: int) -> Trial:
        return self._trial(lambda: self._decode(num_seqs, context, kv_rows, max_new_tokens))

    def hold_decode_graphs(self) -> int:
        """Capture every decode batch bucket the way the worker does at start-up (all of them, the
        largest first, so the smaller ones reuse its pool), over a tape of two rows (the captures touch
        only slab 0's first row and the scratch row), and keep the graphs until `release_graphs`;
        returns the drop in free memory: their memory pool and logits buffer. 0 without graphs (CPU,
        TELESUM_DECODE_GRAPHS=0)."""
        before = self.free_bytes()
        kv = KVCache.allocate(self.cfg, 2, self.dtype, self.device, fp8=self.fp8_kv)
        runner = ModelRunner(self.model, kv, self.device, max_seqlen_k=self.max_context)
        graphs = runner.decode_step
        if not graphs.use_graphs:
            return 0
        capture_decode_graphs(graphs, None)
        self._held_decode = runner
        return max(0, before - self.free_bytes())

    def hold_prefill_graphs(self, bin_tokens: int, bin_seqs: int) -> int:
        """Capture the prefill graphs of the largest bin (`bin_tokens` tokens, `bin_seqs` sequences) the
        way the worker does at start-up (`PrefillGraphs.capture_largest`), over a tape of two rows (a
        capture parks every span, so its tokens write only the scratch row), and keep them until
        `release_graphs` or the next call; returns the drop in free memory: their pool and logits buffer."""
        self._held_prefill = None
        before = self.free_bytes()
        kv = KVCache.allocate(self.cfg, 2, self.dtype, self.device, fp8=self.fp8_kv)
        graphs = PrefillGraphs(self.model, kv, self.device, max_tokens=bin_tokens, max_seqs=bin_seqs,
                               max_seqlen_k=self.max_context, use_graphs=True)
        if not graphs.capture_largest():
            return 0
        self._held_prefill = graphs
        return max(0, before - self.free_bytes())

    def release_graphs(self) -> None:
        self._held_decode = self._held_prefill = None
        self.gauge.release()

    def _trial(self, work) -> Trial:
        g = self.gauge
        g.release()
        base = g.allocated()
        g.reset_peak()
        started = time.perf_counter()
        try:
            work()
            g.synchronize()
            ok = True
        except RuntimeError as exc:
            if not is_out_of_memory(exc):
                raise
            ok = False  # leaving the block drops the exception and the frames holding the trial's tensors
        seconds = time.perf_counter() - started
        peak = g.peak() - base
        g.release()
        return Trial(ok, peak, seconds)

    def _prefill(self, tokens: int, kv_rows: int, seq_tokens: int, *, full: bool) -> None:
        kv = KVCache.allocate(self.cfg, kv_rows, self.dtype, self.device, fp8=self.fp8_kv)
        runner = ModelRunner(self.model, kv, self.device)
        b = synthetic_bin(tokens, seq_tokens, self.cfg.vocab_size, self.device)
        hook = None
        if not full and len(self.model.layers) > PEAK_LAYERS:
            hook = self.model.layers[PEAK_LAYERS].register_forward_pre_hook(_stop_pass)
        try:
            runner.prefill_bin(b, b.slab_starts, b.max_seqlen, b.max_seqlen)
        except _StopPass:
            pass
        finally:
            if hook is not None:
                hook.remove()

    def _decode(self, num_seqs: int, context: int, kv_rows: int, max_new_tokens: int) -> None:
        if num_seqs * (context + 1) > kv_rows:
            raise ValueError(f"{num_seqs} sequences of {context + 1} rows do not fit {kv_rows} KV rows")
        kv = KVCache.allocate(self.cfg, kv_rows, self.dtype, self.device, fp8=self.fp8_kv)
        runner = ModelRunner(self.model, kv, self.device)
        token = min(100, self.cfg.vocab_size - 1)
        logits = runner.decode([token] * num_seqs, [context] * num_seqs,
                               [i * (context + 1) for i in range(num_seqs)])
        batch = SamplingBatch([_CHECK_TEMPERATURE] * num_seqs, [_CHECK_TOP_P] * num_seqs, self.device,
                              [_CHECK_PENALTY] * num_seqs, [[token] * max_new_tokens] * num_seqs)
        batch.sample(logits, torch.Generator(device=self.device).manual_seed(0))


def _stop_pass(_module, _args) -> None:
    raise _StopPass
