"""The engine step: take work, schedule, queue the step on the device (device_step.py), read its
tokens, post-process. Driven by one thread (the GPU loop).

Sequences reach the engine through `add` (any thread): prompts that fit one bin go to the
dispatcher, longer ones to the long-input lane (chunked prefill). With prefix reuse, a prompt whose
head another prompt is prefilling right now is parked until that head is cached, then queued by
the engine thread. Finished or failed sequences
come out of `finished`. An exception while running a step fails only that step's sequences.
"""

from __future__ import annotations

import collections
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from worker.dispatch import Backpressure, DispatcherClosed, SequenceTooLong
from worker.engine.bins import BinWork, split_bin_at
from worker.engine.device_step import DeviceStep, start_read
from worker.engine.errors import ContextTooLong, EngineClosed, OutOfMemory
from worker.engine.kv_arena import SlabAllocator
from worker.engine.out_of_memory import OutOfMemoryRecovery, is_out_of_memory
from worker.engine.plans import Decode, Fail, MixedStep, Plan, PrefillBin, PrefillChunk
from worker.engine.prefix_reuse import PrefixReuse
from worker.engine.runner import ModelRunner
from worker.engine.sampling import host_to_device
from worker.engine.scheduler import Scheduler
from worker.engine.sequence import SamplingParams, Sequence

log = logging.getLogger(__name__)

# Waiting for a bin while sequences are decoding delays every one of them, so only peek;
# when idle, block a while (the wait releases the GIL) but wake often enough to see long inputs.
BUSY_TIMEOUT_S = 0.0
IDLE_TIMEOUT_S = 0.02

# Called after every step, on the engine thread: (the plan run, None when there was none; when the
# step began, when its work was taken and scheduled, when its tokens were applied), in
# time.perf_counter() seconds. A bin launched ahead (`Engine._launch_ahead`) ends after the step it
# was queued behind, so two steps' spans may overlap.
StepObserver = Callable[[Plan | None, float, float, float], None]


class Launched(NamedTuple):
    """A step queued on the device whose tokens are not read yet."""

    plan: Plan
    started: float  # when its step began (perf_counter seconds)
    taken: float    # when its work was taken and scheduled
    tokens: torch.Tensor | None = None  # int64 [B]: on the host once `copied` completes (None until launched)
    copied: torch.cuda.Event | None = None  # marks the tokens' copy to the host (None: already there)
    on_device: torch.Tensor | None = None  # the same tokens where the step sampled them: a decode ahead reads them


class Engine:
    """Continuous-batching generation over packed bins and a KV slab arena."""

    def __init__(self, runner: ModelRunner, dispatcher, slabs: SlabAllocator, *,
                 eos_ids: tuple[int, ...], max_context: int, chunk_tokens: int | None = None,
                 detokenize=None, seed: int = 0, prefix_reuse: PrefixReuse | None = None,
                 max_decode_seqs: int | None = None, mixed_steps: bool = False,
                 launch_ahead: bool | None = None) -> None:
        """prefix_reuse: the shared-prefix cache (its region lies outside `slabs`); None = off.
        max_decode_seqs: sequences admitted to decode at once (the probe's measure); None = as the
        KV arena allows. mixed_steps: a bin's prefill carries the decoding sequences' next tokens in
        the same forward (see scheduler.py); False: separate steps. launch_ahead: queue a bin's
        prefill behind the step before it (`_launch_ahead`); default on CUDA only, where work is
        queued: on a CPU every op runs as it is called, so it would reorder steps and overlap nothing."""
        self.runner = runner
        self.launch_ahead = runner.device.type == "cuda" if launch_ahead is None else launch_ahead
        self.dispatcher = dispatcher
        self.prefix = prefix_reuse
        if prefix_reuse is not None and prefix_reuse.max_claim_tokens is None:
            prefix_reuse.max_claim_tokens = dispatcher.token_budget  # the long lane makes nobody wait
        self.max_context = max_context
        self.scheduler = Scheduler(slabs, eos_ids=eos_ids, detokenize=detokenize,
                                   chunk_tokens=chunk_tokens or dispatcher.token_budget,
                                   max_decode_seqs=max_decode_seqs, mixed_steps=mixed_steps,
                                   # Cut to a step's size, a bin's parts carry the decode rows in mixed
                                   # steps; run apart, they cost more at 80 % load than whole bins
                                   # (docs/streaming.md).
                                   split_bin=split_bin_at if mixed_steps else None)
        self.device_step = DeviceStep(runner, slabs.capacity, seed)
        self.finished: queue.SimpleQueue[Sequence] = queue.SimpleQueue()
        self._lock = threading.Lock()  # protects _seqs, _ids, _closed, _num_parked, _dispatcher_closing
        self._seqs: dict[int, Sequence] = {}
        self._ids = itertools.count()
        self._closed = False
        self._num_parked = 0  # sequences waiting on another prompt's head, or woken and not yet queued
        self._dispatcher_closing = False  # close() sent to the dispatcher (deferred while any are parked)
        self._woken_in: queue.SimpleQueue[Sequence] = queue.SimpleQueue()  # parked ones whose head is cached
        self._woken: collections.deque[Sequence] = collections.deque()  # engine thread: to queue, in order
        self._long_inbox: queue.SimpleQueue[Sequence] = queue.SimpleQueue()
        self._dispatcher_drained = False
        self._stop = threading.Event()
        self.oom = OutOfMemoryRecovery(self.scheduler)
        # The scheduler's pacing first; a benchmark appends a StepTrace's `observe`.
        self.step_observers: list[StepObserver] = [self._pace]
        self._in_flight: Launched | None = None  # a bin's prefill launched ahead, read by the next step

    # -- any thread -------------------------------------------------------------------------
    def add(self, prompt, params: SamplingParams) -> Sequence:
        """Submit one prompt (token ids: a list or an int32 array). Raises ContextTooLong, Backpressure,
        DispatcherClosed. Thread-safe."""
        tokens = np.asarray(prompt, dtype=np.int32)
        if not len(tokens):
            raise ValueError("empty prompt")
        if len(prompt) + params.max_new_tokens > self.max_context:
            raise ContextTooLong(f"prompt of {len(prompt)} tokens + {params.max_new_tokens} new tokens "
                                 f"exceeds the model context of {self.max_context}")
        with self._lock:
            if self._closed:
                raise DispatcherClosed("the engine is closed")
            seq = Sequence(next(self._ids), tokens.tolist(), params)
            self._seqs[seq.seq_id] = seq
            # A cached head is copied in at admission and the bin holds the rest. Matched under the
            # lock so that close_intake sees every parked sequence; parked before the match, since
            # another thread may wake it as soon as it waits.
            if self.prefix is not None:
                seq.parked = True
                self._num_parked += 1
                if not self.prefix.match(seq):
                    return seq
                seq.parked = False
                self._num_parked -= 1
        try:
            self._queue(seq, tokens)
        except BaseException:
            with self._lock:
                del self._seqs[seq.seq_id]
            if self.prefix is not None:
                self._wake(self.prefix.release(seq))
            raise
        return seq

    def _queue(self, seq: Sequence, tokens: np.ndarray | None = None) -> None:
        """The prompt's rest (after any cached head) to the dispatcher, or to the long lane.
        tokens: the prompt as int32 already (`add` has it), else converted from `seq.prompt`."""
        rest = (tokens if tokens is not None else np.asarray(seq.prompt, dtype=np.int32))[seq.prefix_len:]
        if len(rest) > self.dispatcher.token_budget:
            self._long_inbox.put(seq)
            return
        try:
            self.dispatcher.submit(seq.seq_id, rest, seq.params.max_new_tokens)
        except SequenceTooLong:  # alignment pads can push a prompt at the budget over it
            self._long_inbox.put(seq)

    def _wake(self, seqs: list[Sequence]) -> None:
        for seq in seqs:
            self._woken_in.put(seq)

    def close_intake(self) -> None:
        """Refuse new prompts; everything already added still finishes. Thread-safe."""
        with self._lock:
            self._closed = True
            close_now = self._num_parked == 0  # else the engine thread closes it once they are queued
            self._dispatcher_closing |= close_now
        if close_now:
            self.dispatcher.close()

    def stop(self) -> None:
        """Ask `run` to return after the current step, failing unfinished work. Thread-safe."""
        self._stop.set()

    @property
    def num_unfinished(self) -> int:
        with self._lock:
            return len(self._seqs)

    # -- the GPU-loop thread ----------------------------------------------------------------
    def run(self) -> None:
        """Step until closed and drained (or stopped). Only from the GPU-loop thread."""
        while not self._stop.is_set():
            try:
                if not self.step():
                    return
            except Exception as exc:  # a bug in the loop itself: fail what is in flight, keep serving
                log.exception("engine step failed")
                self._fail_all(exc)
        self._fail_all(EngineClosed("the engine stopped before this request finished"))

    def step(self) -> bool:
        """One step: take work, schedule, launch, read and apply the tokens, tell the observers.
        A bin's prefill may be launched ahead, behind the step before it, and read in the next step
        (`_launch_ahead`). False once closed and drained."""
        started = time.perf_counter()
        before, self._in_flight = self._in_flight, None
        if before is None:
            self._take_work()
        elif self._launch_ahead(before, started):  # takes work itself
            return True
        else:
            self._finish(before)
        plan = self.scheduler.schedule()
        taken = time.perf_counter()
        if plan is None:
            for observe in self.step_observers:
                observe(None, started, taken, time.perf_counter())
        else:
            launched = self._launch(Launched(plan, started, taken))
            if launched is not None and not self._launch_ahead(launched, taken):
                self._finish(launched)
        return plan is not None or before is not None or not (
            self._dispatcher_drained and self._long_inbox.empty() and self.scheduler.is_idle)

    def _launch_ahead(self, launched: Launched, now: float) -> bool:
        """Queue the next step behind a launched bin prefill or decode step, before reading that
        step's tokens, so the GPU runs it while this thread applies them instead of waiting for this
        thread to launch it (the GPU idled between steps for as long as a step's host work took):
        the next waiting bin's prefill (it needs nothing from those tokens), else, behind a decode
        step, the next decode step, fed the tokens where they were sampled (`_decode_ahead`). The
        launched step is then finished and the new one left in flight for the next step. Not after
        chunks or mixed steps."""
        if not self.launch_ahead or not isinstance(launched.plan, (PrefillBin, Decode)):
            return False
        self._take_work(launched=True)
        ahead = self.scheduler.admit_bin_ahead(launched.plan)
        if ahead is None:
            return self._decode_ahead(launched)
        self._in_flight = self._launch(Launched(ahead, now, time.perf_counter()))
        self._finish(launched)
        return True

    def _decode_ahead(self, launched: Launched) -> bool:
        """The decode step after a launched one, queued before its tokens are read
        (Scheduler.decode_ahead); it counts as running from when the launched one is finished, so
        that paced steps see decoding's time once. False (nothing queued) when the scheduler plans
        otherwise, decode steps run in passes after running out of memory, or queueing it failed:
        then the next step is planned and launched as usual, out-of-memory recovery included."""
        if not isinstance(launched.plan, Decode) or self.oom.decode_pass_rows is not None:
            return False
        planned = self.scheduler.decode_ahead(launched.plan)
        if planned is None:
            return False
        plan, keep = planned
        ids = launched.on_device
        if len(keep) < len(ids):  # rows at their length limit leave
            ids = ids[host_to_device(keep, torch.int64, ids.device)]
        try:
            on_device = self._queue_on_device(plan, plan.seqs, ids)
        except Exception:  # noqa: BLE001 - planned again after the launched step, where it is handled
            log.debug("decode step ahead not queued", exc_info=True)
            return False
        tokens, copied = start_read(on_device)
        self.oom.step_ran()
        self._finish(launched)
        now = time.perf_counter()
        self._in_flight = Launched(plan, now, now, tokens, copied, on_device)
        return True

    def _pace(self, plan: Plan | None, started: float, taken: float, ended: float) -> None:
        """The scheduler paces small bins' prefills and sizes cut bins by how long steps ran."""
        if plan is not None:
            self.scheduler.observe_step(plan, ended - taken)

    def _take_work(self, launched: bool = False) -> None:
        """launched: a step is on the device, unread (then only peek for a bin, as while decoding)."""
        if self.prefix is not None:
            self._queue_woken()
        while not self._long_inbox.empty():
            self.scheduler.add_long(self._long_inbox.get())
        if self.scheduler.is_holding_bin or self._dispatcher_drained:
            return
        busy = launched or not self.scheduler.is_idle
        try:
            packed = self.dispatcher.next_bin(BUSY_TIMEOUT_S if busy else IDLE_TIMEOUT_S)
        except DispatcherClosed:
            self._dispatcher_drained = True
            return
        if packed is None:
            return
        cu = packed.cu_seqlens.tolist()  # host reads of the page-locked slot: no device sync
        lens = packed.seq_lens.tolist()
        ids = packed.seq_ids.tolist()
        with self._lock:
            seqs = [self._seqs[i] for i in ids]
        device_bin = self.dispatcher.to_device(packed, self.runner.device)  # hands the slot back: read it before
        self.scheduler.add_bin(BinWork.of(device_bin, cu, lens, seqs), seqs)

    def _queue_woken(self) -> None:
        """Queue parked sequences whose heads are now cached, in the order they woke; the rest wait
        for room in the dispatcher. Closes the dispatcher after the last one once intake is closed."""
        while not self._woken_in.empty():
            self._woken.append(self._woken_in.get())
        while self._woken:
            seq = self._woken[0]
            if seq.parked:  # not failed or stopped meanwhile
                try:
                    self._queue(seq)
                except Backpressure:
                    break
                except Exception as exc:  # noqa: BLE001 - this sequence's failure, reported as its result
                    self.scheduler.fail([seq], exc)
                    self._emit([seq])
            self._woken.popleft()
            self._unpark(seq)
        with self._lock:
            close = self._closed and self._num_parked == 0 and not self._dispatcher_closing
            self._dispatcher_closing |= close
        if close:
            self.dispatcher.close()

    def _unpark(self, seq: Sequence) -> None:
        with self._lock:
            if seq.parked:
                seq.parked = False
                self._num_parked -= 1

    def _launch(self, step: Launched) -> Launched | None:
        """Queue the step's forward and sampling on the device -> the step with its tokens (not read
        yet); None when it ended here (failed sequences, out of memory: then observed already)."""
        plan = step.plan
        if isinstance(plan, Fail):
            self.scheduler.fail(plan.seqs, plan.error)
            self._emit(plan.seqs)
            self._observe(step)
            return None
        seqs = [plan.seq] if isinstance(plan, PrefillChunk) else plan.seqs
        if self.prefix is not None and not isinstance(plan, Decode):
            heads = [s for s in seqs if s.prefix_len and not s.prefix_in_slab]  # just admitted
            self.prefix.copy_in(heads)
            for s in heads:
                s.prefix_in_slab = True
        try:
            on_device = self._queue_on_device(plan, seqs)
            tokens, copied = start_read(on_device)  # queued on the device, not read yet
        except Exception as exc:
            if is_out_of_memory(exc):
                self._after_out_of_memory(plan, seqs, exc)
            else:
                log.exception("step failed for %d sequence(s)", len(seqs))
                self.scheduler.fail(seqs, exc)
                self._emit(seqs)
            self._observe(step)
            return None
        self.oom.step_ran()
        if self.prefix is not None:  # before postprocess may finish a sequence and free its slab
            if isinstance(plan, (PrefillBin, MixedStep)):
                self._wake(self.prefix.remember(plan.prefill.seqs if isinstance(plan, MixedStep) else seqs))
            elif isinstance(plan, PrefillChunk) and plan.is_last:
                self._wake(self.prefix.remember(seqs))
        return step._replace(tokens=tokens, copied=copied, on_device=on_device)

    def _finish(self, step: Launched) -> None:
        """Read a launched step's tokens and apply them, then tell the observers. The wait is the
        step's one host sync, after remember: its host work (hashing every new block) then overlaps
        the forward instead of leaving the GPU idle (+11 % records/s at 2 new tokens, bench/NOTES.md)."""
        if step.copied is not None:
            step.copied.synchronize()
        self._emit(self.scheduler.postprocess(step.plan, step.tokens.numpy()))
        self._observe(step)

    def _observe(self, step: Launched) -> None:
        ended = time.perf_counter()
        for observe in self.step_observers:
            observe(step.plan, step.started, step.taken, ended)

    def _after_out_of_memory(self, plan: Plan, seqs: list[Sequence], exc: BaseException) -> None:
        if self.runner.device.type == "cuda":
            torch.cuda.empty_cache()
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:400]
        failed = self.oom.recover(plan, seqs, reason)
        if failed:
            error = OutOfMemory(f"the GPU ran out of memory for this sequence ({failed[0].prompt_len} prompt "
                                f"tokens) even alone in the smallest chunks: {reason[:200]}")
            self.scheduler.fail(failed, error)
            self._emit(failed)

    def _queue_on_device(self, plan: Plan, seqs: list[Sequence], ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.device_step.queue(plan, seqs, self.scheduler.decoding, self.oom.decode_pass_rows, ids)

    def _emit(self, seqs: list[Sequence]) -> None:
        if self.prefix is not None:  # unpin heads, end waits; who waited on a failed prompt is matched again
            for seq in seqs:
                self._wake(self.prefix.release(seq))
                self._unpark(seq)
        with self._lock:
            for seq in seqs:
                self._seqs.pop(seq.seq_id, None)
        for seq in seqs:
            self.finished.put(seq)

    def _fail_all(self, exc: BaseException) -> None:
        self._in_flight = None  # its sequences are among the pending ones
        with self._lock:
            pending = list(self._seqs.values())
        self.scheduler.fail(pending, exc)
        self.scheduler.waiting_bins.clear()
        self.scheduler.waiting_long.clear()
        self._emit(pending)
