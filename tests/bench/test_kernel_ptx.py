"""bench/kernel_ptx.py: the decode kernel compiled for an H100 on a machine without a GPU."""

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_kernel_ptx_shows_how_each_tape_reaches_the_tensor_cores(tmp_path):
    spec = importlib.util.spec_from_file_location("kernel_ptx", BENCH / "kernel_ptx.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    res = bench.main(["--out", str(tmp_path), "--shape", "smollm2"])
    bf16, fp8 = (res["tapes"][t]["instructions"] for t in ("bf16", "fp8"))
    for found in (bf16, fp8):  # both tapes' dots on the tensor cores, in bf16
        assert any(name.startswith("mma.sync") and name.endswith("bf16.bf16.f32") for name in found)
    assert not any("e4m3" in name for name in bf16)
    assert any("e4m3" in name for name in fp8)  # the codes converted on the way
    assert (tmp_path / "decode_fp8.ptx").read_text().count("mma.sync") == sum(
        n for name, n in fp8.items() if name.startswith("mma.sync"))
    assert json.loads((tmp_path / "kernel_ptx.json").read_text())["arch"] == 90
