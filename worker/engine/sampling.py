"""Token sampling on the device, without host syncs: greedy, temperature, top-p, repetition penalty."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from worker.engine.sequence import Sequence


def sample(logits: torch.Tensor,        # float32 [B, V]
           temperatures: torch.Tensor,  # float32 [B]; 0 = greedy
           top_ps: torch.Tensor,        # float32 [B]; 1 = no nucleus cut
           generator: torch.Generator | None = None,
           ) -> torch.Tensor:           # int64 [B]
    """One token per row. Rows with temperature 0 take the argmax; the rest sample. No host sync."""
    greedy = logits.argmax(dim=-1)  # [B]
    temps = temperatures.clamp_min(1e-5).unsqueeze(-1)  # [B, 1]
    probs = torch.softmax(logits / temps, dim=-1)  # [B, V]
    probs = _top_p_filter(probs, top_ps)
    # Exponential-race sampling: argmax(p / E) with E ~ Exp(1) draws from p, no multinomial sync.
    noise = torch.empty_like(probs).exponential_(1.0, generator=generator)  # [B, V]
    sampled = (probs / noise).argmax(dim=-1)  # [B]
    return torch.where(temperatures > 0, sampled, greedy)


def _top_p_filter(probs: torch.Tensor, top_ps: torch.Tensor) -> torch.Tensor:
    """Zero the tail beyond cumulative probability top_p (the top token always stays). [B, V] -> [B, V]."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)  # [B, V]
    cumulative = sorted_probs.cumsum(dim=-1)  # [B, V]
    drop = (cumulative - sorted_probs) > top_ps.unsqueeze(-1)  # [B, V] mass before this token already >= p
    sorted_probs = sorted_probs.masked_fill(drop, 0.0)
    return torch.zeros_like(probs).scatter_(-1, order, sorted_probs)


def apply_repetition_penalty(logits: torch.Tensor,     # float32 [B, V]
                             history: torch.Tensor,    # int64 [B, L]; -1 = padding
                             penalties: torch.Tensor,  # float32 [B]; 1 = no penalty
                             ) -> torch.Tensor:        # float32 [B, V], a new tensor
    """Make tokens already generated less likely: a seen token's logit is divided by the row's
    penalty when positive and multiplied by it when negative (the usual CTRL rule), once per
    distinct token however often it occurred."""
    valid = history >= 0  # [B, L]
    # scatter_add is order-independent, so repeated tokens and padding (sent to id 0 with weight 0) are safe
    counts = torch.zeros_like(logits).scatter_add_(-1, history.clamp_min(0), valid.to(logits.dtype))  # [B, V]
    p = penalties.unsqueeze(-1)  # [B, 1]
    penalised = torch.where(logits > 0, logits / p, logits * p)  # [B, V]
    return torch.where(counts > 0, penalised, logits)


def host_to_device(values, dtype: torch.dtype, device) -> torch.Tensor:
    """A host list as a device tensor; on CUDA through page-locked memory, so the copy does not
    synchronise the stream (the caching host allocator keeps the buffer until the copy is done)."""
    host = torch.from_numpy(np.ascontiguousarray(values)).to(dtype) if isinstance(values, np.ndarray) \
        else torch.tensor(values, dtype=dtype)
    if torch.device(device).type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)


class OutputTape:
    """Every sequence's generated tokens on the device, each at the KV-tape row its K/V goes to
    (slab start + prompt length + output index), so a step gathers its repetition-penalty histories
    on the device instead of uploading each sequence's output from Python every step."""

    def __init__(self, rows: int, device) -> None:
        self.tokens = torch.full((rows,), -1, dtype=torch.int64, device=device)  # [rows]

    def histories(self, output_starts: np.ndarray, output_lens: np.ndarray) -> torch.Tensor | None:
        """int64 [B, max len] of each row's outputs so far (-1 beyond its length); None when all are empty."""
        width = int(output_lens.max(initial=0))
        if width == 0:
            return None
        starts, lens = host_to_device(np.stack([output_starts, output_lens]), torch.int64, self.tokens.device)
        cols = torch.arange(width, device=self.tokens.device)  # [L]
        idx = (starts[:, None] + cols).clamp_(max=self.tokens.shape[0] - 1)  # [B, L]
        return torch.where(cols < lens[:, None], self.tokens[idx], -1)

    def record(self, rows: np.ndarray, tokens: torch.Tensor) -> None:
        """Store tokens [B] (device) at tape rows [B] (output start + index). No host sync."""
        self.tokens.index_copy_(0, host_to_device(rows, torch.int64, self.tokens.device), tokens)


class SamplingBatch:
    """Per-row sampling parameters for one step, built from host values so an all-greedy,
    penalty-free step is a plain argmax (no softmax, no host->device copy)."""

    def __init__(self, temperatures: list[float], top_ps: list[float], device,
                 repetition_penalties: list[float] | None = None,
                 histories: list[list[int]] | torch.Tensor | None = None) -> None:
        """histories: each row's generated tokens, as lists or a device tensor [B, L] (-1 = none)."""
        self.any_sampling = any(t > 0 for t in temperatures)
        self.temperatures = self.top_ps = None
        if self.any_sampling:  # only when the values are used: an all-greedy step copies nothing
            self.temperatures = host_to_device(temperatures, torch.float32, device)
            self.top_ps = host_to_device(top_ps, torch.float32, device)
        self.penalties = self.history = None
        if repetition_penalties is not None and any(p != 1.0 for p in repetition_penalties):
            if isinstance(histories, torch.Tensor):
                if histories.shape[0] != len(repetition_penalties):
                    raise ValueError("repetition penalties need one token history per row")
                self.history = histories
                self.penalties = host_to_device(repetition_penalties, torch.float32, device)
                return
            if histories is None or len(histories) != len(repetition_penalties):
                raise ValueError("repetition penalties need one token history per row")
            width = max((len(h) for h in histories), default=0)
            if width:
                rows = [list(h) + [-1] * (width - len(h)) for h in histories]
                self.history = host_to_device(rows, torch.int64, device)  # [B, L]
                self.penalties = host_to_device(repetition_penalties, torch.float32, device)

    def sample(self, logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """[B, V] -> int64 [B] on the logits' device. No host sync."""
        if self.penalties is not None:
            logits = apply_repetition_penalty(logits, self.history, self.penalties)
        if not self.any_sampling:
            return logits.argmax(dim=-1)
        return sample(logits, self.temperatures, self.top_ps, generator)


@dataclass
class SamplingRows:
    """Per-row sampling inputs of one step (numpy [B] each), for prefilled sequences or decode rows."""

    temperature: np.ndarray
    top_p: np.ndarray
    penalty: np.ndarray
    output_start: np.ndarray  # tape row of each row's output token 0
    out_len: np.ndarray       # tokens each row has generated so far

    @classmethod
    def of(cls, seqs: list[Sequence]) -> SamplingRows:
        return cls(np.array([s.params.temperature for s in seqs], np.float32),
                   np.array([s.params.top_p for s in seqs], np.float32),
                   np.array([s.params.repetition_penalty for s in seqs], np.float32),
                   np.array([s.slab_start + s.prompt_len for s in seqs], np.int64),
                   np.array([len(s.output) for s in seqs], np.int64))

    @classmethod
    def of_batch(cls, batch, part: slice = slice(None)) -> SamplingRows:
        """Rows `part` of a DecodeBatch."""
        return cls(batch.temperature[part], batch.top_p[part], batch.penalty[part],
                   batch.output_start[part], batch.out_len[part])

    def followed_by(self, other: SamplingRows) -> SamplingRows:
        return SamplingRows(*(np.concatenate([getattr(self, f.name), getattr(other, f.name)])
                               for f in dataclasses.fields(self)))
