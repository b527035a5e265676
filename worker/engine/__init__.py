"""The engine: KV arena, scheduler, sampling, model runner and the GPU step loop.

`Engine` is driven by one thread (the GPU loop) inside `worker.summarizer.summarizer.Summarizer`.
"""

from worker.engine.sequence import SamplingParams, Sequence, SequenceStatus

__all__ = ["SamplingParams", "Sequence", "SequenceStatus"]
