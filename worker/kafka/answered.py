"""Answers past the committed offset: which inputs of a partition may be answered (published) before a
slower input below them, and how the commit says so.

A partition's committed offset still only covers its contiguous answered prefix; inputs answered above
it are *listed* in the commit's metadata, and whoever reads the partition next (a restart, a rebalance)
skips the listed inputs instead of answering them again. The incident loop keeps the same kind of list
(`incident_partition.py`, over its inputs in feed order) with this module's bitmap and packing.

Metadata, JSON: {"answered_from": P, "answered": base64(zlib(bitmap))}, bit k set = offset P + k was
answered; P is the committed offset itself. A run of answered offsets compresses to a few bytes, so the
broker's `offset.metadata.max.bytes` (4096 by default) holds tens of thousands of them; past
MAX_METADATA_CHARS, `settle` holds answers back rather than list fewer than were published.

`settle` decides, for one partition, what one commit publishes (exactly-once: in the same transaction
as the offset and metadata) and what it lists. An offset may be listed only once every answer that
covers it is published; an answer may be published only once every offset it covers is complete (all
its parts answered) and listable, so a log window's answer and its offsets go out together, never half.
Pure functions: the Committer (`committer.py`) calls them from the poll-loop thread.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import zlib
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)

# The broker refuses commit metadata over `offset.metadata.max.bytes` (default 4096): stay under it
# (the incident loop's bound too).
MAX_METADATA_CHARS = 4000
# Answers held back are logged at most this often (a commit is tried every commit_interval_s).
HELD_LOG_S = 60.0
_last_held_log = float("-inf")


@dataclass(frozen=True)
class Listed:
    """The offsets a commit lists as answered, from `start` (the committed offset) on."""

    start: int
    bits: bytes = b""

    def __contains__(self, offset: int) -> bool:
        k = offset - self.start
        return 0 <= k < len(self.bits) * 8 and bool(self.bits[k // 8] >> (k % 8) & 1)

    def __len__(self) -> int:
        return sum(bin(b).count("1") for b in self.bits)

    @classmethod
    def of(cls, start: int, offsets: Iterable[int]) -> Listed:
        ks = [o - start for o in offsets if o >= start]
        bits = bytearray((max(ks) + 8) // 8 if ks else 0)
        for k in ks:
            bits[k // 8] |= 1 << (k % 8)
        return cls(start, bytes(bits))

    def metadata(self) -> str:
        """The commit metadata naming these offsets ("" when none: nothing to skip)."""
        if not any(self.bits):
            return ""
        return json.dumps({"answered_from": self.start, "answered": pack_bits(self.bits)}, separators=(",", ":"))

    @classmethod
    def from_metadata(cls, metadata: str | None) -> Listed | None:
        """What a commit's metadata lists; None when it lists nothing (or is not ours: then nothing is skipped)."""
        if not metadata:
            return None
        try:
            found = json.loads(metadata)
            if "answered_from" not in found:
                return None
            return cls(int(found["answered_from"]), unpack_bits(found["answered"]))
        except (ValueError, KeyError, TypeError, AttributeError, zlib.error) as exc:
            log.warning("commit metadata %r is not the worker's (%s): nothing is taken as answered",
                        metadata[:80], exc)
            return None


def pack_bits(bits: bytes) -> str:
    """A bitmap as commit-metadata text (zlib, base64): the incident loop's `listed` form too."""
    return base64.b64encode(zlib.compress(bits, 9)).decode()


def unpack_bits(text: str) -> bytes:
    return zlib.decompress(base64.b64decode(text))


@dataclass(frozen=True)
class Settlement:
    """One partition's part of a commit: the offset, its metadata, the answers published with it."""

    position: int                   # offset to commit: the first input not (listably) answered
    listed: frozenset[int]          # offsets above `position` answered and published (now or before)
    publish: tuple[Hashable, ...]   # staged answers to publish with this commit
    metadata: str
    held_back: int = 0              # answers ready but held back: the metadata could not list their inputs


def settle(next_commit: int | None, pending: Sequence[int], complete: Callable[[int], bool],
           staged: dict[Hashable, tuple[int, ...]], listed_before: Iterable[int] = (),
           max_chars: int = MAX_METADATA_CHARS) -> Settlement | None:
    """next_commit: the offset after the complete prefix (None: nothing complete yet); pending: the
    tracked offsets from there on, in order, the first one incomplete; complete(offset): every part of
    a pending offset is answered; staged: answers not yet published -> the offsets each covers;
    listed_before: offsets a committed metadata already lists (their answers are out: they stay
    listed). None when nothing is tracked."""
    if next_commit is None and not pending:
        return None
    before = set(listed_before)
    newly = sorted(o for o in pending if complete(o) and o not in before)

    def attempt(cut: int) -> Settlement:
        allowed = set(newly[:cut])
        return _settle(next_commit, pending, lambda o: o in allowed or o in before, staged, before)

    settlement = attempt(len(newly))
    if len(settlement.metadata) > max_chars and newly:
        # List the longest run of the newly answered offsets that fits (bisection); the rest wait.
        low, high = 0, len(newly)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if len(attempt(mid).metadata) <= max_chars else (low, mid)
        settlement = attempt(low)
        ready = [rid for rid, covers in staged.items()
                 if all(_below(o, next_commit) or complete(o) for o in covers)]
        held = len(ready) - len(settlement.publish)
        global _last_held_log
        if time.monotonic() - _last_held_log >= HELD_LOG_S:
            _last_held_log = time.monotonic()
            log.warning("answers past the committed offset %d: listing them all would exceed %d characters of "
                        "commit metadata; %d answers held back until the offset moves", settlement.position,
                        max_chars, held)
        settlement = Settlement(settlement.position, settlement.listed, settlement.publish, settlement.metadata,
                                held)
    if len(settlement.metadata) > max_chars:
        log.error("the offsets already answered past %d no longer fit %d characters of commit metadata",
                  settlement.position, max_chars)
    return settlement


def _below(offset: int, next_commit: int | None) -> bool:
    return next_commit is not None and offset < next_commit


def _settle(next_commit: int | None, pending: Sequence[int], listable: Callable[[int], bool],
            staged: dict[Hashable, tuple[int, ...]], before: set[int]) -> Settlement:
    """As `settle`, with `listable` saying which pending offsets may be listed (complete, and within
    the metadata's bound); `before` stay listed, polled again or not yet."""
    def ready(o: int) -> bool:
        return _below(o, next_commit) or listable(o)

    blocked: set[int] = set()     # offsets an unpublishable answer covers: neither committed nor listed
    waiting: set[Hashable] = set()
    changed = True
    while changed:                # a window blocks its offsets, which may block other windows' answers
        changed = False
        for rid, covers in staged.items():
            if rid not in waiting and any(not ready(o) or o in blocked for o in covers):
                waiting.add(rid)
                blocked.update(covers)
                changed = True
    first_open = pending[0] if pending else next_commit
    assert first_open is not None
    position = min(first_open, min(blocked, default=first_open))
    listed = {o for o in pending if o >= position and ready(o) and o not in blocked}
    if next_commit is not None and position < next_commit:  # a window holds part of the complete prefix back
        listed.update(o for o in range(position, next_commit) if o not in blocked)
    listed.update(o for o in before if o >= position)
    publish = tuple(rid for rid in staged if rid not in waiting)
    return Settlement(position, frozenset(listed), publish, Listed.of(position, listed).metadata())
