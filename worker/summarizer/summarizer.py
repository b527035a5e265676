"""Summarizer: records in, `Summary`s out, through the dispatcher and one GPU-loop thread.

The caller's thread renders the prompt and tokenises it; the GPU loop (an `Engine`) prefills and
decodes; `poll` turns finished sequences into `Summary`s (or the exception that stopped them).
A record whose prompt exceeds the model's context is summarised hierarchically (`pieces`, `long_records`):
its pieces first, a few at a time so other records' sequences interleave with them, then a tree of
merges of their summaries. A record over the per-record work cap is summarised from a stated
selection, or refused with RecordTooLong, as the operator chose.
"""

from __future__ import annotations

import gc
import logging
import queue
import sys
import threading
import time
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass

from worker.dispatch import Backpressure, BinDispatcher
from worker.engine.engine import Engine
from worker.engine.errors import EngineClosed
from worker.engine.kv_arena import KVArena
from worker.engine.prefix_reuse import BLOCK_SIZE as PREFIX_BLOCK_SIZE
from worker.engine.prefix_reuse import PrefixReuse
from worker.engine.runner import ModelRunner
from worker.engine.sizing import arena_rows
from worker.engine.warmup import capture_decode_graphs, measure_prefill_rate, run_first_step
from worker.summarizer.in_order import results_in_order, summarize_all
from worker.summarizer.long_records import WAKE, LongRecords, MergeDue
from worker.messages import Facts, Summary, TelemetryRecord
from worker.model.kv_cache import kv_row_bytes
from worker.ops.logs import log_startup_phase
from worker.summarizer.preprocess import Prepared, Preprocessor, default_workers, tokenize_messages
from worker.prompts import approx_tokens
from worker.prompts.sampling import default_sampling
from worker.summarizer.result_collector import ResultCollector
from worker.settings.budgets import (GPU_GIL_SWITCH_MS, MIN_WORK_CAP_TOKENS, WORK_CAP_PROBE_TOKENS, Budgets,
                                     WorkCap, cpu_work_cap, device_work_cap)
from worker.settings.sections import EngineSettings
from worker.summarizer.summary_assembly import RecordRequest

log = logging.getLogger(__name__)


# A closed summarizer's thread finishes its step; joining longer than this means it is stuck.
_JOIN_POLL_S = 0.05
# A body longer than this many contexts (estimated, 4 characters a token) is planned on a thread
# of its own instead of the caller's.
_PLAN_APART_CONTEXTS = 2
# Records accepted but not yet handed to the engine, beyond which `submit` raises Backpressure.
MAX_PENDING_RECORDS = 4096


@dataclass(frozen=True)
class SummarizerStats:
    """What the Summarizer's parts hold and have done, read at one moment (`Summarizer.stats()`).
    Counters count since start."""

    queue_seqs: int              # sequences waiting in the dispatcher
    queue_tokens: int            # their prompt tokens
    bins: int                    # packed prefill bins
    bin_real_tokens: int         # real tokens packed into bins
    bin_pad_tokens: int          # alignment pads in bins
    bin_fill_ratio: float        # mean share of a bin's token budget used
    engine_sequences: int        # admitted to the engine, unfinished
    pending_records: int         # submitted, not yet handed to the engine
    prefix_hit_tokens: int       # prompt tokens served from the prefix cache (0 without one)
    prefix_lookup_tokens: int    # prompt tokens looked up in it
    prefix_occupancy: float      # share of its blocks in use
    prefix_evictions: int        # blocks evicted to make room
    out_of_memory_events: int    # engine steps that ran out of GPU memory (each retried smaller)


class Summarizer:
    """Owns the dispatcher, the KV arena and the engine thread for one loaded model."""

    def __init__(self, loaded, engine: EngineSettings, budgets: Budgets, *, dispatcher=None,
                 preprocessor: Preprocessor | None = None) -> None:
        """engine: the `[engine]` settings it reads (summary length and sampling, context, the per-record
        work cap and what happens beyond it, prefix cache, mixed steps, seed); budgets: the budgets in
        force (bin tokens and sequences, KV rows, sequences decoding at once: records beyond them wait,
        and a caller submitting faster meets Backpressure). A defaulted arena (kv_rows None) grows by
        the prefix cache's region; a given one keeps at least one full context for slabs.
        dispatcher: one for the budgets when None. preprocessor: one already started (its processes
        spawning while the engine warms up), used instead of a new one and closed with the summarizer."""
        self.loaded = loaded
        self.tokenizer = loaded.tokenizer
        self.params = default_sampling(engine.max_new_tokens, engine.temperature, engine.top_p)
        cfg = loaded.config
        self.max_context = engine.max_context or cfg.max_position_embeddings
        engine.work_cap()  # the policy beyond the cap, checked
        if self.max_context <= engine.max_new_tokens:
            raise ValueError(f"max_new_tokens {engine.max_new_tokens} leaves no room in a "
                             f"{self.max_context}-token context")
        param = next(loaded.model.parameters())
        self.device = param.device
        # The per-record work cap in force; None until start() measures it (unset, on CPU).
        self.work_cap: WorkCap | None = budgets.work_cap or (
            WorkCap(engine.work_cap(), "engine.max_record_tokens") if engine.max_record_tokens is not None
            else device_work_cap(self.device.type))
        kv_fp8 = getattr(loaded, "fp8_kv", False)  # engine.kv_cache, applied at load (the probe sized for it)
        kv_rows, region = arena_rows(
            kv_row_bytes(cfg, param.dtype, fp8=kv_fp8), self.device, kv_rows=budgets.kv_rows,
            token_budget=budgets.token_budget, max_seqs_per_bin=budgets.max_seqs_per_bin,
            max_new_tokens=engine.max_new_tokens, max_context=self.max_context, prefix_cache=engine.prefix_cache,
            prefix_cache_tokens=engine.prefix_cache_tokens)
        if dispatcher is None:
            dispatcher = BinDispatcher(budgets.token_budget, max_seqs_per_bin=budgets.max_seqs_per_bin,
                                       pad_id=self.tokenizer.pad_token_id or 0)
        self.dispatcher = dispatcher
        self.max_seqs_per_bin = budgets.max_seqs_per_bin
        self.arena = KVArena(cfg, kv_rows, dtype=param.dtype, device=self.device, reserved_tail_rows=region,
                             fp8=kv_fp8)
        self.prefix = (PrefixReuse(self.arena.cache, first_row=kv_rows - region,
                                   num_blocks=region // PREFIX_BLOCK_SIZE) if region else None)
        self.runner = ModelRunner(loaded.model, self.arena.cache, self.device,
                                  largest_bin=(budgets.token_budget, budgets.max_seqs_per_bin))
        self.max_decode_seqs = budgets.max_decode_seqs
        self.engine = Engine(self.runner, self.dispatcher,
                             self.arena.slabs, eos_ids=tuple(cfg.eos_token_ids), max_context=self.max_context,
                             detokenize=self._decode if self.params.stop else None, seed=engine.seed,
                             prefix_reuse=self.prefix, max_decode_seqs=self.max_decode_seqs,
                             mixed_steps=engine.mixed_steps)
        self.preprocessor = preprocessor or Preprocessor(self.tokenizer, default_workers(self.device.type))
        self.max_pending_records = MAX_PENDING_RECORDS
        self._prepared: queue.SimpleQueue = queue.SimpleQueue()  # (request, future of Prepared); None = stop
        self._feeder: threading.Thread | None = None
        self._abandon = False  # set by close(): queued records fail instead of reaching the engine
        self._lock = threading.Lock()  # protects _closing and _num_pending
        self._closing = False
        self._num_pending = 0  # submitted records not yet handed to the engine (or failed)
        self.results = ResultCollector(self.engine.finished, model=loaded.name, decode=self._decode,
                                       level_done=self._level_done,
                                       prose=self.preprocessor.summary_prose if self.preprocessor.workers else None)
        self.long_records = LongRecords(
            tokenizer=self.tokenizer, tokenize=self.tokenize,
            max_prompt_tokens=self.max_context - self.params.max_new_tokens,
            max_record_tokens=self.work_cap.tokens if self.work_cap else None, over_cap=engine.over_cap,
            add=self._add, push=self.results.push, wake=self._prepared.put)
        self._thread: threading.Thread | None = None
        gil_switch_ms = engine.gil_switch_ms or (GPU_GIL_SWITCH_MS if self.device.type == "cuda" else None)
        self.gil_switch_s = gil_switch_ms / 1000 if gil_switch_ms else None  # None: the interpreter's own
        self._switch_before: float | None = None  # the interval start() replaced, put back by close()

    # -- lifecycle --------------------------------------------------------------------------
    def start(self, first_step_timeout_s: float = 900.0) -> None:
        """Start the dispatcher, the GPU-loop thread and the thread feeding prepared records to the
        engine. Returns once a first prompt has been prefilled and decoded (compilation and the first
        graph capture happen here, not on the first record), so a caller that reports readiness after
        `start` reports it when a step can run."""
        # A bin is admitted whole when nothing decodes, so a decode batch may reach a bin's sequences
        # too; a bucket missed here is still captured when first needed.
        started = time.perf_counter()
        largest = capture_decode_graphs(self.runner.decode_step, self.max_decode_seqs and max(
            self.max_decode_seqs, self.max_seqs_per_bin))
        if largest is not None:
            log_startup_phase(f"decode graphs captured (batch buckets up to {largest})", started, log)
        if self.runner.prefill_step is not None:  # the largest first: the probe sized the arena beside it
            started = time.perf_counter()
            captured = self.runner.prefill_step.capture_largest()
            log_startup_phase(f"prefill graphs of the largest bin captured ({captured} of 2)", started, log)
        self.dispatcher.start()
        self._thread = threading.Thread(target=self.engine.run, name="telesum-gpu-loop", daemon=True)
        self._thread.start()
        started = time.perf_counter()
        first, ok = run_first_step(self.engine, self.loaded.config.vocab_size, first_step_timeout_s)
        if ok:
            log_startup_phase("first engine step (prefill compilation)", started, log)
        if self.prefix is not None:  # the warm-up prompt is no record's
            self.prefix.uncount_lookup(first.prompt_len)
        if self.work_cap is None:
            self.work_cap = self._measure_work_cap(first_step_timeout_s)
        self.long_records.max_record_tokens = self.work_cap.tokens
        log.info("start-up: per-record work cap %s", self.work_cap.describe(),
                 extra={"work_cap": {"tokens": self.work_cap.tokens, "source": self.work_cap.source}})
        self._feeder = threading.Thread(target=self._feed, name="telesum-feeder", daemon=True)
        self._feeder.start()
        if self.gil_switch_s is not None:  # process-wide: this process serves the GPU loop
            self._switch_before = sys.getswitchinterval()
            sys.setswitchinterval(self.gil_switch_s)
            log.info("start-up: GIL switch interval %g ms", self.gil_switch_s * 1000)
        # What start-up built (torch, the tokenizer, the model's modules: ~240,000 objects with the tiny
        # model) lives as long as the process: out of the collector's sight, a full collection no longer
        # walks it while holding the GIL the GPU loop launches with (0.1 s every ~1,500 records).
        gc.freeze()

    def _measure_work_cap(self, timeout_s: float) -> WorkCap:
        """The cap on CPU from the prefill rate measured on the idle engine now."""
        started = time.perf_counter()
        tokens = min(WORK_CAP_PROBE_TOKENS, self.max_context - 1)
        try:
            seq, rate = measure_prefill_rate(self.engine, self.loaded.config.vocab_size, tokens, timeout_s)
        except RuntimeError as exc:  # the records will report their own failures; keep the smallest cap
            log.warning("start-up: %s; the work cap is the smallest", exc)
            return WorkCap(MIN_WORK_CAP_TOKENS, f"smallest: the prefill rate was not measured ({exc})")
        if self.prefix is not None:
            self.prefix.uncount_lookup(seq.prompt_len)
        log_startup_phase(f"prefill rate measured for the work cap ({tokens} tokens)", started, log)
        return cpu_work_cap(rate)

    def close(self, drain: bool = True, timeout: float | None = None) -> None:
        """Stop taking records. drain=True finishes everything submitted (results stay for `poll`);
        drain=False fails unfinished requests with EngineClosed."""
        with self._lock:
            self._closing = True
        deadline = None if timeout is None else time.monotonic() + timeout
        if drain:  # hierarchical requests still submit merges: keep pumping until they have
            while self._has_unsubmitted_work() and (deadline is None or time.monotonic() < deadline):
                self.results.pump(_JOIN_POLL_S)
        self._abandon = True  # from here on the feeder fails what is still queued instead of adding it
        if not drain:
            self.engine.stop()
        self._prepared.put(None)
        if self._feeder is not None:
            self._feeder.join(None if deadline is None else max(deadline - time.monotonic(), _JOIN_POLL_S))
        self.engine.close_intake()
        if self._thread is not None:
            while self._thread.is_alive() and (deadline is None or time.monotonic() < deadline):
                self._thread.join(_JOIN_POLL_S)
        self.results.pump(0.0)
        # the pool writes the last summaries' text; one it cannot is written here
        self.results.wait_written(None if deadline is None else max(deadline - time.monotonic(), _JOIN_POLL_S))
        self.preprocessor.close()
        # hierarchical pieces or merges that never reached the engine
        stranded = [r for r in self.long_records.strand() if not r.failed]
        for req in stranded:
            req.failed = True
            self.results.push(req.request_id, EngineClosed("the summarizer closed before this record finished"))
        gc.unfreeze()  # collectable again, at the interpreter's exit too
        if self._switch_before is not None:
            sys.setswitchinterval(self._switch_before)
            self._switch_before = None

    # -- requests ---------------------------------------------------------------------------
    def tokenize(self, messages: list[dict[str, str]]) -> list[int]:
        """Chat messages -> prompt token ids (chat template with the generation prompt). Thread-safe."""
        return tokenize_messages(self.tokenizer, messages)

    def _count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def submit(self, request_id: Hashable, record: TelemetryRecord, *, caller: Hashable = None) -> None:
        """Queue one record: prepared (facts, prompt, tokens) by the preprocessor, then handed to the
        engine by the feeder thread. Raises Backpressure when `max_pending_records` wait. A record that
        fails to prepare comes back from `poll` as its exception. `caller`: its result comes back only
        from `poll(..., caller=caller)` (None: from `poll` without one); request ids must be unique across
        callers. Thread-safe."""
        if caller is None:
            self._submit(request_id, record)
            return
        self.results.route(request_id, caller)
        try:
            self._submit(request_id, record)
        except BaseException:
            self.results.unroute(request_id)
            raise

    def _submit(self, request_id: Hashable, record: TelemetryRecord) -> None:
        with self._lock:
            if self._closing:
                raise RuntimeError("the summarizer is closed")
        if approx_tokens(record.body_text()) > _PLAN_APART_CONTEXTS * self.max_context:
            # Surely beyond one context: plan its pieces on a thread of their own, so the caller (the
            # Kafka poll loop) and the preprocessing pool are not held for the tens of seconds a
            # multi-megabyte body takes to tokenise (measured: 39 s for 5 MB on 2 busy cores).
            self.long_records.plan_apart(
                RecordRequest(request_id, record, Facts(), time.perf_counter(), hierarchical=True))
            return
        with self._lock:
            if self._num_pending >= self.max_pending_records:
                raise Backpressure(f"{self._num_pending} records are waiting to be prepared or queued")
            self._num_pending += 1
        req = RecordRequest(request_id, record, None, time.perf_counter())
        try:
            future = self.preprocessor.submit(record)
        except BaseException:
            with self._lock:
                self._num_pending -= 1
            raise
        future.add_done_callback(lambda f: self._prepared.put((req, f)))

    def _feed(self) -> None:
        """The feeder thread, the one thread that adds work to the engine: prepared records, long
        records' pieces and the merges of their summaries, each waiting for dispatcher room."""
        stopping = False
        while True:
            try:  # wake now and then while pieces wait for room in the dispatcher
                item = self._prepared.get(timeout=_JOIN_POLL_S if self.long_records.has_deferred else None)
            except queue.Empty:
                item = WAKE
            if item is None:
                stopping = True
            elif isinstance(item, MergeDue):
                self.long_records.plan_merge(item.request)
            elif item is not WAKE:
                self._feed_record(*item)
            if not self._abandon:  # else close() fails what still waits
                self.long_records.submit_ready()
            if stopping:
                with self._lock:
                    if self._num_pending == 0:
                        return

    def _feed_record(self, req: RecordRequest, future) -> None:
        try:
            prepared = future.result()
            if self._abandon:
                raise EngineClosed("the summarizer closed before this record was queued")
            self._admit(req, prepared)
        except Exception as exc:  # noqa: BLE001 - this record's failure, reported through poll
            req.failed = True
            self.results.push(req.request_id, exc)
        with self._lock:
            self._num_pending -= 1

    def _admit(self, req: RecordRequest, prepared: Prepared) -> None:
        """Hand one prepared record to the engine (its pieces, when longer than the context)."""
        req.facts = prepared.facts
        prompt = prepared.prompt
        cap = self.long_records.max_record_tokens
        if len(prompt) <= self.max_context - self.params.max_new_tokens and not (
                cap is not None and len(prompt) > cap and self.long_records.is_over_cap(req.record)):
            self._add_waiting(req, prompt, -1)
            return
        self.long_records.plan_pieces(req)
        self.long_records.defer(req)  # its pieces join the engine as the other long records' do

    def threads_alive(self) -> bool:
        """True while the GPU loop or a long record's planning thread still runs. Thread-safe."""
        return self.long_records.is_planning() or (self._thread is not None and self._thread.is_alive())

    def _add_waiting(self, req: RecordRequest, prompt, piece: int) -> None:
        """`_add`, waiting for dispatcher room while it is full (the feeder thread's backpressure)."""
        while True:
            try:
                self._add(req, prompt, piece)
                return
            except Backpressure:
                if self._abandon:
                    raise EngineClosed("the summarizer closed before this record was queued") from None
                self.dispatcher.wait_for_room(len(prompt), _JOIN_POLL_S)

    def _add(self, req: RecordRequest, prompt, piece: int) -> None:
        self.results.track(req, piece, self.engine.add, prompt, self.params)
        req.prompt_tokens += len(prompt)

    def _level_done(self, req: RecordRequest) -> None:
        """Every piece of a long record's level is summarised (called by the results)."""
        self.long_records.piece_done(req)

    def _has_unsubmitted_work(self) -> bool:
        with self._lock:
            pending = self._num_pending > 0
        return pending or self.long_records.has_work() or self.results.has_unfinished_levels()

    # -- offline helpers --------------------------------------------------------------------
    def summarize_all(self, records: Iterable[TelemetryRecord]) -> Iterator[Summary]:
        """Summaries in input order (see worker.summarizer.in_order)."""
        return summarize_all(self, records)

    def results_in_order(self, records: Iterable[TelemetryRecord], *, max_in_flight: int | None = None,
                         ) -> Iterator[tuple[TelemetryRecord, Summary | Exception]]:
        """(record, result) in input order (see worker.summarizer.in_order)."""
        return results_in_order(self, records, max_in_flight=max_in_flight)

    # -- results ----------------------------------------------------------------------------
    def poll(self, timeout: float, *, caller: Hashable = None) -> list[tuple[Hashable, Summary | Exception]]:
        """Finished requests since the last call, waiting up to `timeout` s for the first: those submitted
        with this `caller` (None: without one). Thread-safe."""
        return self.results.poll(timeout, caller)

    def stats(self) -> SummarizerStats:
        """The dispatcher's, the engine's and the prefix cache's counters, read now (each part under
        its own lock). After `start`; thread-safe."""
        d = self.dispatcher.stats()
        prefix = self.prefix.stats() if self.prefix is not None else {}
        with self._lock:
            pending = self._num_pending
        return SummarizerStats(
            queue_seqs=int(d["queue_seqs"]), queue_tokens=int(d["queue_tokens"]), bins=int(d["bins"]),
            bin_real_tokens=int(d["tokens_packed"]), bin_pad_tokens=int(d["pad_tokens"]),
            bin_fill_ratio=d["fill_ratio"], engine_sequences=self.engine.num_unfinished, pending_records=pending,
            prefix_hit_tokens=int(prefix.get("hit_tokens", 0)),
            prefix_lookup_tokens=int(prefix.get("lookup_tokens", 0)),
            prefix_occupancy=prefix.get("occupancy", 0.0), prefix_evictions=int(prefix.get("evictions", 0)),
            out_of_memory_events=self.engine.oom.events)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)
