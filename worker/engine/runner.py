"""Model runner: turns a step's plan into AttentionMetadata and one forward pass. Never touches queues.

Every per-step integer array is built on the host in one buffer and copied to the device once
(non-blocking from page-locked memory on CUDA), so building a step adds no host sync. Decode steps
go through `DecodeGraphs` (static buffers, one captured CUDA graph per batch bucket); so do packed
bins' prefills, given the largest bin (`PrefillGraphs`: per bucket of tokens, sequences and span).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

from worker.engine.decode_graphs import DecodeGraphs
from worker.engine.prefill_graphs import PrefillGraphs, bin_token_rows
from worker.model.attention import AttentionMetadata
from worker.model.kv_cache import KVCache
from worker.settings.environment import DECODE_GRAPHS as GRAPHS_ENV
from worker.settings.environment import PREFILL_GRAPHS as PREFILL_GRAPHS_ENV


@dataclass(frozen=True)
class DecodeRows:
    """Decoding sequences carried by a prefill pass: int64 [N] each (host arrays)."""

    tokens: np.ndarray       # the token each feeds (its last sampled)
    positions: np.ndarray    # its position = KV rows already cached
    slab_starts: np.ndarray


def wants_prefill_graphs(setting: str | None) -> bool:
    """TELESUM_PREFILL_GRAPHS: "1" replays packed bins' prefills from CUDA graphs; unset or "0" runs
    them eagerly. Off by default: a bucket first met mid-stream is captured there, and every capture
    synchronises the device and empties torch's caches; streaming at 80 % load on an H100 gave p99
    1.58 s with them against 0.91 s without (bench/NOTES.md, 2026-12-07 third; capturing without
    the emptying: 0.83-1.02 s, one capture out of memory, fourth). Their memory is the
    probe's to count (`TorchMeasurer.hold_prefill_graphs`): no out-of-memory line at capacity since."""
    if setting not in (None, "", "0", "1"):
        raise ValueError(f"TELESUM_PREFILL_GRAPHS must be 0 or 1, not {setting!r}")
    return setting == "1"


def graphs_wanted() -> tuple[bool, bool]:
    """(decode, prefill) CUDA graphs as the environment asks for them: decode unless
    TELESUM_DECODE_GRAPHS=0, prefill when `wants_prefill_graphs` and decode graphs are on."""
    decode = os.environ.get(GRAPHS_ENV, "1") != "0"
    return decode, decode and wants_prefill_graphs(os.environ.get(PREFILL_GRAPHS_ENV))


class ModelRunner:
    """Runs prefill (packed bins, long-input chunks) and decode steps against one KV tape."""

    def __init__(self, model: torch.nn.Module, kv: KVCache, device: torch.device | str, *,
                 decode_graphs: bool | None = None, max_decode_batch: int = 1024,
                 max_seqlen_k: int | None = None, largest_bin: tuple[int, int] | None = None) -> None:
        """decode_graphs: replay captured CUDA graphs for decode (default: on CUDA, unless
        TELESUM_DECODE_GRAPHS=0); decode batches above max_decode_batch run in several passes.
        max_seqlen_k: the bound on any slab the graphs bake in (default: the tape's rows, at
        most the model's context; the probe captures the worker's graphs beside a tape of a few rows).
        largest_bin: (tokens, sequences) of the dispatcher's largest bin; given, a bin's prefill
        replays a graph captured per bucket on first use (on CUDA, with decode graphs on, when
        `graphs_wanted` asks for them: the probe counts their memory only then); None: prefills run
        eagerly (the probe measures those)."""
        self.model = model
        self.kv = kv
        self.device = torch.device(device)
        self._pin = self.device.type == "cuda"
        if decode_graphs is None:
            decode_graphs = self.device.type == "cuda" and graphs_wanted()[0]
        max_seqlen_k = max_seqlen_k or min(kv.capacity_rows, model.cfg.max_position_embeddings)
        self.decode_step = DecodeGraphs(model, kv, self.device, max_batch=max_decode_batch,
                                        max_seqlen_k=max_seqlen_k, use_graphs=decode_graphs)
        self.prefill_step: PrefillGraphs | None = None
        if largest_bin is not None and self.decode_step.use_graphs and graphs_wanted()[1]:  # as the probe counted
            self.prefill_step = PrefillGraphs(model, kv, self.device, max_tokens=largest_bin[0],
                                              max_seqs=largest_bin[1], max_seqlen_k=max_seqlen_k, use_graphs=True)

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
        num_tokens, num_seqs = bin.input_ids.shape[0], bin.seq_lens.shape[0]
        from_zero = (not prefix_lens or not any(prefix_lens)) and decode is None
        if decode is None and self.prefill_step is not None:
            bucket = self.prefill_step.bucket_for(num_tokens, num_seqs, max_seqlen_q, from_zero)
            if bucket is not None and self.prefill_step.serves(bucket):
                logits = self.prefill_step.run(bin, bucket, slab_starts, prefix_lens)
                if logits is not None:
                    return logits
        input_ids = bin.input_ids.long()                       # [T]
        cu_seqlens = bin.cu_seqlens.to(torch.int32)            # [B+1] spans include alignment pads
        seq_lens = bin.seq_lens.to(torch.int32)                # [B] real lengths (of what the bin holds)
        last_index = bin.last_token_index.long()               # [B]
        decode_rows = ([], [], []) if decode is None else (
            decode.tokens.tolist(), decode.positions.tolist(), decode.slab_starts.tolist())
        starts, offsets, ids, pos, dec_starts = self._upload(  # one copy for the bin's and the decode rows' ints
            slab_starts, prefix_lens or [0] * num_seqs, *decode_rows)
        rows = torch.arange(num_tokens, dtype=torch.int32, device=self.device)
        position_ids, slot_mapping, seqused_k = bin_token_rows(
            bin.position_ids.long(), rows, cu_seqlens, seq_lens, starts, offsets, from_zero)
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
