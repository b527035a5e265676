"""telesum: summarise streaming telecom telemetry with an LLM on a GPU."""

__version__ = "0.1.0"
