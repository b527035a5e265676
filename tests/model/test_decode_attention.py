"""The Triton decode-attention kernel, run by Triton's interpreter on CPU, against the exact SDPA path."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")

# The interpreter is chosen when the kernel module is imported, so the check runs in its own process.
_CHECK = textwrap.dedent("""
    import torch
    from worker.model.attention import AttentionMetadata, SdpaBackend
    from worker.model.decode_attention import decode_attention

    torch.manual_seed(0)
    for heads, kv_heads, dim in ((9, 3, 64), (28, 4, 128), (4, 4, 32)):
        k, v = torch.randn(700, kv_heads, dim), torch.randn(700, kv_heads, dim)
        starts = torch.tensor([0, 200, 450, 600], dtype=torch.int32)
        used = torch.tensor([150, 1, 130, 70], dtype=torch.int32)   # one slab of a single row
        q = torch.randn(4, heads, dim)
        out = decode_attention(q, k, v, starts, used, dim ** -0.5)
        meta = AttentionMetadata(cu_seqlens_q=torch.arange(5, dtype=torch.int32), max_seqlen_q=1,
                                 slab_starts=starts, seqused_k=used, max_seqlen_k=int(used.max()),
                                 slot_mapping=torch.zeros(4, dtype=torch.long), is_prefill_from_zero=False)
        ref = SdpaBackend()._decode(q, k, v, meta, dim ** -0.5)
        err = float((out - ref).norm() / ref.norm())
        print(heads, kv_heads, dim, err)
        assert err < 1e-5, (heads, kv_heads, dim, err)
""")


def test_decode_kernel_matches_exact_attention_for_gqa_and_mha_shapes():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", _CHECK], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(done.stdout.strip().splitlines()) == 3


# Shared heads: sequences 0 and 2 read their first 96 keys from one copy at rows 600.. (a cached head);
# with the copy equal to their slabs' first rows the result is the slab-only one, and a copy that
# differs changes exactly the sequences that read it.
_SHARED_HEAD_CHECK = textwrap.dedent("""
    import torch
    from worker.model.decode_attention import decode_attention

    torch.manual_seed(1)
    kv_heads, dim = 3, 64
    k, v = torch.randn(800, kv_heads, dim), torch.randn(800, kv_heads, dim)
    starts = torch.tensor([0, 200, 400], dtype=torch.int32)
    used = torch.tensor([150, 120, 97], dtype=torch.int32)
    for rows in (slice(0, 96), slice(400, 496)):  # both sequences' slabs hold the same head
        k[rows], v[rows] = k[600:696], v[600:696]
    q = torch.randn(3, 9, dim)
    plain = decode_attention(q, k, v, starts, used, dim ** -0.5)
    head_starts = torch.tensor([600, 0, 600], dtype=torch.int32)
    head_lens = torch.tensor([96, 0, 96], dtype=torch.int32)
    shared = decode_attention(q, k, v, starts, used, dim ** -0.5, head_starts, head_lens)
    assert torch.allclose(shared, plain, atol=1e-6), float((shared - plain).abs().max())
    k[600:696] += 1.0  # the shared copy no longer matches the slabs
    moved = decode_attention(q, k, v, starts, used, dim ** -0.5, head_starts, head_lens)
    diff = (moved - plain).abs().amax(dim=(1, 2))
    assert diff[0] > 1e-3 and diff[2] > 1e-3 and diff[1] == 0, diff
    print("ok")
""")


def test_decode_kernel_reads_a_shared_head_in_place_of_the_slab_rows():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", _SHARED_HEAD_CHECK], env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "ok"
