"""A record's Python work off the GPU loop's path: before the engine its facts, prompt, chat template
and token ids (`submit`); after it, its summary's text and the check of that text against the facts
(`summary_prose`).

One thread prepares ~550 records/s, and in the serving process it competes for the GIL with the GPU
loop; so does the prose (~0.25 ms a record, most of the main thread's share of the GIL at capacity).
A pool of worker processes (each with its own copy of the tokenizer) does both in parallel instead;
`workers=0` does them in the calling thread (CPU runs and tests).

A task sent to the pool costs the serving process about 0.2 ms of Python whatever it carries (its
future, the executor's threads, the pipes), as much as assembling a summary. So records go in
batches: one is sent at once while a process is free, and while every process is busy the records
that arrive wait and go together, up to MAX_BATCH, when one is free again. A lone record is not
delayed; a stream faster than one record per task's overhead shares it.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import pickle
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from worker.facts import extract_facts
from worker.messages import Facts, NarrativeCheck, TelemetryRecord
from worker.prompts import build_messages
from worker.prompts.opening import split_opening
from worker.summarizer.summary_assembly import Generated, summary_prose


@dataclass(frozen=True)
class Prepared:
    facts: Facts
    prompt: np.ndarray  # int32 [prompt tokens]


def tokenize_messages(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """Chat messages -> prompt token ids (chat template with the generation prompt). A last
    `assistant` message is the answer's opening: rendered after the generation prompt, unclosed,
    for the model to continue (`worker.prompts.opening`)."""
    messages, opening = split_opening(messages)
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) + opening
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


_SENTINEL = " \x00telesum-content\x00 "  # leading/trailing spaces: a template that trims content shows


class HeadTokenizer:
    """Prompt token ids where every message but the last is a fixed head (the system prompt and the
    worked examples of a record kind): each distinct head is rendered and tokenised once, and a record
    costs only its last message's text. The split is at the chat template's message boundary, which
    starts with a special token, so head ids + tail ids == the ids of the whole prompt (tested). A
    template that changes message contents (trims them) or puts no special token at the boundary
    falls back to rendering the whole prompt. Not thread-safe: one per thread or process."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self._heads: dict[tuple, tuple[list[int], str, str] | None] = {}

    def __call__(self, messages: list[dict[str, str]]) -> list[int]:
        turns, opening = split_opening(messages)  # the opening belongs to the record's tail
        head, last = turns[:-1], turns[-1]
        key = tuple((m["role"], m["content"]) for m in head) + (last["role"],)
        if key not in self._heads:
            self._heads[key] = self._split(head, last["role"])
        split = self._heads[key]
        if split is None:
            return tokenize_messages(self.tokenizer, messages)
        head_ids, before, after = split
        tail = self.tokenizer(before + last["content"] + after + opening, add_special_tokens=False)["input_ids"]
        return head_ids + list(tail)

    def _split(self, head: list[dict[str, str]], role: str) -> tuple[list[int], str, str] | None:
        tok = self.tokenizer
        if not head:
            return None
        full = tok.apply_chat_template(head + [{"role": role, "content": _SENTINEL}], add_generation_prompt=True,
                                       tokenize=False)
        head_text = tok.apply_chat_template(head, add_generation_prompt=False, tokenize=False)
        if not full.startswith(head_text) or full.count(_SENTINEL) != 1:
            return None
        before, after = full[len(head_text):].split(_SENTINEL)
        specials = set(tok.all_special_tokens) | {str(t) for t in tok.added_tokens_decoder.values() if t.special}
        if not any(before.startswith(t) for t in specials if t):
            return None
        return list(tok(head_text, add_special_tokens=False)["input_ids"]), before, after


def prepare(record: TelemetryRecord, tokenizer, head_tokenizer: HeadTokenizer | None = None) -> Prepared:
    """Facts and prompt token ids of one record (through `head_tokenizer` when given)."""
    facts = extract_facts(record)
    messages = build_messages(record, facts)
    ids = head_tokenizer(messages) if head_tokenizer is not None else tokenize_messages(tokenizer, messages)
    return Prepared(facts, np.asarray(ids, dtype=np.int32))


# Set in each pool process by _init_worker.
_worker_heads: HeadTokenizer | None = None
_all_started: threading.Barrier | None = None  # a multiprocessing Barrier of the pool's processes

_START_WAIT_S = 600  # a process that has not started by then is not coming (its pool fails)
PREPARED_WHILE_STARTING = 256  # ~0.4 s of one core (1.4 ms a record): a few first bins
MAX_BATCH = 32  # records in one pool task: ~45 ms of a process's work, so the others still share a burst


def _init_worker(tokenizer_file: str, all_started) -> None:
    global _worker_heads, _all_started
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one process, one core
    _all_started = all_started
    try:
        pickled = Path(tokenizer_file).read_bytes()
    except FileNotFoundError:  # the pool was closed before this process came up: it gets no work
        return
    _worker_heads = HeadTokenizer(pickle.loads(pickled))


def _prepare_task(heads: HeadTokenizer, record: TelemetryRecord) -> Prepared:
    return prepare(record, heads.tokenizer, heads)


def _prose_task(heads: HeadTokenizer, record: TelemetryRecord, facts: Facts,
                generated: Generated) -> tuple[str, NarrativeCheck]:
    return summary_prose(record, facts, generated, lambda ids: heads.tokenizer.decode(ids, skip_special_tokens=True))


# A pool task's items: (_prepare_task or _prose_task, its arguments after the tokenizer)
Task = tuple[Callable[..., object], tuple]


def _run_batch_in_worker(tasks: list[Task]) -> list[object]:
    """Each task's result, or the exception that stopped it (one bad record fails only itself)."""
    out: list[object] = []
    for fn, args in tasks:
        try:
            out.append(fn(_worker_heads, *args))
        except Exception as exc:  # noqa: BLE001 - reported through that task's future
            out.append(exc)
    return out


def _started() -> int:
    """This process's pid once every process of the pool has started: each runs exactly one.
    Raises BrokenBarrierError once the pool is closed."""
    _all_started.wait(_START_WAIT_S)
    return os.getpid()


def default_workers(device_type: str) -> int:
    """Pool size: on a GPU host, the cores the GPU loop and the consumer leave (capped at 8); none on CPU,
    where the model itself is the bottleneck."""
    if device_type != "cuda":
        return 0
    return max(0, min(8, (os.cpu_count() or 1) - 3))


class Preprocessor:
    """`submit(record)` -> Future of `Prepared`; `summary_prose([(record, facts, generated), ...])` ->
    Futures of (text, NarrativeCheck). Thread-safe.

    The pool's processes are spawned by the constructor, not at the first record: each takes seconds
    to import and unpickle its tokenizer, which the start-up sequence overlaps with loading the model
    and the engine's warm-up. The constructor itself returns in milliseconds (tested). Until every
    process has started, the first records are prepared on the caller's thread."""

    def __init__(self, tokenizer, workers: int = 0) -> None:
        if workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        self.tokenizer = tokenizer
        self.workers = workers
        self._heads = HeadTokenizer(tokenizer)
        self._heads_lock = threading.Lock()  # protects _heads (in-thread preparation) and the start-up count
        self._pool = None
        self._tokenizer_dir: tempfile.TemporaryDirectory | None = None
        self.started: list[concurrent.futures.Future] = []  # of each worker's pid, once all are up
        self.prepared_while_starting = 0  # records prepared on the caller's thread before the pool was up
        self._answering = False  # every process has started
        self._batch_lock = threading.Lock()  # protects _waiting, _tasks and _closed
        self._waiting: list[tuple[Task, concurrent.futures.Future]] = []  # not yet sent
        self._tasks = 0  # batches sent, not yet answered
        self._closed = False
        self.batches_sent = 0  # pool tasks so far (items / batches: how well the overhead is shared)
        if workers:
            # The processes read the tokenizer from a file. Given as an initarg it is pickled into each
            # spawn's pipe (megabytes), and the write waits until that child has imported transformers
            # to read it: the processes started one after another, seconds each on the caller's thread
            # on an H200 host (bench/results/gpu/summarize_pyspy_before_pool_fix.txt).
            self._tokenizer_dir = tempfile.TemporaryDirectory(prefix="telesum-preprocess-")
            tokenizer_file = Path(self._tokenizer_dir.name) / "tokenizer.pickle"
            tokenizer_file.write_bytes(pickle.dumps(tokenizer))
            # spawn, not fork: the serving process runs native and CUDA threads that a fork would copy mid-state
            context = multiprocessing.get_context("spawn")
            self._all_started = context.Barrier(workers)
            self._pool = concurrent.futures.ProcessPoolExecutor(
                workers, mp_context=context, initializer=_init_worker,
                initargs=(str(tokenizer_file), self._all_started))
            # The executor spawns a process per task while none is idle, and these tasks wait for
            # every process: all spawn now, and each answers one of them.
            self.started = [self._pool.submit(_started) for _ in range(workers)]

    def submit(self, record: TelemetryRecord) -> concurrent.futures.Future:
        """Future of the record's `Prepared` (or of the exception that stopped it)."""
        if self._pool is not None and not self._prepare_here_while_starting():
            return self._queue([(_prepare_task, (record,))])[0]
        with self._heads_lock:
            return _done_here(lambda: _prepare_task(self._heads, record))

    def summary_prose(self, finished: list[tuple[TelemetryRecord, Facts, Generated]]) -> list[concurrent.futures.Future]:
        """Futures of finished records' (summary text, NarrativeCheck) (`summary_assembly.summary_prose`),
        written in the pool's processes once every process is up (in batches of up to MAX_BATCH
        spread over the free ones), else here."""
        if self._pool is not None and self._answering:
            return self._queue([(_prose_task, item) for item in finished])
        return [_done_here(lambda item=item: _prose_task(self._heads, *item)) for item in finished]

    def _queue(self, tasks: list[Task]) -> list[concurrent.futures.Future]:
        """Futures of `tasks`, queued together and sent in batches while processes are free."""
        futures = [concurrent.futures.Future() for _ in tasks]
        with self._batch_lock:
            if self._closed:
                raise RuntimeError("the preprocessor is closed")
            self._waiting.extend(zip(tasks, futures))
        while self._send():
            pass
        return futures

    def _send(self) -> bool:
        """Send what waits as one task while a process is free (the call queue may hold one more);
        True when a task was sent."""
        with self._batch_lock:
            if not self._waiting or self._closed or self._tasks > self.workers:
                return False
            batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
            self._tasks += 1
            self.batches_sent += 1
        try:
            task = self._pool.submit(_run_batch_in_worker, [item for item, _ in batch])
        except BaseException as exc:  # noqa: BLE001 - a broken or shut-down pool: these records fail
            with self._batch_lock:
                self._tasks -= 1
            for _, future in batch:
                future.set_exception(exc)
            return False
        task.add_done_callback(lambda t: self._answered(t, batch))
        return True

    def _answered(self, task: concurrent.futures.Future, batch: list) -> None:
        """A batch's results onto its items' futures (on the executor's thread), then the next batch."""
        with self._batch_lock:
            self._tasks -= 1
        if task.cancelled():
            for _, future in batch:
                future.cancel()
        elif task.exception() is not None:  # the pool broke (a process died): every item of the batch fails
            for _, future in batch:
                future.set_exception(task.exception())
        else:
            for (_, future), result in zip(batch, task.result()):
                if isinstance(result, Exception):
                    future.set_exception(result)
                else:
                    future.set_result(result)
        self._send()

    def _prepare_here_while_starting(self) -> bool:
        """Whether the caller's thread prepares this record: the pool's processes still start (seconds
        of imports), and fewer than PREPARED_WHILE_STARTING records were prepared so. The first bins
        then need not wait for the pool, and a backlog at start costs the caller's thread a bounded time."""
        if self._answering:  # once up, for good: every later record skips the lock
            return False
        with self._heads_lock:
            self._answering = all(f.done() for f in self.started)  # a failed start: the pool reports it
            if self._answering or self.prepared_while_starting >= PREPARED_WHILE_STARTING:
                return False
            self.prepared_while_starting += 1
            return True

    def close(self) -> None:
        with self._batch_lock:
            self._closed = True
            waiting, self._waiting = self._waiting, []
        for _, future in waiting:  # never sent: cancelled, as the pool cancels what it has not started
            future.cancel()
        if self._pool is not None:
            # Processes already up stop waiting for the others (which, the tokenizer file gone, get
            # no work): else they would hold the interpreter's exit for _START_WAIT_S.
            self._all_started.abort()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        if self._tokenizer_dir is not None:
            self._tokenizer_dir.cleanup()
            self._tokenizer_dir = None


def _done_here(work: Callable[[], object]) -> concurrent.futures.Future:
    """A future of `work()` run now, on this thread (its exception, if it raised)."""
    future: concurrent.futures.Future = concurrent.futures.Future()
    try:
        future.set_result(work())
    except Exception as exc:  # noqa: BLE001 - the item's own failure, reported through its future
        future.set_exception(exc)
    return future
