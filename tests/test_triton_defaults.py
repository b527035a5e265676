"""The package keeps Triton's FP fusion on (the way every kernel of ours was measured) unless the operator
chose: the decode kernel compiled for an H100 on this machine holds FMAs only when it is on."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The decode kernel's PTX for sm_90 (bench/kernel_ptx.py), compiled after the package was imported.
COMPILE = """
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("kernel_ptx", sys.argv[1])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)  # imports worker
from worker.model.decode_attention import DEFAULT_CONFIG
ptx = bench.decode_ptx(False, 3, 64, 90, DEFAULT_CONFIG)
print(os.environ.get("TRITON_DEFAULT_FP_FUSION"), ptx.count("fma.rn.f32"), ptx.count("mul.rn.f32"))
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
@pytest.mark.parametrize(("given", "fusion"), [(None, True), ("0", False)])
def test_triton_fp_fusion_stays_on_unless_the_operator_turns_it_off(tmp_path, given, fusion):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_DEFAULT_FP_FUSION"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)  # compile here, not from a cache another setting filled
    if given is not None:
        env["TRITON_DEFAULT_FP_FUSION"] = given
    out = subprocess.run([sys.executable, "-c", COMPILE,
                          str(ROOT / "bench" / "kernel_ptx.py")],
                         env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    setting, fmas, rounded_muls = out.stdout.split()
    assert "TRITON_DEFAULT_FP_FUSION is unset" not in out.stderr  # Triton's warning that 3.10 changes it
    assert setting == ("1" if given is None else given)
    if fusion:  # contracted: FMAs, no separately rounded multiplies
        assert int(fmas) > 0 and int(rounded_muls) == 0
    else:
        assert int(fmas) == 0 and int(rounded_muls) > 0
