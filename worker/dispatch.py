"""The dispatcher's Python face: slot memory, zero-copy bin views, the copy to the GPU.

The packing itself runs in the native module (`worker._native.Dispatcher`, a C++ thread). This
module allocates the slots it writes into (page-locked through torch when CUDA is available),
presents each packed bin as torch views of its slot, and returns a slot to the native side once
the host-to-device copy that reads it has finished.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass

import numpy as np
import torch

from worker import _native
from worker.settings.budgets import ALIGNMENT, GPU_MAX_SEQS_PER_BIN, GPU_TOKEN_BUDGET, LATENCY_CAP_S, QUEUE_CAPACITY_TOKENS

Backpressure = _native.Backpressure                  # submit(): the bounded queue is full; retry later
DispatcherClosed = _native.DispatcherClosed          # submit() after close(); next_bin() once drained
DispatcherNotStarted = _native.DispatcherNotStarted  # any call before start()
SequenceTooLong = _native.SequenceTooLong            # one sequence is larger than a bin
UnknownSlot = _native.UnknownSlot                    # release() of a slot not handed out
SequenceTooLong.reason = "too_long"                  # its dead letter's reason code

_INT32_MIN, _INT32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max
bin_log = logging.getLogger("worker.bins")  # with debug logging on: one line per bin handed out


@dataclass(frozen=True)
class PackedBin:
    """Views into one slot (no copy); valid until the slot is released."""

    slot: int
    input_ids: torch.Tensor         # int32 [num_tokens], num_tokens = sum of aligned spans
    position_ids: torch.Tensor      # int32 [num_tokens], restart at 0 per sequence (pads continue)
    cu_seqlens: torch.Tensor        # int32 [num_seqs + 1], span boundaries (pads at each span's end)
    seq_ids: torch.Tensor           # int64 [num_seqs]
    seq_lens: torch.Tensor          # int32 [num_seqs], real (unpadded) lengths
    last_token_index: torch.Tensor  # int32 [num_seqs], index of each sequence's last real token
    num_real_tokens: int


@dataclass(frozen=True)
class DeviceBin:
    """A bin's arrays on the target device (int32). Its sequence ids stay on the host: the engine reads
    them from the slot before the copy.

    `ready` is the event recorded after the copy on the side stream; to_device has already made
    the current (compute) stream wait for it. None on CPU.
    """

    input_ids: torch.Tensor         # int32 [num_tokens]
    position_ids: torch.Tensor      # int32 [num_tokens]
    cu_seqlens: torch.Tensor        # int32 [num_seqs + 1]
    seq_lens: torch.Tensor          # int32 [num_seqs]
    last_token_index: torch.Tensor  # int32 [num_seqs]
    num_real_tokens: int
    ready: torch.cuda.Event | None


@dataclass(frozen=True)
class _Slot:
    input_ids: torch.Tensor         # int32 [token_budget]
    position_ids: torch.Tensor      # int32 [token_budget]
    cu_seqlens: torch.Tensor        # int32 [max_seqs_per_bin + 1]
    seq_ids: torch.Tensor           # int64 [max_seqs_per_bin]
    seq_lens: torch.Tensor          # int32 [max_seqs_per_bin]
    last_token_index: torch.Tensor  # int32 [max_seqs_per_bin]

    @classmethod
    def allocate(cls, token_budget: int, max_seqs: int, pin: bool) -> "_Slot":
        def empty(n: int, dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros(n, dtype=dtype, pin_memory=pin)

        return cls(empty(token_budget, torch.int32), empty(token_budget, torch.int32),
                   empty(max_seqs + 1, torch.int32), empty(max_seqs, torch.int64),
                   empty(max_seqs, torch.int32), empty(max_seqs, torch.int32))


class BinDispatcher:
    """Sequences in, packed bins out. Thread-safe; every blocking call releases the GIL."""

    def __init__(self, token_budget: int = GPU_TOKEN_BUDGET, *, alignment: int = ALIGNMENT, num_slots: int = 3,
                 max_seqs_per_bin: int = GPU_MAX_SEQS_PER_BIN, queue_capacity_tokens: int = QUEUE_CAPACITY_TOKENS,
                 pad_id: int = 0, latency_cap_s: float = LATENCY_CAP_S, adaptive: bool = True,
                 pin_memory: bool | None = None) -> None:
        if num_slots < 2:
            raise ValueError(f"num_slots must be at least 2 (one filling while one is read), got {num_slots}")
        pin = torch.cuda.is_available() if pin_memory is None else pin_memory
        self._native = _native.Dispatcher(
            token_budget=token_budget, alignment=alignment, max_seqs_per_bin=max_seqs_per_bin,
            queue_capacity_tokens=queue_capacity_tokens, pad_id=pad_id,
            latency_cap_s=latency_cap_s, adaptive=adaptive)
        self._slots = [_Slot.allocate(token_budget, max_seqs_per_bin, pin) for _ in range(num_slots)]
        for s in self._slots:
            self._native.add_slot(s.input_ids.numpy(), s.position_ids.numpy(), s.cu_seqlens.numpy(),
                                  s.seq_ids.numpy(), s.seq_lens.numpy(), s.last_token_index.numpy())
        self._copy_streams: dict[torch.device, torch.cuda.Stream] = {}
        self._reaper: threading.Thread | None = None
        self._in_flight: queue.SimpleQueue = queue.SimpleQueue()  # (event, slot) awaiting release

    @property
    def token_budget(self) -> int:
        return self._native.token_budget

    def start(self) -> None:
        """Starts the packing thread. Once."""
        self._native.start()

    def submit(self, seq_id: int, tokens, max_new_tokens: int) -> None:
        """Copies `tokens` (1-D int32 array, tensor or list of ints) into the queue. Thread-safe.

        Raises Backpressure, SequenceTooLong, DispatcherClosed, DispatcherNotStarted; TypeError for
        a non-int32 array or tensor, ValueError for a non-1-D or empty one.
        """
        if type(tokens) is not np.ndarray:
            tokens = _as_int32_array(tokens)
        self._native.submit(seq_id, tokens, max_new_tokens)

    def submit_many(self, seq_ids, tokens, max_new_tokens: int) -> int:
        """Submits a batch under one lock (one GIL release); returns how many, a prefix, were queued.

        Same checks as submit() for every sequence, nothing queued if one fails; raises Backpressure
        only when not even the first fits. Thread-safe.
        """
        tokens = [t if type(t) is np.ndarray else _as_int32_array(t) for t in tokens]
        return self._native.submit_many(seq_ids, tokens, max_new_tokens)

    def wait_for_room(self, num_tokens: int, timeout: float | None) -> bool:
        """Blocks until `num_tokens` more fit the queue; False on timeout or after close."""
        return self._native.wait_for_room(num_tokens, timeout)

    def next_bin(self, timeout: float | None) -> PackedBin | None:
        """The next packed bin (asking is the "GPU wants work" signal); None on timeout.

        Raises DispatcherClosed once closed and drained. Thread-safe.
        """
        got = self._native.next_bin(timeout)
        if got is None:
            return None
        slot, num_seqs, num_tokens, num_real = got
        s = self._slots[slot]
        if bin_log.isEnabledFor(logging.DEBUG):
            bin_log.debug("bin slot=%d seqs=%d tokens=%d real=%d fill=%.3f", slot, num_seqs, num_tokens, num_real,
                          num_real / self.token_budget,
                          extra={"bin_seqs": num_seqs, "bin_tokens": num_tokens, "bin_real_tokens": num_real})
        return PackedBin(slot, s.input_ids[:num_tokens], s.position_ids[:num_tokens],
                         s.cu_seqlens[:num_seqs + 1], s.seq_ids[:num_seqs], s.seq_lens[:num_seqs],
                         s.last_token_index[:num_seqs], num_real)

    def to_device(self, bin: PackedBin, device: torch.device | str) -> DeviceBin:
        """Copies a bin to `device` and hands its slot back once the copy has finished.

        CUDA: non_blocking copies on a side stream, an event after them, the current stream made to
        wait for it; a reaper thread releases the slot when the event completes. CPU: copies and
        releases at once. Either way `bin` must not be used afterwards. Thread-safe.
        """
        device = torch.device(device)
        fields = (bin.input_ids, bin.position_ids, bin.cu_seqlens, bin.seq_lens, bin.last_token_index)
        if device.type != "cuda":
            copies = [t.to(device, copy=True) for t in fields]
            self.release(bin.slot)
            return DeviceBin(*copies, num_real_tokens=bin.num_real_tokens, ready=None)
        stream = self._copy_streams.get(device)
        if stream is None:
            stream = self._copy_streams.setdefault(device, torch.cuda.Stream(device))
        compute = torch.cuda.current_stream(device)
        stream.wait_stream(compute)  # device memory the copies write into was allocated on `compute`
        with torch.cuda.stream(stream):
            copies = [t.to(device, non_blocking=True) for t in fields]
            ready = torch.cuda.Event()
            ready.record(stream)
        for t in copies:
            t.record_stream(compute)
        compute.wait_event(ready)
        self._release_when_done(ready, bin.slot)
        return DeviceBin(*copies, num_real_tokens=bin.num_real_tokens, ready=ready)

    def release(self, slot: int) -> None:
        """Hands a slot back for reuse. Raises UnknownSlot if it is not handed out. Thread-safe."""
        self._native.release(slot)

    def close(self) -> None:
        """Refuses new sequences; everything already submitted still comes out of next_bin()."""
        self._native.close()

    def stats(self) -> dict[str, float]:
        """Counters: sequences, bins, fill ratio, pad tokens, wait time, queue depth. Thread-safe."""
        return {k: float(v) for k, v in self._native.stats().items()}

    def _release_when_done(self, event: torch.cuda.Event, slot: int) -> None:
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, name="slot-reaper", daemon=True)
            self._reaper.start()
        self._in_flight.put((event, slot))

    def _reap(self) -> None:
        while True:
            event, slot = self._in_flight.get()
            event.synchronize()  # releases the GIL while the copy finishes
            self._native.release(slot)


def _as_int32_array(tokens) -> np.ndarray:
    if isinstance(tokens, torch.Tensor):
        if tokens.dtype != torch.int32:
            raise TypeError(f"tokens must be int32, got a {tokens.dtype} tensor")
        return tokens.detach().cpu().numpy()
    if isinstance(tokens, np.ndarray):  # a subclass: the native check applies
        return tokens
    array = np.asarray(tokens)
    if array.size == 0:
        return array.astype(np.int32)
    if array.dtype.kind not in "iu":
        raise TypeError(f"tokens must be integers, got {array.dtype}")
    if array.min() < _INT32_MIN or array.max() > _INT32_MAX:
        raise ValueError("token ids must fit in int32")
    return array.astype(np.int32)
