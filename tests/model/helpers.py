"""Helpers shared by the model tests: packed forwards and error measures."""

from __future__ import annotations

import torch

from worker.model import KVCache, build_pass


def run_packed(model, seqs: list[torch.Tensor], *, ctx_lens=None, pad_lens=None, kv=None, slab_rows=64,
               all_logits=True):
    """One packed forward over `seqs` (new tokens per sequence); returns (logits per sequence, kv).

    Slab b starts at row b * slab_rows; with all_logits every real token's logits come back.
    """
    ctx_lens = ctx_lens or [0] * len(seqs)
    pad_lens = pad_lens or [0] * len(seqs)
    cfg = model.cfg
    device = seqs[0].device
    kv = kv or KVCache.allocate(cfg, slab_rows * len(seqs), torch.float32, "cpu")
    meta, pos = build_pass([len(s) for s in seqs], ctx_lens, [b * slab_rows for b in range(len(seqs))],
                           pad_lens=pad_lens, device=device)
    ids = torch.cat([torch.cat([s, torch.zeros(p, dtype=s.dtype, device=device)]) for s, p in zip(seqs, pad_lens)])
    cu = meta.cu_seqlens_q.tolist()
    rows = [list(range(cu[b], cu[b] + len(s))) if all_logits else [cu[b] + len(s) - 1] for b, s in enumerate(seqs)]
    logits = model(ids, pos, meta, kv, torch.tensor([r for rr in rows for r in rr], device=device))
    out, i = [], 0
    for rr in rows:
        out.append(logits[i:i + len(rr)])
        i += len(rr)
    return out, kv


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()
