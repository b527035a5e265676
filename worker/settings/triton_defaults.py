"""Triton's floating-point contraction (a*b+c as one FMA) on for our kernels unless the operator chose.

Triton 3.9 compiles with it on by default and warns that 3.10 turns it off. Every Triton kernel in
worker/ was timed and checked against its reference with it on; an upgrade should not change their
rounding or their instruction count behind our back. `TRITON_DEFAULT_FP_FUSION=0` adopts the new
default (Triton's own variable, read when a kernel compiles).
"""

from __future__ import annotations

import os

VARIABLE = "TRITON_DEFAULT_FP_FUSION"


def default_to_fp_fusion() -> None:
    """FP fusion on unless the operator set the variable. `worker/__init__.py` calls it, before any
    kernel compiles."""
    os.environ.setdefault(VARIABLE, "1")
