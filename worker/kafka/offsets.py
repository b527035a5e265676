"""Which offsets may be committed: the contiguous prefix of records whose output the broker acknowledged;
and, above it, which inputs a restored partition skips because their answers were already published."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kafka import TopicPartition

from worker.kafka.answered import Listed


@dataclass
class _PartitionState:
    epoch: int
    pending: deque[int] = field(default_factory=deque)  # offsets seen, in order, not yet committable
    done: set[int] = field(default_factory=set)          # acknowledged offsets still inside `pending`
    parts: dict[int, int] = field(default_factory=dict)  # offsets answered in several parts: parts still due
    next_commit: int | None = None                       # the commit position once the prefix advances
    committed: int | None = None                         # last position committed
    answered: Listed | None = None                       # restored: inputs answered before, not to answer again


class OffsetTracker:
    """Per-partition bookkeeping for at-least-once delivery.

    Commit steps, followed in this order by the poll loop:
      1. `track(tp, offset, parts)` every record as it is polled (offsets arrive in increasing order);
         `parts` is how many answers cover it (a batch message has one per item).
      2. publish its output (summary or dead letter) to the broker.
      3. `mark_done(tp, offset, epoch)` only after the broker acknowledged that publish, once per
         answer: an offset is done when all its parts are.
      4. `committable()` gives, per partition, the offset after the contiguous done prefix
         (the last done offset + 1), only where it moved since the last commit.
      5. commit those offsets with the consumer, then `committed(offsets)`.
    Exactly-once changes steps 2-3 and 5: `mark_done` as soon as the answer is ready; one transaction
    publishes the ready answers and commits the offsets with the list of inputs answered above them
    (`answered.settle` over `view(tp)`; `send_offsets_to_transaction`); `committed(offsets)` once it
    committed (an aborted one is simply retried: the offsets stay committable and the answers stay staged).
    Both guarantees commit that list (`answered.Listed`); a partition newly assigned is `restore`d from
    its committed list, and an input it names is tracked and marked done without being answered again.
    A partition's `epoch` changes when it is revoked or assigned: acknowledgements and results
    that belong to an older epoch are ignored (the partition's new owner replays that work).
    Only from the poll-loop thread.
    """

    def __init__(self) -> None:
        self._parts: dict[TopicPartition, _PartitionState] = {}
        self._epochs: dict[TopicPartition, int] = {}

    def assign(self, tp: TopicPartition) -> int:
        """Start a fresh epoch for `tp` (a new assignment); returns it."""
        epoch = self._epochs.get(tp, 0) + 1
        self._epochs[tp] = epoch
        self._parts[tp] = _PartitionState(epoch)
        return epoch

    def revoke(self, tp: TopicPartition) -> int:
        """Forget `tp`'s unfinished work; returns how many tracked records were dropped."""
        state = self._parts.pop(tp, None)
        self._epochs[tp] = self._epochs.get(tp, 0) + 1
        return len(state.pending) if state is not None else 0

    def epoch(self, tp: TopicPartition) -> int | None:
        """The current epoch of an assigned partition, None when it is not assigned."""
        state = self._parts.get(tp)
        return state.epoch if state is not None else None

    def track(self, tp: TopicPartition, offset: int, parts: int = 1) -> int:
        """Record that `offset` was polled and is answered in `parts` answers; returns the epoch to
        hand back to `mark_done`."""
        state = self._parts.get(tp)
        if state is None:
            raise KeyError(f"{tp} is not assigned")
        if state.pending and offset <= state.pending[-1]:
            raise ValueError(f"{tp}: offset {offset} polled after {state.pending[-1]}")
        if parts < 1:
            raise ValueError(f"{tp}: offset {offset} needs at least one answer")
        state.pending.append(offset)
        if parts > 1:
            state.parts[offset] = parts
        return state.epoch

    def restore(self, tp: TopicPartition, answered: Listed | None) -> None:
        """The inputs of `tp` at or above its committed offset whose answers were published already."""
        state = self._parts.get(tp)
        if state is not None:
            state.answered = answered

    def was_answered(self, tp: TopicPartition, offset: int) -> bool:
        """True when `offset`'s answers were published before this assignment (restored from the commit)."""
        state = self._parts.get(tp)
        return state is not None and state.answered is not None and offset in state.answered

    def view(self, tp: TopicPartition) -> tuple[int | None, tuple[int, ...], set[int]]:
        """(offset after the complete prefix or None, the tracked offsets from there on, those of them
        complete): what `answered.settle` needs. Only read the set."""
        state = self._parts[tp]
        return state.next_commit, tuple(state.pending), state.done

    def committed_position(self, tp: TopicPartition) -> int | None:
        state = self._parts.get(tp)
        return state.committed if state is not None else None

    def last_tracked(self, tp: TopicPartition, default: int) -> int:
        """The highest offset tracked for `tp` in this epoch (done or not), else `default`."""
        state = self._parts.get(tp)
        if state is None:
            return default
        if state.pending:
            return state.pending[-1]
        return state.next_commit - 1 if state.next_commit is not None else default

    def mark_done(self, tp: TopicPartition, offset: int, epoch: int) -> bool:
        """The broker acknowledged one answer of `offset`; False when that work is stale (revoked)."""
        state = self._parts.get(tp)
        if state is None or state.epoch != epoch:
            return False
        left = state.parts.get(offset)
        if left is not None:
            if left > 1:
                state.parts[offset] = left - 1
                return True
            del state.parts[offset]
        state.done.add(offset)
        while state.pending and state.pending[0] in state.done:
            first = state.pending.popleft()
            state.done.discard(first)
            state.next_commit = first + 1
        return True

    def is_current(self, tp: TopicPartition, epoch: int) -> bool:
        state = self._parts.get(tp)
        return state is not None and state.epoch == epoch

    def committable(self) -> dict[TopicPartition, int]:
        """Per partition, the next offset to read after the done prefix, where it moved since the last commit."""
        return {tp: s.next_commit for tp, s in self._parts.items()
                if s.next_commit is not None and s.next_commit != s.committed}

    def committed(self, offsets: dict[TopicPartition, int]) -> None:
        """The consumer committed `offsets`."""
        for tp, offset in offsets.items():
            state = self._parts.get(tp)
            if state is not None:
                state.committed = offset

    def in_flight(self, tp: TopicPartition | None = None) -> int:
        """Records tracked but not yet part of a done prefix (one partition, or all)."""
        if tp is not None:
            state = self._parts.get(tp)
            return len(state.pending) if state is not None else 0
        return sum(len(s.pending) for s in self._parts.values())

    def partitions(self) -> set[TopicPartition]:
        return set(self._parts)
