"""Token sampling on the device, without host syncs: greedy, temperature, top-p."""

from __future__ import annotations

import torch


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


class SamplingBatch:
    """Per-row sampling parameters for one step, built from host values so an all-greedy step skips the softmax."""

    def __init__(self, temperatures: list[float], top_ps: list[float], device) -> None:
        self.any_sampling = any(t > 0 for t in temperatures)
        self.temperatures = self.top_ps = None
        if self.any_sampling:  # a host->device copy syncs the stream: only when the values are used
            self.temperatures = torch.tensor(temperatures, dtype=torch.float32, device=device)
            self.top_ps = torch.tensor(top_ps, dtype=torch.float32, device=device)

    def sample(self, logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """[B, V] -> int64 [B] on the logits' device. No host sync."""
        if not self.any_sampling:
            return logits.argmax(dim=-1)
        return sample(logits, self.temperatures, self.top_ps, generator)
