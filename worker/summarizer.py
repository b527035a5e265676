"""Summarizer: records in, `Summary`s out, through the dispatcher and one GPU-loop thread.

The caller's thread renders the prompt and tokenises it; the GPU loop (an `Engine`) prefills and
decodes; `poll` turns finished sequences into `Summary`s (or the exception that stopped them).
A record whose prompt exceeds the model's context is summarised hierarchically: its pieces
first, then one merge of their summaries.
"""

from __future__ import annotations

import collections
import dataclasses
import queue
import threading
import time
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field

import torch

from worker.dispatch import Backpressure
from worker.engine.engine import Engine
from worker.engine.errors import ContextTooLong, EngineClosed
from worker.engine.kv_arena import KVArena
from worker.engine.prefix_reuse import BLOCK_SIZE as PREFIX_BLOCK_SIZE
from worker.engine.prefix_reuse import PrefixReuse
from worker.engine.long_inputs import merge_prompt, plan_chunk_prompts
from worker.engine.runner import ModelRunner
from worker.engine.sequence import SamplingParams, Sequence, SequenceStatus
from worker.engine.stops import first_stop
from worker.facts.agreement import check_narrative
from worker.messages import Facts, Summary, TelemetryRecord, Timings
from worker.preprocess import Prepared, Preprocessor, default_workers, tokenize_messages
from worker.sampling_defaults import REPETITION_PENALTY, STOP_STRINGS

# A closed summarizer's thread finishes its step; joining longer than this means it is stuck.
_JOIN_POLL_S = 0.05


def default_sampling(max_new_tokens: int, temperature: float = 0.0, top_p: float = 1.0) -> SamplingParams:
    """How summaries are generated unless told otherwise: the prompts' stop strings and repetition
    penalty (what `telesum bench quality` measured), greedy by default."""
    return SamplingParams(max_new_tokens, temperature, top_p, stop=STOP_STRINGS,
                          repetition_penalty=REPETITION_PENALTY)


# Share of the GPU memory still free after the model loaded that the KV arena takes by default: the
# rest is for prefill activations of a full bin and the decode graphs' buffers.
GPU_KV_MEMORY_SHARE = 0.5


def default_kv_rows(cfg, dtype: torch.dtype, device: torch.device, *, token_budget: int,
                    max_seqs_per_bin: int, max_new_tokens: int, max_context: int) -> int:
    """KV-tape rows when none are configured: two full bins (one decoding while the next is admitted)
    and at least one full context; on a GPU at least `GPU_KV_MEMORY_SHARE` of the free memory, since
    the more sequences decode together the cheaper each step is per token."""
    rows = max(2 * (token_budget + max_seqs_per_bin * max_new_tokens), max_context)
    if device.type == "cuda":
        free_bytes, _ = torch.cuda.mem_get_info(device)
        per_row = cfg.kv_bytes_per_row(torch.empty((), dtype=dtype).element_size())
        rows = max(rows, int(GPU_KV_MEMORY_SHARE * free_bytes / per_row))
    return rows


def prefix_region_rows(kv_rows: int) -> int:
    """Rows of the KV arena kept for the prefix cache: a sixteenth, in whole blocks, from 4 blocks up to
    65,536 rows (the heads of telesum's prompts are ~350-900 tokens per record kind)."""
    rows = min(kv_rows // 16, 65536) // PREFIX_BLOCK_SIZE * PREFIX_BLOCK_SIZE
    return rows if rows >= 4 * PREFIX_BLOCK_SIZE else 0


@dataclass(eq=False)
class _Request:
    request_id: Hashable
    record: TelemetryRecord
    facts: Facts | None  # set once the record is prepared
    submitted_at: float
    hierarchical: bool = False
    pieces: list[str | None] = field(default_factory=list)   # piece summaries, in order
    prompt_tokens: int = 0
    output_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    queued_s: float | None = None
    num_chunks: int = 1
    failed: bool = False


class Summarizer:
    """Owns the dispatcher, the KV arena and the engine thread for one loaded model."""

    def __init__(self, loaded, *, token_budget: int, max_new_tokens: int,
                 kv_capacity_rows: int | None = None, max_seqs_per_bin: int = 64,
                 sampling: SamplingParams | None = None, seed: int = 0, dispatcher=None,
                 max_context: int | None = None, preprocess_workers: int | None = None,
                 max_pending_records: int = 4096, prefix_cache: bool = True) -> None:
        """preprocess_workers: processes preparing records (facts, prompt, tokens); None = a default for
        the device (see worker.preprocess). max_pending_records: records accepted but not yet handed to
        the engine, beyond which `submit` raises Backpressure. prefix_cache: keep the KV of prompt
        heads in a region at the end of the arena (`prefix_region_rows`) and reuse it."""
        self.loaded = loaded
        self.tokenizer = loaded.tokenizer
        # The prompts ask for one paragraph; the stop string ends the model's habit of adding another,
        # the repetition penalty its loops (both measured by `telesum bench quality`).
        self.params = sampling or default_sampling(max_new_tokens)
        if self.params.max_new_tokens != max_new_tokens:
            self.params = dataclasses.replace(self.params, max_new_tokens=max_new_tokens)
        cfg = loaded.config
        self.max_context = max_context or cfg.max_position_embeddings
        if self.max_context <= max_new_tokens:
            raise ValueError(f"max_new_tokens {max_new_tokens} leaves no room in a {self.max_context}-token context")
        param = next(loaded.model.parameters())
        self.device = param.device
        if kv_capacity_rows is None:
            kv_capacity_rows = default_kv_rows(cfg, param.dtype, self.device, token_budget=token_budget,
                                               max_seqs_per_bin=max_seqs_per_bin, max_new_tokens=max_new_tokens,
                                               max_context=self.max_context)
        if dispatcher is None:
            from worker.dispatch import BinDispatcher

            dispatcher = BinDispatcher(token_budget, max_seqs_per_bin=max_seqs_per_bin,
                                       pad_id=self.tokenizer.pad_token_id or 0)
        self.dispatcher = dispatcher
        self.max_seqs_per_bin = max_seqs_per_bin
        region = prefix_region_rows(kv_capacity_rows) if prefix_cache else 0
        self.arena = KVArena(cfg, kv_capacity_rows, dtype=param.dtype, device=self.device, reserved_tail_rows=region)
        self.prefix = (PrefixReuse(self.arena.cache, first_row=kv_capacity_rows - region,
                                   num_blocks=region // PREFIX_BLOCK_SIZE) if region else None)
        self.engine = Engine(ModelRunner(loaded.model, self.arena.cache, self.device), self.dispatcher,
                             self.arena.slabs, eos_ids=tuple(cfg.eos_token_ids), max_context=self.max_context,
                             detokenize=self._decode if self.params.stop else None, seed=seed,
                             prefix_reuse=self.prefix)
        self.preprocessor = Preprocessor(
            self.tokenizer, default_workers(self.device.type) if preprocess_workers is None else preprocess_workers)
        self.max_pending_records = max_pending_records
        self._prepared: queue.SimpleQueue = queue.SimpleQueue()  # (request, future of Prepared); None = stop
        self._num_pending = 0  # submitted records not yet handed to the engine (or failed)
        self._feeder: threading.Thread | None = None
        self._abandon = False  # set by close(): queued records fail instead of reaching the engine
        self._lock = threading.Lock()  # protects _owners, _deferred, _results, _closing, _num_pending
        self._owners: dict[int, tuple[_Request, int]] = {}  # seq_id -> (request, piece index or -1)
        self._deferred: collections.deque[tuple[_Request, list[int], int]] = collections.deque()
        self._results: collections.deque[tuple[Hashable, Summary | Exception]] = collections.deque()
        self._closing = False
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Start the dispatcher, the GPU-loop thread and the thread feeding prepared records to the engine."""
        self.dispatcher.start()
        self._thread = threading.Thread(target=self.engine.run, name="telesum-gpu-loop", daemon=True)
        self._thread.start()
        self._feeder = threading.Thread(target=self._feed, name="telesum-feeder", daemon=True)
        self._feeder.start()

    def close(self, drain: bool = True, timeout: float | None = None) -> None:
        """Stop taking records. drain=True finishes everything submitted (results stay for `poll`);
        drain=False fails unfinished requests with EngineClosed."""
        with self._lock:
            self._closing = True
        deadline = None if timeout is None else time.monotonic() + timeout
        if drain:  # hierarchical requests still submit merges: keep pumping until they have
            while self._has_unsubmitted_work() and (deadline is None or time.monotonic() < deadline):
                self._pump(_JOIN_POLL_S)
        self._abandon = True  # from here on the feeder fails what is still queued instead of adding it
        if not drain:
            self.engine.stop()
        self._prepared.put(None)
        if self._feeder is not None:
            self._feeder.join(None if deadline is None else max(deadline - time.monotonic(), _JOIN_POLL_S))
        self.preprocessor.close()
        self.engine.close_intake()
        if self._thread is not None:
            while self._thread.is_alive() and (deadline is None or time.monotonic() < deadline):
                self._thread.join(_JOIN_POLL_S)
        self._pump(0.0)
        with self._lock:  # hierarchical pieces or merges that never reached the engine
            stranded = {id(r): r for r, _, _ in self._deferred if not r.failed}
            self._deferred.clear()
        for req in stranded.values():
            req.failed = True
            self._push(req.request_id, EngineClosed("the summarizer closed before this record finished"))

    # -- requests ---------------------------------------------------------------------------
    def tokenize(self, messages: list[dict[str, str]]) -> list[int]:
        """Chat messages -> prompt token ids (chat template with the generation prompt). Thread-safe."""
        return tokenize_messages(self.tokenizer, messages)

    def _count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def submit(self, request_id: Hashable, record: TelemetryRecord) -> None:
        """Queue one record: prepared (facts, prompt, tokens) by the preprocessor, then handed to the
        engine by the feeder thread. Raises Backpressure when `max_pending_records` wait. A record that
        fails to prepare comes back from `poll` as its exception. Thread-safe."""
        with self._lock:
            if self._closing:
                raise RuntimeError("the summarizer is closed")
            if self._num_pending >= self.max_pending_records:
                raise Backpressure(f"{self._num_pending} records are waiting to be prepared or queued")
            self._num_pending += 1
        req = _Request(request_id, record, None, time.perf_counter())
        try:
            future = self.preprocessor.submit(record)
        except BaseException:
            with self._lock:
                self._num_pending -= 1
            raise
        future.add_done_callback(lambda f: self._prepared.put((req, f)))

    def _feed(self) -> None:
        """The feeder thread: prepared records into the engine, waiting for dispatcher room."""
        stopping = False
        while True:
            item = self._prepared.get()
            if item is None:
                stopping = True
                with self._lock:
                    if self._num_pending == 0:
                        return
                continue
            req, future = item
            try:
                prepared = future.result()
                if self._abandon:
                    raise EngineClosed("the summarizer closed before this record was queued")
                self._admit(req, prepared)
            except Exception as exc:  # noqa: BLE001 - this record's failure, reported through poll
                req.failed = True
                self._push(req.request_id, exc)
            with self._lock:
                self._num_pending -= 1
                if stopping and self._num_pending == 0:
                    return

    def _admit(self, req: _Request, prepared: Prepared) -> None:
        """Hand one prepared record to the engine (its pieces, when longer than the context)."""
        req.facts = prepared.facts
        prompt = prepared.prompt
        record = req.record
        limit = self.max_context - self.params.max_new_tokens
        if len(prompt) <= limit:
            self._add_waiting(req, prompt, -1)
            return
        pieces = plan_chunk_prompts(record, tokenize=self.tokenize, count_tokens=self._count_tokens,
                                    max_prompt_tokens=limit)
        req.hierarchical = True
        req.num_chunks = len(pieces)
        req.pieces = [None] * len(pieces)
        self._add_waiting(req, pieces[0], 0)
        with self._lock:
            self._deferred.extend((req, p, i) for i, p in enumerate(pieces[1:], start=1))
        self._retry_deferred()

    def _add_waiting(self, req: _Request, prompt, piece: int) -> None:
        """`_add`, waiting for dispatcher room while it is full (the feeder thread's backpressure)."""
        while True:
            try:
                self._add(req, prompt, piece)
                return
            except Backpressure:
                if self._abandon:
                    raise EngineClosed("the summarizer closed before this record was queued") from None
                self.dispatcher.wait_for_room(len(prompt), _JOIN_POLL_S)

    def _add(self, req: _Request, prompt, piece: int) -> None:
        with self._lock:  # held across add so the sequence is owned before it can finish
            seq = self.engine.add(prompt, self.params)
            self._owners[seq.seq_id] = (req, piece)
        req.prompt_tokens += len(prompt)

    def _retry_deferred(self) -> None:
        """Hand deferred pieces and merges to the engine until it pushes back. Any thread: an item
        is taken off the queue under the lock, so two threads never add the same one."""
        while True:
            with self._lock:
                if not self._deferred:
                    return
                req, prompt, piece = self._deferred.popleft()
            if req.failed:
                continue
            try:
                self._add(req, prompt, piece)
            except Backpressure:
                with self._lock:
                    self._deferred.appendleft((req, prompt, piece))
                return
            except Exception as exc:  # closed, or a prompt the engine refuses: the record fails
                req.failed = True
                self._push(req.request_id, exc)

    def _has_unsubmitted_work(self) -> bool:
        with self._lock:
            return bool(self._deferred) or self._num_pending > 0 or any(
                r.hierarchical and not r.failed and None in r.pieces for r, _ in self._owners.values())

    # -- offline helpers --------------------------------------------------------------------
    def summarize_all(self, records: Iterable[TelemetryRecord]) -> Iterator[Summary]:
        """Summaries in input order; raises the exception of the first record that failed."""
        for _, result in self.results_in_order(records):
            if isinstance(result, Exception):
                raise result
            yield result

    def results_in_order(self, records: Iterable[TelemetryRecord], *, max_in_flight: int | None = None,
                         ) -> Iterator[tuple[TelemetryRecord, Summary | Exception]]:
        """(record, Summary or the exception that stopped it) in input order. Request ids are
        input indices, so do not mix with `submit` calls from elsewhere. max_in_flight: default
        two full bins of sequences (so one decodes while the next is packed), at least 256."""
        if max_in_flight is None:
            max_in_flight = max(256, 2 * self.max_seqs_per_bin)
        held: dict[int, TelemetryRecord] = {}
        done: dict[int, Summary | Exception] = {}
        next_out = 0
        for index, record in enumerate(records):
            held[index] = record
            while True:
                try:
                    if len(held) - len(done) > max_in_flight:
                        raise Backpressure("too many records in flight")
                    self.submit(index, record)
                    break
                except Backpressure:
                    done.update(self.poll(0.05))
                except Exception as exc:  # bad prompt or record: reported in its place
                    done[index] = exc
                    break
                while next_out in done:
                    yield held.pop(next_out), done.pop(next_out)
                    next_out += 1
            done.update(self.poll(0.0))
            while next_out in done:
                yield held.pop(next_out), done.pop(next_out)
                next_out += 1
        while held:
            done.update(self.poll(0.1))
            while next_out in done:
                yield held.pop(next_out), done.pop(next_out)
                next_out += 1

    # -- results ----------------------------------------------------------------------------
    def poll(self, timeout: float) -> list[tuple[Hashable, Summary | Exception]]:
        """Finished requests since the last call, waiting up to `timeout` s for the first. Thread-safe."""
        deadline = time.monotonic() + timeout
        while True:
            self._pump(max(deadline - time.monotonic(), 0.0))
            with self._lock:
                if self._results or time.monotonic() >= deadline:
                    out = list(self._results)
                    self._results.clear()
                    return out

    def _pump(self, timeout: float) -> None:
        """Move finished sequences into results (blocking up to `timeout` for the first one)."""
        self._retry_deferred()
        try:
            seq = self.engine.finished.get(timeout=timeout) if timeout > 0 else self.engine.finished.get_nowait()
        except queue.Empty:
            return
        while True:
            self._on_finished(seq)
            try:
                seq = self.engine.finished.get_nowait()
            except queue.Empty:
                break
        self._retry_deferred()

    def _on_finished(self, seq: Sequence) -> None:
        with self._lock:
            req, piece = self._owners.pop(seq.seq_id)
        if req.failed:
            return
        if seq.status is SequenceStatus.FAILED:
            req.failed = True
            self._push(req.request_id, seq.error or RuntimeError("generation failed"))
            return
        queued, prefill, decode = seq.timings()
        req.queued_s = queued if req.queued_s is None else req.queued_s
        req.prefill_s += prefill
        req.decode_s += decode
        req.output_tokens += len(seq.output)
        text = seq.text
        if text is None:  # the stop check only decodes on trigger tokens: cut any stop it missed
            text = self._decode(seq.output)
            cut = first_stop(text, self.params.stop)
            text = text if cut < 0 else text[:cut]
        if piece < 0:
            self._push(req.request_id, self._summary(req, text.strip()))
            return
        req.pieces[piece] = text.strip()
        if None in req.pieces:
            return
        try:
            prompt = merge_prompt(req.record, req.facts, list(req.pieces), tokenize=self.tokenize,
                                  max_prompt_tokens=self.max_context - self.params.max_new_tokens)
            req.pieces = []  # merged next: the final sequence has piece -1
            with self._lock:
                self._deferred.append((req, prompt, -1))
        except ContextTooLong as exc:
            req.failed = True
            self._push(req.request_id, exc)

    def _summary(self, req: _Request, text: str) -> Summary:
        return Summary(
            id=req.record.id, summary=text, model=self.loaded.name, prompt_tokens=req.prompt_tokens,
            output_tokens=req.output_tokens, hierarchical=req.hierarchical, chunks=req.num_chunks,
            facts=req.facts, timings=Timings(queued_s=req.queued_s or 0.0, prefill_s=req.prefill_s,
                                             decode_s=req.decode_s,
                                             total_s=time.perf_counter() - req.submitted_at),
            narrative=check_narrative(text, req.facts, req.record))

    def _push(self, request_id: Hashable, result: Summary | Exception) -> None:
        with self._lock:
            self._results.append((request_id, result))

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)
