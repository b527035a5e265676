"""KVCache: one preallocated K tape and V tape per layer; the engine's KV arena hands out row ranges.

A tape holds K (or V) in the model dtype, or as FP8 codes with per-token, per-head scales
(`fp8=True`, see `kv_fp8`): then each layer's `k`/`v` is an `Fp8Tape` that the attention kernels read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from worker.model import kv_fp8
from worker.model.config import ModelConfig
from worker.model.kv_fp8 import Fp8Layout, Fp8Tape


def kv_row_bytes(cfg: ModelConfig, dtype: torch.dtype, *, fp8: bool = False) -> int:
    """Bytes one KV row takes over all layers, K and V: in `dtype`, or as FP8 codes and scales."""
    if fp8:
        return 2 * cfg.num_layers * Fp8Layout(cfg.num_kv_heads, cfg.head_dim).row_bytes
    return cfg.kv_bytes_per_row(torch.empty((), dtype=dtype).element_size())


@dataclass
class KVCache:
    k: list  # per layer: a tensor [capacity_rows, num_kv_heads, head_dim], or an Fp8Tape
    v: list
    # Per layer [capacity_rows + 1, ...] tensors that `k`/`v` are views of; the extra last row takes the
    # writes of pad tokens (slot -1) so a write never needs a host sync to filter them out.
    k_full: list[torch.Tensor] | None = field(default=None, repr=False)
    v_full: list[torch.Tensor] | None = field(default=None, repr=False)
    fp8: Fp8Layout | None = None  # the rows' layout when the tapes hold FP8 codes

    @classmethod
    def allocate(cls, cfg: ModelConfig, capacity_rows: int, dtype, device, *, fp8: bool = False) -> KVCache:
        """Zero-filled tapes of `capacity_rows` rows per layer on `device`; `fp8`: FP8 codes and scales
        (`dtype` is then what attention computes in, not what the tapes hold)."""
        if capacity_rows <= 0:
            raise ValueError(f"KV capacity must be positive, got {capacity_rows} rows")
        if fp8:
            layout = Fp8Layout(cfg.num_kv_heads, cfg.head_dim)
            shape, dtype = (capacity_rows + 1, layout.row_bytes), torch.uint8
        else:
            layout, shape = None, (capacity_rows + 1, cfg.num_kv_heads, cfg.head_dim)
        k_full = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_layers)]
        v_full = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_layers)]
        k, v = [t[:capacity_rows] for t in k_full], [t[:capacity_rows] for t in v_full]
        if layout is not None:
            k, v = [Fp8Tape(t, layout) for t in k], [Fp8Tape(t, layout) for t in v]
        return cls(k=k, v=v, k_full=k_full, v_full=v_full, fp8=layout)

    @property
    def capacity_rows(self) -> int:
        return self.k[0].shape[0]

    @property
    def num_layers(self) -> int:
        return len(self.k)

    def row_tapes(self) -> list[torch.Tensor]:
        """Every layer's K and V tape as a contiguous [capacity_rows, ...] tensor (whole-row copies)."""
        if self.fp8 is None:
            return [*self.k, *self.v]
        return [t.data.view(torch.int32) for t in (*self.k, *self.v)]  # rows are whole 16-byte words

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
            if self.fp8 is not None:
                kv_fp8.write(self.k_full[layer], self.v_full[layer], slots, k, v, self.fp8)
                return
            self.k_full[layer].index_copy_(0, slots, k)
            self.v_full[layer].index_copy_(0, slots, v)
        else:
            keep = slot_mapping >= 0
            self.k[layer][slot_mapping[keep]] = k[keep]
            self.v[layer][slot_mapping[keep]] = v[keep]
