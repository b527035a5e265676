"""Scheduler: decides what the next engine step does. Never touches tensors.

Priority per step: prefill the oldest waiting bin when all its slabs fit (new work joins the
decode batch early). With mixed steps on, that prefill also carries every decoding sequence's next
token in the same forward, and while sequences decode a bin whose prefill would take longer than a
step should is cut into parts prefilled one per step (both off by default: on an H200 mixing gained
no latency, and parts run apart from decoding cost more at high load than they save,
docs/streaming.md). Else one chunk of a long input, alternating with decode steps so active
sequences keep moving, and while they decode taking at most a bounded share of the engine's time
(prefill_pacing.LONG_LANE_SHARE), each chunk about CHUNK_TARGET_S long once prefills were timed;
else one decode step over every active sequence.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from worker.engine.decode_batch import DecodeBatch, not_done
from worker.engine.errors import ArenaTooSmall
from worker.engine.kv_arena import SlabAllocator
from worker.engine.plans import Decode, Fail, MixedStep, Plan, PrefillBin, PrefillChunk
from worker.engine.prefill_pacing import PrefillPacer, is_small_bin
from worker.engine.sequence import Sequence, SequenceStatus
from worker.engine.stops import StopChecker

# Out-of-memory retries halve a long input's chunk down to this many tokens before the sequence fails.
MIN_OOM_CHUNK = 256

# (bin, its sequences, k) -> (bin of the first k sequences, bin of the rest); opaque bins, the engine's.
BinSplitter = Callable[[Any, list[Sequence], int], tuple[Any, Any]]


class Scheduler:
    """Queues of waiting bins, long inputs and active sequences; owns slab admission. Engine thread only."""

    def __init__(self, slabs: SlabAllocator, *, eos_ids: tuple[int, ...], chunk_tokens: int,
                 detokenize: Callable[[list[int]], str] | None = None, max_decode_seqs: int | None = None,
                 mixed_steps: bool = False, split_bin: BinSplitter | None = None) -> None:
        """max_decode_seqs: sequences admitted at once (decoding or being prefilled); a bin that would
        go past it waits for sequences to finish (one that exceeds it alone runs when nothing else does).
        mixed_steps: a bin's prefill carries the decoding sequences' next tokens (else separate steps).
        split_bin: cuts a bin in two (None: bins are never cut to keep steps short)."""
        if chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
        if max_decode_seqs is not None and max_decode_seqs < 1:
            raise ValueError(f"max_decode_seqs must be >= 1, got {max_decode_seqs}")
        self.max_decode_seqs = max_decode_seqs
        self.slabs = slabs
        self.eos_ids = frozenset(eos_ids)
        self.eos_array = np.asarray(sorted(self.eos_ids), dtype=np.int64)
        self.chunk_tokens = chunk_tokens
        self._shrunk_chunks: dict[int, int] = {}  # seq_id -> chunk size after an out-of-memory retry
        self.stops = StopChecker(detokenize) if detokenize is not None else None
        self.waiting_bins: deque[PrefillBin] = deque()
        self.waiting_long: deque[Sequence] = deque()
        self.prefilling: Sequence | None = None  # the long input being chunk-prefilled
        self.decoding = DecodeBatch()
        self._last_was_chunk = False
        self._last_was_part = False  # the last step prefilled part of a cut bin, without decode rows
        self.pacer = PrefillPacer()
        self.mixed_steps = mixed_steps
        self.max_mixed_rows: int | None = None  # decode rows a mixed step may carry (after out of memory)
        self._split_bin = split_bin
        self.decodes_ahead = True  # plan a decode step behind a launched one (`decode_ahead`); a benchmark turns it off

    # -- intake -----------------------------------------------------------------------------
    def add_bin(self, bin: Any, seqs: list[Sequence]) -> None:
        """Queue a packed bin for prefill (admitted when all its slabs fit)."""
        self.waiting_bins.append(PrefillBin(bin, seqs))

    def add_long(self, seq: Sequence) -> None:
        """Queue a sequence for the chunked-prefill lane."""
        self.waiting_long.append(seq)

    @property
    def running(self) -> list[Sequence]:
        """The decoding sequences, in step order."""
        return self.decoding.seqs

    @property
    def has_decode_work(self) -> bool:
        return bool(self.decoding) or self.prefilling is not None

    @property
    def is_idle(self) -> bool:
        return not (self.waiting_bins or self.waiting_long or self.decoding or self.prefilling)

    @property
    def is_holding_bin(self) -> bool:
        """A bin waits for slabs: take no further bins until it is admitted."""
        return bool(self.waiting_bins)

    # -- decisions --------------------------------------------------------------------------
    def schedule(self) -> Plan | None:
        """The next step's work, with slabs allocated for anything it admits; None when idle."""
        plan = self._schedule()
        self._last_was_part = isinstance(plan, PrefillBin) and plan.is_part
        return plan

    def _schedule(self) -> Plan | None:
        plan = self._admit_bin() or self._admit_long()
        if isinstance(plan, PrefillBin) and self._may_mix():
            return MixedStep(plan, Decode(list(self.decoding.seqs)))
        if plan is not None:
            return plan
        chunk_waits = self.pacer.chunk_waits(bool(self.decoding))
        if self.prefilling is not None and not (self.decoding and (self._last_was_chunk or chunk_waits)):
            self._last_was_chunk = True
            seq = self.prefilling
            chunk = self._shrunk_chunks.get(seq.seq_id) or self.pacer.chunk_tokens(self.chunk_tokens)
            return PrefillChunk(seq, seq.num_prefilled, min(seq.num_prefilled + chunk, seq.prompt_len))
        self._last_was_chunk = False
        return Decode(list(self.decoding.seqs)) if self.decoding else None

    def admit_bin_ahead(self, launched: Plan) -> Plan | None:
        """The oldest waiting bin, admitted while the `launched` step's tokens are not applied yet,
        so that the engine queues its prefill behind that step; None when it may not be admitted
        now. Room counts the sequences a launched bin adds to the decode batch, and the rows a
        launched decode step takes to their length limit; the slabs its finished sequences free are
        not free yet, so a bin that needs them waits for the next step. Behind a bin's prefill, a
        small bin waits as it would once that prefill is timed (decode has had none of its share
        since); a full bin goes straight behind it, as it would anyway. Never with mixed steps, where
        a bin's prefill carries the decode rows instead. A PrefillBin, or (as from `schedule`) a Fail."""
        if self.mixed_steps or not self.waiting_bins:
            return None
        if isinstance(launched, PrefillBin):
            pending = len(launched.seqs)
            if (self.decoding or pending) and is_small_bin(self.waiting_bins[0].prompt_tokens, self.chunk_tokens):
                return None
        elif isinstance(launched, Decode):
            batch = self.decoding
            pending = -int(np.count_nonzero(batch.out_len + 1 >= batch.max_new))
        else:
            return None
        admitted = self._admit_bin(pending)
        self._last_was_part = isinstance(admitted, PrefillBin) and admitted.is_part
        return admitted

    def decode_ahead(self, launched: Decode) -> tuple[Decode, np.ndarray] | None:
        """The decode step after the `launched` one, planned before its tokens are read so that the
        engine queues it behind that step: the GPU runs it while this thread applies the tokens,
        instead of idling for as long as that host work takes. Its rows are the launched step's that
        are not done and do not reach their length limit there; a row that ends there on EOS or a stop
        string runs one step more, and that token is dropped (`postprocess`). Returns the plan and
        the rows it keeps (indices into the launched step's rows, whose tokens feed it), or None
        when the next step may be something else: a long input waits or is being prefilled (its
        chunks alternate with decode steps), or mixed steps (a bin's prefill carries the rows)."""
        if not self.decodes_ahead or self.mixed_steps or self.prefilling is not None or self.waiting_long:
            return None
        rows = self.decoding if launched.ahead is None else launched.ahead  # as when `launched` was planned
        keep = np.flatnonzero((rows.out_len + 1 < rows.max_new) & not_done(rows.seqs))
        if not keep.size:
            return None
        nxt = rows.successor(keep)
        return Decode(nxt.seqs, ahead=nxt), keep

    def observe_step(self, plan: Plan, seconds: float) -> None:
        """How long a step took to run (the engine reports each one): paces small bins' prefills and
        sizes the parts a bin is cut into."""
        if isinstance(plan, MixedStep):
            plan = plan.prefill
        if isinstance(plan, PrefillBin):
            self.pacer.prefilled(seconds, plan.prompt_tokens)
        elif isinstance(plan, Decode):
            self.pacer.decoded(seconds)
        elif isinstance(plan, PrefillChunk):
            self.pacer.chunked(seconds, plan.end - plan.start)

    def _may_mix(self) -> bool:
        return (self.mixed_steps and bool(self.decoding)
                and (self.max_mixed_rows is None or len(self.decoding) <= self.max_mixed_rows))

    def step_prompt_tokens(self) -> int | None:
        """Prompt tokens one step beside decoding may prefill (None: no bound, or not measured yet)."""
        return None if self._split_bin is None else self.pacer.step_prompt_tokens()

    def _cut_to_step(self, work: PrefillBin) -> None:
        """While sequences decode, keep only the head of the oldest bin that fits one step; the rest
        stays first in the queue as a bin of its own, prefilled by the next steps without waiting."""
        limit = self.step_prompt_tokens() if self.decoding else None
        if limit is None or len(work.seqs) < 2:
            return
        total, keep = 0, 0
        for seq in work.seqs:  # at least one sequence
            total += seq.prompt_len - seq.prefix_len
            if keep and total > limit:
                break
            keep += 1
        if keep == len(work.seqs):
            return
        head, rest = self._split_bin(work.bin, work.seqs, keep)
        self.waiting_bins[0] = PrefillBin(head, work.seqs[:keep], is_part=True)
        self.waiting_bins.insert(1, PrefillBin(rest, work.seqs[keep:], is_part=True))

    def _bin_may_wait(self, work: PrefillBin) -> bool:
        """A small bin waits while decoding has had less than its share since the last prefill. The
        parts of a cut bin alternate with decode steps: back to back, they would stall decoding as
        long as the whole bin did."""
        if not self.decoding:
            return False
        if work.is_part:
            return self._last_was_part
        return self.pacer.small_bin_waits(work.prompt_tokens, self.chunk_tokens)

    def _decode_has_room(self, num_seqs: int, pending: int = 0) -> bool:
        """pending: sequences about to join (+) or leave (-) the decode batch when a launched step is applied."""
        active = len(self.decoding) + (self.prefilling is not None) + pending
        return self.max_decode_seqs is None or active == 0 or active + num_seqs <= self.max_decode_seqs

    def _admit_bin(self, pending: int = 0) -> Plan | None:
        if not self.waiting_bins:
            return None
        if self._bin_may_wait(self.waiting_bins[0]):
            return None
        self._cut_to_step(self.waiting_bins[0])
        work = self.waiting_bins[0]
        if not self._decode_has_room(len(work.seqs), pending):
            return None
        sizes = [s.slab_rows for s in work.seqs]
        starts = self.slabs.allocate_all(sizes)
        if starts is None:
            if self.slabs.num_used_rows > 0:
                return None  # hold the bin until finished sequences free their slabs
            # Even an empty arena cannot take the whole bin: prefill its sequences one by one
            # through the long-input lane; fail only those larger than the arena itself.
            self.waiting_bins.popleft()
            too_big = [s for s in work.seqs if s.slab_rows > self.slabs.capacity]
            self.waiting_long.extend(s for s in work.seqs if s.slab_rows <= self.slabs.capacity)
            if too_big:
                return Fail(too_big, ArenaTooSmall(
                    f"a sequence needs {max(s.slab_rows for s in too_big)} KV rows but the arena "
                    f"holds {self.slabs.capacity}"))
            return None
        self.waiting_bins.popleft()
        now = time.perf_counter()
        for seq, start in zip(work.seqs, starts):
            seq.slab_start = start
            seq.prefill_started_at = now
        return work

    def _admit_long(self) -> Fail | None:
        if self.prefilling is not None or not self.waiting_long or not self._decode_has_room(1):
            return None
        seq = self.waiting_long[0]
        start = self.slabs.allocate(seq.slab_rows)
        if start is None:
            if self.slabs.num_used_rows == 0:
                self.waiting_long.popleft()
                return Fail([seq], ArenaTooSmall(
                    f"a sequence needs {seq.slab_rows} KV rows but the arena holds {self.slabs.capacity}"))
            return None
        self.waiting_long.popleft()
        seq.slab_start = start
        seq.num_prefilled = seq.prefix_len  # a cached head is copied in, not prefilled
        seq.prefill_started_at = time.perf_counter()
        seq.status = SequenceStatus.PREFILLING
        self.prefilling = seq
        return None

    # -- results ----------------------------------------------------------------------------
    def postprocess(self, plan: Plan, tokens: list[int]) -> list[Sequence]:
        """Apply one step's sampled tokens (one per sequence that produced logits); return finished ones."""
        now = time.perf_counter()
        if isinstance(plan, MixedStep):  # the decoding rows first, then the new sequences join them
            first = len(plan.prefill.seqs)
            tokens = np.asarray(tokens, dtype=np.int64)
            finished = self._apply_decode(tokens[first:], now)
            return finished + self.postprocess(plan.prefill, tokens[:first])
        if isinstance(plan, PrefillChunk):
            seq = plan.seq
            seq.num_prefilled = plan.end
            if not plan.is_last:
                return []
            self.prefilling = None
            seqs = [seq]
        else:
            seqs = plan.seqs
        if isinstance(plan, PrefillBin):
            for seq in seqs:
                seq.num_prefilled = seq.prompt_len
        if len(tokens) != len(seqs):
            raise ValueError(f"{len(tokens)} tokens for {len(seqs)} sequences")
        if isinstance(plan, Decode):
            tokens = np.asarray(tokens, dtype=np.int64)
            if plan.ahead is not None:  # rows that ended in the step before it: their token is dropped
                tokens = tokens[not_done(seqs)]
            return self._apply_decode(tokens, now)
        finished, joining = [], []
        for seq, token in zip(seqs, np.asarray(tokens).tolist()):
            seq.first_token_at = now
            if self._append(seq, token):
                self._finish(seq, now)
                finished.append(seq)
            else:
                seq.status = SequenceStatus.DECODING
                joining.append(seq)
        self.decoding.add(joining)
        return finished

    def _apply_decode(self, tokens: np.ndarray, now: float) -> list[Sequence]:
        """One token for every decoding row: array checks first, per-sequence code only for rows
        that may finish (EOS, length limit, a stop-string trigger)."""
        batch = self.decoding
        if len(tokens) != len(batch):
            raise ValueError(f"{len(tokens)} tokens for {len(batch)} decoding sequences")
        for seq, token in zip(batch.seqs, tokens.tolist()):
            seq.output.append(token)
        batch.advance(tokens)
        maybe = batch.out_len >= batch.max_new
        if self.eos_array.size:
            maybe |= np.isin(tokens, self.eos_array)
        if self.stops is not None:
            for group, stops in enumerate(batch.stop_sets):
                rows = batch.stop_group == group
                if rows.any():
                    maybe[rows] |= self.stops.triggers(stops, tokens[rows])
        finished = []
        for row in np.flatnonzero(maybe).tolist():
            seq = batch.seqs[row]
            token = seq.output.pop()
            if self._append(seq, token):
                self._finish(seq, now)
                finished.append(seq)
        if finished:
            batch.remove_done()
        return finished

    def _append(self, seq: Sequence, token: int) -> bool:
        """Add one token; True when the sequence is finished."""
        if token in self.eos_ids:
            seq.finish_reason = "eos"
            return True
        seq.output.append(token)
        if self.stops is not None and self.stops.check(seq):
            seq.finish_reason = "stop"
            return True
        if len(seq.output) >= seq.params.max_new_tokens:
            seq.finish_reason = "length"
            return True
        return False

    def _finish(self, seq: Sequence, now: float) -> None:
        seq.status = SequenceStatus.FINISHED
        seq.finished_at = now
        self._free(seq)

    # -- out of memory: split and retry ----------------------------------------------------
    def retry_smaller(self, plan: Plan) -> list[Sequence]:
        """After `plan` ran out of GPU memory: its sequences are retried in smaller pieces. A bin's
        sequences go to the one-by-one lane; a chunk is retried at half its size. Returns the
        sequences that cannot be split further (a chunk of MIN_OOM_CHUNK tokens failed): the caller
        fails them. A decode step is not split here (its inputs are fixed-size): the caller retries it."""
        if isinstance(plan, PrefillBin):
            for seq in plan.seqs:
                self._free(seq)
                seq.status = SequenceStatus.WAITING
            self.waiting_long.extendleft(reversed(plan.seqs))  # ahead of later long inputs, in bin order
            return []
        if isinstance(plan, PrefillChunk):
            size = plan.end - plan.start
            if size <= MIN_OOM_CHUNK:
                return [plan.seq]
            self._shrunk_chunks[plan.seq.seq_id] = max(MIN_OOM_CHUNK, size // 2)
            self._last_was_chunk = False  # retry the chunk next
            return []
        return []

    def requeue_split(self, plan: PrefillBin, parts: list[tuple[Any, list[Sequence]]]) -> None:
        """After `plan` ran out of GPU memory: its slabs are given back and its parts (bins, each with
        its sequences) go first in the queue, in order, to be admitted again."""
        for seq in plan.seqs:
            self._free(seq)
            seq.status = SequenceStatus.WAITING
        self.waiting_bins.extendleft(reversed([PrefillBin(work, seqs) for work, seqs in parts]))

    def fail(self, seqs: list[Sequence], error: BaseException) -> None:
        """Mark sequences failed and give back their slabs; they leave every queue."""
        for seq in seqs:
            seq.status = SequenceStatus.FAILED
            seq.error = error
            seq.finished_at = time.perf_counter()
            self._free(seq)
            if self.prefilling is seq:
                self.prefilling = None
        self.decoding.remove_done()

    def _free(self, seq: Sequence) -> None:
        self._shrunk_chunks.pop(seq.seq_id, None)
        seq.prefix_in_slab = False
        if seq.slab_start >= 0:
            self.slabs.free(seq.slab_start)
            seq.slab_start = -1
