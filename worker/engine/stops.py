"""Stop strings without re-decoding whole outputs every step.

A stop string can only first appear in the text when a token that holds its last character is
appended. Each token id's own text is decoded once and its flag kept in a table, so a step looks up an array, and
only a sequence whose new token could complete a stop string is decoded (its whole output, once).
A token whose text alone is an incomplete character (byte-level vocabularies split multi-byte
characters over tokens) always counts as a trigger. Whatever the triggers, the reader of a finished
sequence cuts its decoded output at the first stop string (`first_stop`, as the Summarizer does), so a
missed trigger costs tokens, never a wrong text.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from worker.engine.sequence import Sequence

Detokenize = Callable[[list[int]], str]
_INCOMPLETE = "\ufffd"  # what a decoder writes for a partial UTF-8 character


def first_stop(text: str, stops: tuple[str, ...]) -> int:
    """Index of the earliest stop string in text, or -1."""
    return min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)


class StopChecker:
    """Per-token trigger tables (one per stop-string tuple) over one detokenizer. Engine thread only."""

    def __init__(self, detokenize: Detokenize) -> None:
        self.detokenize = detokenize
        self._token_text: dict[int, str] = {}
        self._tables: dict[tuple[str, ...], np.ndarray] = {}  # per stop tuple: int8 per token id, -1 = unknown
        self.num_decodes = 0  # whole-output decodes, for tests and profiles

    def _is_trigger(self, token: int, stops: tuple[str, ...]) -> bool:
        text = self._token_text.get(token)
        if text is None:
            text = self._token_text[token] = self.detokenize([token])
        return _INCOMPLETE in text or any(s[-1] in text for s in stops if s)

    def triggers(self, stops: tuple[str, ...], tokens: np.ndarray) -> np.ndarray:
        """bool [B]: which of tokens [B] (int64) could complete one of `stops` (see `_is_trigger`)."""
        table = self._tables.get(stops)
        top = int(tokens.max(initial=-1)) + 1
        if table is None or len(table) < top:
            grown = np.full(max(top, 2 * len(table) if table is not None else top), -1, np.int8)
            if table is not None:
                grown[:len(table)] = table
            table = self._tables[stops] = grown
        flags = table[tokens]
        if (flags < 0).any():
            for token in np.unique(tokens[flags < 0]).tolist():
                table[token] = self._is_trigger(token, stops)
            flags = table[tokens]
        return flags.astype(bool)

    def check(self, seq: Sequence) -> bool:
        """After appending seq.output[-1]: True (and seq.text set, cut before the stop) when a stop string appeared."""
        stops = seq.params.stop
        if not stops or not self.triggers(stops, np.array([seq.output[-1]], dtype=np.int64))[0]:
            return False
        self.num_decodes += 1
        text = self.detokenize(seq.output)
        cut = first_stop(text, stops)
        if cut < 0:
            return False
        seq.text = text[:cut]
        return True
