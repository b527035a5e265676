"""What one planned step queues on the device: its forward pass and sampling, and the read of its
tokens, never waited for here. The engine thread decides and applies; this module only launches.
Engine thread only."""

from __future__ import annotations

import torch

from worker.engine.bins import BinWork
from worker.engine.decode_batch import DecodeBatch
from worker.engine.plans import Decode, MixedStep, Plan, PrefillBin, PrefillChunk
from worker.engine.runner import DecodeRows, ModelRunner
from worker.engine.sampling import OutputTape, SamplingBatch, SamplingRows
from worker.engine.sequence import Sequence


def start_read(tokens: torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
    """Queue a step's tokens' copy into page-locked host memory and mark it with an event: waiting
    for the event waits for this step only, where `tokens.cpu()` would also wait for a bin's
    prefill queued behind it."""
    if tokens.device.type != "cuda":
        return tokens, None
    host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
    host.copy_(tokens, non_blocking=True)
    copied = torch.cuda.Event()
    copied.record()
    return host, copied


class DeviceStep:
    """The model runner, the sampler's random generator and the repetition-penalty tape."""

    def __init__(self, runner: ModelRunner, tape_rows: int, seed: int) -> None:
        self.runner = runner
        self.generator = torch.Generator(device=runner.device).manual_seed(seed)
        self.outputs = OutputTape(tape_rows, runner.device)  # repetition-penalty histories

    def queue(self, plan: Plan, seqs: list[Sequence], decoding: DecodeBatch, pass_rows: int | None,
              ids: torch.Tensor | None = None) -> torch.Tensor:
        """The step's forward pass and sampling, queued -> int64 [B] tokens on the device, not waited
        for (empty for a non-final chunk). decoding: the decode batch (a mixed step's rows, a decode
        step's unless it was planned ahead); pass_rows: rows per decode pass (None: all at once);
        ids: a decode step's input tokens on the device (a decode ahead: the step before sampled
        them), else the batch's."""
        if isinstance(plan, (PrefillBin, MixedStep)):
            prefill = plan.prefill if isinstance(plan, MixedStep) else plan
            work: BinWork = prefill.bin
            batch = decoding if isinstance(plan, MixedStep) else None  # the plan's decode rows
            logits = self.runner.prefill_bin(
                work.device_bin, [s.slab_start for s in prefill.seqs], work.max_seqlen_q, work.max_seqlen_k,
                [s.prefix_len for s in prefill.seqs],
                decode=None if batch is None else DecodeRows(batch.last_token, batch.position, batch.slab_start))
            rows = SamplingRows.of(prefill.seqs)
            if batch is not None:
                rows = rows.followed_by(SamplingRows.of_batch(batch))
        elif isinstance(plan, PrefillChunk):
            logits = self.runner.prefill_chunk(plan.seq.prompt[plan.start:plan.end], plan.start,
                                               plan.seq.slab_start)
            if not plan.is_last:
                return torch.empty(0, dtype=torch.int64)
            rows = SamplingRows.of(seqs)
        else:
            assert isinstance(plan, Decode)
            batch = decoding if plan.ahead is None else plan.ahead  # the plan's rows, as arrays
            size = pass_rows or len(batch)
            return torch.cat([self._decode_pass(batch, slice(i, i + size), ids)
                              for i in range(0, len(batch), size)])
        return self._sample(logits, rows)

    def _decode_pass(self, batch: DecodeBatch, part: slice, ids: torch.Tensor | None) -> torch.Tensor:
        """Decode and sample rows `part` of the decode batch -> int64 tokens of those rows, on the
        device. ids: the batch's input tokens on the device (else its last_token)."""
        logits = self.runner.decode(batch.last_token[part] if ids is None else ids[part], batch.position[part],
                                    batch.slab_start[part], batch.head_start[part], batch.head_len[part])
        return self._sample(logits, SamplingRows.of_batch(batch, part))

    def _sample(self, logits: torch.Tensor, rows: SamplingRows) -> torch.Tensor:
        """int64 [B] tokens on the logits' device: sampling queued, not waited for."""
        penalised = bool((rows.penalty != 1.0).any())
        history = self.outputs.histories(rows.output_start, rows.out_len) if penalised else None
        batch = SamplingBatch(rows.temperature.tolist(), rows.top_p.tolist(), logits.device,
                              rows.penalty.tolist() if history is not None else None, history)
        tokens = batch.sample(logits, self.generator)  # [B] on the device
        if penalised:
            self.outputs.record(rows.output_start + rows.out_len, tokens)
        return tokens
