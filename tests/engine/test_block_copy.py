"""Block copies across every KV tape: the torch ops on CPU, and the Triton kernel run by Triton's
interpreter on CPU, each against a copy made row by row."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from worker.engine.block_copy import BlockCopier

# Checks that the copier moved exactly these blocks in every tape, rows elsewhere untouched.
_CHECK = textwrap.dedent("""
    import torch
    from worker.engine.block_copy import BlockCopier

    def check(use_kernel, dtype, kv_heads, dim, block_rows, src, dst):
        gen = torch.Generator().manual_seed(len(src) + dim)
        tapes = [torch.randn(12 * block_rows, kv_heads, dim, generator=gen).to(dtype) for _ in range(6)]
        expected = [t.clone() for t in tapes]
        for t in expected:
            for s, d in zip(src, dst):
                t[d:d + block_rows] = t[s:s + block_rows].clone()
        copier = BlockCopier(tapes, block_rows)
        if use_kernel:  # the interpreter runs on CPU tensors
            copier.use_kernel = True
            copier._table = torch.tensor([t.data_ptr() for t in tapes], dtype=torch.int64)
        copier.copy(src, dst)
        for layer, (t, e) in enumerate(zip(tapes, expected)):
            assert torch.equal(t.view(torch.uint8), e.view(torch.uint8)), (use_kernel, dtype, layer)

    import sys
    use_kernel = sys.argv[1] == "kernel"
    # SmolLM2's rows (3 x 64) in 32-row blocks, Qwen2.5-7B's (4 x 128), a span not a multiple of the
    # program's chunk, 4-byte elements; heads from the cache region (rows 8+ blocks) to slabs and back.
    check(use_kernel, torch.bfloat16, 3, 64, 32, [8 * 32, 9 * 32, 8 * 32], [0, 32, 3 * 32])
    check(use_kernel, torch.bfloat16, 4, 128, 32, [10 * 32], [2 * 32])
    check(use_kernel, torch.float16, 3, 5, 7, [0, 7, 70], [21, 28, 63])
    check(use_kernel, torch.float32, 2, 8, 4, [4, 40], [0, 12])
    print("ok")
""")


def _run(mode: str) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", _CHECK, mode], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr


def test_torch_ops_copy_exactly_the_blocks_of_every_tape():
    _run("torch")


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_kernel_copies_exactly_the_blocks_of_every_tape():
    _run("kernel")


def test_copier_refuses_tapes_of_different_shapes():
    with pytest.raises(ValueError, match="one shape"):
        BlockCopier([torch.zeros(8, 2, 4), torch.zeros(9, 2, 4)], 4)


def test_copier_uses_the_kernel_only_on_cuda():
    assert not BlockCopier([torch.zeros(8, 2, 4)], 4).use_kernel
