"""Record preprocessing off the GPU loop's path: facts, prompt, chat template and token ids.

One thread does this at ~550 records/s, and in the serving process it competes for the GIL with the
GPU loop. A pool of worker processes (each with its own copy of the tokenizer) prepares records in
parallel instead; `workers=0` prepares in the calling thread (CPU runs and tests).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
from dataclasses import dataclass

import numpy as np

from worker.facts import extract_facts
from worker.messages import Facts, TelemetryRecord
from worker.prompts import build_messages


@dataclass(frozen=True)
class Prepared:
    facts: Facts
    prompt: np.ndarray  # int32 [prompt tokens]


def tokenize_messages(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """Chat messages -> prompt token ids (chat template with the generation prompt)."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def prepare(record: TelemetryRecord, tokenizer) -> Prepared:
    """Facts and prompt token ids of one record."""
    facts = extract_facts(record)
    ids = tokenize_messages(tokenizer, build_messages(record, facts))
    return Prepared(facts, np.asarray(ids, dtype=np.int32))


_worker_tokenizer = None  # set in each pool process by _init_worker


def _init_worker(tokenizer) -> None:
    global _worker_tokenizer
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one process, one core
    _worker_tokenizer = tokenizer


def _prepare_in_worker(record: TelemetryRecord) -> Prepared:
    return prepare(record, _worker_tokenizer)


def default_workers(device_type: str) -> int:
    """Pool size: on a GPU host, the cores the GPU loop and the consumer leave (capped at 8); none on CPU,
    where the model itself is the bottleneck."""
    if device_type != "cuda":
        return 0
    return max(0, min(8, (os.cpu_count() or 1) - 3))


class Preprocessor:
    """`submit(record)` -> Future of `Prepared`. Thread-safe."""

    def __init__(self, tokenizer, workers: int = 0) -> None:
        if workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        self.tokenizer = tokenizer
        self.workers = workers
        self._pool = None
        if workers:
            # spawn, not fork: the serving process runs native and CUDA threads that a fork would copy mid-state
            self._pool = concurrent.futures.ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker, initargs=(tokenizer,))

    def submit(self, record: TelemetryRecord) -> concurrent.futures.Future:
        if self._pool is not None:
            return self._pool.submit(_prepare_in_worker, record)
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(prepare(record, self.tokenizer))
        except Exception as exc:  # noqa: BLE001 - the record's own failure, reported through its future
            future.set_exception(exc)
        return future

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
