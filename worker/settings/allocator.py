"""torch's CUDA allocator settings: growable segments unless the operator chose others.

Bins of every size in torch's fixed segments left GiBs reserved but unusable: a bf16 Qwen2.5-7B on an
H100 split 6-11 bins a run for want of 2-5 GiB beside 4-7 GiB reserved and unused, and none with
growable segments (bench/NOTES.md, 2026-12-07 fifth). The probe's cache key records the settings in
force (growable segments fit more KV rows).
"""

from __future__ import annotations

import os

VARIABLE = "PYTORCH_ALLOC_CONF"            # torch's newer name; read first
CUDA_VARIABLE = "PYTORCH_CUDA_ALLOC_CONF"
GROWABLE = "expandable_segments:True"


def allocator_settings() -> str:
    """The settings in force, as torch reads them: the newer variable's, else the older one's ("" for
    torch's defaults)."""
    return os.environ.get(VARIABLE) or os.environ.get(CUDA_VARIABLE, "")


def default_to_growable_segments() -> None:
    """Growable segments unless the operator set either variable. Must run before torch first touches
    the GPU: `worker/__init__.py` calls it, before any model is loaded."""
    if not allocator_settings():
        os.environ[CUDA_VARIABLE] = GROWABLE
