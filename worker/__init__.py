"""telesum: summarise streaming telecom telemetry with an LLM on a GPU."""

from worker.settings.allocator import default_to_growable_segments

__version__ = "0.1.0"

default_to_growable_segments()  # before torch first touches the GPU: worker/settings/allocator.py
