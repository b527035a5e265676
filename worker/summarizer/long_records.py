"""Long records (a prompt beyond one context) as one unit: their pieces planned, fed to the engine a
few at a time beside other work, and the merges of the pieces' summaries planned level by level.

The Summarizer owns the threads and the engine; this unit owns which long records wait and what
each does next. Planning runs on the feeder thread, or on a thread of its own for a body far beyond
one context; `submit_ready` and `plan_merge` run on the feeder thread only, so every piece and
merge enters the engine from there. Which long records wait is guarded by its own lock.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from worker.dispatch import Backpressure
from worker.engine.errors import ContextTooLong
from worker.facts import extract_facts
from worker.prompts import render_body
from worker.summarizer.pieces import (MAX_PIECE_LINE_CHARS, SURELY_OVER_CHARS_PER_TOKEN, RecordTooLong, body_for_pieces,
                                      plan_chunk_prompts, plan_merge, select_within_cap, wrap_long_lines)

# Pieces of one long record in the engine at once: enough to keep a bin busy beside other work,
# few enough that a long record never fills the dispatcher's queue ahead of newer records.
MAX_PIECES_IN_FLIGHT = 2


class Wake:
    """Put on the feeder's queue: look at the waiting pieces now."""


WAKE = Wake()


@dataclass(frozen=True, eq=False)
class MergeDue:
    """Put on the feeder's queue: every piece of this long record is summarised."""

    request: Any


class LongRecords:
    """Requests are the Summarizer's (`record`, `facts`, `pieces`, `todo`, `in_flight`, `failed` …)."""

    def __init__(self, *, tokenizer, tokenize: Callable[[list[dict[str, str]]], list[int]],
                 max_prompt_tokens: int, max_record_tokens: int | None, over_cap: str,
                 add: Callable[[Any, Any, int], None], push: Callable[[Any, Any], None],
                 wake: Callable[[object], None]) -> None:
        """add(req, prompt, piece): one piece into the engine (may raise Backpressure); push(request_id,
        result): a record's final result; wake(item): put an item on the feeder's queue."""
        self._lock = threading.Lock()  # protects _deferred, _planning and _merging
        self.tokenizer, self.tokenize = tokenizer, tokenize
        self.max_prompt_tokens = max_prompt_tokens
        self.max_record_tokens, self.over_cap = max_record_tokens, over_cap
        self._add, self._push, self._wake = add, push, wake
        self._deferred: collections.deque = collections.deque()  # (lock) requests with pieces to submit
        self._planning: set = set()  # (lock) requests whose pieces are being planned on their own thread
        self._merging: set = set()   # (lock) requests whose merge the feeder has still to plan

    # -- any thread -------------------------------------------------------------------------
    def plan_apart(self, req) -> None:
        """Plan `req`'s facts and pieces on a thread of its own, then queue them."""
        with self._lock:
            self._planning.add(req)
        threading.Thread(target=self._plan_apart, args=(req,), name="telesum-long-plan", daemon=True).start()

    def defer(self, req) -> None:
        """Queue a planned request's pieces for the feeder."""
        with self._lock:
            if req not in self._deferred:
                self._deferred.append(req)
        self._wake(WAKE)

    def piece_done(self, req) -> None:
        """Every piece of this level is summarised: the feeder plans what comes next."""
        with self._lock:
            self._merging.add(req)
        self._wake(MergeDue(req))

    def has_work(self) -> bool:
        """True while a long record waits here (pieces to submit, planning, a merge to plan)."""
        with self._lock:
            return bool(self._deferred or self._planning or self._merging)

    @property
    def has_deferred(self) -> bool:
        return bool(self._deferred)

    def is_planning(self) -> bool:
        with self._lock:
            return bool(self._planning)

    def strand(self) -> list:
        """Every request still waiting here (for close), removed."""
        with self._lock:
            stranded = {id(r): r for r in [*self._deferred, *self._planning, *self._merging]}
            self._deferred.clear()
            self._planning.clear()
            self._merging.clear()
        return list(stranded.values())

    # -- planning ---------------------------------------------------------------------------
    def is_over_cap(self, record) -> bool:
        """Whether a record that fits one prompt has a body over the work cap (a cap below the
        context, as a slow CPU's is): then it is summarised from its selection too."""
        if self.max_record_tokens is None:
            return False
        lines = body_for_pieces(record).splitlines()  # counted as plan_pieces counts them
        return bool(lines) and sum(map(len, self.tokenizer(lines, add_special_tokens=False)["input_ids"])) \
            + len(lines) > self.max_record_tokens

    def plan_pieces(self, req) -> None:
        """The record's chunk prompts into req.todo (from a stated selection when over the work cap).
        Raises RecordTooLong (over the cap, policy dead_letter) or ContextTooLong."""
        record = req.record
        rendered = render_body(record)
        surely_over = self.max_record_tokens is not None and \
            len(rendered) > SURELY_OVER_CHARS_PER_TOKEN * self.max_record_tokens
        # Surely over the cap: its selection counts the templates, so repeats are not collapsed first
        # (7-14 s of one core for a 50 MB line, holding the GIL the engine's thread needs).
        body = wrap_long_lines(rendered, MAX_PIECE_LINE_CHARS) if surely_over else body_for_pieces(record)
        lines = body.splitlines()
        # One batch call counts every line (per-line calls cost ~100x more), unless the body is surely
        # over the cap: then only the lines its selection takes are counted.
        counts = dict(zip(lines, map(len, self.tokenizer(lines, add_special_tokens=False)["input_ids"]))) \
            if lines and not surely_over else {}

        def count_tokens(text: str) -> int:
            n = counts.get(text)
            return n if n is not None else len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

        if surely_over or self.max_record_tokens is not None and \
                sum(counts.values()) + len(lines) > self.max_record_tokens:
            if self.over_cap == "dead_letter":
                raise RecordTooLong(f"record {record.id!r}: its body is over the work cap of "
                                    f"{self.max_record_tokens} tokens")
            selected = select_within_cap(body, self.max_record_tokens, count_tokens)
            body, req.selection = selected.text, selected.description
        pieces = plan_chunk_prompts(record, tokenize=self.tokenize, count_tokens=count_tokens,
                                    max_prompt_tokens=self.max_prompt_tokens, body=body)
        req.hierarchical = True
        req.num_chunks = len(pieces)
        req.pieces = [None] * len(pieces)
        req.todo.extend((p, i) for i, p in enumerate(pieces))

    def _plan_apart(self, req) -> None:
        try:
            req.facts = extract_facts(req.record)
            self.plan_pieces(req)
        except Exception as exc:  # noqa: BLE001 - this record's problem: it comes back as its result
            req.failed = True
            self._push(req.request_id, exc)
        finally:
            with self._lock:
                self._planning.discard(req)
        if not req.failed:
            self.defer(req)

    # -- the feeder thread ------------------------------------------------------------------
    def plan_merge(self, req) -> None:
        """One merge when the summaries fit one prompt (the final sequence, piece -1); else the next
        level of the tree: merges of groups, queued as pieces."""
        try:
            prompts = plan_merge(req.record, req.facts, list(req.pieces), tokenize=self.tokenize,
                                 max_prompt_tokens=self.max_prompt_tokens)
        except ContextTooLong as exc:
            req.failed = True
            self._push(req.request_id, exc)
            prompts = []
        if len(prompts) == 1:
            req.pieces = []
            req.todo.append((prompts[0], -1))
        elif prompts:
            req.pieces = [None] * len(prompts)
            req.todo.extend((p, i) for i, p in enumerate(prompts))
        with self._lock:
            self._merging.discard(req)
            if prompts and req not in self._deferred:
                self._deferred.append(req)

    def submit_ready(self) -> None:
        """Long records' next pieces into the engine, round-robin, at most MAX_PIECES_IN_FLIGHT each,
        until the dispatcher pushes back."""
        with self._lock:
            waiting = list(self._deferred)
        for req in waiting:
            while req.todo and not req.failed and req.in_flight < MAX_PIECES_IN_FLIGHT:
                prompt, piece = req.todo[0]
                try:
                    self._add(req, prompt, piece)
                except Backpressure:
                    return
                except Exception as exc:  # closed, or a prompt the engine refuses: the record fails
                    req.failed = True
                    self._push(req.request_id, exc)
                    break
                req.todo.popleft()
            if req.failed or not req.todo:
                with self._lock:
                    self._deferred.remove(req)
