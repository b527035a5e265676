"""Stop strings without re-decoding whole outputs every step.

A stop string can only first appear in the text when a token that holds its last character is
appended. Each token id's own text is decoded once and remembered, so a step looks at a set, and
only a sequence whose new token could complete a stop string is decoded (its whole output, once).
A token whose text alone is an incomplete character (byte-level vocabularies split multi-byte
characters over tokens) always counts as a trigger. Whatever the triggers, `final_text` cuts the
finished output at the first stop string, so a missed trigger costs tokens, never a wrong text.
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
        self._triggers: dict[tuple[str, ...], dict[int, bool]] = {}
        self._tables: dict[tuple[str, ...], np.ndarray] = {}  # the same flags as int8 arrays, -1 = unknown
        self.num_decodes = 0  # whole-output decodes, for tests and profiles

    def _is_trigger(self, token: int, stops: tuple[str, ...]) -> bool:
        table = self._triggers.get(stops)
        if table is None:
            table = self._triggers[stops] = {}
        hit = table.get(token)
        if hit is None:
            text = self._token_text.get(token)
            if text is None:
                text = self._token_text[token] = self.detokenize([token])
            hit = table[token] = _INCOMPLETE in text or any(s[-1] in text for s in stops if s)
        return hit

    def triggers(self, stops: tuple[str, ...], tokens: np.ndarray) -> np.ndarray:
        """bool [B]: which of tokens [B] (int64) could complete one of `stops` (see `_is_trigger`)."""
        table = self._tables.get(stops)
        top = int(tokens.max(initial=-1)) + 1
        if table is None or len(table) < top:  # -1 = not looked at yet
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
        if not stops or not self._is_trigger(seq.output[-1], stops):
            return False
        self.num_decodes += 1
        text = self.detokenize(seq.output)
        cut = first_stop(text, stops)
        if cut < 0:
            return False
        seq.text = text[:cut]
        return True

    def final_text(self, seq: Sequence) -> str:
        """The text of a finished sequence: seq.text when a stop ended it, else its output cut at any stop."""
        if seq.text is not None:
            return seq.text
        text = self.detokenize(seq.output)
        cut = first_stop(text, seq.params.stop) if seq.params.stop else -1
        return text if cut < 0 else text[:cut]
