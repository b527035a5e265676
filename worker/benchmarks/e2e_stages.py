"""Stage timers for `telesum bench e2e`: wrap the worker's and the engine's functions in place.

Each timed call adds its *exclusive* wall time (minus the timed calls nested inside it) to a
stage named `<thread>:<stage>`, where the thread is `engine` for the GPU-loop thread and `worker`
for the Kafka loop thread. Exclusive times of one thread sum to at most that thread's wall time,
so the rest is that thread's own code between the timed calls (or idling in an untimed wait).
"""

from __future__ import annotations

import functools
import threading
import time
from collections import defaultdict
from typing import Any

ENGINE_THREAD = "telesum-gpu-loop"


class StageTimer:
    """Accumulates exclusive seconds and call counts per stage. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._restore: list[tuple[Any, str, Any, bool]] = []
        self.ack_latencies: list[float] = []   # producer send -> broker acknowledgement, seconds
        self._window = (float("-inf"), float("inf"))

    def open_window(self, start: float) -> None:
        """Forget everything measured so far; count only time after `start` (perf_counter)."""
        with self._lock:
            self.seconds.clear()
            self.calls.clear()
            self.ack_latencies.clear()
            self._window = (start, float("inf"))

    def close_window(self, end: float) -> None:
        """Count no time after `end`: calls still running then, or started later, are cut off."""
        with self._lock:
            self._window = (self._window[0], end)

    def _clip(self, start: float, end: float) -> float:
        lo, hi = self._window
        return max(0.0, min(end, hi) - max(start, lo))

    def wrap(self, stage: str, fn):
        """`fn` with its exclusive wall time added to `<thread>:<stage>` on every call."""

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            stack = self._local.__dict__.setdefault("stack", [])
            stack.append(0.0)  # time spent in timed calls nested inside this one
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = self._clip(start, time.perf_counter())  # the part inside the window
                nested = stack.pop()
                if stack:
                    stack[-1] += elapsed
                if elapsed > 0:
                    thread = "engine" if threading.current_thread().name == ENGINE_THREAD else "worker"
                    with self._lock:
                        self.seconds[f"{thread}:{stage}"] += elapsed - nested
                        self.calls[f"{thread}:{stage}"] += 1

        return timed

    def patch(self, owner: Any, attr: str, stage: str) -> None:
        """Replace `owner.attr` (a module, class or instance attribute) by its timed wrapper."""
        had_own = attr in getattr(owner, "__dict__", {})
        original = getattr(owner, attr)
        self._restore.append((owner, attr, owner.__dict__.get(attr) if had_own else None, had_own))
        setattr(owner, attr, self.wrap(stage, original))

    def restore(self) -> None:
        """Undo every patch, newest first."""
        for owner, attr, original, had_own in reversed(self._restore):
            if had_own:
                setattr(owner, attr, original)
            else:
                delattr(owner, attr)
        self._restore.clear()


class TimedTokenizer:
    """A tokenizer proxy timing the chat template, encoding and decoding; everything else passes through."""

    def __init__(self, tokenizer, timer: StageTimer) -> None:
        self._tokenizer = tokenizer
        self._encode = timer.wrap("tokenise", tokenizer.__call__)
        self.apply_chat_template = timer.wrap("prompt render: chat template", tokenizer.apply_chat_template)
        self.decode = timer.wrap("detokenise", tokenizer.decode)

    def __call__(self, *args, **kwargs):
        return self._encode(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._tokenizer, name)

    def __len__(self) -> int:
        return len(self._tokenizer)


def instrument(timer: StageTimer, summarizer, worker) -> None:
    """Time the stages of one in-process worker and its summarizer (call before `worker.run`)."""
    import worker.kafka.publish as publish_mod
    import worker.summarizer.preprocess as preprocess_mod
    from worker.engine.sampling import SamplingBatch

    # Kafka loop thread: the intake's decoder, and the names the publish module imported.
    timer.patch(worker.intake, "decode_message", "decode + validate")
    timer.patch(publish_mod, "summary_output", "output encode")
    timer.patch(publish_mod, "dead_letter_output", "output encode")
    timer.patch(worker.consumer, "poll", "consumer poll (incl. wait)")
    timer.patch(worker.consumer, "commit", "commit")
    _time_publish(timer, worker.producer)
    # Record preparation: in the calling thread here (no pool), so every stage is seen.
    timer.patch(preprocess_mod, "extract_facts", "fact extraction")
    timer.patch(preprocess_mod, "build_messages", "prompt render: messages")
    summarizer.tokenizer = TimedTokenizer(summarizer.tokenizer, timer)
    summarizer.preprocessor.close()  # its processes, spawned when it was made
    summarizer.preprocessor = preprocess_mod.Preprocessor(summarizer.tokenizer, workers=0)
    timer.patch(summarizer.engine, "add", "engine.add (dispatcher submit)")
    timer.patch(summarizer, "poll", "summarizer poll (incl. wait)")
    # GPU-loop thread.
    engine = summarizer.engine
    timer.patch(engine, "_take_work", "take work (incl. bin wait)")
    timer.patch(engine.scheduler, "schedule", "schedule")
    timer.patch(engine.scheduler, "postprocess", "postprocess")
    timer.patch(engine.runner, "prefill_bin", "prefill (model)")
    timer.patch(engine.runner, "prefill_chunk", "prefill chunk (model)")
    timer.patch(engine.runner, "decode", "decode step (model)")
    timer.patch(SamplingBatch, "sample", "sampling")


def _time_publish(timer: StageTimer, producer) -> None:
    """Time the send call and, separately, each send's wait for the broker's acknowledgement."""
    send = timer.wrap("publish (send call)", producer.send)

    def timed_send(topic, key, value, headers, on_done):
        sent = time.perf_counter()

        def acked(error):
            with timer._lock:
                timer.ack_latencies.append(time.perf_counter() - sent)
            on_done(error)

        send(topic, key, value, headers, acked)

    timer._restore.append((producer, "send", None, False))
    producer.send = timed_send
