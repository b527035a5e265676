"""KVCache: one preallocated K tape and V tape per layer; the engine's KV arena hands out row ranges."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from worker.model.config import ModelConfig


@dataclass
class KVCache:
    k: list[torch.Tensor]  # per layer [capacity_rows, num_kv_heads, head_dim]
    v: list[torch.Tensor]
    # Per layer [capacity_rows + 1, ...] tensors that `k`/`v` are views of; the extra last row takes the
    # writes of pad tokens (slot -1) so a write never needs a host sync to filter them out.
    k_full: list[torch.Tensor] | None = field(default=None, repr=False)
    v_full: list[torch.Tensor] | None = field(default=None, repr=False)

    @classmethod
    def allocate(cls, cfg: ModelConfig, capacity_rows: int, dtype, device) -> KVCache:
        """Zero-filled tapes of `capacity_rows` rows per layer on `device`."""
        if capacity_rows <= 0:
            raise ValueError(f"KV capacity must be positive, got {capacity_rows} rows")
        shape = (capacity_rows + 1, cfg.num_kv_heads, cfg.head_dim)
        k_full = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_layers)]
        v_full = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_layers)]
        return cls(k=[t[:capacity_rows] for t in k_full], v=[t[:capacity_rows] for t in v_full],
                   k_full=k_full, v_full=v_full)

    @property
    def capacity_rows(self) -> int:
        return self.k[0].shape[0]

    @property
    def num_layers(self) -> int:
        return len(self.k)

    def rows_for(self, slot_mapping: torch.Tensor) -> torch.Tensor | None:
        """int64 [T] rows of the full tapes for slot_mapping [T] (-1 -> the scratch row); None without one.

        Computed once per pass and handed to every layer's `write(..., rows=)`; no host sync.
        """
        if self.k_full is None:
            return None
        return torch.where(slot_mapping < 0, self.capacity_rows, slot_mapping)

    def write(self, layer: int, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
              rows: torch.Tensor | None = None) -> None:
        """Store k/v [T, num_kv_heads, head_dim] at tape rows slot_mapping [T]; rows of -1 are not stored.

        `rows` = rows_for(slot_mapping) when the caller already has it.
        """
        if self.k_full is not None:
            # Pads go to the scratch row; index_copy_ keeps this free of host syncs.
            slots = self.rows_for(slot_mapping) if rows is None else rows
            self.k_full[layer].index_copy_(0, slots, k)
            self.v_full[layer].index_copy_(0, slots, v)
        else:
            keep = slot_mapping >= 0
            self.k[layer][slot_mapping[keep]] = k[keep]
            self.v[layer][slot_mapping[keep]] = v[keep]
