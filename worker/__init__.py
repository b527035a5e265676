"""telesum: summarise streaming telecom telemetry with an LLM on a GPU."""

from worker.settings.allocator import default_to_growable_segments
from worker.settings.triton_defaults import default_to_fp_fusion

__version__ = "0.1.0"

default_to_growable_segments()  # before torch first touches the GPU: worker/settings/allocator.py
default_to_fp_fusion()  # before any Triton kernel compiles: worker/settings/triton_defaults.py
