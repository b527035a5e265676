"""Model runner: turns a step's plan into AttentionMetadata and one forward pass. Never touches queues.

Every per-step integer array is built on the host in one buffer and copied to the device once
(non-blocking from page-locked memory on CUDA), so building a step adds no host sync. Decode steps
go through `DecodeGraphs` (static buffers, one captured CUDA graph per batch bucket).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

from worker.engine.decode_graphs import DecodeGraphs
from worker.model.attention import AttentionMetadata
from worker.model.kv_cache import KVCache
from worker.settings.environment import DECODE_GRAPHS as GRAPHS_ENV


@dataclass(frozen=True)
class DecodeRows:
    """Decoding sequences carried by a prefill pass: int64 [N] each (host arrays)."""

    tokens: np.ndarray       # the token each feeds (its last sampled)
    positions: np.ndarray    # its position = KV rows already cached
    slab_starts: np.ndarray


class ModelRunner:
    """Runs prefill (packed bins, long-input chunks) and decode steps against one KV tape."""

    def __init__(self, model: torch.nn.Module, kv: KVCache, device: torch.device | str, *,
                 decode_graphs: bool | None = None, max_decode_batch: int = 1024,
                 max_seqlen_k: int | None = None) -> None:
        """decode_graphs: replay captured CUDA graphs for decode (default: on CUDA, unless
        TELESUM_DECODE_GRAPHS=0); decode batches above max_decode_batch run in several passes.
        max_seqlen_k: the bound on any slab the decode graphs bake in (default: the tape's rows, at
        most the model's context; the probe captures the worker's graphs beside a tape of a few rows)."""
        self.model = model
        self.kv = kv
        self.device = torch.device(device)
        self._pin = self.device.type == "cuda"
        if decode_graphs is None:
            decode_graphs = self.device.type == "cuda" and os.environ.get(GRAPHS_ENV, "1") != "0"
        max_seqlen_k = max_seqlen_k or min(kv.capacity_rows, model.cfg.max_position_embeddings)
        self.decode_step = DecodeGraphs(model, kv, self.device, max_batch=max_decode_batch,
                                        max_seqlen_k=max_seqlen_k, use_graphs=decode_graphs)

    def _upload(self, *rows: list[int]) -> list[torch.Tensor]:
        """Host int lists -> int64 device tensors, one copy for all of them."""
        flat = [x for row in rows for x in row]
        host = torch.tensor(flat, dtype=torch.int64)
        if self._pin:
            host = host.pin_memory()
        dev = host.to(self.device, non_blocking=True)
        out, offset = [], 0
        for row in rows:
            out.append(dev[offset:offset + len(row)])
            offset += len(row)
        return out

    @torch.inference_mode()
    def prefill_bin(self, bin, slab_starts: list[int], max_seqlen_q: int, max_seqlen_k: int,
                    prefix_lens: list[int] | None = None, decode: DecodeRows | None = None) -> torch.Tensor:
        """Prefill a packed device bin whose sequences own the given slabs -> float32 [B, V] last-token logits.

        prefix_lens: rows already on each slab (a cached head); the bin then holds only the rest of
        each prompt, at positions continuing from there, attending to the slab through the tape.
        max_seqlen_k is the longest prefix + span then.
        decode: decoding sequences carried in the same pass, one token each after the bin's tokens
        (a mixed step); their logits follow the bin's -> [B + len(decode), V]."""
        input_ids = bin.input_ids.long()                       # [T]
        position_ids = bin.position_ids.long()                 # [T] restart at 0 per sequence; pads continue
        cu_seqlens = bin.cu_seqlens.to(torch.int32)            # [B+1] spans include alignment pads
        seq_lens = bin.seq_lens.to(torch.int32)                # [B] real lengths (of what the bin holds)
        last_index = bin.last_token_index.long()               # [B]
        num_tokens = input_ids.shape[0]
        from_zero = (not prefix_lens or not any(prefix_lens)) and decode is None
        decode_rows = ([], [], []) if decode is None else (
            decode.tokens.tolist(), decode.positions.tolist(), decode.slab_starts.tolist())
        starts, offsets, ids, pos, dec_starts = self._upload(  # one copy for the bin's and the decode rows' ints
            slab_starts, prefix_lens or [0] * len(slab_starts), *decode_rows)
        spans = cu_seqlens[1:] - cu_seqlens[:-1]               # [B]
        seg = torch.repeat_interleave(torch.arange(spans.shape[0], device=self.device), spans,
                                      output_size=num_tokens)  # [T] sequence index of each token
        is_real = position_ids < seq_lens[seg].long()          # [T] pads sit after the real tokens
        if not from_zero:
            position_ids = position_ids + offsets[seg]         # [T] continue after the cached head
        slot_mapping = torch.where(is_real, starts[seg] + position_ids, -1)  # [T]
        # Through the tape (a cached head, decode rows beside) seqused_k counts a span's pads (see attention.py).
        seqused_k = seq_lens if from_zero else (offsets + spans).to(torch.int32)
        if decode is not None:  # each decoding sequence: a span of one token at its position
            num_rows = len(decode.tokens)
            input_ids = torch.cat([input_ids, ids])
            position_ids = torch.cat([position_ids, pos])
            slot_mapping = torch.cat([slot_mapping, dec_starts + pos])
            ones = torch.arange(1, num_rows + 1, device=self.device, dtype=torch.int32)
            cu_seqlens = torch.cat([cu_seqlens, num_tokens + ones])
            starts = torch.cat([starts, dec_starts])
            seqused_k = torch.cat([seqused_k, (pos + 1).to(torch.int32)])
            last_index = torch.cat([last_index, num_tokens - 1 + ones.long()])
            max_seqlen_k = max(max_seqlen_k, int(decode.positions.max()) + 1)
        attn = AttentionMetadata(
            cu_seqlens_q=cu_seqlens, max_seqlen_q=max_seqlen_q,
            slab_starts=starts.to(torch.int32), seqused_k=seqused_k, max_seqlen_k=max_seqlen_k,
            slot_mapping=slot_mapping, is_prefill_from_zero=from_zero,
            num_decode_rows=0 if decode is None else len(decode.tokens))
        return self.model(input_ids, position_ids, attn, self.kv, last_index)

    @torch.inference_mode()
    def prefill_chunk(self, tokens: list[int], start: int, slab_start: int) -> torch.Tensor:
        """Prefill tokens at positions start.. of one sequence, attending to its earlier rows -> [1, V]."""
        n = len(tokens)
        positions = list(range(start, start + n))
        input_ids, position_ids, slot_mapping, meta = self._upload(
            tokens, positions, [slab_start + p for p in positions], [0, n, slab_start, start + n, n - 1])
        attn = AttentionMetadata(
            cu_seqlens_q=meta[0:2].to(torch.int32), max_seqlen_q=n,
            slab_starts=meta[2:3].to(torch.int32), seqused_k=meta[3:4].to(torch.int32),
            max_seqlen_k=start + n, slot_mapping=slot_mapping, is_prefill_from_zero=start == 0)
        return self.model(input_ids, position_ids, attn, self.kv, meta[4:5])

    @torch.inference_mode()
    def decode(self, input_ids, positions, slab_starts, head_starts=None, head_lens=None) -> torch.Tensor:
        """One token per sequence at the given positions (= rows already cached) -> float32 [B, V].
        head_starts/head_lens: where a shared copy of each sequence's first rows lies (prefix cache)."""
        step = self.decode_step.max_batch
        if len(input_ids) <= step:
            return self.decode_step.run(input_ids, positions, slab_starts, head_starts, head_lens)
        # A replay overwrites its graph's logits, so each pass's rows are copied out before the next.
        part = (lambda x, i: None if x is None else x[i:i + step])  # noqa: E731
        return torch.cat([self.decode_step.run(input_ids[i:i + step], positions[i:i + step],
                                               slab_starts[i:i + step], part(head_starts, i),
                                               part(head_lens, i)).clone()
                          for i in range(0, len(input_ids), step)])
