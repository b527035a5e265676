"""Attention over packed sequences and per-sequence KV slabs; backends chosen once per process.

Contract of one pass (AttentionMetadata): T query tokens of B sequences are packed back to back;
sequence b's queries are rows cu_seqlens_q[b]:cu_seqlens_q[b+1]. Its keys are the KV-tape rows
slab_starts[b] : slab_starts[b] + seqused_k[b] (this pass's K/V already written there), so query i
of a span of length L sees keys j <= i + seqused_k[b] - L: the causal mask is aligned bottom-right,
the way FlashAttention-2 aligns it. Spans may end in alignment pads (slot -1; their outputs are
garbage, never used): bottom-right alignment counts them as queries, so seqused_k must count them
too (a span after a cached prefix of P rows: seqused_k = P + span), and real queries never see their
rows. When `is_prefill_from_zero`, backends may use the fresh packed K/V instead of the tape.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from worker.model.kv_fp8 import Fp8Tape

log = logging.getLogger(__name__)

BACKEND_NAMES = ("flash_attn", "torch_fa2", "sdpa")


@dataclass(frozen=True)
class AttentionMetadata:
    cu_seqlens_q: torch.Tensor  # int32 [B+1]
    max_seqlen_q: int
    slab_starts: torch.Tensor  # int32 [B] first KV-tape row of each sequence's slab
    seqused_k: torch.Tensor  # int32 [B] KV rows filled per sequence AFTER this pass's writes
    max_seqlen_k: int
    slot_mapping: torch.Tensor  # int64 [T] tape row of each token's K/V; -1 = don't write (pad)
    is_prefill_from_zero: bool  # every sequence starts at position 0 in this pass
    # int32 [B+1]: slab starts then the tape length, for FA2 over the tape. Derived on the device once per
    # pass (LlamaModel.forward fills it when None) so no layer builds it again.
    cu_seqlens_k: torch.Tensor | None = None
    # Decode only, int32 [B] each: the first head_lens[b] keys of sequence b may be read from rows
    # head_starts[b].. (a shared copy of its slab's first rows, see decode_attention); None = none.
    head_starts: torch.Tensor | None = None
    head_lens: torch.Tensor | None = None
    # A mixed step: the last num_decode_rows sequences are decoding ones, one query each (after
    # every prefill token); through the tape their attention may run as a decode kernel of its own.
    num_decode_rows: int = 0

    @property
    def num_seqs(self) -> int:
        return self.slab_starts.shape[0]


def build_pass(new_lens: list[int], ctx_lens: list[int], slab_starts: list[int], *,
               pad_lens: list[int] | None = None, device="cpu") -> tuple[AttentionMetadata, torch.Tensor]:
    """Metadata and position ids [T] (int64) for sequences adding new_lens tokens after ctx_lens tape rows.

    pad_lens adds trailing pads per span (slot -1, positions continuing); seqused_k counts them, so
    the real queries' bottom-right causal window stays where it belongs.
    """
    pad_lens = pad_lens or [0] * len(new_lens)
    if not len(new_lens) == len(ctx_lens) == len(slab_starts) == len(pad_lens):
        raise ValueError("new_lens, ctx_lens, slab_starts and pad_lens must have one entry per sequence")
    from_zero = all(c == 0 for c in ctx_lens)
    spans = [n + p for n, p in zip(new_lens, pad_lens)]
    cu = [0]
    slots: list[int] = []
    positions: list[int] = []
    for n, c, s, p in zip(new_lens, ctx_lens, slab_starts, pad_lens):
        cu.append(cu[-1] + n + p)
        slots += list(range(s + c, s + c + n)) + [-1] * p
        positions += list(range(c, c + n + p))
    used = [c + n + p for c, n, p in zip(ctx_lens, new_lens, pad_lens)]
    meta = AttentionMetadata(
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device=device),
        max_seqlen_q=max(spans),
        slab_starts=torch.tensor(slab_starts, dtype=torch.int32, device=device),
        seqused_k=torch.tensor(used, dtype=torch.int32, device=device),
        max_seqlen_k=max(used),
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        is_prefill_from_zero=from_zero,
    )
    return meta, torch.tensor(positions, dtype=torch.int64, device=device)


class AttentionBackend:
    """attend(q [T,H,D], k/v [T,Hkv,D] fresh, k_tape/v_tape [rows,Hkv,D] (tensors or `Fp8Tape`s), meta,
    scale) -> [T,H,D]."""

    name = "abstract"

    def attend(self, q, k, v, k_tape, v_tape, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        raise NotImplementedError


class SdpaBackend(AttentionBackend):
    """Exact reference path (CPU, or any device): PyTorch SDPA per sequence over its slab rows."""

    name = "sdpa"

    def attend(self, q, k, v, k_tape, v_tape, meta, scale):
        num_seqs = meta.num_seqs
        if meta.max_seqlen_q == 1 and q.shape[0] == num_seqs and not meta.is_prefill_from_zero:
            return self._decode(q, k_tape, v_tape, meta, scale)
        cu = meta.cu_seqlens_q.tolist()
        starts, used = meta.slab_starts.tolist(), meta.seqused_k.tolist()
        out = torch.empty_like(q)
        for b in range(num_seqs):
            if cu[b] == cu[b + 1]:
                continue  # an empty span (a padded bin's padding sequence)
            q_b = q[cu[b]:cu[b + 1]]  # [Lq, H, D]
            if meta.is_prefill_from_zero:
                k_b, v_b = k[cu[b]:cu[b + 1]], v[cu[b]:cu[b + 1]]  # [Lq, Hkv, D]
            else:
                self._check_span(meta, cu[b], cu[b + 1], used[b])
                span = slice(starts[b], starts[b] + used[b])
                k_b, v_b = tape_rows(k_tape, span, q.dtype), tape_rows(v_tape, span, q.dtype)  # [Lk, Hkv, D]
            len_q, len_k = q_b.shape[0], k_b.shape[0]
            rows = torch.arange(len_q, device=q.device)[:, None]
            mask = torch.arange(len_k, device=q.device)[None, :] <= rows + (len_k - len_q)  # [Lq, Lk]
            o = F.scaled_dot_product_attention(
                q_b.transpose(0, 1)[None], k_b.transpose(0, 1)[None], v_b.transpose(0, 1)[None],
                attn_mask=mask, scale=scale, enable_gqa=True)  # [1, H, Lq, D]
            out[cu[b]:cu[b + 1]] = o[0].transpose(0, 1)
        return out

    @staticmethod
    def _check_span(meta, lo: int, hi: int, used: int) -> None:
        if hi - lo > used:
            raise ValueError(f"query span of {hi - lo} tokens exceeds the {used} KV rows it may see")

    @staticmethod
    def _decode(q, k_tape, v_tape, meta, scale):
        # One query per sequence: gather every slab padded to max_seqlen_k and attend in one batch.
        cols = torch.arange(meta.max_seqlen_k, device=q.device)  # [K]
        rows = (meta.slab_starts.long()[:, None] + cols).clamp_(max=k_tape.shape[0] - 1)  # [B, K]
        mask = (cols[None, :] < meta.seqused_k[:, None])[:, None, None, :]  # [B, 1, 1, K]
        k_g = tape_rows(k_tape, rows, q.dtype).transpose(1, 2)  # [B, Hkv, K, D]
        v_g = tape_rows(v_tape, rows, q.dtype).transpose(1, 2)
        o = F.scaled_dot_product_attention(q[:, :, None, :], k_g, v_g, attn_mask=mask,
                                           scale=scale, enable_gqa=True)  # [B, H, 1, D]
        return o[:, :, 0, :]


def tape_rows(tape, rows, dtype: torch.dtype) -> torch.Tensor:
    """Rows of a KV tape as values [..., Hkv, D]: a view of a tape in the model dtype, FP8 ones dequantised."""
    return tape.dequantized(rows, dtype) if isinstance(tape, Fp8Tape) else tape[rows]


class TorchFa2Backend(AttentionBackend):
    """PyTorch's built-in FlashAttention-2 (CUDA), through its aten op: from zero, and with seqused_k on the tape.

    Not `torch.nn.attention.varlen.varlen_attn`, the same kernel behind a custom op: its first call
    imports torch's compiler stack (torch 2.11: 1.7 s of the warm start's first engine step on an
    H200), and each call pays the custom op's Python wrappers."""

    name = "torch_fa2"

    def attend(self, q, k, v, k_tape, v_tape, meta, scale):
        if meta.is_prefill_from_zero:
            cu = meta.cu_seqlens_q
            return _fa2(q, k, v, cu, cu, meta.max_seqlen_q, meta.max_seqlen_q, None, scale)
        return tape_attention(q, k_tape, v_tape, meta, scale)


def tape_cu_seqlens_k(slab_starts: torch.Tensor, tape_rows: int) -> torch.Tensor:
    """int32 [B+1]: slab_starts [B] followed by tape_rows; one device kernel, no host->device copy."""
    return F.pad(slab_starts.to(torch.int32), (0, 1), value=tape_rows)


# Decode steps (one query per sequence) on CUDA go through the Triton kernel of
# worker.model.decode_attention when the head size allows; "fa2" keeps FlashAttention-2 (benchmarks).
DECODE_KERNEL = "triton"


def tape_attention(q, k_tape, v_tape, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """FA2 over per-sequence slabs of the tape: cu_seq_k = slab starts then the tape length, seqused_k = fill
    (an FP8 tape: `tape_prefill`'s kernel, with the same contract). Decode rows (one query per sequence)
    go through the decode kernel when it serves this head size (always for an FP8 tape); in a mixed
    step the prefill part and the decode rows each get their own kernel."""
    cu_k = meta.cu_seqlens_k
    if cu_k is None:
        cu_k = tape_cu_seqlens_k(meta.slab_starts, k_tape.shape[0])  # [B+1]
    fp8 = isinstance(k_tape, Fp8Tape)  # FA2 reads no FP8: Triton kernels over the tape instead
    decode_kernel = fp8 or _triton_decode_ok(q)
    if decode_kernel and meta.max_seqlen_q == 1 and q.shape[0] == meta.num_seqs:
        return _decode_kernel(q, k_tape, v_tape, meta.slab_starts, meta.seqused_k, scale,
                              meta.head_starts, meta.head_lens)
    rows = meta.num_decode_rows if decode_kernel else 0
    if not rows:
        if fp8:
            return _tape_prefill(q, k_tape, v_tape, meta.cu_seqlens_q, meta.slab_starts, meta.seqused_k,
                                 meta.max_seqlen_q, scale)
        return _fa2(q, k_tape, v_tape, meta.cu_seqlens_q, cu_k, meta.max_seqlen_q, meta.max_seqlen_k,
                         meta.seqused_k, scale)
    # FA2 gives every sequence of a pass as many query blocks as the longest span needs: decode rows
    # beside a bin of long prompts cost it ~4x the decode kernel (SmolLM2-135M shape, 1,500 rows).
    seqs, tokens = meta.num_seqs - rows, q.shape[0] - rows
    if fp8:
        prefill = _tape_prefill(q[:tokens], k_tape, v_tape, meta.cu_seqlens_q[:seqs + 1], meta.slab_starts[:seqs],
                                meta.seqused_k[:seqs], meta.max_seqlen_q, scale)
    else:
        prefill = _fa2(q[:tokens], k_tape, v_tape, meta.cu_seqlens_q[:seqs + 1],
                       torch.cat([cu_k[:seqs], cu_k[-1:]]), meta.max_seqlen_q, meta.max_seqlen_k,
                       meta.seqused_k[:seqs], scale)
    decode = _decode_kernel(q[tokens:], k_tape, v_tape, meta.slab_starts[seqs:], meta.seqused_k[seqs:], scale)
    return torch.cat([prefill, decode])


def _fa2(q, k, v, cu_q, cu_k, max_q: int, max_k: int, seqused_k, scale: float) -> torch.Tensor:
    """FA2's causal varlen kernel (aten op); seqused_k [B] limits each sequence's keys (None: all of cu_k's span)."""
    out = torch.ops.aten._flash_attention_forward(
        q, k, v, cu_q, cu_k, max_q, max_k, 0.0, True, False, scale=scale, seqused_k=seqused_k)
    return out[0]  # [T, H, D]


def _decode_kernel(q, k_tape, v_tape, slab_starts, seqused_k, scale: float, head_starts=None,
                   head_lens=None) -> torch.Tensor:
    from worker.model.decode_attention import decode_attention

    return decode_attention(q, k_tape, v_tape, slab_starts, seqused_k, scale, head_starts, head_lens)


def _tape_prefill(q, k_tape, v_tape, cu_seqlens_q, slab_starts, seqused_k, max_seqlen_q: int, scale: float):
    from worker.model.tape_prefill import tape_prefill_attention

    return tape_prefill_attention(q, k_tape, v_tape, cu_seqlens_q, slab_starts, seqused_k, max_seqlen_q, scale)


_HAS_TRITON = importlib.util.find_spec("triton") is not None


def _triton_decode_ok(q: torch.Tensor) -> bool:
    return DECODE_KERNEL == "triton" and _HAS_TRITON and q.is_cuda and q.shape[-1] in (32, 64, 128, 256)


class FlashAttnBackend(AttentionBackend):
    """The flash_attn package's varlen kernel from zero; the tape path uses torch's FA2 op with seqused_k."""

    name = "flash_attn"

    def __init__(self) -> None:
        from flash_attn import flash_attn_varlen_func

        self._varlen = flash_attn_varlen_func

    def attend(self, q, k, v, k_tape, v_tape, meta, scale):
        if meta.is_prefill_from_zero:
            cu = meta.cu_seqlens_q
            return self._varlen(q, k, v, cu, cu, meta.max_seqlen_q, meta.max_seqlen_q,
                                softmax_scale=scale, causal=True)
        return tape_attention(q, k_tape, v_tape, meta, scale)


def _torch_fa2_available(device: torch.device) -> bool:
    if device.type != "cuda" or not hasattr(torch.ops.aten, "_flash_attention_forward"):
        return False
    return torch.cuda.get_device_capability(device) >= (8, 0)


def select_backend(device, override: str | None = None) -> AttentionBackend:
    """The attention backend for `device`: `override` when given (validated), else the fastest available. Logged."""
    device = torch.device(device)
    if override is not None:
        if override not in BACKEND_NAMES:
            raise ValueError(f"unknown attention backend {override!r}; choose one of {', '.join(BACKEND_NAMES)}")
        if override != "sdpa" and device.type != "cuda":
            raise ValueError(f"attention backend {override!r} needs a CUDA device, not {device}")
        if override == "flash_attn" and importlib.util.find_spec("flash_attn") is None:
            raise ValueError("attention backend 'flash_attn' needs the flash-attn package "
                             "(pip install 'telesum[flash]' on a CUDA host)")
        if override == "torch_fa2" and not _torch_fa2_available(device):
            raise ValueError(f"attention backend 'torch_fa2' needs an sm80+ GPU and a torch with FA2; {device} has not")
        name, reason = override, "configured"
    elif device.type == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        name, reason = "flash_attn", "flash-attn package installed"
    elif _torch_fa2_available(device):
        name, reason = "torch_fa2", "PyTorch's built-in FlashAttention-2"
    else:
        name, reason = "sdpa", f"exact per-sequence SDPA on {device.type}"
    backend = {"flash_attn": FlashAttnBackend, "torch_fa2": TorchFa2Backend, "sdpa": SdpaBackend}[name]()
    log.info("attention backend: %s (%s)", name, reason)
    return backend
