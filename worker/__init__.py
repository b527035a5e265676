"""telesum: summarise streaming telecom telemetry with an LLM on a GPU."""

import os

__version__ = "0.1.0"

# Growable segments for torch's CUDA allocator, set before torch first touches the GPU (the package
# is imported before any model is loaded). Bins of every size in fixed segments left GiBs reserved
# but unusable: a bf16 Qwen2.5-7B on an H100 split 6-11 bins a run for want of 2-5 GiB beside 4-7 GiB
# reserved and unused, and none with this (bench/NOTES.md, 2026-12-07 fifth). The operator's own
# setting wins; the probe's cache key records the one in force.
if not (os.environ.get("PYTORCH_ALLOC_CONF") or os.environ.get("PYTORCH_CUDA_ALLOC_CONF")):
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
