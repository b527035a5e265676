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
